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
  if (absl::Status st = k8s::ResolvePodGroups(core::DefaultTopologyLevels(), &*m); !st.ok()) {
    return st;
  }
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

std::string PodGroup(const std::string& name, int min) {
  return StrCat("apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: ", name,
                "}\nspec: {schedulingPolicy: {gang: {minCount: ", min, "}}}\n");
}

std::string Member(const std::string& kind, const std::string& name, const std::string& group) {
  const std::string pod = StrCat("{schedulingGroup: {podGroupName: ", group,
                                 "}, containers: [{name: c, resources: {limits: "
                                 "{tessera.dev/gpu: 1}}}]}");
  if (kind == "Pod") return StrCat("kind: Pod\nmetadata: {name: ", name, "}\nspec: ", pod, "\n");
  return StrCat("kind: ", kind, "\nmetadata: {name: ", name,
                "}\nspec: {replicas: 3, template: {spec: ", pod, "}}\n");
}

// All the objects whose pods name one gang PodGroup are one gang of every pod they make, running
// from minCount: a leader Pod and a Deployment of 3 workers in PodGroup g {minCount: 3}.
TEST(WorkloadFromManifests, ObjectsNamingOnePodGroupAreOneGang) {
  absl::StatusOr<sim::Workload> w =
      From(StrCat(Member("Pod", "leader", "g"), "---\n", PodGroup("g", 3), "---\n",
                  Member("Deployment", "workers", "g")));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->jobs.size(), 1u);
  EXPECT_EQ(w->jobs[0].name, "default/g");
  EXPECT_EQ(w->jobs[0].replicas, 4);
  ASSERT_TRUE(w->jobs[0].gang.has_value());
  EXPECT_EQ(w->jobs[0].gang->size, 4);
  EXPECT_EQ(w->jobs[0].gang->min_members(), 3);
  const std::vector<core::PodRequest> pods = sim::ExpandJob(w->jobs[0]);
  ASSERT_EQ(pods.size(), 4u);
  EXPECT_EQ(pods[3].gang->name, "default/g");

  // minCount equal to the pods made: all or nothing.
  w = From(StrCat(PodGroup("g", 3), "---\n", Member("Deployment", "workers", "g")));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_FALSE(w->jobs[0].gang->elastic());
  EXPECT_EQ(w->jobs[0].gang->size, 3);
}

TEST(WorkloadFromManifests, PodGroupGangsThatCannotRunAreErrors) {
  EXPECT_THAT(From(StrCat(PodGroup("g", 5), "---\n", Member("Deployment", "workers", "g")))
                  .status()
                  .message(),
              HasSubstr("PodGroup default/g needs at least 5 pods (gang.minCount) but the "
                        "manifests make 3 that name it"));
  EXPECT_THAT(
      From(StrCat(PodGroup("g", 2), "---\n", Member("Pod", "a", "g"), "---\n", GangPod("b", "1")))
          .status()
          .message(),
      HasSubstr("gang g is also the name of a PodGroup's gang"));
}

}  // namespace
}  // namespace tessera::cli
