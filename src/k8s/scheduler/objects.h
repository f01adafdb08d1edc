// Pods and Nodes as the scheduler needs them, decoded once from their API objects (on the watch
// thread) into immutable values. Decoding never fails and never throws: what is wrong with an
// object is kept in it (PodInfo::input_error, NodeInfo::inventory_error) with the field that is
// wrong, so that the scheduler can tell the pod's owner (an Event) or stop using a node's GPUs,
// and carry on with everything else.
//
// The pod contract (DESIGN.md "Kubernetes-facing contract"):
//   container resources.limits   tessera.dev/gpu: N          N whole GPUs, exclusive
//                                tessera.dev/gpu-memory: 4Gi  a share of one GPU with this memory
//                                tessera.dev/gpu-compute: 25  percent of one GPU's compute (1..100)
//   annotations  tessera.dev/topology: nvlink|pcie-switch|numa|node (+ -mode: required|preferred)
//                tessera.dev/gang: NAME, tessera.dev/gang-size: K (+ tessera.dev/gang-min: M,
//                1..K: an elastic gang that starts with M members and grows to K),
//                tessera.dev/gang-topology: LEVEL (+ tessera.dev/gang-topology-mode, default
//                required), tessera.dev/queue: NAME; spec.priority orders the queue;
//                tessera.dev/max-runtime: DURATION (or spec.activeDeadlineSeconds) declares the
//                pod's maximum run time (backfill into reserved room; enforced by the scheduler).
//   gangs also   spec.schedulingGroup.podGroupName (an upstream PodGroup, pod_groups.h) and
//                Kueue's label kueue.x-k8s.io/pod-group-name with the annotation
//                kueue.x-k8s.io/pod-group-total-count (a gang of that size, all or nothing).
// CPU and memory requests are what kube-scheduler computes (component-helpers PodRequests):
// the sum over containers, raised to any init container's need (restartable "sidecar" init
// containers count as running alongside), plus spec.overhead. GPU asks add up the same way.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/node.h"
#include "core/model/request.h"
#include "k8s/client/protobuf_value.h"
#include "k8s/dra/objects.h"
#include "k8s/taints/taints.h"
#include "nlohmann/json.hpp"
#include "records/assignment.h"
#include "records/names.h"

namespace tessera::k8s {

// Where a pod may go, as kube-scheduler's NodeUnschedulable, TaintToleration (NoSchedule and
// NoExecute; Taint, Toleration and their matching in k8s/taints/taints.h) and NodeAffinity
// (spec.nodeSelector, required node affinity) filters decide.
struct NodeSelectorRequirement {
  std::string key;
  std::string op;  // In, NotIn, Exists, DoesNotExist, Gt, Lt
  std::vector<std::string> values;
  bool field = false;  // matchFields (metadata.name) rather than labels
  bool operator==(const NodeSelectorRequirement&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const NodeSelectorRequirement& r) {
    return H::combine(std::move(h), r.key, r.op, r.values, r.field);
  }
};
using NodeSelectorTerm = std::vector<NodeSelectorRequirement>;  // all must match

// Everything of a pod that restricts its nodes. Equal constraints allow equal nodes, so the
// scheduler keeps one allowed set per distinct value (equality and hashing cover every field).
struct NodeConstraints {
  std::map<std::string, std::string> node_selector;
  std::vector<NodeSelectorTerm> affinity_terms;  // required node affinity: any term matches
  bool has_affinity = false;
  std::vector<Toleration> tolerations;

