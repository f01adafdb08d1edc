#include "k8s/scheduler/pod_groups.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"
#include "records/names.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::PodGroupJson;
using testing::PodObject;

class PodGroupsTest : public ::testing::Test {
 protected:
  PodGroups::Resolved Resolve(const PodObject& pod) {
    return groups_.Resolve(DecodePod(pod.Json()));
  }
  PodGroups groups_{core::DefaultTopologyLevels()};
};

// The same GangAsk the annotations give: named as the PodGroup, min = minCount, no fixed size;
// the group's topology key is the level whose label it is; without one, the pod's own
// tessera.dev/gang-topology applies.
TEST_F(PodGroupsTest, AGangPodGroupIsAnElasticGangOfMinCount) {
  const PodObject pod = PodObject("ns", "w-0")
                            .Limit("tessera.dev/gpu", "1")
                            .PodGroup("train")
                            .Annotation("tessera.dev/gang-topology", "rack");
  PodGroups::Resolved missing = Resolve(pod);
  EXPECT_TRUE(missing.pod->pod_group_missing);
  EXPECT_EQ(groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("ns", "train", 4))),
            std::vector<std::string>{"ns/w-0"});
  PodGroups::Resolved r = groups_.Resolve(groups_.Raw("ns/w-0"));
  EXPECT_FALSE(r.pod->pod_group_missing);
  ASSERT_TRUE(r.pod->request.gang.has_value());
  EXPECT_EQ(r.pod->request.gang->name, "train");
  EXPECT_EQ(r.pod->request.gang->size, records::kMaxGangSize);
  EXPECT_EQ(r.pod->request.gang->min_members(), 4);
  EXPECT_EQ(r.pod->request.gang->level, "rack");
  EXPECT_TRUE(r.ignored.empty());
  // The group's own topology wins over the pod's.
  groups_.OnGroup(Change::kUpdated,
                  DecodePodGroup(PodGroupJson("ns", "train", 4, "tessera.dev/nvlink-domain")));
  r = groups_.Resolve(groups_.Raw("ns/w-0"));
  EXPECT_EQ(r.pod->request.gang->level, "nvlink-domain");
  EXPECT_TRUE(r.pod->request.gang->required);
  // Deleted: its pods are told again, and wait.
  EXPECT_EQ(groups_.OnGroup(Change::kDeleted, DecodePodGroup(PodGroupJson("ns", "train", 4))),
            std::vector<std::string>{"ns/w-0"});
  EXPECT_TRUE(groups_.Resolve(groups_.Raw("ns/w-0")).pod->pod_group_missing);
  groups_.Forget("ns/w-0");
  EXPECT_EQ(groups_.Raw("ns/w-0"), nullptr);
  EXPECT_TRUE(
      groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("ns", "train", 4))).empty());
}

// Workload-aware preemption: the group's priority and preemption policy become its pods', and
// disruptionMode all makes them one victim; a group that says none of it leaves the pods' own.
TEST_F(PodGroupsTest, TheGroupsPriorityPreemptionPolicyAndDisruptionModeAreItsPods) {
  json unit = PodGroupJson("ns", "unit", 2);
  unit["spec"]["disruptionMode"] = {{"all", json::object()}};
  unit["spec"]["priority"] = 1000;
  unit["spec"]["preemptionPolicy"] = "Never";
  groups_.OnGroup(Change::kAdded, DecodePodGroup(unit));
  groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("ns", "plain", 2)));
  PodGroups::Resolved u =
      Resolve(PodObject("ns", "u-0").Limit("tessera.dev/gpu", "1").Priority(5).PodGroup("unit"));
  EXPECT_EQ(u.pod->priority, 1000);
  EXPECT_EQ(u.pod->request.priority, 1000);  // reservations and defragmentation read this one
  EXPECT_FALSE(u.pod->may_preempt);
  EXPECT_TRUE(u.pod->disrupted_with_group);
  json never =
      PodObject("ns", "p-0").Limit("tessera.dev/gpu", "1").Priority(5).PodGroup("plain").Json();
  never["spec"]["preemptionPolicy"] = "Never";
  PodGroups::Resolved p = groups_.Resolve(DecodePod(never));
  EXPECT_EQ(p.pod->priority, 5);
  EXPECT_FALSE(p.pod->may_preempt);  // the pod's own policy
  EXPECT_FALSE(p.pod->disrupted_with_group);
  EXPECT_TRUE(Resolve(PodObject("ns", "p-1").Limit("tessera.dev/gpu", "1").PodGroup("plain"))
                  .pod->may_preempt);
}

// The pod's own gang that agrees (same name, same min) is not a conflict; one that disagrees is
// said once, not on every update.
TEST_F(PodGroupsTest, AnAnnotationThatDisagreesIsIgnoredAndSaidOnce) {
  groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("ns", "train", 4)));
  EXPECT_TRUE(Resolve(PodObject("ns", "a").PodGroup("train").Gang("train", 4)).ignored.empty());
  const PodObject other = PodObject("ns", "b").PodGroup("train").Gang("train", 8);
  EXPECT_THAT(Resolve(other).ignored, ::testing::HasSubstr("min 8) is ignored"));
  EXPECT_TRUE(Resolve(other).ignored.empty());
}

