#include "k8s/scheduler/objects.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using testing::NodeObject;
using testing::PodObject;

TEST(DecodePod, ShareWholeAndTopologyAsks) {
  auto share = DecodePod(PodObject("ns", "a")
                             .Limit("tessera.dev/gpu-memory", "4Gi")
                             .Limit("tessera.dev/gpu-compute", "25")
                             .Request("cpu", "500m")
                             .Request("memory", "1Gi")
                             .Json());
  ASSERT_TRUE(share->input_error.empty()) << share->input_error;
  EXPECT_EQ(share->key, "ns/a");
  EXPECT_EQ(share->request.name, "ns/a");
  EXPECT_EQ(share->request.gpu.kind, core::GpuAsk::Kind::kShare);
  EXPECT_EQ(share->request.gpu.memory_mib, 4096);
  EXPECT_EQ(share->request.gpu.compute_milli, 250);
  EXPECT_EQ(share->request.cpu_milli, 500);
  EXPECT_EQ(share->request.memory_mib, 1024);
  EXPECT_EQ(share->queue, "default");

  auto whole = DecodePod(PodObject("ns", "b")
                             .Limit("tessera.dev/gpu", "4")
                             .Annotation("tessera.dev/topology", "nvlink")
                             .Annotation("tessera.dev/topology-mode", "required")
                             .Annotation("tessera.dev/queue", "training")
                             .Priority(100)
                             .Json());
  ASSERT_TRUE(whole->input_error.empty()) << whole->input_error;
  EXPECT_EQ(whole->request.gpu.kind, core::GpuAsk::Kind::kWhole);
  EXPECT_EQ(whole->request.gpu.count, 4);
  EXPECT_EQ(whole->request.gpu.topology, core::GpuTopology::kNvLink);
  EXPECT_TRUE(whole->request.gpu.topology_required);
  EXPECT_EQ(whole->priority, 100);
  EXPECT_EQ(whole->request.priority, 100);
  EXPECT_EQ(whole->queue, "training");
  EXPECT_FALSE(whole->SameAsk(*share));

  auto cpu_only = DecodePod(PodObject("ns", "c").Request("cpu", "2").Json());
  EXPECT_EQ(cpu_only->request.gpu.kind, core::GpuAsk::Kind::kNone);
  EXPECT_EQ(cpu_only->request.cpu_milli, 2000);
}

// The MIG and GPU-model asks of docs/workloads.md, as annotations; every field of the request
// counts in SameAsk (a change of either is a change of the ask).
TEST(DecodePod, MigProfileAndGpuModels) {
  auto mig = DecodePod(PodObject("ns", "m").Annotation("tessera.dev/mig", "1g.10gb").Json());
  ASSERT_TRUE(mig->input_error.empty()) << mig->input_error;
  EXPECT_EQ(mig->request.gpu.kind, core::GpuAsk::Kind::kMig);
  EXPECT_EQ(mig->request.gpu.mig_profile, "1g.10gb");
  auto mig_one = DecodePod(PodObject("ns", "m")
                               .Limit("tessera.dev/gpu", "1")
                               .Annotation("tessera.dev/mig", "1g.10gb")
                               .Json());
  ASSERT_TRUE(mig_one->input_error.empty()) << mig_one->input_error;
  EXPECT_TRUE(mig->SameAsk(*mig_one));
  auto other = DecodePod(PodObject("ns", "m").Annotation("tessera.dev/mig", "2g.20gb").Json());
  EXPECT_FALSE(mig->SameAsk(*other));

  auto models = DecodePod(PodObject("ns", "w")
                              .Limit("tessera.dev/gpu", "2")
                              .Annotation("tessera.dev/gpu-model", "A100-80GB, H100-80GB")
                              .Json());
  ASSERT_TRUE(models->input_error.empty()) << models->input_error;
  EXPECT_EQ(models->request.gpu_models, (std::vector<std::string>{"A100-80GB", "H100-80GB"}));
  auto fewer = DecodePod(PodObject("ns", "w")
                             .Limit("tessera.dev/gpu", "2")
                             .Annotation("tessera.dev/gpu-model", "A100-80GB")
                             .Json());
  EXPECT_FALSE(models->SameAsk(*fewer));

  auto error = [](const PodObject& p) { return DecodePod(p.Json())->input_error; };
  EXPECT_THAT(error(PodObject("ns", "x").Annotation("tessera.dev/mig", "5g.50gb")),
              HasSubstr("metadata.annotations[tessera.dev/mig]: \"5g.50gb\" is not a MIG profile "
                        "tessera knows (A100-40GB: 7g.40gb"));
  EXPECT_THAT(error(PodObject("ns", "x")
                        .Limit("tessera.dev/gpu-memory", "4Gi")
                        .Annotation("tessera.dev/mig", "1g.10gb")),
              HasSubstr("cannot be combined with tessera.dev/gpu-memory"));
  EXPECT_THAT(error(PodObject("ns", "x")
                        .Limit("tessera.dev/gpu", "2")
                        .Annotation("tessera.dev/mig", "1g.10gb")),
              HasSubstr("cannot be combined with tessera.dev/gpu: 2"));
  EXPECT_THAT(error(PodObject("ns", "x").Annotation("tessera.dev/gpu-model", "A100-80GB")),
              HasSubstr("is only for pods asking GPUs"));
  EXPECT_THAT(error(PodObject("ns", "x")
                        .Limit("tessera.dev/gpu", "1")
                        .Annotation("tessera.dev/gpu-model", "A100-80GB,,")),
              HasSubstr("must list GPU models separated by commas"));
}