  // Selector or affinity present (tolerations only matter on tainted nodes).
  bool selects() const { return !node_selector.empty() || has_affinity; }
  bool operator==(const NodeConstraints&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const NodeConstraints& c) {
    return H::combine(std::move(h), c.node_selector, c.affinity_terms, c.has_affinity,
                      c.tolerations);
  }
};

// The pod's declared maximum run time (a duration: 30m, 2h): with reservations on, it may backfill
// reserved room (core/reservations), and the scheduler evicts it once it has run that long
// (runtime_limits.h).
inline constexpr std::string_view kMaxRuntimeAnnotation = "tessera.dev/max-runtime";

// What happens to a gang that loses a member to a GPU fault: "member" (the default: the member's
// controller makes a replacement, placed beside the survivors) or "all" (the whole gang is
// evicted and placed again together): gang_restarts.h.
inline constexpr std::string_view kGangRestartAnnotation = "tessera.dev/gang-restart";

// The pod condition type in which the scheduler's scale-up signal tells a waiting pod which
// nodes would let it run (scale_up_signal.h); `tessera status` shows it.
inline constexpr std::string_view kScaleUpCondition = "tessera.dev/ScaleUp";

// The pod condition type that marks an old member of a gang restarting whole (status True; its
// message says why): written before the member is evicted, so that a restarted scheduler knows
// the restart is under way from the API server alone (gang_restarts.h).
inline constexpr std::string_view kGangRestartCondition = "tessera.dev/GangRestart";

struct PodInfo {
  std::string ns, name, uid, key;  // key: "ns/name"
  std::string resource_version;
  std::string scheduler_name;
  std::string node_name;  // empty until bound
  std::string phase;
  bool deleting = false;  // metadata.deletionTimestamp is set
  bool gated = false;     // spec.schedulingGates is not empty
  int32_t priority = 0;
  std::string queue = "default";
  std::string created;        // metadata.creationTimestamp
  int64_t created_unix = -1;  // the same in Unix seconds (-1: absent or unreadable)
  int64_t started_unix = -1;  // status.startTime in Unix seconds (-1: not started, unreadable)
  // The declared maximum run time in seconds: tessera.dev/max-runtime (rounded up to whole
  // seconds) or spec.activeDeadlineSeconds, the smaller when both are given; nullopt: none.
  std::optional<int64_t> max_runtime_s;
  // "<field>: <what is wrong>" when tessera.dev/max-runtime cannot be read: it is then taken as
  // not declared (activeDeadlineSeconds still counts), and the scheduler tells the pod's owner.
  std::string max_runtime_error;
  std::string nominated_node;  // status.nominatedNodeName: room being made for it (preemption)
  // "Kind/name" of the ownerReference with controller: true (the ReplicaSet, Job, ... that
  // recreates the pod when it is evicted); empty for a bare pod.
  std::string controller;
  std::map<std::string, std::string> labels;  // metadata.labels (disruption budgets select by them)
  bool ready = false;                         // condition Ready is True

  // spec.schedulingGroup.podGroupName: the upstream PodGroup the pod belongs to; empty: none.
  // Decoded request.gang is then what the pod's own annotations say; the scheduler replaces it
  // with the PodGroup's gang (PodGroups::Resolve).
  std::string pod_group;
  // tessera.dev/gang-topology (+ -mode) on a pod in a PodGroup without tessera.dev/gang: a gang
  // with only level and required set, for the PodGroup's gang (PodGroups::Resolve).
  std::optional<core::GangAsk> pod_group_topology;
  // Set by PodGroups::Resolve, never decoded: the pod names a PodGroup that does not exist (yet).
  bool pod_group_missing = false;
  // Set by PodGroups::Resolve, never decoded: the pod's PodGroup says spec.disruptionMode.all, so
  // preemption evicts the pod only together with every other pod of the group (the group is the
  // victim unit; without it a gang's members above its min may go alone, its core together).
  bool disrupted_with_group = false;
  // Whether the pod may evict others to fit: false for spec.preemptionPolicy Never, or when its
  // PodGroup says so (PodGroups::Resolve). It still waits for room in its turn.
  bool may_preempt = true;
  // tessera.dev/gang-restart: all, or (set by PodGroups::Resolve) its PodGroup's
  // spec.disruptionMode.all: the gang is restarted whole when a member is lost to a GPU fault
  // (gang_restarts.h). False ("member", the default): only the lost member is replaced.
  bool gang_restart_all = false;

  // What the pod asks for; meaningful when input_error is empty. request.name == key.
  core::PodRequest request;
  // "<field>: <what is wrong>" when the pod's resources or annotations cannot be understood.
  std::string input_error;

  // The tessera.dev/assignment record, when present and valid; assignment_error when present but
  // invalid.
  std::optional<records::Assignment> assignment;
  std::string assignment_error;
  // The message of a PodScheduled=False condition already on the pod (so it is not rewritten).
  std::string unschedulable_message;
  // The message of the scheduler's scale-up signal on the pod (condition tessera.dev/ScaleUp).
  std::string scale_up_message;
  // The scheduler's reservation for the pod (condition tessera.dev/Reserved, records/reservation.h)
  // while its status is True: the message and lastTransitionTime, as written; empty otherwise.
  std::string reservation_message;
  std::string reservation_since;
  // Condition tessera.dev/Moving (records/move.h) while True: this pod was moved for
  // defragmentation and its destination is held for its replacement (the message, as written).
  std::string moving_message;
  // Condition tessera.dev/GangRestart while True: this pod is an old member of its gang's restart
  // (the message, as written); empty otherwise.
  std::string gang_restart_message;

  NodeConstraints constraints;

  // spec.resourceClaims, resolved through status.resourceClaimStatuses (DRA mode).
  dra::PodClaims claims;
  // Extended resources a DeviceClass may serve (DRA mode, DRAExtendedResource), and the claim
  // made for them.
  dra::PodExtended extended;

