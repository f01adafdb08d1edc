// `tessera simulate -f manifests.yaml`: the user's own objects (k8s/manifests) as the simulator's
// workload, the one place the two meet (k8s never depends on sim).
//
// One job per object, named "ns/name" (its pods "ns/name-0", "ns/name-1", ...), asking what the
// scheduler decoded from its pod template. Gangs (tessera.dev/gang, gang-size K): an object's pods
// form count/K gangs of K consecutive pods, so its count must be a multiple of K; bare Pods of one
// gang (same namespace and gang name) become one job at the first one's place, and must ask the
// same (the simulator's gangs are of identical members). Pods naming an upstream PodGroup have
// its gang (the manifests must have been through k8s::ResolvePodGroups, which gives it as the
// scheduler does): all the objects whose pods name one gang PodGroup become one job
// "ns/podgroup", a gang of every pod they make (the live gang has no upper bound; here it is what
// the manifests make) that runs with at least minCount, so they too must ask the same; a basic
// PodGroup's pods are independent. Objects that make no pods now (replicas 0) are left out.
//
// Example: PodGroup train {gang: {minCount: 4}} and a Job of parallelism 6 naming it give one
// job "ns/train" of 6 replicas, gang {size 6, min 4}.
#pragma once

#include "absl/status/statusor.h"
#include "k8s/manifests/manifests.h"
#include "sim/workload_file.h"

namespace tessera::cli {

// `manifests`: all the files, after ResolvePodGroups. `source` names them as a whole in errors;
// each object's own file is in the object.
[[nodiscard]] absl::StatusOr<sim::Workload> WorkloadFromManifests(const k8s::Manifests& manifests,
                                                                  std::string_view source);

}  // namespace tessera::cli
