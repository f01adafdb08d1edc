#include "k8s/manifests/manifests.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

std::string Err(std::string_view text) {
  absl::StatusOr<Manifests> m = ParseManifests(text, "m.yaml", "default");
  EXPECT_FALSE(m.ok()) << text;
  return std::string(FromAbsl(m.status().message()));
}

TEST(Manifests, ReadsEachKindWithItsCount) {
  absl::StatusOr<Manifests> m = ParseManifests(R"(apiVersion: v1
kind: Pod
metadata: {name: solo, namespace: ml}
spec:
  schedulerName: tessera
  priority: 100
  containers:
  - name: c
    resources:
      limits: {tessera.dev/gpu-memory: 4Gi, tessera.dev/gpu-compute: 25}
      requests: {cpu: 1, memory: 2.5Gi}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  template:
    metadata:
      annotations: {tessera.dev/queue: inference}
    spec:
      schedulerName: tessera
      containers:
      - {name: c, resources: {limits: {tessera.dev/gpu: 1}}}
---
apiVersion: v1
kind: Service
metadata: {name: web}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 8
  completions: 4
  template:
    metadata:
      annotations: {tessera.dev/gang: train, tessera.dev/gang-size: "4"}
    spec:
      schedulerName: tessera
      nodeSelector: {pool: h100}
      containers:
      - {name: c, resources: {limits: {tessera.dev/gpu: 2}}}
---
---
apiVersion: v1
kind: List
items:
- apiVersion: apps/v1
  kind: StatefulSet
  metadata: {name: db, namespace: data}
  spec:
    template:
      spec:
        containers: [{name: c}]
- apiVersion: batch/v1
  kind: CronJob
  metadata: {name: nightly}
  spec:
    jobTemplate:
      spec:
        template:
          spec:
            schedulerName: tessera
            containers: [{name: c}]
)",
                                               "m.yaml", "team-a");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->workloads.size(), 5u);
  const ManifestWorkload& solo = m->workloads[0];
  EXPECT_EQ(solo.kind, "Pod");
  EXPECT_EQ(solo.ns, "ml");
  EXPECT_EQ(solo.count, 1);
  EXPECT_EQ(solo.line, 1);
  EXPECT_EQ(solo.pod->request.gpu, core::GpuAsk::Share(4096, 250));
  EXPECT_EQ(solo.pod->request.cpu_milli, 1000);
  EXPECT_EQ(solo.pod->request.memory_mib, 2560);
  EXPECT_EQ(solo.pod->request.priority, 100);
  EXPECT_EQ(solo.pod->request.name, "ml/solo");
  EXPECT_TRUE(solo.not_simulated.empty());

  const ManifestWorkload& web = m->workloads[1];
  EXPECT_EQ(web.kind, "Deployment");
  EXPECT_EQ(web.ns, "team-a");  // the default namespace
  EXPECT_EQ(web.count, 3);
  EXPECT_EQ(web.pod->request.gpu, core::GpuAsk::Whole(1));
  EXPECT_EQ(web.pod->queue, "inference");

  const ManifestWorkload& train = m->workloads[2];
  EXPECT_EQ(train.count, 4);  // parallelism 8, but only 4 completions
  ASSERT_TRUE(train.pod->request.gang.has_value());
  EXPECT_EQ(train.pod->request.gang->size, 4);
  EXPECT_THAT(train.not_simulated, ::testing::ElementsAre("spec.nodeSelector"));

  EXPECT_EQ(m->workloads[3].kind, "StatefulSet");
  EXPECT_EQ(m->workloads[3].count, 1);
  EXPECT_EQ(m->workloads[3].ns, "data");
  EXPECT_THAT(m->workloads[3].not_simulated[0], HasSubstr("schedulerName (none)"));
  EXPECT_EQ(m->workloads[4].kind, "CronJob");

  ASSERT_EQ(m->skipped.size(), 1u);
  EXPECT_EQ(m->skipped[0].kind, "Service");
  EXPECT_EQ(m->skipped[0].line, 26);
  EXPECT_THAT(m->skipped[0].why, HasSubstr("makes no pods"));
}

TEST(Manifests, ErrorsNameTheFileLineAndObject) {
  EXPECT_THAT(Err("kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: "
                  "{limits: {tessera.dev/gpu-memory: lots}}}]}\n"),
              HasSubstr("m.yaml:1 (Pod p): "));
  EXPECT_THAT(Err("---\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: -2, template: "
                  "{spec: {containers: []}}}\n"),
              HasSubstr("m.yaml:2 (Deployment d): its replica count"));
  EXPECT_THAT(Err("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: 1}\n"),
              HasSubstr("no pod template (spec.template.spec is missing)"));
  EXPECT_THAT(Err("kind: Pod\nmetadata: {name: p, annotations: {tessera.dev/gang-size: 4}}\n"
                  "spec: {containers: []}\n"),
              HasSubstr("annotations[tessera.dev/gang-size]: 4 must be a string"));
  EXPECT_THAT(Err("metadata: {name: p}\n"), HasSubstr("has no kind"));
  EXPECT_THAT(Err("kind: Pod\nspec: {containers: []}\n"), HasSubstr("metadata.name is missing"));
  EXPECT_THAT(Err("- a\n- b\n"), HasSubstr("expected a Kubernetes object"));
  EXPECT_THAT(Err("kind: Pod\n  bad: [\n"), HasSubstr("m.yaml:"));
  EXPECT_THAT(Err("\n---\n"), HasSubstr("no Kubernetes objects"));
}

