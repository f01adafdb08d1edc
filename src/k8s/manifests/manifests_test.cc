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

}  // namespace
}  // namespace tessera::k8s
