#include "k8s/scheduler/config.h"

#include <algorithm>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/config_keys.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

TEST(SchedulerConfig, DefaultsAndAFullFile) {
  absl::StatusOr<SchedulerConfig> empty = ParseSchedulerConfig("", "x");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->core.scheduler_name, "tessera");
  EXPECT_EQ(empty->core.policy, "tessera");
  EXPECT_TRUE(empty->leader_elect);
  EXPECT_EQ(empty->metrics_address, "127.0.0.1");
  EXPECT_EQ(empty->bind_concurrency, 64);
  EXPECT_FALSE(empty->http2);
  EXPECT_TRUE(empty->protobuf_wire);

  absl::StatusOr<SchedulerConfig> c = ParseSchedulerConfig(R"(
apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: gpu-scheduler
policy: binpack
seed: 7
nodeSelector: "tessera.dev/gpu-node=true"
topologyLevels:
  - {name: nvlink-domain, label: tessera.dev/nvlink-domain}
  - {name: rack}
leaderElection:
  leaderElect: true
  resourceNamespace: tessera-system
  resourceName: lease-x
  leaseDuration: 4s
  renewDeadline: 3s
  retryPeriod: 500ms
metrics: {bindAddress: 0.0.0.0, port: 0}
bindConcurrency: 8
http2: true
wire: json
retry: {minInterval: 200ms, period: 1m}
maxPodsPerCycle: 64
dra: {enabled: true, driver: gpu.example.com}
)",
                                                           "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->core.scheduler_name, "gpu-scheduler");
  EXPECT_EQ(c->core.policy, "binpack");
  EXPECT_EQ(c->core.seed, 7u);
  EXPECT_EQ(c->node_selector, "tessera.dev/gpu-node=true");
  ASSERT_EQ(c->core.levels.size(), 2u);
  EXPECT_EQ(c->core.levels[1].label, "tessera.dev/rack");
  EXPECT_EQ(c->lease.lease_namespace, "tessera-system");
  EXPECT_EQ(c->lease.lease_name, "lease-x");
  EXPECT_EQ(c->lease.lease_duration.count(), 4000);
  EXPECT_EQ(c->lease.retry_period.count(), 500);
  EXPECT_EQ(c->metrics_port, 0);
  EXPECT_EQ(c->bind_concurrency, 8);
  EXPECT_TRUE(c->http2);
  EXPECT_FALSE(c->protobuf_wire);
  EXPECT_EQ(c->core.retry_min_interval.count(), 200);
  EXPECT_EQ(c->core.retry_period.count(), 60000);
  EXPECT_EQ(c->core.max_pods_per_cycle, 64);
  EXPECT_TRUE(c->core.dra);
  EXPECT_EQ(c->core.dra_driver, "gpu.example.com");
}

TEST(SchedulerConfig, ErrorsNameTheLineAndKey) {
  auto err = [](const std::string& text) {
    absl::StatusOr<SchedulerConfig> c = ParseSchedulerConfig(text, "cfg.yaml");
    EXPECT_FALSE(c.ok());
    return std::string(c.status().message());
  };
  EXPECT_THAT(err("schedulerName: x\npolcy: tessera\n"),
              HasSubstr("cfg.yaml:2:1: unknown key \"polcy\""));
  EXPECT_THAT(err("policy: fastest\n"), HasSubstr("cfg.yaml:1:9: policy:"));
  EXPECT_THAT(err("leaderElection: {leaseDuration: 5s, renewDeadline: 6s}\n"),
              HasSubstr("leaseDuration must be longer than renewDeadline"));
  EXPECT_THAT(err("retry: {period: soon}\n"),
              HasSubstr("retry.period: \"soon\" is not a duration"));
  EXPECT_THAT(err("bindConcurrency: 0\n"), HasSubstr("bindConcurrency: 0 is not in 1..1024"));
  EXPECT_THAT(err("spareGpusPerDomain: -1\n"), HasSubstr("spareGpusPerDomain: -1 is not in 0..64"));
  EXPECT_THAT(err("kind: Pod\n"), HasSubstr("is not SchedulerConfiguration"));
  EXPECT_THAT(err("wire: yaml\n"), HasSubstr("wire: \"yaml\" is neither protobuf nor json"));
  EXPECT_THAT(err("topologyLevels: [{label: x}]\n"), HasSubstr("needs a name"));
  EXPECT_THAT(err("a: [\n"), HasSubstr("cfg.yaml:"));
}