// A PodGroup and the objects naming it, in any order: the pods get the gang the scheduler's
// PodGroups::Resolve gives them (named as the group, min its minCount, no upper bound).
TEST(Manifests, PodGroupsGiveTheirPodsTheGangTheSchedulerWould) {
  absl::StatusOr<Manifests> m = ParseManifests(R"(apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  parallelism: 6
  template:
    metadata:
      annotations: {tessera.dev/gang: other, tessera.dev/gang-size: "2"}
    spec:
      schedulerName: tessera
      schedulingGroup: {podGroupName: g}
      containers: [{name: c, resources: {limits: {tessera.dev/gpu: 1}}}]
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: g, namespace: ml}
spec:
  schedulingPolicy: {gang: {minCount: 4}}
  schedulingConstraints: {topology: [{key: tessera.dev/rack}]}
---
apiVersion: scheduling.k8s.io/v1beta1
kind: PodGroup
metadata: {name: loose}
spec: {schedulingPolicy: {basic: {}}}
---
kind: Pod
metadata: {name: p}
spec:
  schedulerName: tessera
  schedulingGroup: {podGroupName: loose}
  containers: [{name: c}]
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata: {name: coscheduling}
spec: {minMember: 2}
)",
                                               "m.yaml", "team-a");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->pod_groups.size(), 2u);
  EXPECT_EQ(m->pod_groups[0].line, 14);
  EXPECT_EQ(m->pod_groups[1].group->key, "team-a/loose");  // the default namespace
  // Another API's PodGroup is skipped as other kinds are.
  ASSERT_EQ(m->skipped.size(), 1u);
  EXPECT_EQ(m->skipped[0].name, "coscheduling");

  ASSERT_TRUE(ResolvePodGroups(core::DefaultTopologyLevels(), &*m).ok());
  ASSERT_EQ(m->workloads.size(), 2u);
  const ManifestWorkload& train = m->workloads[0];
  ASSERT_TRUE(train.pod->request.gang.has_value());
  EXPECT_EQ(train.pod->request.gang->name, "g");
  EXPECT_EQ(train.pod->request.gang->min_members(), 4);
  EXPECT_TRUE(train.pod->request.gang->elastic());
  EXPECT_EQ(train.pod->request.gang->level, "rack");
  EXPECT_TRUE(train.pod->request.gang->required);
  ASSERT_EQ(train.not_simulated.size(), 1u);  // its own gang annotation loses
  EXPECT_THAT(train.not_simulated[0], HasSubstr("the pod's gang other"));
  EXPECT_THAT(train.not_simulated[0], HasSubstr("is ignored: spec.schedulingGroup names"));
  EXPECT_FALSE(m->workloads[1].pod->request.gang.has_value());  // basic: independent
}

TEST(Manifests, PodGroupErrorsNameTheObject) {
  EXPECT_THAT(Err("apiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: g}\n"
                  "spec: {schedulingPolicy: {gang: {minCount: 0}}}\n"),
              HasSubstr("m.yaml:1 (PodGroup g): spec.schedulingPolicy.gang.minCount: 0"));
  auto resolve = [](std::string_view text) {
    absl::StatusOr<Manifests> m = ParseManifests(text, "m.yaml", "default");
    EXPECT_TRUE(m.ok()) << m.status();
    return std::string(FromAbsl(ResolvePodGroups(core::DefaultTopologyLevels(), &*m).message()));
  };
  const std::string member =
      "kind: Pod\nmetadata: {name: p}\nspec: {schedulingGroup: {podGroupName: g}, "
      "containers: [{name: c}]}\n";
  EXPECT_THAT(resolve(member),
              HasSubstr("m.yaml:1 (Pod p): spec.schedulingGroup.podGroupName names PodGroup "
                        "default/g, which none of the manifests gives"));
  EXPECT_THAT(resolve(StrCat(member,
                             "---\napiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\n"
                             "metadata: {name: g}\nspec: {schedulingPolicy: {gang: {minCount: "
                             "2}}, schedulingConstraints: {topology: [{key: pool}]}}\n")),
              HasSubstr("m.yaml:1 (Pod p): PodGroup default/g: "
                        "spec.schedulingConstraints.topology[0].key: \"pool\""));
  const std::string group =
      "---\napiVersion: scheduling.k8s.io/v1beta1\nkind: PodGroup\nmetadata: {name: g}\n"
      "spec: {schedulingPolicy: {basic: {}}}\n";
  EXPECT_THAT(resolve(StrCat(member, group, group)),
              HasSubstr("PodGroup default/g is given twice (first at m.yaml:5)"));
}

}  // namespace
}  // namespace tessera::k8s
