#include "k8s/scheduler/metrics.h"

#include <atomic>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(SchedulerMetrics, PrometheusTextInBaseUnits) {
  SchedulerMetrics m;
  m.pods_scheduled = 28;
  m.failed_unschedulable = 2;
  m.nodes_bad_inventory = 1;
  m.preemptions = 3;
  m.preemption_victims = 5;
  m.scheduling_duration.Observe(0.002);
  m.SetNodes({{"gpu-1", 4096, 8 * 81920, 250, 8000, true}, {"we\"ird", 0, 0, 0, 0, false}});
  QueueGauges q;
  q.queue = "team-a";
  q.allocated = core::QueueResources::Of(1250, 20480, 500);
  q.usage = core::QueueResources::Of(3500, 1024, 3500);
  q.pending_pods = 4;
  m.SetQueues({q});
  m.SetBuild({"0.1.0", "abc1234-dirty"});
  m.SetExtra([](prometheus::Exposition& out) {
    out.Scalar({"tessera_scheduler_extra_total", prometheus::MetricType::kCounter, "Extra."}, 7);
  });
  const std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_scheduler_pods_scheduled_total counter\n"
                              "tessera_scheduler_pods_scheduled_total 28\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_pods_failed_total{reason=\"unschedulable\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_preemptions_total 3\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_preemption_victims_total 5\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_scheduler_scheduling_duration_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_scheduling_duration_seconds_count 1\n"));
  EXPECT_THAT(
      text, HasSubstr("tessera_scheduler_gpu_memory_allocated_bytes{node=\"gpu-1\"} 4294967296\n"));
  EXPECT_THAT(text,
              HasSubstr("tessera_scheduler_gpu_compute_allocated_gpus{node=\"gpu-1\"} 0.25\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_gpu_compute_capacity_gpus{node=\"gpu-1\"} 8\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_node_inventory_valid{node=\"we\\\"ird\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_nodes_bad_inventory 1\n"));
  // One metric per resource, in base units.
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_queue_allocated_gpus{queue=\"team-a\"} 1.25\n"));
  EXPECT_THAT(text,
              HasSubstr("tessera_scheduler_queue_allocated_gpu_memory_bytes{queue=\"team-a\"} "
                        "21474836480\n"));
  EXPECT_THAT(
      text,
      HasSubstr("tessera_scheduler_queue_allocated_gpu_compute_gpus{queue=\"team-a\"} 0.5\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_queue_pending_pods{queue=\"team-a\"} 4\n"));
  // The decayed usage (queues.usageHalfLife) as the other figures.
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_queue_usage_gpus{queue=\"team-a\"} 3.5\n"));
  EXPECT_THAT(
      text,
      HasSubstr("tessera_scheduler_queue_usage_gpu_memory_bytes{queue=\"team-a\"} 1073741824\n"));
  EXPECT_THAT(text,
              HasSubstr("tessera_scheduler_queue_usage_gpu_compute_gpus{queue=\"team-a\"} 3.5\n"));
  EXPECT_THAT(text,
              HasSubstr("tessera_build_info{version=\"0.1.0\",revision=\"abc1234-dirty\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_oldest_pending_pod_age_seconds 0\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_extra_total 7\n"));
  EXPECT_THAT(text, Not(HasSubstr("_mib")));
  EXPECT_THAT(text, Not(HasSubstr("_milli")));
  EXPECT_THAT(text, Not(HasSubstr("resource=")));
  EXPECT_TRUE(testing::PromtoolCheckMetrics(text).ok()) << testing::PromtoolCheckMetrics(text);
}

