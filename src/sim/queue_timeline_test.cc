#include "sim/queue_timeline.h"

#include "core/testing/cluster_builder.h"
#include "gtest/gtest.h"

namespace tessera::sim {
namespace {

TracePod At(std::string name, std::string qos, int64_t created, int64_t deleted) {
  TracePod p;
  p.name = std::move(name);
  p.cpu_milli = 1000;
  p.memory_mib = 1024;
  p.num_gpu = 1;
  p.gpu_milli = 1000;
  p.qos = std::move(qos);
  p.creation_time = created;
  p.scheduled_time = created;
  p.deletion_time = deleted;
  return p;
}

// Two batch pods hold both GPUs for 100 s; a latency pod arrives at 10 and runs 10 s. Its queue
// deserves one GPU: with reclaim it takes one back at once (one batch pod waits 10 s and starts
// over), without it waits 90 s.
TEST(QueueTimeline, ReclaimServesTheQueueBelowItsShareAtOnce) {
  core::Cluster c = core::testing::ClusterBuilder().Node("n").Gpus(2, "A100-80GB").Build();
  PodTrace trace;
  trace.source = "test";
  trace.has_times = true;
  // A last batch pod at 50 keeps the arrival window (what the figures cover) open until then.
  trace.pods = {At("b0", "BE", 0, 100), At("b1", "BE", 0, 100), At("l0", "LS", 10, 20),
                At("b2", "BE", 50, 51)};
  QueueTimelineOptions o;
  o.preempt = true;
  absl::StatusOr<QueueTimelineResult> with = RunQueueTimeline(c, trace, o);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->evictions, 1);
  EXPECT_EQ(with->queues[0].queue, "latency");
  EXPECT_DOUBLE_EQ(with->queues[0].pending_p99, 0);
  EXPECT_EQ(with->queues[1].evicted, 1);
  EXPECT_EQ(with->queues[1].started, 4);  // three starts and one restart
  EXPECT_EQ(with->queues[0].still_waiting + with->queues[1].still_waiting, 0);
  EXPECT_DOUBLE_EQ(with->queues[0].deserved_gpus, 1);

  o.preempt = false;
  absl::StatusOr<QueueTimelineResult> without = RunQueueTimeline(c, trace, o);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_EQ(without->evictions, 0);
  EXPECT_EQ(without->plans, 0);
  EXPECT_DOUBLE_EQ(without->queues[0].pending_p99, 90);
  // While the latency pod waits (10 to 50 of the window), batch holds twice its fair share and
  // latency none: Jain's index (0 + 2)^2 / (2 (0 + 4)) = 0.5; with reclaim each holds its share.
  EXPECT_DOUBLE_EQ(without->jain, 0.5);
  EXPECT_DOUBLE_EQ(with->jain, 1);
  EXPECT_DOUBLE_EQ(without->queues[1].mean_allocated_gpus, 2);
  EXPECT_DOUBLE_EQ(with->queues[0].mean_allocated_gpus, 10.0 / 50);