// The declared run time: tessera.dev/max-runtime, spec.activeDeadlineSeconds, the smaller of
// both; a bad annotation is said and taken as no declaration. status.startTime in Unix seconds.
TEST(DecodePod, MaxRuntimeAndStartTime) {
  auto with = [](const std::string& annotation, std::optional<int64_t> deadline) {
    nlohmann::json j = PodObject("ns", "r").Limit("tessera.dev/gpu", "1").Json();
    if (!annotation.empty()) j["metadata"]["annotations"]["tessera.dev/max-runtime"] = annotation;
    if (deadline) j["spec"]["activeDeadlineSeconds"] = *deadline;
    return DecodePod(j);
  };
  EXPECT_EQ(with("", std::nullopt)->max_runtime_s, std::nullopt);
  EXPECT_EQ(with("30m", std::nullopt)->max_runtime_s, 1800);
  EXPECT_EQ(with("1500ms", std::nullopt)->max_runtime_s, 2);  // rounded up
  EXPECT_EQ(with("", 600)->max_runtime_s, 600);
  EXPECT_EQ(with("30m", 600)->max_runtime_s, 600);
  EXPECT_EQ(with("5m", 600)->max_runtime_s, 300);
  auto bad = with("soon", std::nullopt);
  EXPECT_EQ(bad->max_runtime_s, std::nullopt);
  EXPECT_TRUE(bad->input_error.empty());  // still scheduled, as declaring nothing
  EXPECT_THAT(bad->max_runtime_error, HasSubstr("metadata.annotations[tessera.dev/max-runtime]"));
  EXPECT_THAT(bad->max_runtime_error, HasSubstr("declaring no run time"));
  auto zero = with("0", 600);
  EXPECT_EQ(zero->max_runtime_s, 600);  // the deadline still counts
  EXPECT_THAT(zero->max_runtime_error, HasSubstr("at least 1s"));
  EXPECT_TRUE(with("30m", std::nullopt)->max_runtime_error.empty());

  nlohmann::json j = PodObject("ns", "s").Created("2026-12-05T05:00:00Z").Json();
  EXPECT_EQ(DecodePod(j)->started_unix, -1);
  j["status"]["startTime"] = "2026-12-05T05:00:10Z";
  auto started = DecodePod(j);
  EXPECT_EQ(started->started_unix - started->created_unix, 10);
  EXPECT_EQ(started->created_unix, 1796446800);
}

