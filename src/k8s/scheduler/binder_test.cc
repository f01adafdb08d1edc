#include "k8s/scheduler/binder.h"

#include "gtest/gtest.h"
#include "records/required_plugins.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

// A pod given GPUs carries, with its assignment, containerd's required-plugins annotation naming
// the agent's NRI plugin: created while the agent is down, its containers fail instead of starting
// without their GPUs. A pod given none does not need the agent.
TEST(AnnotationBinderTest, AGpuPodRequiresTheAgentsNriPlugin) {
  PodInfo pod;
  pod.ns = "team";
  pod.name = "trainer";
  pod.uid = "8d1c0a2e-5f2b-4c1e-9d7a-2b6c8e1f4a10";
  records::Assignment a;
  a.node = "gpu-a";
  records::AssignedGpu g;
  g.grant.gpu = 3;
  g.grant.memory_mib = 4096;
  a.gpus.push_back(g);
  json body = json::parse(AnnotationBinder::BindingRequest(pod, a).body);
  const json& annotations = body["metadata"]["annotations"];
  ASSERT_TRUE(annotations.contains(std::string(records::kRequiredNriPluginsAnnotation)));
  EXPECT_EQ(annotations[std::string(records::kRequiredNriPluginsAnnotation)], "[\"tessera\"]");
  EXPECT_TRUE(annotations.contains(std::string(records::kAssignmentAnnotation)));
  EXPECT_EQ(body["target"]["name"], "gpu-a");

  a.gpus.clear();
  body = json::parse(AnnotationBinder::BindingRequest(pod, a).body);
  EXPECT_FALSE(body["metadata"]["annotations"].contains(
      std::string(records::kRequiredNriPluginsAnnotation)));
}

}  // namespace
}  // namespace tessera::k8s
