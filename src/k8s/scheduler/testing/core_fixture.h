// A SchedulerCore driven step by step with the recording fakes (recorder.h): the test's clock, the
// pods as the watch shows them, and binds that land when the test says so. The fixtures of
// preemption, gang restarts and reservations derive from it.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "k8s/scheduler/scheduler_core.h"
#include "k8s/scheduler/testing/recorder.h"
#include "nlohmann/json.hpp"
#include "records/assignment.h"

namespace tessera::k8s::testing {

class CoreFixture : public ::testing::Test {
 protected:
  // (Re)creates the core with `options` on this fixture's clock, preemption writing to rec_.
  void CreateCore(const SchedulerCoreOptions& options) {
    auto c = SchedulerCore::Create(options, &rec_, &rec_, &metrics_, [this] { return now_; });
    ASSERT_TRUE(c.ok()) << c.status();
    core_ = std::move(*c);
    core_->EnablePreemption(&rec_);
  }
  // The watch shows `pod` (kept as the pod's latest object).
  void Pod(const nlohmann::json& pod, Change change = Change::kAdded) {
    objects_[DecodePod(pod)->key] = pod;
    core_->OnPod(change, DecodePod(pod));
  }
  // Schedules, and makes every new bind land (its answer and the watch).
  void ScheduleAndBind() {
    const size_t from = rec_.binds.size();
    core_->ScheduleSome();
    for (size_t i = from; i < rec_.binds.size(); ++i) {
      const Recorder::BindCall& b = rec_.binds[i];
      core_->OnBindResult(b.key, b.attempt, absl::OkStatus());
      nlohmann::json pod = objects_.at(b.key);
      pod["spec"]["nodeName"] = b.assignment.node;
      pod["metadata"]["annotations"]["tessera.dev/assignment"] =
          records::AssignmentToJson(b.assignment);
      Landed(pod);
      Pod(pod, Change::kUpdated);
    }
  }
  // What else the watch shows of a pod whose bind landed (a fixture whose pods start at once
  // sets their status here); nothing by default.
  virtual void Landed(nlohmann::json& pod) { (void)pod; }
  // The node of `key`'s first bind ("" if none).
  std::string BoundTo(const std::string& key) const {
    for (const Recorder::BindCall& b : rec_.binds) {
      if (b.key == key) return b.assignment.node;
    }
    return "";
  }
  // The watch shows the pod terminating (the Eviction API's graceful deletion), then gone.
  void Terminating(const std::string& key) {
    nlohmann::json pod = objects_.at(key);
    pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
    Pod(pod, Change::kUpdated);
  }
  void Gone(const std::string& key) {
    core_->OnPod(Change::kDeleted, DecodePod(objects_.at(key)));
    objects_.erase(key);
  }
  void Advance(int ms) { now_ += std::chrono::milliseconds(ms); }

  Recorder rec_;
  SchedulerMetrics metrics_;
  std::map<std::string, nlohmann::json> objects_;
  std::chrono::steady_clock::time_point now_ =
      std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  std::unique_ptr<SchedulerCore> core_;
};

}  // namespace tessera::k8s::testing