TEST(DecodePod, GangAnnotations) {
  auto p = DecodePod(PodObject("ns", "w-0")
                         .Limit("tessera.dev/gpu", "1")
                         .Gang("train", 8, "nvlink-domain")
                         .Json());
  ASSERT_TRUE(p->input_error.empty()) << p->input_error;
  ASSERT_TRUE(p->request.gang.has_value());
  EXPECT_EQ(p->request.gang->name, "train");
  EXPECT_EQ(p->request.gang->size, 8);
  EXPECT_EQ(p->request.gang->level, "nvlink-domain");
  EXPECT_TRUE(p->request.gang->required);
  auto preferred = DecodePod(PodObject("ns", "w-1")
                                 .Limit("tessera.dev/gpu", "1")
                                 .Gang("train", 8, "rack")
                                 .Annotation("tessera.dev/gang-topology-mode", "preferred")
                                 .Json());
  EXPECT_FALSE(preferred->request.gang->required);
}

TEST(DecodePod, ElasticGangMinAndItsBadValues) {
  auto gang = [](std::string_view min) {
    return PodObject("ns", "w-0")
        .Limit("tessera.dev/gpu", "1")
        .Gang("train", 8, "nvlink-domain")
        .Annotation("tessera.dev/gang-min", std::string(min))
        .Json();
  };
  auto p = DecodePod(gang("4"));
  ASSERT_TRUE(p->input_error.empty()) << p->input_error;
  EXPECT_EQ(p->request.gang->min, 4);
  EXPECT_TRUE(p->request.gang->elastic());
  EXPECT_EQ(p->request.gang->min_members(), 4);
  // min = size is an ordinary gang.
  auto all = DecodePod(gang("8"));
  ASSERT_TRUE(all->input_error.empty()) << all->input_error;
  EXPECT_FALSE(all->request.gang->elastic());
  EXPECT_EQ(all->request.gang->min_members(), 8);
  EXPECT_THAT(DecodePod(gang("9"))->input_error,
              HasSubstr("metadata.annotations[tessera.dev/gang-min]: \"9\" is more than "
                        "tessera.dev/gang-size 8"));
  EXPECT_THAT(DecodePod(gang("0"))->input_error,
              HasSubstr("tessera.dev/gang-min]: \"0\" is not a whole number 1..8"));
  EXPECT_THAT(DecodePod(gang("half"))->input_error,
              HasSubstr("tessera.dev/gang-min]: \"half\" is not a whole number 1..8"));
  EXPECT_THAT(
      DecodePod(PodObject("ns", "p").Annotation("tessera.dev/gang-min", "2").Json())->input_error,
      HasSubstr("tessera.dev/gang-min]: \"2\" needs tessera.dev/gang"));
}

// spec.schedulingGroup.podGroupName is kept for the scheduler to resolve (pod_groups.h); a pod in
// a PodGroup may give tessera.dev/gang-topology alone (kept apart: only where its gang goes).
TEST(DecodePod, PodGroupNameAndTheTopologyItMayAddTo) {
  auto p = DecodePod(PodObject("ns", "w-0")
                         .Limit("tessera.dev/gpu", "1")
                         .PodGroup("train")
                         .Annotation("tessera.dev/gang-topology", "nvlink-domain")
                         .Json());
  ASSERT_TRUE(p->input_error.empty()) << p->input_error;
  EXPECT_EQ(p->pod_group, "train");
  EXPECT_FALSE(p->pod_group_missing);
  EXPECT_FALSE(p->request.gang.has_value());  // the PodGroup says which gang
  ASSERT_TRUE(p->pod_group_topology.has_value());
  EXPECT_EQ(p->pod_group_topology->level, "nvlink-domain");
  EXPECT_TRUE(p->pod_group_topology->required);
  EXPECT_FALSE(DecodePod(PodObject("ns", "w-1").PodGroup("train").Json())->pod_group_topology);
  // Without a PodGroup (or gang) the topology has no gang to apply to.
  EXPECT_THAT(DecodePod(PodObject("ns", "p").Annotation("tessera.dev/gang-topology", "rack").Json())
                  ->input_error,
              HasSubstr("tessera.dev/gang-topology]: \"rack\" needs tessera.dev/gang or "
                        "spec.schedulingGroup.podGroupName"));
}

