// The scheduler's configuration file (YAML; every key optional, unknown keys are errors), as
// deploy/ ships it in a ConfigMap:
//
//   apiVersion: tessera.dev/v1alpha1
//   kind: SchedulerConfiguration
//   schedulerName: tessera          # pods with this spec.schedulerName are ours
//   policy: tessera                 # any name `tessera simulate --help` lists
//   seed: 1                         # for policies that randomise
//   nodeSelector: "gpu=true"        # label selector: the nodes to place on (default: all)
//   topologyLevels:                 # gang topology levels, narrowest first (default:
//   nvlink-domain,
//     - {name: rack, label: tessera.dev/rack}   # rack, block, zone from tessera.dev/<level>)
//   leaderElection:
//     leaderElect: true
//     resourceNamespace: kube-system
//     resourceName: tessera-scheduler
//     leaseDuration: 15s
//     renewDeadline: 10s
//     retryPeriod: 2s
//   metrics: {bindAddress: 127.0.0.1, port: 10269}   # /metrics and /healthz; port 0 = any free
//   bindConcurrency: 64             # binds and status writes in flight at once
//   http2: false                    # writes over HTTP/1.1 keep-alive connections (faster with
//                                   # kube-apiserver than multiplexing them on HTTP/2)
//   retry: {minInterval: 1s, period: 30s}   # unschedulable pods: after changes / periodically
//   maxPodsPerCycle: 512
//   dra: {enabled: false, driver: gpu.tessera.dev}   # DRA mode: allocate pods' ResourceClaims
//                                   # (dra_allocator.h; needs RBAC on resource.k8s.io)
//   scaleUp:                        # the scale-up signal (scale_up_signal.h); off without
//     templates:                    # templates: the nodes an operator or autoscaler can add
//       - {name: h100, profile: hgx-h100, labels: {tessera.dev/rack: new}}
//     interval: 30s                 # recomputed at most this often while pods wait
//     maxNodes: 64                  # most nodes of one template
//   defrag:                         # the defragmentation executor (defrag_executor.h)
//     enabled: false                # off by default
//     minPriority: 0                # pods of at least this priority trigger a plan
//     after: 5m                     # ... once they have waited this long
//     maxMoves: 2                   # the move budget of one plan
//     maxChecks: 20000              # sets of pods one search checks at most
//     holdFor: 2m                   # a moved pod's destination is kept this long for its
//                                   # replacement (move_holds.h)
//   queues:                         # fair share that remembers (core/queues/usage_history.h)
//     usageHalfLife: 0s             # queues are ordered by what they hold plus what they held
//                                   # lately, with weights halving every half-life (24h: a day);
//                                   # 0: by what they hold now
//     usageWriteInterval: 1m        # each Queue's status.usage is written at most this often
//                                   # (queue_usage_writer.h), for restarts and `tessera status`
//
// Durations are integers with a unit: ms, s, m, h (500ms, 15s, 2m, 24h).
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
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
  std::chrono::milliseconds queue_usage_half_life{0};
  std::chrono::milliseconds queue_usage_write_interval{60'000};
};

[[nodiscard]] absl::StatusOr<SchedulerConfig> ParseSchedulerConfig(std::string_view yaml,
                                                                   std::string_view source);
[[nodiscard]] absl::StatusOr<SchedulerConfig> LoadSchedulerConfig(const std::string& path);
// "500ms", "15s", "2m".
[[nodiscard]] absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);

}  // namespace tessera::k8s
