// A point-in-time read of a cluster as tessera sees it: its nodes with their GPU inventories, and
// its pods (bound ones with the GPUs their tessera.dev/assignment grants, pending ones with the
// scheduler's last word on them). One paginated list of nodes and one of pods, run side by side;
// never a call per node or per pod. `tessera status`, `tessera simulate --from-cluster` and
// `tessera plan --from-cluster` all start here.
//
// Objects are decoded exactly as the scheduler decodes them (DecodeNode, DecodePod: the one owner
// of what a Node offers and a Pod asks), and Ledger() rebuilds the engine a scheduler starting
// now would have (ClusterLedger: the one owner of restoring what bound pods hold), so every
// reader of a snapshot agrees with the live scheduler about what is free.
//
//   absl::StatusOr<ClusterSnapshot> snap = ReadSnapshot(client);
//   for (const SnapshotNode& n : snap->nodes()) ... n.info->spec.gpus, n.health, n.ready
//   for (const auto& p : snap->pods()) ... p->bound(), p->assignment, p->unschedulable_message
//   std::unique_ptr<ClusterLedger> ledger = snap->Ledger({.policy = "tessera"}, &problems);
//   ledger->engine().state() ...  // what is free, as the scheduler would see it
//
// Invariants: nodes are sorted by name and unique; pods are sorted by key ("ns/name"), unique,
// and none is terminal (Succeeded or Failed pods hold nothing and are not listed).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "k8s/client/http.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/objects.h"
#include "k8s/scheduler/queue_book.h"
#include "nlohmann/json.hpp"
#include "records/inventory.h"
#include "records/queue.h"

namespace tessera::k8s {

// A Node as the scheduler decodes it, plus what only people need: GPU health and readiness.
struct SnapshotNode {
  std::shared_ptr<const NodeInfo> info;
  // One entry per GPU, in index order, when the inventory marks some GPU unhealthy; else empty
  // (records::Inventory::healthy answers for either).
  std::vector<records::GpuHealth> health;
  bool ready = false;  // the NodeReady condition is True

  const std::string& name() const { return info->name; }
  bool healthy(int gpu) const {
    return static_cast<size_t>(gpu) >= health.size() || health[static_cast<size_t>(gpu)].healthy;
  }
};

// The continue token of a list page, read without parsing the page: from the metadata the API
// server writes before the items. "" when the page is the last; nullopt when it cannot be read
// there (a different layout, an escaped token), and the page must be parsed for it. ReadSnapshot
// uses it to ask for the next page while it decodes this one.
std::optional<std::string> PeekContinue(std::string_view body);

// Decodes one Node object (never fails: problems are kept in info->inventory_error and
// info->capacity_error).
SnapshotNode DecodeSnapshotNode(const nlohmann::json& node);
SnapshotNode DecodeSnapshotNode(const ProtobufValue& node);  // a protobuf Node read in place

// Something a snapshot reader should tell people: a bound pod whose GPUs cannot be accounted (it
// blocks its node for GPU pods, as in the scheduler), a node whose inventory cannot be used.
struct SnapshotProblem {
  std::string object;  // "node/gpu-3", "pod/ns/name"
  std::string node;
  std::string message;
};

struct SnapshotOptions {
  int page_size = 500;
  // The request timeout of each page.
  std::chrono::milliseconds page_timeout{120'000};
  // Only the nodes with these labels (a label selector, as the scheduler's nodeSelector); empty:
  // every node. Pods bound elsewhere are still listed; the ledger ignores them.
  std::string node_selector;
  // Only this namespace's pods (GET /api/v1/namespaces/NS/pods), what a user whose RBAC covers
  // one namespace may read; empty: every namespace. The ledger then holds only their grants.
  std::string pod_namespace;
  // A node list the API server refuses (HTTP 403) gives a snapshot without nodes, nodes_error
  // saying why, instead of an error: a namespace-scoped user still sees its own pods.
  bool nodes_optional = false;
  // Ask the lists of nodes and pods in protobuf (k8s/client/protobuf_wire.h), which the API server
  // encodes faster than JSON; an answer in JSON (a server that will not) is read as well.
  bool protobuf = false;
};

class ClusterSnapshot {
 public:
  ClusterSnapshot() = default;
  // From decoded objects (a watch's caches, tests). Sorts them and drops terminal pods.
  ClusterSnapshot(std::vector<SnapshotNode> nodes,
                  std::vector<std::shared_ptr<const PodInfo>> pods);
  // From API objects, as a list returns them (tests).
  static ClusterSnapshot FromObjects(const std::vector<nlohmann::json>& nodes,
                                     const std::vector<nlohmann::json>& pods);

