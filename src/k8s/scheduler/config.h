// The scheduler's configuration file (YAML; every key optional, unknown keys are errors), as
// deploy/ ships it in a ConfigMap:
//
//   apiVersion: tessera.dev/v1alpha1
//   kind: SchedulerConfiguration
//   schedulerName: tessera
//   policy: tessera
//   leaderElection: {leaderElect: true, resourceNamespace: tessera-system}
//   metrics: {bindAddress: 0.0.0.0, port: 10269}
//   retry: {minInterval: 1s, period: 30s}
//
// Every key, with its type, default and meaning: config_keys.h (the one list, which the parser
// checks keys against), rendered as docs/configuration.md. Durations are integers with a unit:
// ms, s, m, h (500ms, 15s, 2m, 24h).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/prometheus.h"
#include "k8s/client/leader_election.h"
#include "k8s/scheduler/scheduler_core.h"

namespace tessera::k8s {

struct SchedulerConfig {
  SchedulerCoreOptions core;
  std::string node_selector;
  bool leader_elect = true;
  LeaderElectionConfig lease;  // identity is filled in at start
  std::string metrics_address = "127.0.0.1";
  int metrics_port = 10269;
  int bind_concurrency = 64;
  bool http2 = false;
  // Lists and watches of Pods and Nodes in Kubernetes' protobuf (file key `wire: protobuf`), or
  // in JSON (`wire: json`); every other resource is read in JSON (CRDs have no protobuf).
  bool protobuf_wire = true;
  // Not from the file: the binary's build, served as tessera_build_info (`tessera scheduler`).
  prometheus::BuildInfo build{"unknown", "unknown"};
  std::chrono::milliseconds queue_usage_half_life{0};
  std::chrono::milliseconds queue_usage_write_interval{60'000};
};

[[nodiscard]] absl::StatusOr<SchedulerConfig> ParseSchedulerConfig(std::string_view yaml,
                                                                   std::string_view source);
[[nodiscard]] absl::StatusOr<SchedulerConfig> LoadSchedulerConfig(const std::string& path);

}  // namespace tessera::k8s
