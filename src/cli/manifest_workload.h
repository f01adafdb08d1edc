// `tessera simulate -f manifests.yaml`: the user's own objects (k8s/manifests) as the simulator's
// workload, the one place the two meet (k8s never depends on sim).
//
// One job per object, named "ns/name" (its pods "ns/name-0", "ns/name-1", ...), asking what the
// scheduler decoded from its pod template. Gangs (tessera.dev/gang, gang-size K): an object's pods
// form count/K gangs of K consecutive pods, so its count must be a multiple of K; bare Pods of one
// gang (same namespace and gang name) become one job at the first one's place, and must ask the
// same (the simulator's gangs are of identical members). Objects that make no pods now (replicas
// 0) are left out.
#pragma once

#include "absl/status/statusor.h"
#include "k8s/manifests/manifests.h"
#include "sim/workload_file.h"

namespace tessera::cli {

[[nodiscard]] absl::StatusOr<sim::Workload> WorkloadFromManifests(const k8s::Manifests& manifests,
                                                                  std::string_view source);

}  // namespace tessera::cli
