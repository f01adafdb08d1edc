#include "agent/metrics/agent_metrics.h"

#include "common/testing/promtool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(AgentMetrics, PerGpuThePodsAndWhatEachWasGranted) {
  GpuUse g0{0, "GPU-a", true, "", {}};
  GpuUse::Pod share;
  share.ns = "team";
  share.name = "infer";
  share.uid = "u1";
  share.sharing = Sharing::kShim;
  share.memory_mib = 4096;
  share.compute_milli = 300;
  share.used_bytes = 1 << 20;
  share.oom_count = 2;
  share.processes = 1;
  share.ledger_tampered = 1;
  share.driver_used_bytes = 3 << 20;
  g0.pods.push_back(share);
  g0.busy_ns = 12'500'000'000;  // sampled: 12.5 s busy, 2 s of it while two pods ran
  g0.unattributed_busy_ns = 2'000'000'000;
  g0.rejected_usage_reports = 3;
  GpuUse g1{1, "GPU-b", false, "", {}};
  GpuUse::Pod whole;
  whole.ns = "team";
  whole.name = "train \"x\"";
  whole.queue = "research";  // tessera.dev/queue; the share has none (the default queue)
  whole.exclusive = true;
  whole.memory_mib = 81920;
  whole.compute_milli = 1000;
  whole.busy_ns = 750'000'000;
  whole.idle = 1;
  g1.pods.push_back(whole);
  k8s::RequestCounts requests;
  requests.Count("PATCH", 200);
  const std::string text =
      MetricsText({{g0, g1}, {"n1", 5, 1, 3, 4, 2, 6, true}, {"0.1.0", "abc1234"}, &requests});
  EXPECT_THAT(text,
              HasSubstr("# TYPE tessera_agent_gpu_healthy gauge\n"
                        "tessera_agent_gpu_healthy{node=\"n1\",gpu=\"0\",uuid=\"GPU-a\"} 1\n"
                        "tessera_agent_gpu_healthy{node=\"n1\",gpu=\"1\",uuid=\"GPU-b\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_pod_gpu_memory_granted_bytes{node=\"n1\",gpu=\"0\","
                              "uuid=\"GPU-a\",namespace=\"team\",pod=\"infer\",sharing=\"shim\""
                              "} 4294967296\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_pod_gpu_compute_granted_ratio{node=\"n1\","
                              "gpu=\"0\",uuid=\"GPU-a\",namespace=\"team\",pod=\"infer\","
                              "sharing=\"shim\"} 0.3\n"));
  EXPECT_THAT(text, HasSubstr("pod=\"train \\\"x\\\"\",sharing=\"whole\",queue=\"research\"} "
                              "85899345920\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_pod_gpu_memory_used_bytes{node=\"n1\",gpu=\"0\","
                              "uuid=\"GPU-a\",namespace=\"team\",pod=\"infer\",sharing=\"shim\""
                              "} 1048576\n"));
  EXPECT_THAT(text,
              HasSubstr("tessera_agent_pod_gpu_cap_refusals_total{node=\"n1\",gpu=\"0\","
                        "uuid=\"GPU-a\",namespace=\"team\",pod=\"infer\",sharing=\"shim\"} 2\n"));
  EXPECT_THAT(text,
              HasSubstr("tessera_agent_pod_ledger_tampered_total{node=\"n1\",gpu=\"0\","
                        "uuid=\"GPU-a\",namespace=\"team\",pod=\"infer\",sharing=\"shim\"} 1\n"));
  EXPECT_THAT(
      text,
      HasSubstr("tessera_agent_pod_gpu_memory_driver_bytes{node=\"n1\",gpu=\"0\","
                "uuid=\"GPU-a\",namespace=\"team\",pod=\"infer\",sharing=\"shim\"} 3145728\n"));
  // Not sampled by the driver: no series.
  EXPECT_THAT(text,
              Not(HasSubstr("tessera_agent_pod_gpu_memory_driver_bytes{node=\"n1\",gpu=\"1\"")));
  // Busy time: per sampled GPU, and per pod charged with some.
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_agent_gpu_busy_seconds_total counter\n"
                              "tessera_agent_gpu_busy_seconds_total{node=\"n1\",gpu=\"0\","
                              "uuid=\"GPU-a\"} 12.5\n#"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_gpu_unattributed_busy_seconds_total{node=\"n1\","
                              "gpu=\"0\",uuid=\"GPU-a\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_agent_gpu_usage_reports_rejected_total counter\n"
                              "tessera_agent_gpu_usage_reports_rejected_total{node=\"n1\","
                              "gpu=\"0\",uuid=\"GPU-a\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_pod_gpu_busy_seconds_total{node=\"n1\",gpu=\"1\","
                              "uuid=\"GPU-b\",namespace=\"team\",pod=\"train \\\"x\\\"\","
                              "sharing=\"whole\",queue=\"research\"} 0.75\n"));
  EXPECT_THAT(text,
              Not(HasSubstr("tessera_agent_pod_gpu_busy_seconds_total{node=\"n1\",gpu=\"0\"")));
  EXPECT_THAT(text, HasSubstr("tessera_agent_pod_gpu_idle{node=\"n1\",gpu=\"1\",uuid=\"GPU-b\","));
  EXPECT_THAT(text, Not(HasSubstr("tessera_agent_pod_gpu_idle{node=\"n1\",gpu=\"0\"")));
  EXPECT_THAT(text, HasSubstr("tessera_agent_backstop_over_share_total{node=\"n1\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_backstop_actions_total{node=\"n1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_idle_reclaims_total{node=\"n1\"} 6\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_agent_host_pid_namespace gauge\n"
                              "tessera_agent_host_pid_namespace{node=\"n1\"} 1\n"));
  // A whole GPU has no shim accounting.
  EXPECT_THAT(text,
              Not(HasSubstr("tessera_agent_pod_gpu_memory_used_bytes{node=\"n1\",gpu=\"1\"")));
  EXPECT_THAT(text, HasSubstr("tessera_agent_gpu_pods{node=\"n1\",gpu=\"1\",uuid=\"GPU-b\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_containers_delivered_total{node=\"n1\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_containers_refused_total{node=\"n1\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_reaped_processes_total{node=\"n1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("tessera_build_info{version=\"0.1.0\",revision=\"abc1234\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_agent_api_requests_total{verb=\"PATCH\",code=\"200\"} 1\n"));
  EXPECT_TRUE(testing::PromtoolCheckMetrics(text).ok()) << testing::PromtoolCheckMetrics(text);
}

// A node without GPUs yet, or without a client, still names every family (dashboards find them),
// and promtool passes.
TEST(AgentMetrics, EmptyNodePassesPromtool) {
  const std::string text = MetricsText({{}, {"n1", 0, 0, 0}});
  EXPECT_THAT(text, HasSubstr("# TYPE tessera_agent_gpu_healthy gauge\n"));
  EXPECT_THAT(text, HasSubstr("tessera_build_info{version=\"unknown\",revision=\"unknown\"} 1\n"));
  EXPECT_TRUE(testing::PromtoolCheckMetrics(text).ok()) << testing::PromtoolCheckMetrics(text);
}

TEST(AgentMetrics, ServesTheTextOverHttp) {
  MetricsServer server;
  ASSERT_TRUE(server.Start("127.0.0.1", 0, [] { return std::string("m 1\n"); }).ok());
  ASSERT_GT(server.port(), 0);
  httplib::Client client("127.0.0.1", server.port());
  auto got = client.Get("/metrics");
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(got->body, "m 1\n");
  EXPECT_EQ(got->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace
}  // namespace tessera::agent