  // Over time, in five periods of 10 s: with reclaim latency holds its GPU during 10..20 only,
  // batch gives it back then; without, batch holds both throughout.
  o.preempt = true;
  o.periods = 5;
  absl::StatusOr<QueueTimelineResult> periods = RunQueueTimeline(c, trace, o);
  ASSERT_TRUE(periods.ok()) << periods.status();
  ASSERT_EQ(periods->periods.size(), 5u);
  const std::vector<double> latency = {0, 1, 0, 0, 0}, batch = {2, 1, 2, 2, 2};
  for (int k = 0; k < 5; ++k) {
    EXPECT_DOUBLE_EQ(periods->periods[k].from_hours, k * 10 / 3600.0);
    EXPECT_DOUBLE_EQ(periods->periods[k].allocated_gpus[0], latency[k]) << k;
    EXPECT_DOUBLE_EQ(periods->periods[k].allocated_gpus[1], batch[k]) << k;
  }
  EXPECT_DOUBLE_EQ(periods->periods[1].fair_share_gpus[0], 1);
  o.periods = 0;
  EXPECT_FALSE(RunQueueTimeline(c, trace, o).ok());
}

TEST(QueueTimeline, PriorityPreemptionInsideAQueue) {
  core::Cluster c = core::testing::ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Build();
  PodTrace trace;
  trace.source = "test";
  trace.has_times = true;
  // Burstable (priority 50) holds the GPU; a Guaranteed pod (200) of the same queue evicts it.
  trace.pods = {At("burst", "Burstable", 0, 100), At("g", "Guaranteed", 5, 15)};
  absl::StatusOr<QueueTimelineResult> r = RunQueueTimeline(c, trace, QueueTimelineOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->evictions, 1);
  EXPECT_EQ(r->queues[0].evicted, 1);
  EXPECT_EQ(r->queues[0].still_waiting, 0);
}

// Fair share that remembers: one GPU, two teams deserving half each. `burst` held the GPU from 0
// to 100 and has another pod waiting since 10; `steady` has one waiting since 20. At 100 both hold
// nothing: by current allocation they tie and burst's older pod goes first (steady waits until
// 200); with a 100 s half-life burst's usage (the GPU for one half-life: half a GPU, its whole
// fair share) puts steady first.
TEST(QueueTimeline, DecayedUsageServesTheSteadyTeamAfterABurst) {
  core::Cluster c = core::testing::ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Build();
  PodTrace trace;
  trace.source = "test";
  trace.has_times = true;
  trace.pods = {At("b0", "burst", 0, 100), At("b1", "burst", 10, 110), At("s0", "steady", 20, 120),
                At("end", "steady", 300, 301)};
  QueueTimelineOptions o;
  o.preempt = false;
  o.queues = {{"burst", 50, {"burst"}}, {"steady", 50, {"steady"}}};
  o.jain_window_s = 100;
  o.periods = 3;  // 0-100, 100-200, 200-300
  absl::StatusOr<QueueTimelineResult> now_only = RunQueueTimeline(c, trace, o);
  ASSERT_TRUE(now_only.ok()) << now_only.status();
  EXPECT_EQ(now_only->queues[1].queue, "steady");
  EXPECT_DOUBLE_EQ(now_only->periods[0].pending_mean_s[1], 180);  // s0: 20 to 200
  EXPECT_DOUBLE_EQ(now_only->periods[0].pending_mean_s[0], 45);   // b0 0, b1 90
  o.usage_half_life_s = 100;
  absl::StatusOr<QueueTimelineResult> remembers = RunQueueTimeline(c, trace, o);
  ASSERT_TRUE(remembers.ok()) << remembers.status();
  EXPECT_DOUBLE_EQ(remembers->periods[0].pending_mean_s[1], 80);  // s0: 20 to 100
  EXPECT_DOUBLE_EQ(remembers->periods[0].pending_mean_s[0], 95);  // b1: 10 to 200
  // Jain's index over sliding 100 s windows: in the first, burst holds the GPU (twice its fair
  // share of half a GPU) and steady, which wants it from 20, nothing: (2 + 0)^2 / (2 x 4) = 0.5.
  // One team holds the only GPU throughout, so every window is as unfair either way.
  EXPECT_GT(remembers->jain_windows, 0);
  EXPECT_DOUBLE_EQ(remembers->jain_window_min, 0.5);
  EXPECT_DOUBLE_EQ(now_only->jain_window_min, 0.5);
  // A qos no queue takes is an error.
  o.queues = {{"burst", 50, {"burst"}}};
  EXPECT_FALSE(RunQueueTimeline(c, trace, o).ok());
}

TEST(QueueTimeline, RefusesTracesWithoutTimes) {
  core::Cluster c = core::testing::ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Build();
  PodTrace trace;
  trace.source = "five-columns.csv";
  EXPECT_FALSE(RunQueueTimeline(c, trace, QueueTimelineOptions{}).ok());
  QueueTimelineOptions bad;
  bad.speedup = 0;
  trace.has_times = true;
  EXPECT_FALSE(RunQueueTimeline(c, trace, bad).ok());
}

}  // namespace
}  // namespace tessera::sim