  const std::vector<SnapshotNode>& nodes() const { return nodes_; }
  const std::vector<std::shared_ptr<const PodInfo>>& pods() const { return pods_; }
  const SnapshotNode* FindNode(std::string_view name) const;

  // Pods bound to a node (spec.nodeName set), and pods of `scheduler_name` waiting for one (not
  // bound, not being deleted), in key order.
  std::vector<const PodInfo*> BoundPods() const;
  std::vector<const PodInfo*> PendingPods(std::string_view scheduler_name) const;

  // The ledger of a tessera scheduler that started now: every node (cordoned ones cordoned), then
  // every bound pod's holding restored (Holding::OfBoundPod). Pods whose GPUs cannot be accounted
  // block their node for GPU pods, as in the scheduler; they and unusable inventories are
  // appended to `problems` (optional). The policy must exist (core::CreatePolicy).
  std::unique_ptr<ClusterLedger> Ledger(const LedgerOptions& options,
                                        std::vector<SnapshotProblem>* problems = nullptr) const;

  // Where and when it was read (ReadSnapshot fills them).
  std::string server;
  std::chrono::system_clock::time_point taken_at{};
  double read_seconds = 0;     // the two lists, decoding included
  int64_t pages = 0;           // list requests made (both lists)
  int64_t protobuf_pages = 0;  // of which the API server answered in protobuf
  std::string pod_namespace;   // the pods are this namespace's only (SnapshotOptions)
  std::string nodes_error;     // the nodes could not be read (nodes_optional); none are here

 private:
  std::vector<SnapshotNode> nodes_;
  std::vector<std::shared_ptr<const PodInfo>> pods_;
};

// The queues as a scheduler starting now would count them: `book` (its specs set by the caller)
// gets the cluster of `ledger`, what every bound pod holds there, and what every pending pod of
// `scheduler_name` asks (not gated, readable, asking GPUs). `tessera status` and `tessera
// explain` both count through this.
void CountQueues(const ClusterSnapshot& snapshot, const ClusterLedger& ledger,
                 std::string_view scheduler_name, QueueBook* book);

// The scheduler's hot-spare rule (spareGpusPerDomain) as its nodes show it: the most GPUs that
// its tessera.dev/spare-gpus annotations list in one NVLink domain of `ledger`'s engine, 0 where
// no node lists one (or none can be read). A domain with fewer free GPUs than the rule keeps
// fewer, so the most is the rule's count unless every domain is short of free GPUs.
int SparesPerDomainShown(const ClusterSnapshot& snapshot, const ClusterLedger& ledger);

// The Queue objects (queues.tessera.dev) into `specs`, and those that cannot be decoded into
// `errors` (name, why). `specs` stays nullopt when they cannot be listed (no CRD, no permission):
// then, as in the scheduler, every queue is implicit. With `usage`, also each Queue's decayed
// usage (status.usage, written by the scheduler when it keeps a usage half-life).
void ReadQueues(ApiClient& client, std::optional<std::vector<core::QueueSpec>>* specs,
                std::vector<std::pair<std::string, std::string>>* errors,
                std::vector<records::QueueUsageStatus>* usage = nullptr);

// Lists every Node and every non-terminal Pod (field selector status.phase!=Succeeded,Failed), or
// one namespace's pods (options.pod_namespace), paginated, the two lists side by side. Errors
// name the list and the API server's answer.
[[nodiscard]] absl::StatusOr<ClusterSnapshot> ReadSnapshot(ApiClient& client,
                                                           const SnapshotOptions& options = {});

}  // namespace tessera::k8s