// A basic PodGroup asks for no gang (the Job controller gives one to every Job without
// spec.scheduling): the pod's own gang applies, and nothing is said; without one the pod is
// independent.
TEST_F(PodGroupsTest, ABasicPodGroupLeavesThePodsOwnGang) {
  groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("ns", "serve", 0)));
  PodGroups::Resolved annotated = Resolve(PodObject("ns", "c").PodGroup("serve").Gang("g", 2));
  ASSERT_TRUE(annotated.pod->request.gang.has_value());
  EXPECT_EQ(annotated.pod->request.gang->name, "g");
  EXPECT_EQ(annotated.pod->request.gang->min_members(), 2);
  EXPECT_TRUE(annotated.ignored.empty());
  PodGroups::Resolved plain = Resolve(PodObject("ns", "d").PodGroup("serve"));
  EXPECT_FALSE(plain.pod->request.gang.has_value());
}

// Kueue labels the pods it admits as a group (kueue.x-k8s.io/pod-group-name) and counts them in
// an annotation; a pod in a PodGroup is the PodGroup's, so the label alone, without the count,
// says nothing the PodGroup does not: the pod is valid input and joins the PodGroup's gang.
// (Before, it was refused as a gang without its size.) With the count, a gang that disagrees is
// ignored and said once, as for tessera's annotations.
TEST_F(PodGroupsTest, AKueueLabelWithoutItsCountInAPodGroupIsThePodGroups) {
  groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("ns", "train", 4)));
  PodGroups::Resolved r = Resolve(PodObject("ns", "k-0")
                                      .Limit("tessera.dev/gpu", "1")
                                      .PodGroup("train")
                                      .Label("kueue.x-k8s.io/pod-group-name", "train-kueue"));
  EXPECT_EQ(r.pod->input_error, "");
  ASSERT_TRUE(r.pod->request.gang.has_value());
  EXPECT_EQ(r.pod->request.gang->name, "train");
  EXPECT_EQ(r.pod->request.gang->min_members(), 4);
  EXPECT_TRUE(r.ignored.empty());
  PodGroups::Resolved counted =
      Resolve(PodObject("ns", "k-1")
                  .Limit("tessera.dev/gpu", "1")
                  .PodGroup("train")
                  .Label("kueue.x-k8s.io/pod-group-name", "train-kueue")
                  .Annotation("kueue.x-k8s.io/pod-group-total-count", "8"));
  EXPECT_EQ(counted.pod->input_error, "");
  EXPECT_EQ(counted.pod->request.gang->name, "train");
  EXPECT_THAT(counted.ignored, ::testing::HasSubstr("is ignored"));
  // Outside a PodGroup the count is still required: the label alone is no gang.
  EXPECT_THAT(DecodePod(PodObject("ns", "k-2")
                            .Limit("tessera.dev/gpu", "1")
                            .Label("kueue.x-k8s.io/pod-group-name", "train-kueue")
                            .Json())
                  ->input_error,
              ::testing::HasSubstr("missing; a gang needs its size"));
}

// A pod is remembered by its key ("ns/name") and is a member of the group key its namespace and
// podGroupName make. Two decoded pods with one key but different namespaces (names with a '/',
// which the API server refuses, but the decoder does not) must not leave the key behind in the
// first one's group: OnGroup would name it for a group it is not in, even after Forget.
// (fuzz/pod_group_fuzz checks the same: OnGroup names exactly the pods that name the group.)
TEST_F(PodGroupsTest, APodKeyMovedToAnotherGroupKeyLeavesTheFirst) {
  EXPECT_TRUE(Resolve(PodObject("a", "b/c").PodGroup("g")).pod->pod_group_missing);
  EXPECT_TRUE(Resolve(PodObject("a/b", "c").PodGroup("g")).pod->pod_group_missing);
  EXPECT_TRUE(groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("a", "g", 0))).empty());
  EXPECT_EQ(groups_.OnGroup(Change::kAdded, DecodePodGroup(PodGroupJson("a/b", "g", 0))),
            std::vector<std::string>{"a/b/c"});
  groups_.Forget("a/b/c");
  EXPECT_TRUE(groups_.OnGroup(Change::kUpdated, DecodePodGroup(PodGroupJson("a", "g", 0))).empty());
  EXPECT_TRUE(
      groups_.OnGroup(Change::kUpdated, DecodePodGroup(PodGroupJson("a/b", "g", 0))).empty());
}

