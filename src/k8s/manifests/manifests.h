// The user's own manifests (what `kubectl apply -f` takes: Pods, Deployments, Jobs, ...) as the
// pods they would make, for `tessera simulate --from-cluster -f manifests.yaml`: "would my
// workload fit on the cluster as it stands?".
//
// Each document is read by its kind (ManifestKinds() lists them, from a table): the pod template
// is taken as the pod it makes and decoded by DecodePod, the one owner of what a Pod asks, so a
// manifest asks here exactly what its pods will ask the scheduler. Counts: a Pod is one;
// Deployments, ReplicaSets and StatefulSets make spec.replicas (default 1); a Job runs
// spec.parallelism at once (default 1, at most spec.completions); a CronJob one run of its job
// template. `kind: List` documents are read item by item. Documents of other kinds (Services,
// ConfigMaps, DaemonSets, ...) are reported and skipped.
//
// Upstream PodGroups (scheduling.k8s.io) make no pods: they are decoded by DecodePodGroup and kept
// in Manifests::pod_groups, and ResolvePodGroups gives the pods that name one
// (spec.schedulingGroup.podGroupName) the gang the scheduler would, through the scheduler's own
// PodGroups::Resolve (pod_groups.h: a gang {minCount: M} is an elastic gang of at least M, basic
// is independent pods, a topology key is a level of `levels`). Its caller gives it all the files
// at once: a PodGroup and its pods may be in different files.
//
// Strict, as files people write should be: a document that is not a map, an object without
// kind or name, annotation or label values that are not strings (kubectl refuses them too), a
// negative count, a pod whose resources or tessera annotations cannot be read, a PodGroup with
// neither gang nor basic policy, or a pod naming a PodGroup that no manifest gives is an error
// naming the file, the document's line and the object.
//
// Example: a Deployment "web" with replicas 3 and limits tessera.dev/gpu-memory: 4Gi gives one
// ManifestWorkload {kind Deployment, name web, count 3, pod asking a 4Gi share}. With a PodGroup
// "train" {gang: {minCount: 4}} and a Job of parallelism 4 whose template has
// schedulingGroup.podGroupName: train, the Job's pod is in gang "train" with min 4 once resolved.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/topology/domains.h"
#include "k8s/scheduler/objects.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

// One object that makes pods, and the pod it makes.
struct ManifestWorkload {
  std::string source;  // the file, as given to ParseManifests
  std::string kind;    // "Deployment"
  std::string ns;      // metadata.namespace, or the default namespace given
  std::string name;    // metadata.name
  int line = 0;        // where its document (or List item) starts, 1-based
  int32_t count = 0;   // pods it runs at once
  // The pod template as a Pod named `name` in `ns` (its request's name is "ns/name"); after
  // ResolvePodGroups, as its PodGroup makes it.
  std::shared_ptr<const PodInfo> pod;
  // What the simulation cannot honour of it: node selectors, affinity, tolerations, a
  // priorityClassName (spec.priority is honoured), another schedulerName. Empty: nothing.
  std::vector<std::string> not_simulated;
};

// A document left out, and why ("kind Service makes no pods").
struct ManifestSkipped {
  std::string kind, name;
  int line = 0;
  std::string why;
};

// An upstream PodGroup (scheduling.k8s.io), as the scheduler decodes it.
struct ManifestPodGroup {
  std::string source;
  int line = 0;
  std::shared_ptr<const PodGroupInfo> group;  // its namespace defaulted as a workload's is
};

struct Manifests {
  std::vector<ManifestWorkload> workloads;  // in file order
  std::vector<ManifestSkipped> skipped;
  std::vector<ManifestPodGroup> pod_groups;
  bool pod_groups_resolved = false;  // ResolvePodGroups has given the workloads their PodGroups
};

// The kinds read, in the order of the table.
std::vector<std::string> ManifestKinds();

// Reads multi-document YAML (or JSON). `source` names the file in errors; objects without a
// namespace go to `default_namespace`.
[[nodiscard]] absl::StatusOr<Manifests> ParseManifests(std::string_view text,
                                                       std::string_view source,
                                                       const std::string& default_namespace);

// Gives each workload whose pods name a PodGroup (spec.schedulingGroup.podGroupName) the pod the
// scheduler would work with: its gang from the PodGroup (PodGroups::Resolve), whatever the pod's
// own gang annotations say (then told in not_simulated). `levels` are the topology levels a
// PodGroup's topology keys are looked up in. An error names the object: a PodGroup given twice, a
// pod naming a PodGroup in none of the manifests, a topology key that is no level.
[[nodiscard]] absl::Status ResolvePodGroups(const std::vector<core::TopologyLevel>& levels,
                                            Manifests* manifests);

}  // namespace tessera::k8s
