// Explanations of planted pods: the scheduler's word, queue position, preemption victims, the
// defragmentation plan and scale-up signal, gang shortfalls, and the engine's what-if where the
// scheduler wrote nothing.
#include "k8s/explain/explain.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::GpuAssignment;
using ::testing::HasSubstr;
using testing::NodeObject;
using testing::PodObject;

ExplainInputs Inputs(const json& pod, std::vector<json> pods, std::vector<json> nodes) {
  ExplainInputs in;
  in.pod = pod;
  pods.push_back(pod);
  in.snapshot = ClusterSnapshot::FromObjects(nodes, pods);
  in.now = std::chrono::system_clock::from_time_t(1772360000);  // 2026-03-01T10:13:20Z
  return in;
}

TEST(Explain, TheSchedulersWordAndTheQueuePosition) {
  json big = PodObject("ml", "big")
                 .Limit("tessera.dev/gpu", "8")
                 .Created("2026-03-01T10:10:00Z")
                 .Unschedulable("0/1 nodes can take it now: 1 too few free GPUs")
                 .Json();
  std::vector<json> pods = {
      PodObject("ml", "first").Limit("tessera.dev/gpu", "1").Created("2026-03-01T10:00:00Z").Json(),
      PodObject("ml", "urgent")
          .Limit("tessera.dev/gpu", "1")
          .Priority(100)
          .Created("2026-03-01T10:12:00Z")
          .Json(),
      PodObject("ml", "later")
          .Limit("tessera.dev/gpu", "1")
          .Created("2026-03-01T10:11:00Z")
          .Json()};
  ExplainInputs in = Inputs(big, pods, {NodeObject("gpu-a").Gpus(4).Ready().Json()});
  in.events = {{{"type", "Warning"},
                {"reason", "FailedScheduling"},
                {"message", "0/1 nodes can take it now: 1 too few free GPUs"},
                {"count", 3},
                {"lastTimestamp", "2026-03-01T10:13:00Z"}}};
  absl::StatusOr<PodExplanation> e = ExplainPod(in);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->summary, "0/1 nodes can take it now: 1 too few free GPUs");
  EXPECT_EQ(e->scheduled_status, "False");
  EXPECT_EQ(e->scheduled_reason, "Unschedulable");
  EXPECT_EQ(e->waiting_seconds, 200);
  // urgent (priority 100), then by arrival: first, big, later.
  EXPECT_EQ(e->position, 3);
  EXPECT_EQ(e->waiting_pods, 4);
  EXPECT_THAT(e->queue_figures, HasSubstr("its waiting pods ask 11"));
  EXPECT_TRUE(e->what_if.empty());  // the scheduler has spoken
  ASSERT_EQ(e->events.size(), 1u);
  EXPECT_EQ(e->events[0].count, 3);
  const std::string text = RenderExplanationText(*e);
  EXPECT_THAT(text, HasSubstr("position 3 of 4 waiting pods"));
  EXPECT_THAT(text, HasSubstr("FailedScheduling (x3)"));
  json j = ExplanationToJson(*e);
  EXPECT_EQ(j["queue"]["position"], 3);
  EXPECT_EQ(j["scheduled"]["reason"], "Unschedulable");
  EXPECT_TRUE(j["gang"].is_null());
}

TEST(Explain, WithoutTheSchedulersWordTheEngineAnswers) {
  std::vector<json> nodes = {NodeObject("gpu-a").Gpus(2).Ready().Json()};
  // Two free GPUs: one more fits; eight can never.
  ExplainInputs fits =
      Inputs(PodObject("ml", "one").Limit("tessera.dev/gpu", "1").Json(), {}, nodes);
  absl::StatusOr<PodExplanation> e = ExplainPod(fits);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->what_if_fits);
  EXPECT_THAT(e->what_if, HasSubstr("the engine would place it now at gpu-a"));
  EXPECT_THAT(e->summary, HasSubstr("has not tried it yet"));

  ExplainInputs never =
      Inputs(PodObject("ml", "huge").Limit("tessera.dev/gpu", "8").Json(), {}, nodes);
  e = ExplainPod(never);
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->never_fits);
  EXPECT_THAT(e->what_if, HasSubstr("it can never fit this cluster"));

  // Both GPUs held: not now.
  std::vector<json> held = {PodObject("ml", "a")
                                .Limit("tessera.dev/gpu", "2")
                                .Assigned(GpuAssignment("gpu-a", {0, 1}, 81920, 1000, true))
                                .Phase("Running")
                                .Json()};
  e = ExplainPod(Inputs(PodObject("ml", "one").Limit("tessera.dev/gpu", "1").Json(), held, nodes));
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->what_if_fits);
  EXPECT_FALSE(e->never_fits);
  EXPECT_THAT(e->what_if, HasSubstr("it does not fit now"));
}