// The PodGroup and a pod as kube-controller-manager v1.37.2's Job controller writes them (gate
// WorkloadWithJob; captured from the harness, docs/workloads.md "The Job controller's PodGroups"):
// owners, finalizers, workloadRef and disruptionMode are read past, and the pod is one gang named
// as the PodGroup, min = the Job's parallelism, in one NVLink domain. A minCount the controller
// patches later (the Job's spec.scheduling changed) is what the group's pods are resolved with.
TEST_F(PodGroupsTest, TheJobControllersPodGroupIsAGangOfItsPods) {
  const std::string name = "train-5bdbfb54f-train-pgt-0-c4c4d6f75";
  json group = json::parse(R"({
    "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
    "metadata": {
      "name": "train-5bdbfb54f-train-pgt-0-c4c4d6f75", "namespace": "ml",
      "uid": "0b46a15f-229e-4f94-a3b3-e668253ae213", "resourceVersion": "238",
      "finalizers": ["scheduling.k8s.io/podgroup-protection"],
      "ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "controller": true,
         "blockOwnerDeletion": true, "uid": "9a08b0c2-f080-4bf3-af1c-3c15f7ed0b32"},
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload", "name": "train-5bdbfb54f",
         "uid": "54b438a7-c137-46da-a999-fdfc29f8d4bb"}]},
    "spec": {
      "disruptionMode": {"single": {}},
      "schedulingConstraints": {"topology": [{"key": "tessera.dev/nvlink-domain"}]},
      "schedulingPolicy": {"gang": {"minCount": 3}},
      "workloadRef": {"templateName": "train-pgt-0", "workloadName": "train-5bdbfb54f"}},
    "status": {}})");
  auto g = DecodePodGroup(group);
  EXPECT_EQ(g->error, "");
  EXPECT_TRUE(g->gang);
  EXPECT_EQ(g->min_count, 3);
  json pod = PodObject("ml", "train-0-nlbhl").Limit("tessera.dev/gpu", "1").PodGroup(name).Json();
  pod["metadata"]["generateName"] = "train-0-";
  pod["metadata"]["finalizers"] = {"batch.kubernetes.io/job-tracking"};
  pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] = "train";
  pod["metadata"]["ownerReferences"] = {{{"apiVersion", "batch/v1"},
                                         {"kind", "Job"},
                                         {"name", "train"},
                                         {"controller", true},
                                         {"uid", "9a08b0c2-f080-4bf3-af1c-3c15f7ed0b32"}}};
  groups_.OnGroup(Change::kAdded, g);
  PodGroups::Resolved r = groups_.Resolve(DecodePod(pod));
  ASSERT_FALSE(r.pod->pod_group_missing);
  ASSERT_TRUE(r.pod->input_error.empty()) << r.pod->input_error;
  ASSERT_TRUE(r.pod->request.gang.has_value());
  EXPECT_EQ(r.pod->request.gang->name, name);
  EXPECT_EQ(r.pod->request.gang->min_members(), 3);
  EXPECT_EQ(r.pod->request.gang->level, "nvlink-domain");
  EXPECT_TRUE(r.pod->request.gang->required);
  EXPECT_EQ(groups_.GroupOf(*r.pod), groups_.Find(StrCat("ml/", name)));

  group["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2;
  group["metadata"]["resourceVersion"] = "251";
  EXPECT_EQ(groups_.OnGroup(Change::kUpdated, DecodePodGroup(group)),
            std::vector<std::string>{"ml/train-0-nlbhl"});
  EXPECT_EQ(groups_.Resolve(groups_.Raw("ml/train-0-nlbhl")).pod->request.gang->min_members(), 2);
}

// As kube-scheduler: a True condition is final; the same message is not written twice; a
// recreated PodGroup (new uid) starts again.
TEST_F(PodGroupsTest, TheConditionIsWrittenWhenItChangesAndNeverAfterTrue) {
  json j = PodGroupJson("ns", "train", 2);
  auto g = DecodePodGroup(j);
  groups_.OnGroup(Change::kAdded, g);
  EXPECT_TRUE(groups_.ShouldWrite(*g, false, "no room"));
  EXPECT_FALSE(groups_.ShouldWrite(*g, false, "no room"));
  EXPECT_TRUE(groups_.ShouldWrite(*g, false, "still no room"));
  EXPECT_TRUE(groups_.ShouldWrite(*g, true, "2 pods"));
  EXPECT_FALSE(groups_.ShouldWrite(*g, false, "no room"));
  j["metadata"]["uid"] = "uid-2";
  auto again = DecodePodGroup(j);
  groups_.OnGroup(Change::kAdded, again);
  EXPECT_TRUE(groups_.ShouldWrite(*again, false, "no room"));
  // True on the object already (another scheduler, or this one before a restart): final.
  j["status"]["conditions"] = {{{"type", "PodGroupInitiallyScheduled"}, {"status", "True"}}};
  EXPECT_FALSE(groups_.ShouldWrite(*DecodePodGroup(j), false, "other"));
}

}  // namespace
}  // namespace tessera::k8s