  bool terminal() const { return phase == "Succeeded" || phase == "Failed"; }
  // Whether `other` (the same pod, updated) asks the scheduler for something else: its request,
  // queue, node constraints, declared run time or input error differ. Only then is an
  // unschedulable pod retried because it changed.
  bool SameAsk(const PodInfo& other) const {
    return input_error == other.input_error && request == other.request && queue == other.queue &&
           priority == other.priority && may_preempt == other.may_preempt &&
           max_runtime_s == other.max_runtime_s && constraints == other.constraints &&
           claims == other.claims && extended.requests == other.extended.requests;
  }
  bool bound() const { return !node_name.empty(); }
};

std::shared_ptr<const PodInfo> DecodePod(const nlohmann::json& pod);
// The same from a Pod of a protobuf list read in place (issue 33 "decode once": no JSON tree in
// between); the same decoder, so the same PodInfo as DecodePod of ProtobufObjectToJson's JSON.
std::shared_ptr<const PodInfo> DecodePod(const ProtobufValue& pod);

// An upstream PodGroup (scheduling.k8s.io/v1beta1, Kubernetes 1.37 with the GenericWorkload
// gate): the fields tessera uses. Decoding never fails: unknown fields are ignored, and what
// tessera cannot use is kept in `error` (the field and why), for its pods' owner to read.
struct PodGroupInfo {
  std::string ns, name, key;  // key: "ns/name"
  std::string uid, resource_version;
  int64_t generation = 0;
  // spec.schedulingPolicy: gang {minCount} (all or nothing for at least min_count pods) or
  // basic {} (independent pods).
  bool gang = false;
  int32_t min_count = 0;
  // spec.schedulingConstraints.topology[].key: node label keys the group stays inside.
  std::vector<std::string> topology_keys;
  // spec.disruptionMode: all (the group is preempted as one unit, and a member lost to a GPU fault
  // restarts the whole group: gang_restarts.h, as tessera.dev/gang-restart: all does) or single
  // (the default the API server writes: each pod on its own, within tessera's gang rule:
  // PodInfo::disrupted_with_group).
  bool disrupt_all = false;
  // spec.priority (the API server's Priority admission sets it from spec.priorityClassName): when
  // set, the priority of every pod of the group, as kube-scheduler's workload-aware preemption
  // takes it, whatever the pods' own spec.priority says.
  std::optional<int32_t> priority;
  // spec.preemptionPolicy Never: the group's pods evict nobody (PreemptLowerPriority or absent:
  // each pod's own spec.preemptionPolicy decides).
  bool preempt_never = false;
  // status.conditions as they are (the scheduler rewrites the list with its own condition).
  nlohmann::json conditions = nlohmann::json::array();
  std::string error;
  // The status of condition PodGroupInitiallyScheduled ("True", "False"; "" when absent).
  std::string InitiallyScheduled() const;
};

inline constexpr std::string_view kPodGroupsPath = "/apis/scheduling.k8s.io/v1beta1/podgroups";
inline constexpr std::string_view kPodGroupScheduledCondition = "PodGroupInitiallyScheduled";

std::shared_ptr<const PodGroupInfo> DecodePodGroup(const nlohmann::json& group);

struct NodeInfo {
  std::string name;
  // Name, allocatable CPU and memory, labels, and the GPUs and links of a valid inventory (none
  // when the inventory is absent or invalid).
  core::NodeSpec spec;
  bool has_inventory = false;
  std::string inventory_error;  // non-empty: the annotation is there but unusable
  std::string capacity_error;   // allocatable CPU or memory could not be read (counted as 0)
  bool unschedulable = false;   // spec.unschedulable (cordoned)
  // GPUs the agent marked unhealthy in the inventory (by index): they take no new pods.
  std::vector<int32_t> unhealthy_gpus;
  std::vector<Taint> taints;  // NoSchedule and NoExecute (PreferNoSchedule is only a preference)
  // The scheduler's own tessera.dev/spare-gpus annotation as found ("" when absent): what it
  // published last (the engine does not read it: not in the fingerprint).
  std::string spare_gpus;
  // Everything the engine sees of this node; a change rebuilds the engine's cluster.
  std::string fingerprint;
};

std::shared_ptr<const NodeInfo> DecodeNode(const nlohmann::json& node);
std::shared_ptr<const NodeInfo> DecodeNode(const ProtobufValue& node);  // as DecodePod's

// Whether `pod` may go on `node` by its taints, node selector and required node affinity; when
// not, `why` (optional) says which: "taint", "selector".
bool NodeAllows(const NodeInfo& node, const NodeConstraints& constraints,
                std::string* why = nullptr);
inline bool NodeAllows(const NodeInfo& node, const PodInfo& pod, std::string* why = nullptr) {
  return NodeAllows(node, pod.constraints, why);
}

}  // namespace tessera::k8s