// Kueue's pod groups (the label and the total count) are gangs of that size, all or nothing;
// tessera's own annotation wins over Kueue's label.
TEST(DecodePod, KueuePodGroupLabelAndTotalCount) {
  auto p = DecodePod(PodObject("ns", "w-0")
                         .Limit("tessera.dev/gpu", "1")
                         .Label("kueue.x-k8s.io/pod-group-name", "team-a-job")
                         .Annotation("kueue.x-k8s.io/pod-group-total-count", "4")
                         .Json());
  ASSERT_TRUE(p->input_error.empty()) << p->input_error;
  ASSERT_TRUE(p->request.gang.has_value());
  EXPECT_EQ(p->request.gang->name, "team-a-job");
  EXPECT_EQ(p->request.gang->size, 4);
  EXPECT_FALSE(p->request.gang->elastic());
  EXPECT_THAT(
      DecodePod(PodObject("ns", "w-1").Label("kueue.x-k8s.io/pod-group-name", "team-a-job").Json())
          ->input_error,
      HasSubstr("metadata.annotations[kueue.x-k8s.io/pod-group-total-count]: missing"));
  EXPECT_THAT(DecodePod(PodObject("ns", "w-1")
                            .Label("kueue.x-k8s.io/pod-group-name", "team-a-job")
                            .Annotation("kueue.x-k8s.io/pod-group-total-count", "many")
                            .Json())
                  ->input_error,
              HasSubstr("kueue.x-k8s.io/pod-group-total-count]: \"many\" is not a whole number"));
  auto both = DecodePod(PodObject("ns", "w-2")
                            .Gang("mine", 2)
                            .Label("kueue.x-k8s.io/pod-group-name", "team-a-job")
                            .Annotation("kueue.x-k8s.io/pod-group-total-count", "4")
                            .Json());
  ASSERT_TRUE(both->input_error.empty()) << both->input_error;
  EXPECT_EQ(both->request.gang->name, "mine");
  EXPECT_EQ(both->request.gang->size, 2);
}

// The PodGroup's fields as the v1.37.2 API server serves them (scheduling.k8s.io/v1beta1), unknown
// fields ignored; what tessera cannot use is kept in `error`.
TEST(DecodePodGroup, GangBasicTopologyConditionsAndBadInput) {
  json gang = testing::PodGroupJson("ns", "train", 4, "tessera.dev/nvlink-domain");
  gang["metadata"]["generation"] = 3;
  gang["spec"]["disruptionMode"] = {{"single", json::object()}};
  gang["spec"]["someFutureField"] = {{"x", 1}};
  gang["status"]["conditions"] = {{{"type", "PodGroupInitiallyScheduled"},
                                   {"status", "False"},
                                   {"reason", "Unschedulable"},
                                   {"message", "no room"}}};
  auto g = DecodePodGroup(gang);
  EXPECT_TRUE(g->error.empty()) << g->error;
  EXPECT_EQ(g->key, "ns/train");
  EXPECT_TRUE(g->gang);
  EXPECT_EQ(g->min_count, 4);
  EXPECT_EQ(g->generation, 3);
  EXPECT_EQ(g->topology_keys, std::vector<std::string>{"tessera.dev/nvlink-domain"});
  EXPECT_EQ(g->InitiallyScheduled(), "False");
  EXPECT_FALSE(g->disrupt_all);
  EXPECT_FALSE(g->priority.has_value());
  EXPECT_FALSE(g->preempt_never);
  // Workload-aware preemption's fields.
  json unit = testing::PodGroupJson("ns", "unit", 2);
  unit["spec"]["disruptionMode"] = {{"all", json::object()}};
  unit["spec"]["priority"] = 1000;
  unit["spec"]["preemptionPolicy"] = "Never";
  auto u = DecodePodGroup(unit);
  EXPECT_TRUE(u->error.empty()) << u->error;
  EXPECT_TRUE(u->disrupt_all);
  EXPECT_EQ(u->priority, 1000);
  EXPECT_TRUE(u->preempt_never);
  unit["spec"]["disruptionMode"]["single"] = json::object();
  EXPECT_THAT(DecodePodGroup(unit)->error, HasSubstr("spec.disruptionMode: both single and all"));
  auto basic = DecodePodGroup(testing::PodGroupJson("ns", "serve", 0));
  EXPECT_TRUE(basic->error.empty()) << basic->error;
  EXPECT_FALSE(basic->gang);
  EXPECT_EQ(basic->InitiallyScheduled(), "");
  json zero = testing::PodGroupJson("ns", "bad", 1);
  zero["spec"]["schedulingPolicy"]["gang"]["minCount"] = 0;
  EXPECT_THAT(DecodePodGroup(zero)->error,
              HasSubstr("spec.schedulingPolicy.gang.minCount: 0 is not a whole number"));
  json none = testing::PodGroupJson("ns", "none", 1);
  none["spec"]["schedulingPolicy"] = json::object();
  EXPECT_THAT(DecodePodGroup(none)->error, HasSubstr("neither gang nor basic"));
  // Garbage where objects belong never throws.
  for (json odd : {json::array(), json("x"), json{{"spec", 5}}, json{{"metadata", json::array()}},
                   json{{"spec", {{"schedulingPolicy", {{"gang", 7}}}}}},
                   json{{"status", {{"conditions", {1, "a"}}}}}}) {
    auto x = DecodePodGroup(odd);
    EXPECT_FALSE(x->error.empty()) << odd.dump();
  }
}