TEST(Explain, PreemptionGangsGatesAndOtherSchedulers) {
  std::vector<json> nodes = {NodeObject("gpu-a").Gpus(2).Ready().Json()};
  json nominated = PodObject("ml", "vip").Limit("tessera.dev/gpu", "2").Priority(1000).Json();
  nominated["status"]["nominatedNodeName"] = "gpu-a";
  ExplainInputs in = Inputs(nominated, {}, nodes);
  in.other_events = {{{"reason", "Preempted"},
                      {"involvedObject", {{"namespace", "batch"}, {"name", "low-1"}}},
                      {"message",
                       "evicted by tessera to make room on node gpu-a for pod ml/vip (priority "
                       "1000, queue default)"}},
                     {{"reason", "Preempted"},
                      {"involvedObject", {{"namespace", "batch"}, {"name", "other"}}},
                      {"message",
                       "evicted by tessera to make room on node gpu-a for pod ml/vipx (priority "
                       "1, queue default)"}}};
  absl::StatusOr<PodExplanation> e = ExplainPod(in);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->victims, std::vector<std::string>{"batch/low-1 (on node gpu-a)"});
  EXPECT_EQ(e->summary, "nominated to node gpu-a: waiting for 1 evicted pod(s) to end");

  json member = PodObject("ml", "w-0").Limit("tessera.dev/gpu", "1").Gang("train", 3).Json();
  e = ExplainPod(
      Inputs(member, {PodObject("ml", "w-1").Limit("tessera.dev/gpu", "1").Gang("train", 3).Json()},
             nodes));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->gang, "train");
  EXPECT_EQ(e->members.size(), 2u);
  EXPECT_THAT(e->summary, HasSubstr("gang train has 2 of the 3 members it needs"));
  EXPECT_THAT(ExplanationToJson(*e)["gang"]["members"][0]["state"], "waiting");

  json gated = PodObject("ml", "g").Limit("tessera.dev/gpu", "1").Json();
  gated["spec"]["schedulingGates"] = {{{"name", "example.com/quota"}}};
  e = ExplainPod(Inputs(gated, {}, nodes));
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->summary, HasSubstr("scheduling gates to be removed: example.com/quota"));

  e = ExplainPod(Inputs(PodObject("ml", "k").Scheduler("default-scheduler").Json(), {}, nodes));
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->summary, HasSubstr("its schedulerName is default-scheduler"));

  e = ExplainPod(
      Inputs(PodObject("ml", "bad").Limit("tessera.dev/gpu-memory", "lots").Json(), {}, nodes));
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->summary, HasSubstr("its request cannot be read"));

  e = ExplainPod(Inputs(PodObject("ml", "run")
                            .Limit("tessera.dev/gpu", "1")
                            .Assigned(GpuAssignment("gpu-a", {0}, 81920, 1000, true))
                            .Phase("Running")
                            .Json(),
                        {}, nodes));
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->summary, "not waiting: bound to node gpu-a");
}

// A pod the scheduler is defragmenting for (nominated, its Defragmentation Event: the latest plan
// is the one told) that also has a scale-up signal (condition tessera.dev/ScaleUp), as the
// scheduler writes them (defrag_answer.cc, scheduler.cc ReportScaleUp).
TEST(Explain, TheDefragmentationPlanAndTheScaleUpTemplate) {
  std::vector<json> nodes = {NodeObject("a").Gpus(4).Ready().Json(),
                             NodeObject("b").Gpus(4).Ready().Json()};
  json big = PodObject("ml", "big")
                 .Limit("tessera.dev/gpu", "4")
                 .Created("2026-03-01T10:10:00Z")
                 .Unschedulable("0/2 nodes can take it now: 1 too few free GPUs")
                 .Json();
  big["status"]["nominatedNodeName"] = "b";
  big["status"]["conditions"].push_back(
      {{"type", "tessera.dev/ScaleUp"},
       {"status", "True"},
       {"reason", "NodesWouldHelp"},
       {"message",
        "adding 1 node of template h100 (8 GPUs) would let it run, with 0 of the "
        "other 0 waiting pods"}});
  ExplainInputs in = Inputs(big, {}, nodes);
  const std::string plan =
      "waited 61s: moving 1 pod(s) to make room on node b: ml/b0 from b GPU 0 (20Gi) to a";
  in.events = {{{"type", "Normal"},
                {"reason", "Defragmentation"},
                {"message", plan},
                {"lastTimestamp", "2026-03-01T10:12:00Z"}},
               {{"type", "Normal"},
                {"reason", "Defragmentation"},
                {"message", "an older plan"},
                {"lastTimestamp", "2026-03-01T10:11:00Z"}}};
  absl::StatusOr<PodExplanation> e = ExplainPod(in);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->defrag, plan);
  EXPECT_EQ(e->scale_up,
            "adding 1 node of template h100 (8 GPUs) would let it run, with 0 of the other 0 "
            "waiting pods");
  EXPECT_EQ(e->nominated_node, "b");
  EXPECT_TRUE(e->victims.empty());  // moved pods are no preemption victims
  EXPECT_EQ(e->summary, "nominated to node b: waiting for room being made there");

  const std::string text = RenderExplanationText(*e);
  EXPECT_THAT(text, HasSubstr(StrCat("DEFRAG     ", plan, "\n")));
  EXPECT_THAT(text, HasSubstr("SCALE-UP   adding 1 node of template h100 (8 GPUs)"));
  EXPECT_THAT(text, HasSubstr("PREEMPTION nominated to node b\n"));
  json j = ExplanationToJson(*e);
  EXPECT_EQ(j["defrag"], plan);
  EXPECT_EQ(j["scale_up"], e->scale_up);
  EXPECT_EQ(j["nominated_node"], "b");

  // Neither: the fields are null in JSON and the rows absent.
  e = ExplainPod(Inputs(PodObject("ml", "one").Limit("tessera.dev/gpu", "1").Json(), {}, nodes));
  ASSERT_TRUE(e.ok());
  j = ExplanationToJson(*e);
  EXPECT_TRUE(j["defrag"].is_null());
  EXPECT_TRUE(j["scale_up"].is_null());
  EXPECT_THAT(RenderExplanationText(*e), ::testing::Not(HasSubstr("DEFRAG")));
  EXPECT_THAT(RenderExplanationText(*e), ::testing::Not(HasSubstr("SCALE-UP")));
}

}  // namespace
}  // namespace tessera::k8s