TEST(SchedulerConfig, QueueUsage) {
  absl::StatusOr<SchedulerConfig> off = ParseSchedulerConfig("schedulerName: x\n", "cfg.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->queue_usage_half_life.count(), 0);  // no history by default
  EXPECT_EQ(off->queue_usage_write_interval.count(), 60'000);
  absl::StatusOr<SchedulerConfig> on =
      ParseSchedulerConfig("queues: {usageHalfLife: 24h, usageWriteInterval: 30s}\n", "cfg.yaml");
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_EQ(on->queue_usage_half_life.count(), 86'400'000);
  EXPECT_EQ(on->queue_usage_write_interval.count(), 30'000);
  auto err = [](const std::string& text) {
    absl::StatusOr<SchedulerConfig> c = ParseSchedulerConfig(text, "cfg.yaml");
    EXPECT_FALSE(c.ok()) << text;
    return std::string(c.status().message());
  };
  EXPECT_THAT(err("queues: {usageHalfLife: 1500ms}\n"), HasSubstr("whole seconds"));
  EXPECT_THAT(err("queues: {usageWriteInterval: 10ms}\n"), HasSubstr("at least 1s"));
  EXPECT_THAT(err("queues: {halfLife: 1h}\n"), HasSubstr("unknown key \"halfLife\""));
}

TEST(SchedulerConfig, Defrag) {
  absl::StatusOr<SchedulerConfig> off = ParseSchedulerConfig("schedulerName: x\n", "cfg.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->core.defrag.enabled);  // off by default
  EXPECT_EQ(off->core.defrag.hold_for.count(), 120'000);
  absl::StatusOr<SchedulerConfig> c = ParseSchedulerConfig(
      "defrag: {enabled: true, minPriority: 100, after: 2m, maxMoves: 3, maxChecks: 500, "
      "holdFor: 45s}\n",
      "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const DefragExecutorOptions& d = c->core.defrag;
  EXPECT_TRUE(d.enabled);
  EXPECT_EQ(d.min_priority, 100);
  EXPECT_EQ(d.after.count(), 120'000);
  EXPECT_EQ(d.max_moves, 3);
  EXPECT_EQ(d.max_checks, 500);
  EXPECT_EQ(d.hold_for.count(), 45'000);
  absl::StatusOr<SchedulerConfig> bad = ParseSchedulerConfig("defrag: {holdFor: 5}\n", "cfg.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("defrag.holdFor"));
}

TEST(SchedulerConfig, Reservations) {
  absl::StatusOr<SchedulerConfig> off = ParseSchedulerConfig("schedulerName: x\n", "cfg.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->core.reservations.max_reservations, 0);  // off by default
  EXPECT_EQ(off->core.max_runtime_grace.count(), 30);
  absl::StatusOr<SchedulerConfig> c = ParseSchedulerConfig(
      "reservations: {max: 4, after: 2m, minGpus: 4, runtimeEstimate: 4h, grace: 5m, "
      "maxRuntimeGrace: 1m}\n",
      "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const core::ReservationOptions& r = c->core.reservations;
  EXPECT_EQ(r.max_reservations, 4);
  EXPECT_EQ(r.after_s, 120);
  EXPECT_EQ(r.min_gpus, 4);
  EXPECT_EQ(r.unknown_runtime_s, 4 * 3600);
  EXPECT_EQ(r.grace_s, 300);
  EXPECT_EQ(c->core.max_runtime_grace.count(), 60);
  for (const char* bad : {"reservations: {after: 1500ms}\n", "reservations: {max: -1}\n",
                          "reservations: {runtimeEstimate: 0}\n", "reservations: {minGpu: 2}\n"}) {
    absl::StatusOr<SchedulerConfig> e = ParseSchedulerConfig(bad, "cfg.yaml");
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_THAT(e.status().message(), HasSubstr("reservations")) << bad;
  }
}

TEST(SchedulerConfig, ScaleUpTemplates) {
  absl::StatusOr<SchedulerConfig> off = ParseSchedulerConfig("schedulerName: x\n", "cfg.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_TRUE(off->core.scale_up.templates.empty());  // off by default
  absl::StatusOr<SchedulerConfig> c = ParseSchedulerConfig(
      "scaleUp:\n  templates:\n    - {name: h100, profile: hgx-h100, labels: {tessera.dev/rack: "
      "new}}\n    - {profile: l40s-4gpu}\n  interval: 1m\n  maxNodes: 8\n",
      "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const ScaleUpSignalOptions& s = c->core.scale_up;
  ASSERT_EQ(s.templates.size(), 2u);
  EXPECT_EQ(s.templates[0].name, "h100");
  EXPECT_EQ(s.templates[0].gpu_count(), 8);
  EXPECT_EQ(s.templates[0].labels.at("tessera.dev/rack"), "new");
  EXPECT_EQ(s.templates[1].name, "l40s-4gpu");
  EXPECT_EQ(s.templates[1].gpu_count(), 4);
  EXPECT_EQ(s.interval.count(), 60'000);
  EXPECT_EQ(s.max_nodes, 8);
  auto err = [](const std::string& text) {
    absl::StatusOr<SchedulerConfig> bad = ParseSchedulerConfig(text, "cfg.yaml");
    EXPECT_FALSE(bad.ok());
    return std::string(bad.status().message());
  };
  EXPECT_THAT(err("scaleUp: {templates: [{name: x}]}\n"), HasSubstr("needs a profile"));
  EXPECT_THAT(err("scaleUp: {templates: [{profile: nope}]}\n"), HasSubstr("unknown profile"));
  EXPECT_THAT(err("scaleUp: {templates: [{profile: dgx-a100}, {profile: dgx-a100}]}\n"),
              HasSubstr("taken by another template"));
  EXPECT_THAT(err("scaleUp: {every: 1s}\n"), HasSubstr("unknown key \"every\""));
}

// The list of keys (config_keys.h) and the parser agree: each key's example parses on its own
// (a list item's keys appear in their list's example), and a key the list does not have is
// refused naming the keys that are.
TEST(SchedulerConfigKeys, EveryKeysExampleParses) {
  for (const ConfigKey& k : SchedulerConfigKeys()) {
    SCOPED_TRACE(k.path);
    EXPECT_FALSE(k.description.empty());
    const size_t items = k.path.find("[].");
    if (items != std::string::npos) {
      const std::string list = k.path.substr(0, items);
      const auto parent = std::find_if(SchedulerConfigKeys().begin(), SchedulerConfigKeys().end(),
                                       [&](const ConfigKey& p) { return p.path == list; });
      ASSERT_NE(parent, SchedulerConfigKeys().end());
      EXPECT_THAT(parent->example, HasSubstr(StrCat(k.path.substr(items + 3), ":")));
      continue;
    }
    // "a.b.c: example" as nested maps.
    std::string yaml;
    std::string path = k.path;
    int depth = 0;
    for (size_t dot; (dot = path.find('.')) != std::string::npos; path = path.substr(dot + 1)) {
      yaml += StrCat(std::string(2 * depth, ' '), path.substr(0, dot), ":\n");
      ++depth;
    }
    yaml += StrCat(std::string(2 * depth, ' '), path, ": ", k.example, "\n");
    absl::StatusOr<SchedulerConfig> c = ParseSchedulerConfig(yaml, "example.yaml");
    EXPECT_TRUE(c.ok()) << yaml << c.status();
  }
  absl::StatusOr<SchedulerConfig> typo = ParseSchedulerConfig("retry: {periode: 1m}\n", "t.yaml");
  ASSERT_FALSE(typo.ok());
  EXPECT_THAT(std::string(typo.status().message()),
              HasSubstr("unknown key \"periode\" in retry (expected one of: minInterval, period)"));
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(500)), "500ms");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(15'000)), "15s");
  EXPECT_EQ(FormatDuration(std::chrono::milliseconds(120'000)), "2m");
}

}  // namespace
}  // namespace tessera::k8s