// kube-scheduler's PodRequests: containers add up; an init container needs its own request plus
// the restartable (sidecar) init containers started before it; overhead on top.
TEST(DecodePod, CpuAndMemoryAsKubeSchedulerComputesThem) {
  json pod = PodObject("ns", "p").Json();
  pod["spec"]["containers"] = json::array(
      {{{"name", "a"}, {"resources", {{"requests", {{"cpu", "1"}, {"memory", "1Gi"}}}}}},
       {{"name", "b"}, {"resources", {{"requests", {{"cpu", "500m"}, {"memory", "512Mi"}}}}}}});
  pod["spec"]["initContainers"] = json::array(
      {{{"name", "sidecar"},
        {"restartPolicy", "Always"},
        {"resources", {{"requests", {{"cpu", "200m"}, {"memory", "100Mi"}}}}}},
       {{"name", "migrate"}, {"resources", {{"requests", {{"cpu", "3"}, {"memory", "64Mi"}}}}}}});
  pod["spec"]["overhead"] = {{"cpu", "100m"}, {"memory", "10Mi"}};
  auto p = DecodePod(pod);
  ASSERT_TRUE(p->input_error.empty()) << p->input_error;
  // cpu: containers 1.5 + sidecar 0.2 = 1.7; init "migrate" needs 3 + 0.2 = 3.2 > 1.7; + 0.1
  EXPECT_EQ(p->request.cpu_milli, 3300);
  // memory: 1536 + 100 = 1636 > init 64 + 100; + 10
  EXPECT_EQ(p->request.memory_mib, 1646);

  // Pod-level resources replace the aggregate.
  pod["spec"]["resources"] = {{"requests", {{"cpu", "8"}}}};
  p = DecodePod(pod);
  EXPECT_EQ(p->request.cpu_milli, 8100);
  EXPECT_EQ(p->request.memory_mib, 1646);
}

// A compute-only share used to run with no memory cap at all (the grant's memory 0 meant
// unlimited on the node): it now reserves the same fraction of the GPU's memory as of its
// compute, which the grant carries to the node as its cap.
TEST(DecodePod, AComputeOnlyShareReservesTheSameFractionOfMemory) {
  auto p = DecodePod(PodObject("ns", "c").Limit("tessera.dev/gpu-compute", "30").Json());
  ASSERT_TRUE(p->input_error.empty()) << p->input_error;
  EXPECT_EQ(p->request.gpu.kind, core::GpuAsk::Kind::kFraction);
  EXPECT_EQ(p->request.gpu.fraction_milli, 300);
  EXPECT_EQ(core::ShareMemoryOn(p->request.gpu, 81920), 24576);  // 30% of 80 GiB
  EXPECT_EQ(core::ShareComputeOn(p->request.gpu), 300);
  auto all = DecodePod(PodObject("ns", "w").Limit("tessera.dev/gpu-compute", "100").Json());
  ASSERT_TRUE(all->input_error.empty()) << all->input_error;
  EXPECT_EQ(all->request.gpu.kind, core::GpuAsk::Kind::kWhole);
  EXPECT_EQ(all->request.gpu.count, 1);
}

