// `tessera explain pod NS/NAME` (and `kubectl tessera explain pod ...`): why a pod waits, in one
// place. Everything the scheduler left on the API server about it, and, where it left nothing, the
// engine's own answer on the cluster as it stands:
//
//   the scheduler's word  condition PodScheduled (reason, message) and the pod's Events
//   its queue             tessera.dev/queue and priority; its position in the order the scheduler
//                         would try the waiting pods now (SchedulingQueue over the QueueBook, as
//                         the scheduler orders them: priority, the queue furthest below its fair
//                         share, arrival); the queue's deserved, fair share, allocated figures
//   preemption / defrag   status.nominatedNodeName; the victims (Preempted Events naming it) and
//                         the moves (its Defragmentation Event)
//   scale-up              the condition tessera.dev/ScaleUp (the template that would let it run)
//   its gang              tessera.dev/gang: the members present, bound and waiting, against the
//                         size and min
//   what-if               when the scheduler wrote nothing: the engine's decision now (the
//                         snapshot's ledger, as a scheduler starting now would hold it), with
//                         the reason it does not fit, or where it would go
//
// Gathering (GatherExplainInputs: the pod, its Events, a snapshot, the Queues) is apart from
// explaining (ExplainPod: pure), so tests explain planted objects. A user whose RBAC covers only
// the pod's namespace still gets an answer: the snapshot is then that namespace's pods (and no
// nodes when nodes cannot be listed), and what could not be read is said.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/queues/queue_set.h"
#include "k8s/client/http.h"
#include "k8s/snapshot/snapshot.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

struct ExplainInputs {
  nlohmann::json pod;                        // as the API server has it
  std::vector<nlohmann::json> events;        // Events whose involvedObject is the pod
  std::vector<nlohmann::json> other_events;  // Preempted Events of other pods (victims)
  ClusterSnapshot snapshot;
  std::optional<std::vector<core::QueueSpec>> queues;  // nullopt: not readable (implicit queues)
  std::string scheduler_name = "tessera";
  std::vector<std::string> unreadable;  // what could not be read, for the answer
  std::chrono::system_clock::time_point now = std::chrono::system_clock::now();
};

struct ExplainEvent {
  std::string type, reason, message, last;  // last: when it last happened (RFC 3339)
  int count = 1;
};

struct GangMember {
  std::string pod;
  std::string state;  // "bound to NODE", "waiting", "being deleted"
};

struct PodExplanation {
  std::string pod;  // "ns/name"
  std::string phase;
  std::string node;  // bound to
  std::string scheduler_name;
  bool ours = true;  // its schedulerName is the scheduler explained
  std::string ask;   // core::DescribeAsk, or why it cannot be read
  std::string input_error;
  int64_t waiting_seconds = -1;
  std::string summary;  // one line: why it waits (or that it does not)

  // The scheduler's word.
  std::string scheduled_status;  // PodScheduled condition: "False", "True", "" none
  std::string scheduled_reason, scheduled_message;
  std::vector<ExplainEvent> events;  // oldest first
  std::vector<std::string> gates;    // spec.schedulingGates

  // Its queue.
  std::string queue;
  int32_t priority = 0;
  int position = 0;  // 1-based among the waiting pods the scheduler would try; 0 unknown
  int waiting_pods = 0;
  std::string queue_figures;  // "deserves 4 GPUs, fair share 4, holds 3, borrows 0"
  std::string queue_invalid;

  // Preemption and defragmentation.
  std::string nominated_node;
  std::vector<std::string> victims;  // "ns/name (on node X)"
  std::string defrag;                // its Defragmentation Event's message

  std::string scale_up;  // condition tessera.dev/ScaleUp's message

  // Its gang.
  std::string gang;
  int32_t gang_size = 0, gang_min = 0;
  std::vector<GangMember> members;

  // The engine's answer now, when the scheduler left none.
  std::string what_if;
  bool what_if_fits = false;
  bool never_fits = false;

  std::vector<std::string> unreadable;
};

[[nodiscard]] absl::StatusOr<PodExplanation> ExplainPod(const ExplainInputs& inputs);

std::string RenderExplanationText(const PodExplanation& e);
// {"version": 1, "pod", "phase", "node", "scheduler_name", "ours", "ask", "input_error",
// "waiting_seconds", "summary", "scheduled": {"status", "reason", "message"}, "events": [{"type",
// "reason", "message", "count", "last"}], "gates", "queue": {"name", "priority", "position",
// "waiting_pods", "figures", "invalid"}, "nominated_node", "victims", "defrag", "scale_up",
// "gang": {"name", "size", "min", "members": [{"pod", "state"}]} or null, "what_if": {"fits",
// "never_fits", "message"} or null, "unreadable"}: fields are only ever added.
nlohmann::json ExplanationToJson(const PodExplanation& e);

// Reads what ExplainPod needs: the pod (NotFound names it), its Events, the Preempted Events
// (cluster-wide, else its namespace's), a snapshot (cluster-wide, else its namespace's pods, and
// no nodes when they cannot be listed) and the Queues.
[[nodiscard]] absl::StatusOr<ExplainInputs> GatherExplainInputs(ApiClient& client,
                                                                const std::string& ns,
                                                                const std::string& name,
                                                                const std::string& scheduler_name);

}  // namespace tessera::k8s
