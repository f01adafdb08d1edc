// Upstream PodGroups (scheduling.k8s.io/v1beta1, Kubernetes 1.37, feature gate GenericWorkload)
// and the pods that name them (spec.schedulingGroup.podGroupName): which gang such a pod is in,
// said as the same core::GangAsk the annotations give, so that GangAssembler and the engine see
// one kind of gang whichever way it was asked. It decides nothing about where or when.
//
// A PodGroup's policy:
//   gang {minCount: M}  a gang named as the PodGroup ("ns/name"), all or nothing for at least M
//                       pods, growing as room allows (kube-scheduler's semantics): an elastic gang
//                       with no fixed size (GangAsk::size kMaxGangSize, GangAsk::min M);
//   basic {}            independent pods (grouped for the PodGroup's status only).
// spec.schedulingConstraints.topology[].key, a node label, is the topology level whose label it is
// (required); a key that is no level of this scheduler makes the group's pods invalid input.
//
// Precedence when a pod says several things (one owner: Resolve):
//   1. spec.schedulingGroup: the PodGroup decides the gang (the API server, kube-scheduler and
//      the PodGroup's controller all read it). The pod's own tessera.dev/gang or Kueue label,
//      when it names another gang or another min, is ignored, and the pod is told once (`ignored`).
//      A basic PodGroup asks for no gang: the pod's own gang, if it has one, applies (the Job
//      controller gives every Job without spec.scheduling a basic PodGroup; a Job whose template
//      says tessera.dev/gang keeps its gang).
//      tessera.dev/gang-topology on the pod applies when the PodGroup has no topology constraint
//      (it can say what the upstream API cannot: an NVLink domain inside a node).
//   2. tessera.dev/gang (+ size, min, topology) (objects.h);
//   3. Kueue's kueue.x-k8s.io/pod-group-name and pod-group-total-count (objects.h). In a
//      PodGroup's pod, the label without its count is no gang of its own and is not an error.
// A pod whose PodGroup does not exist (yet) waits (pod_group_missing), as with kube-scheduler; it
// is resolved again when the PodGroup appears (OnGroup returns its key).
//
// Workload-aware preemption, as kube-scheduler 1.37 takes a PodGroup (gang or basic):
//   spec.priority          when set, every pod's priority (as preemptor, as victim, in its queue);
//   spec.preemptionPolicy  Never: the pods evict nobody (else each pod's own policy decides);
//   spec.disruptionMode    all: the group is one victim, every pod of it evicted together or none
//                          (disrupted_with_group); single (the API server's default): a gang
//                          group's members above minCount may be evicted alone and its first
//                          minCount only together, tessera's rule for every elastic gang
//                          (core/preemption/planner.h); kube-scheduler would evict any one member,
//                          leaving a gang below its minCount holding GPUs it cannot use.
#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/topology/domains.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

class PodGroups {
 public:
  explicit PodGroups(std::vector<core::TopologyLevel> levels) : levels_(std::move(levels)) {}

  // A PodGroup changed; returns the keys of the pods that name it, to be resolved again.
  std::vector<std::string> OnGroup(Change change, std::shared_ptr<const PodGroupInfo> group);

  struct Resolved {
    std::shared_ptr<const PodInfo> pod;  // what the scheduler works with
    // Non-empty the first time the pod's own gang annotations (or Kueue label) are found to
    // disagree with its PodGroup: why they are ignored.
    std::string ignored;
  };
  // `raw` as decoded. A pod naming a PodGroup is remembered (Raw) until Forget; others pass.
  Resolved Resolve(std::shared_ptr<const PodInfo> raw);
  std::shared_ptr<const PodInfo> Raw(const std::string& pod_key) const;
  // The pods whose PodGroup is missing, by key.
  std::vector<std::string> Waiting() const;
  void Forget(const std::string& pod_key);

  const PodGroupInfo* Find(const std::string& group_key) const;
  // The PodGroup whose gang (or basic group) `pod` is in; nullptr when the pod's gang comes from
  // elsewhere.
  const PodGroupInfo* GroupOf(const PodInfo& pod) const;

  // Whether condition PodGroupInitiallyScheduled should be written now with this status and
  // message: not when it is True already (terminal, as kube-scheduler keeps it), nor when this
  // scheduler wrote the same last. Records it as written when true.
  bool ShouldWrite(const PodGroupInfo& group, bool scheduled, const std::string& message);

 private:
  // The pod as the scheduler sees it in `group` (nullptr: the group is missing).
  std::shared_ptr<const PodInfo> Apply(const PodInfo& raw, const PodGroupInfo* group,
                                       std::string* ignored) const;

  std::vector<core::TopologyLevel> levels_;
  absl::flat_hash_map<std::string, std::shared_ptr<const PodGroupInfo>> groups_;
  absl::flat_hash_map<std::string, std::set<std::string>> members_;  // group key -> pod keys
  struct Member {
    std::shared_ptr<const PodInfo> raw;
    std::string ignored;  // what the pod was last told
  };
  absl::flat_hash_map<std::string, Member> raw_;           // pod key -> as decoded
  absl::flat_hash_map<std::string, std::string> written_;  // group key -> status + message
};

}  // namespace tessera::k8s