// The sharing mode is a scheduling input, read from the annotation the agent reads.
TEST(DecodePod, TheSharingModeIsPartOfTheAsk) {
  auto mps = DecodePod(PodObject("ns", "m")
                           .Limit("tessera.dev/gpu-memory", "4Gi")
                           .Annotation("tessera.dev/gpu-sharing", "mps")
                           .Json());
  ASSERT_TRUE(mps->input_error.empty()) << mps->input_error;
  EXPECT_EQ(mps->request.gpu.mode, core::ShareMode::kMps);
  auto shim = DecodePod(PodObject("ns", "s").Limit("tessera.dev/gpu-memory", "4Gi").Json());
  EXPECT_EQ(shim->request.gpu.mode, core::ShareMode::kShim);
  EXPECT_FALSE(mps->SameAsk(*shim));
  auto bad = DecodePod(PodObject("ns", "b")
                           .Limit("tessera.dev/gpu-memory", "4Gi")
                           .Annotation("tessera.dev/gpu-sharing", "spatial")
                           .Json());
  EXPECT_THAT(bad->input_error,
              HasSubstr("metadata.annotations[tessera.dev/gpu-sharing]: \"spatial\" must be "
                        "shim or mps"));
}

TEST(DecodePod, GpuAsksAddUpOverContainers) {
  json pod = PodObject("ns", "p").Json();
  pod["spec"]["containers"] = json::array(
      {{{"name", "a"},
        {"resources",
         {{"limits", {{"tessera.dev/gpu-memory", "2Gi"}, {"tessera.dev/gpu-compute", "10"}}}}}},
       {{"name", "b"}, {"resources", {{"limits", {{"tessera.dev/gpu-memory", "1Gi"}}}}}}});
  auto p = DecodePod(pod);
  ASSERT_TRUE(p->input_error.empty()) << p->input_error;
  EXPECT_EQ(p->request.gpu.memory_mib, 3072);
  EXPECT_EQ(p->request.gpu.compute_milli, 100);
}

TEST(DecodePod, BadInputNamesTheField) {
  auto error = [](const json& pod) {
    auto p = DecodePod(pod);
    EXPECT_FALSE(p->input_error.empty());
    return p->input_error;
  };
  EXPECT_THAT(error(PodObject("ns", "p").Limit("tessera.dev/gpu-memory", "lots").Json()),
              HasSubstr("spec.containers[0].resources.limits[tessera.dev/gpu-memory]: \"lots\""));
  EXPECT_THAT(error(PodObject("ns", "p").Limit("tessera.dev/gpu-compute", "150").Json()),
              HasSubstr("tessera.dev/gpu-compute]: \"150\" must be a percentage"));
  EXPECT_THAT(error(PodObject("ns", "p").Limit("tessera.dev/gpu", "1.5").Json()),
              HasSubstr("limits[tessera.dev/gpu]: \"1.5\""));
  EXPECT_THAT(error(PodObject("ns", "p").Request("cpu", "-1").Json()), HasSubstr("requests[cpu]"));
  EXPECT_THAT(error(PodObject("ns", "p")
                        .Limit("tessera.dev/gpu", "1")
                        .Limit("tessera.dev/gpu-memory", "1Gi")
                        .Json()),
              HasSubstr("cannot be combined"));
  EXPECT_THAT(
      error(PodObject("ns", "p")
                .Limit("tessera.dev/gpu", "2")
                .Annotation("tessera.dev/topology", "warp-drive")
                .Json()),
      HasSubstr("metadata.annotations[tessera.dev/topology]: \"warp-drive\" is not one of"));
  EXPECT_THAT(error(PodObject("ns", "p")
                        .Limit("tessera.dev/gpu-memory", "1Gi")
                        .Annotation("tessera.dev/topology", "nvlink")
                        .Json()),
              HasSubstr("only for pods asking whole GPUs"));
  EXPECT_THAT(error(PodObject("ns", "p")
                        .Limit("tessera.dev/gpu", "2")
                        .Annotation("tessera.dev/topology-mode", "required")
                        .Json()),
              HasSubstr("needs tessera.dev/topology"));
  EXPECT_THAT(error(PodObject("ns", "p").Annotation("tessera.dev/gang", "g").Json()),
              HasSubstr("tessera.dev/gang-size]: missing"));
  EXPECT_THAT(error(PodObject("ns", "p")
                        .Annotation("tessera.dev/gang", "g")
                        .Annotation("tessera.dev/gang-size", "zero")
                        .Json()),
              HasSubstr("tessera.dev/gang-size]: \"zero\""));
  EXPECT_THAT(error(PodObject("ns", "p").Annotation("tessera.dev/gang-size", "3").Json()),
              HasSubstr("needs tessera.dev/gang"));
  // A quantity that is not a string or number.
  json odd = PodObject("ns", "p").Json();
  odd["spec"]["containers"][0]["resources"] = {{"requests", {{"cpu", {{"a", 1}}}}}};
  EXPECT_THAT(error(odd), HasSubstr("spec.containers[0].resources.requests[cpu]"));
  // Not a pod at all: decoded without a crash, asking nothing.
  auto junk = DecodePod(json::array({1, 2}));
  EXPECT_EQ(junk->key, "/");
  EXPECT_EQ(junk->request.gpu.kind, core::GpuAsk::Kind::kNone);
}

