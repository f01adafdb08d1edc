#include "k8s/status/agent_usage.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

// As the agent writes them (agent_metrics.cc): other families, comments and the queue label are
// passed over; each pod's figures land under (namespace/name, GPU UUID).
TEST(AgentUsage, ReadsThePerPodSeries) {
  const std::string text = R"(# HELP tessera_agent_gpu_busy_seconds_total Time the GPU ran kernels
# TYPE tessera_agent_gpu_busy_seconds_total counter
tessera_agent_gpu_busy_seconds_total{node="n1",gpu="0",uuid="GPU-a"} 12.5
tessera_agent_pod_gpu_busy_seconds_total{node="n1",gpu="0",uuid="GPU-a",namespace="team",pod="p1",sharing="whole",mig="",queue="research"} 12.25
tessera_agent_pod_gpu_idle{node="n1",gpu="0",uuid="GPU-a",namespace="team",pod="p1",sharing="whole",mig=""} 1
tessera_agent_pod_gpu_memory_used_bytes{node="n1",gpu="1",uuid="GPU-b",namespace="team",pod="s\"q",sharing="shim",mig=""} 1048576
tessera_agent_pod_gpu_memory_granted_bytes{node="n1",gpu="1",uuid="GPU-b",namespace="team",pod="s",sharing="shim",mig=""} 4294967296
tessera_agent_pod_gpu_memory_driver_bytes{node="n1",gpu="1",uuid="GPU-b",namespace="team",pod="s\"q",sharing="shim",mig=""} 1610612736
tessera_agent_pod_gpu_memory_driver_bytes{node="n1",gpu="2",uuid="GPU-c",namespace="team",pod="w",sharing="whole",mig=""} 2097152
)";
  AgentUsage usage;
  ASSERT_TRUE(AddAgentMetrics(text, &usage).ok());
  ASSERT_EQ(usage.size(), 3u);
  const PodGpuUsage& p1 = usage.at({"team/p1", "GPU-a"});
  EXPECT_EQ(p1.busy_seconds, 12.25);
  EXPECT_EQ(p1.idle, 1);
  EXPECT_EQ(p1.memory_used_bytes, -1);
  // A share: the shim's figure, not the driver's (which counts its contexts too).
  const PodGpuUsage& s = usage.at({"team/s\"q", "GPU-b"});
  EXPECT_EQ(s.memory_used_bytes, 1048576);
  // A whole GPU: the driver's.
  EXPECT_EQ(usage.at({"team/w", "GPU-c"}).memory_used_bytes, 2097152);
  EXPECT_EQ(s.busy_seconds, -1);
  EXPECT_EQ(s.idle, -1);
}

TEST(AgentUsage, AnUnreadableLineOfOurFamiliesIsAnError) {
  AgentUsage usage;
  absl::Status s = AddAgentMetrics(
      "tessera_agent_pod_gpu_idle{namespace=\"a\",pod=\"b\",uuid=\"u\"} 0\n"
      "tessera_agent_pod_gpu_idle{namespace=\"a\",pod=\"b\",uuid=\"u\"} lots\n",
      &usage);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("line 2 of the agent's /metrics: its value is not a number"));
  EXPECT_EQ(usage.size(), 1u);  // what came before stays
  s = AddAgentMetrics("tessera_agent_pod_gpu_idle{namespace=\"a\",pod=\"b} 0\n", &usage);
  EXPECT_THAT(s.message(), HasSubstr("its labels cannot be read"));
  s = AddAgentMetrics("tessera_agent_pod_gpu_idle{node=\"n\"} 0\n", &usage);
  EXPECT_THAT(s.message(), HasSubstr("no namespace, pod or uuid label"));
  // Other families are not looked at, however they look.
  EXPECT_TRUE(AddAgentMetrics("something_else{x=} y\n", &usage).ok());
}

}  // namespace
}  // namespace tessera::k8s
