#include "cli/manifest_workload.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::cli {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<sim::Workload> From(std::string_view yaml) {
  absl::StatusOr<k8s::Manifests> m = k8s::ParseManifests(yaml, "m.yaml", "default");
  if (!m.ok()) return m.status();
  return WorkloadFromManifests(*m, "m.yaml");
}

std::string GangPod(const std::string& name, const std::string& gpus) {
  return StrCat("kind: Pod\nmetadata:\n  name: ", name,
                "\n  annotations: {tessera.dev/gang: g, tessera.dev/gang-size: \"2\"}\n"
                "spec: {containers: [{name: c, resources: {limits: {tessera.dev/gpu: ",
                gpus, "}}}]}\n");
}

TEST(WorkloadFromManifests, OneJobPerObjectAndBarePodsOfAGangTogether) {
  absl::StatusOr<sim::Workload> w = From(StrCat(R"(kind: Deployment
metadata: {name: web, namespace: ml}
spec:
  replicas: 4
  template:
    metadata: {annotations: {tessera.dev/gang: web, tessera.dev/gang-size: "2"}}
    spec: {containers: [{name: c, resources: {limits: {tessera.dev/gpu-memory: 8Gi}}}]}
---
kind: Deployment
metadata: {name: idle}
spec: {replicas: 0, template: {spec: {containers: [{name: c}]}}}
---
)",
                                                GangPod("a", "1"), "---\n", GangPod("b", "1")));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->jobs.size(), 2u);
  EXPECT_EQ(w->jobs[0].name, "ml/web");
  EXPECT_EQ(w->jobs[0].replicas, 4);
  ASSERT_TRUE(w->jobs[0].gang.has_value());
  EXPECT_EQ(w->jobs[0].gang->size, 2);
  const std::vector<core::PodRequest> pods = sim::ExpandJob(w->jobs[0]);
  EXPECT_EQ(pods[0].name, "ml/web-0");
  EXPECT_EQ(pods[2].gang->name, "ml/web-g1");  // two gangs of two
  EXPECT_EQ(w->jobs[1].name, "default/g");
  EXPECT_EQ(w->jobs[1].replicas, 2);
}

TEST(WorkloadFromManifests, GangsThatCannotBeFormedAreErrors) {
  EXPECT_THAT(From(R"(kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  template:
    metadata: {annotations: {tessera.dev/gang: web, tessera.dev/gang-size: "2"}}
    spec: {containers: [{name: c}]}
)")
                  .status()
                  .message(),
              HasSubstr("makes 3 pods, not a multiple of its gang size 2"));
  EXPECT_THAT(From(StrCat(GangPod("a", "1"), "---\n", GangPod("b", "2"))).status().message(),
              HasSubstr("members of gang g ask different things"));
  EXPECT_THAT(From(GangPod("a", "1")).status().message(),
              HasSubstr("gang g in namespace default has 1 Pods"));
  EXPECT_THAT(From("kind: Service\nmetadata: {name: s}\n").status().message(),
              HasSubstr("no object in it makes pods"));
}

}  // namespace
}  // namespace tessera::cli