TEST(DecodePod, AssignmentStateAndConditions) {
  json pod = PodObject("ns", "p").Limit("tessera.dev/gpu", "1").Node("n1").Phase("Running").Json();
  pod["metadata"]["annotations"]["tessera.dev/assignment"] =
      R"({"version":1,"node":"n1","gpus":[{"index":3,"memory_mib":81920,"compute_milli":1000,"exclusive":true}]})";
  pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  pod["status"]["conditions"] =
      json::array({{{"type", "PodScheduled"}, {"status", "False"}, {"message", "no room"}}});
  auto p = DecodePod(pod);
  EXPECT_TRUE(p->bound());
  EXPECT_TRUE(p->deleting);
  EXPECT_FALSE(p->terminal());
  ASSERT_TRUE(p->assignment.has_value());
  EXPECT_EQ(p->assignment->gpus[0].grant.gpu, 3);
  EXPECT_EQ(p->unschedulable_message, "no room");
  pod["metadata"]["annotations"]["tessera.dev/assignment"] = "{broken";
  pod["status"]["phase"] = "Succeeded";
  p = DecodePod(pod);
  EXPECT_FALSE(p->assignment.has_value());
  EXPECT_THAT(p->assignment_error, HasSubstr("assignment"));
  EXPECT_TRUE(p->terminal());
}

TEST(DecodeNode, InventoryLabelsAndAllocatable) {
  auto n = DecodeNode(NodeObject("gpu-1")
                          .Gpus(8)
                          .NvSwitch()
                          .Cpu("96")
                          .Memory("1Ti")
                          .Label("tessera.dev/rack", "r1")
                          .Json());
  EXPECT_EQ(n->name, "gpu-1");
  EXPECT_TRUE(n->has_inventory);
  EXPECT_TRUE(n->inventory_error.empty()) << n->inventory_error;
  EXPECT_EQ(n->spec.gpu_count(), 8);
  EXPECT_EQ(n->spec.gpus[3].uuid, "GPU-gpu-1-3");
  EXPECT_EQ(n->spec.links.at(0, 7).kind, core::LinkKind::kNvLink);
  EXPECT_EQ(n->spec.cpu_milli, 96000);
  EXPECT_EQ(n->spec.memory_mib, 1024 * 1024);
  EXPECT_EQ(n->spec.labels.at("tessera.dev/rack"), "r1");

  auto plain = DecodeNode(NodeObject("cpu-1").Json());
  EXPECT_FALSE(plain->has_inventory);
  EXPECT_EQ(plain->spec.gpu_count(), 0);
  EXPECT_NE(plain->fingerprint, n->fingerprint);
}

