#include "k8s/scheduler/metrics.h"

#include <atomic>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({0.1, 1, 10});
  h.Observe(0.05);
  h.Observe(0.5);
  h.Observe(0.5);
  h.Observe(100);
  std::string out;
  h.Render("x", &out);
  EXPECT_EQ(out,
            "x_bucket{le=\"0.1\"} 1\n"
            "x_bucket{le=\"1\"} 3\n"
            "x_bucket{le=\"10\"} 3\n"
            "x_bucket{le=\"+Inf\"} 4\n"
            "x_sum 101.05\n"
            "x_count 4\n");
}

TEST(SchedulerMetrics, PrometheusTextWithPerNodeGauges) {
  SchedulerMetrics m;
  m.pods_scheduled = 28;
  m.failed_unschedulable = 2;
  m.nodes_bad_inventory = 1;
  m.scheduling_duration.Observe(0.002);
  m.SetNodes({{"gpu-1", 4096, 8 * 81920, 250, 8000, true}, {"we\"ird", 0, 0, 0, 0, false}});
  m.SetExtra([] { return std::string("extra_metric 7\n"); });
  std::string text = m.Render();
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_scheduler_pods_scheduled_total counter\n"
                              "tessera_scheduler_pods_scheduled_total 28\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_pods_failed_total{reason=\"unschedulable\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_scheduler_scheduling_duration_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_scheduling_duration_seconds_count 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_gpu_memory_allocated_mib{node=\"gpu-1\"} 4096\n"));
  EXPECT_THAT(text,
              HasSubstr("tessera_scheduler_gpu_compute_allocated_milli{node=\"gpu-1\"} 250\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_node_inventory_valid{node=\"we\\\"ird\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_nodes_bad_inventory 1\n"));
  EXPECT_THAT(text, HasSubstr("extra_metric 7\n"));
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
