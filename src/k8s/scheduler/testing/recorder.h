// Recorder: everything SchedulerCore asks the outside world to do, kept for a test to read: the
// binds it starts, the failures, warnings and normal Events it reports, the PodGroup conditions it
// writes, and (with EnablePreemption) the nominations and evictions it makes. One recorder for the
// scheduler's tests (scheduler_core_test, preemption_test, defrag_executor_test); a test pretends
// to be the API server by feeding the core what would come back (OnBindResult, the watch).
//
// Each bind's assignment is also written as the annotation binder writes it and read back as the
// node agent reads it (records::AssignmentToJson / AssignmentFromJson): a record that does not
// survive the trip fails the test that made it.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/binder.h"
#include "k8s/scheduler/preemption.h"
#include "k8s/scheduler/reporter.h"
#include "records/assignment.h"

namespace tessera::k8s::testing {

class Recorder : public Binder, public Reporter, public PreemptionWriter {
 public:
  struct BindCall {
    std::string key;
    std::string node;
    records::Assignment assignment;  // as the node agent reads it back
    uint64_t attempt = 0;
  };
  struct ReportCall {
    std::string key;  // the pod's, or the PodGroup's
    std::string reason;
    std::string message;
    bool repeat = false;
  };

  void Bind(const PodInfo& pod, const records::Assignment& assignment, uint64_t attempt) override {
    absl::StatusOr<records::Assignment> a =
        records::AssignmentFromJson(records::AssignmentToJson(assignment));
    EXPECT_TRUE(a.ok()) << a.status();
    binds.push_back({pod.key, assignment.node, a.ok() ? *a : assignment, attempt});
  }
  void ReportFailure(const PodInfo& pod, std::string_view reason, const std::string& message,
                     bool repeat) override {
    reports.push_back({pod.key, std::string(reason), message, repeat});
    failures[pod.key] = message;
  }
  void ReportWarning(const PodInfo& pod, std::string_view reason,
                     const std::string& message) override {
    warnings.push_back({pod.key, std::string(reason), message, false});
  }
  void ReportNormal(const PodInfo& pod, std::string_view reason,
                    const std::string& message) override {
    normals.push_back({pod.key, std::string(reason), message, false});
  }
  void ReportReservation(const PodInfo& pod, bool held, const std::string& message,
                         int64_t since_unix) override {
    reservations.push_back({pod.key, held ? "RoomReserved" : "Released", message, false});
    reservation_since[pod.key] = since_unix;
  }
  void ReportPodGroup(const PodGroupInfo& group, bool scheduled,
                      const std::string& message) override {
    groups.push_back({group.key, scheduled ? "Scheduled" : "Unschedulable", message, false});
  }
  void ReportMoving(const PodInfo& pod, const std::string& message) override {
    moving_marks.push_back({pod.key, "MovedForDefragmentation", message, false});
  }
  void ReportGangRestart(const PodInfo& pod, const std::string& message) override {
    gang_restart_marks.push_back({pod.key, "GangRestarting", message, false});
  }
  void ReportSpares(const std::string& node, const std::string& gpus) override {
    spares.push_back(StrCat(node, "=", gpus));
  }
  void Nominate(const PodInfo& pod, const std::string& node) override {
    nominated.push_back(StrCat(pod.key, "->", node));
  }
  void Evict(const PodInfo& victim) override { evicted.push_back(victim.key); }
  std::vector<Refusal> TakeRefusals() override {
    std::vector<Refusal> out;
    out.swap(refusals);
    return out;
  }

  // The last failure reported for `key` ("" none).
  std::string LastFailure(const std::string& key) const {
    auto it = failures.find(key);
    return it == failures.end() ? "" : it->second;
  }
  // "key->node" for every bind, in order.
  std::vector<std::string> BindTexts() const {
    std::vector<std::string> out;
    for (const BindCall& b : binds) out.push_back(StrCat(b.key, "->", b.node));
    return out;
  }
  // "key Reason: message" for every call of `calls`, in order.
  static std::vector<std::string> Texts(const std::vector<ReportCall>& calls) {
    std::vector<std::string> out;
    for (const ReportCall& c : calls) out.push_back(StrCat(c.key, " ", c.reason, ": ", c.message));
    return out;
  }

  std::vector<BindCall> binds;
  std::vector<ReportCall> reports;              // failures, in order
  std::map<std::string, std::string> failures;  // the last failure of each pod
  std::vector<ReportCall> warnings;
  std::vector<ReportCall> normals;
  // Conditions tessera.dev/Reserved written (reason RoomReserved or Released), in order, and the
  // last lastTransitionTime written for each pod (Unix seconds).
  std::vector<ReportCall> reservations;
  std::map<std::string, int64_t> reservation_since;
  std::vector<ReportCall> groups;              // PodGroupInitiallyScheduled conditions written
  std::vector<std::string> spares;             // "node=gpus" for every spares annotation written
  std::vector<ReportCall> gang_restart_marks;  // conditions tessera.dev/GangRestart written
  std::vector<ReportCall> moving_marks;        // conditions tessera.dev/Moving written
  std::vector<std::string> nominated;          // "key->node"
  std::vector<std::string> evicted;            // keys
  std::vector<Refusal> refusals;               // what TakeRefusals hands over next
};

}  // namespace tessera::k8s::testing