TEST(DecodeNode, BadInventoryLeavesTheNodeWithoutGpus) {
  auto garbage = DecodeNode(NodeObject("bad").Gpus(2).RawInventory("{not json").Json());
  EXPECT_TRUE(garbage->has_inventory);
  EXPECT_THAT(garbage->inventory_error, HasSubstr("inventory"));
  EXPECT_EQ(garbage->spec.gpu_count(), 0);
  EXPECT_EQ(garbage->spec.cpu_milli, 64000);  // still usable for CPU pods

  nlohmann::json inv = nlohmann::json::parse(NodeObject("x").Gpus(2).InventoryJson());
  inv["gpus"][1]["memory_mib"] = -5;
  auto negative = DecodeNode(NodeObject("bad2").RawInventory(inv.dump()).Json());
  EXPECT_FALSE(negative->inventory_error.empty());
  EXPECT_EQ(negative->spec.gpu_count(), 0);

  json bad_cpu = NodeObject("bad3").Json();
  bad_cpu["status"]["allocatable"]["cpu"] = "many";
  auto n3 = DecodeNode(bad_cpu);
  EXPECT_THAT(n3->capacity_error, HasSubstr("status.allocatable.cpu"));
  EXPECT_EQ(n3->spec.cpu_milli, 0);
}

TEST(NodeAllows, TaintsTolerationsSelectorsAndAffinity) {
  json node = NodeObject("gpu-1").Gpus(1).Label("pool", "a100").Label("gen", "3").Json();
  node["spec"]["taints"] =
      json::array({{{"key", "nvidia.com/gpu"}, {"value", "present"}, {"effect", "NoSchedule"}},
                   {{"key", "soft"}, {"effect", "PreferNoSchedule"}}});
  auto n = DecodeNode(node);
  ASSERT_EQ(n->taints.size(), 1u);  // PreferNoSchedule is only a preference
  auto allows = [&](const json& pod) {
    std::string why;
    bool ok = NodeAllows(*n, *DecodePod(pod), &why);
    return ok ? std::string("yes") : why;
  };
  json pod = PodObject("ns", "p").Json();
  EXPECT_EQ(allows(pod), "taint");
  pod["spec"]["tolerations"] = json::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}}});
  EXPECT_EQ(allows(pod), "yes");
  pod["spec"]["tolerations"] =
      json::array({{{"key", "nvidia.com/gpu"}, {"value", "absent"}, {"effect", "NoSchedule"}}});
  EXPECT_EQ(allows(pod), "taint");
  pod["spec"]["tolerations"] = json::array({{{"operator", "Exists"}}});  // tolerates everything
  EXPECT_EQ(allows(pod), "yes");
  pod["spec"]["nodeSelector"] = {{"pool", "h100"}};
  EXPECT_EQ(allows(pod), "selector");
  pod["spec"]["nodeSelector"] = {{"pool", "a100"}};
  EXPECT_EQ(allows(pod), "yes");
  auto affinity = [&](const json& terms) {
    json p = pod;
    p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
     ["nodeSelectorTerms"] = terms;
    return allows(p);
  };
  auto expr = [](const std::string& key, const std::string& op, json values) {
    return json{
        {"matchExpressions", json::array({{{"key", key}, {"operator", op}, {"values", values}}})}};
  };
  EXPECT_EQ(affinity(json::array({expr("gen", "Gt", {"2"})})), "yes");
  EXPECT_EQ(affinity(json::array({expr("gen", "Lt", {"2"})})), "selector");
  EXPECT_EQ(
      affinity(json::array({expr("pool", "NotIn", {"a100"}), expr("pool", "In", {"x", "a100"})})),
      "yes");  // terms are ORed
  EXPECT_EQ(affinity(json::array({expr("zone", "Exists", json::array())})), "selector");
  EXPECT_EQ(affinity(json::array({expr("zone", "DoesNotExist", json::array())})), "yes");
  EXPECT_EQ(affinity(json::array({{{"matchFields", json::array({{{"key", "metadata.name"},
                                                                 {"operator", "In"},
                                                                 {"values", {"gpu-1"}}}})}}})),
            "yes");
  EXPECT_EQ(affinity(json::array({json::object()})), "selector");  // an empty term: no node
  json bad = pod;
  bad["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
     ["nodeSelectorTerms"] = json::array({expr("gen", "Near", {"3"})});
  EXPECT_THAT(DecodePod(bad)->input_error, HasSubstr("operator \"Near\""));
}

}  // namespace
}  // namespace tessera::k8s