// The pod waiting longest: its age from the scheduler's first sight of it.
// GPU time granted per queue (issue 34): the time integral of what each queue was allocated, by
// exact fraction, counted at each publication with the allocation the previous one said.
TEST(SchedulerMetrics, GrantedGpuTimeIsTheIntegralOfTheAllocation) {
  SchedulerMetrics m;
  const auto t0 = std::chrono::steady_clock::time_point() + std::chrono::hours(5);
  QueueGauges a;
  a.queue = "team-a";
  a.allocated = core::QueueResources::Of(1250, 20480, 500);  // 1.25 GPUs, 20 GiB, 0.5 compute
  m.SetQueues({a}, t0);
  EXPECT_THAT(m.Render(), Not(HasSubstr("tessera_scheduler_queue_granted_gpu_seconds_total{")));
  a.allocated = core::QueueResources::Of(2000, 0, 2000);
  m.SetQueues({a}, t0 + std::chrono::seconds(10));  // 10 s of the first allocation
  m.SetQueues({}, t0 + std::chrono::seconds(15));   // 5 s of the second; then the queue is gone
  m.SetQueues({}, t0 + std::chrono::seconds(100));
  m.SetQueues({a}, t0 + std::chrono::seconds(90));  // a clock going back adds nothing
  const std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_scheduler_queue_granted_gpu_seconds_total counter\n"
                              "tessera_scheduler_queue_granted_gpu_seconds_total{queue=\"team-a\"} "
                              "22.5\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_queue_granted_gpu_memory_byte_seconds_total{"
                              "queue=\"team-a\"} 214748364800\n"));  // 20 GiB x 10 s
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_queue_granted_gpu_compute_seconds_total{"
                              "queue=\"team-a\"} 15\n"));  // 0.5 x 10 + 2 x 5
}

// The same integral by namespace, beside the queues' (a namespace's pods may be in several queues).
TEST(SchedulerMetrics, GrantedGpuTimeByNamespace) {
  SchedulerMetrics m;
  const auto t0 = std::chrono::steady_clock::time_point() + std::chrono::hours(5);
  NamespaceGauges research{"research", core::QueueResources::Of(500, 10240, 250)};
  NamespaceGauges infer{"inference", core::QueueResources::Of(3000, 0, 3000)};
  m.SetQueues({}, t0, {research, infer});
  research.allocated = core::QueueResources::Of(1000, 0, 1000);
  m.SetQueues({}, t0 + std::chrono::seconds(20), {research});  // inference let go of its GPUs
  m.SetQueues({}, t0 + std::chrono::seconds(30), {});
  m.SetQueues({}, t0 + std::chrono::seconds(60), {});
  const std::string text = m.Render();
  EXPECT_THAT(text,
              HasSubstr("# TYPE tessera_scheduler_namespace_granted_gpu_seconds_total counter\n"
                        "tessera_scheduler_namespace_granted_gpu_seconds_total{"
                        "namespace=\"inference\"} 60\n"  // 3 GPUs x 20 s
                        "tessera_scheduler_namespace_granted_gpu_seconds_total{"
                        "namespace=\"research\"} 20\n"));  // 0.5 x 20 + 1 x 10
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_namespace_granted_gpu_memory_byte_seconds_total{"
                              "namespace=\"research\"} 214748364800\n"));  // 10 GiB x 20 s
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_namespace_granted_gpu_compute_seconds_total{"
                              "namespace=\"research\"} 15\n"));  // 0.25 x 20 + 1 x 10
}

TEST(SchedulerMetrics, OldestPendingPodAge) {
  SchedulerMetrics m;
  m.oldest_waiting_since_ns =
      (std::chrono::steady_clock::now() - std::chrono::minutes(20)).time_since_epoch() /
      std::chrono::nanoseconds(1);
  const std::string text = m.Render();
  const size_t at = text.find("\ntessera_scheduler_oldest_pending_pod_age_seconds ");
  ASSERT_NE(at, std::string::npos) << text;
  const double age = std::stod(text.substr(text.find(' ', at + 1) + 1));
  EXPECT_GE(age, 1200);
  EXPECT_LT(age, 1200 + 3600);
}

// /metrics is rendered on the HTTP server's threads while the scheduler thread updates counters,
// histograms and the per-node snapshot (the ThreadSanitizer preset runs this).
TEST(SchedulerMetrics, RenderWhileTheSchedulerThreadUpdates) {
  SchedulerMetrics m;
  std::atomic<bool> stop{false};
  std::thread scheduler([&] {
    for (int i = 0; i < 2000; ++i) {
      m.pods_scheduled++;
      m.pending_active = i;
      m.decision_duration.Observe(1e-5 * i);
      if (i % 50 == 0) {
        std::vector<NodeGauges> nodes(3);
        for (NodeGauges& g : nodes) g.node = StrCat("n", i);
        m.SetNodes(std::move(nodes));
      }
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) EXPECT_THAT(m.Render(), HasSubstr("tessera_scheduler_pods_scheduled"));
    });
  }
  scheduler.join();
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(m.pods_scheduled.load(), 2000);
  EXPECT_EQ(m.decision_duration.count(), 2000);
  EXPECT_THAT(m.Render(), HasSubstr("# TYPE tessera_scheduler_decision_cpu_seconds histogram"));
}

}  // namespace
}  // namespace tessera::k8s
