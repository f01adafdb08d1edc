#include "core/plan/scale_up.h"

#include "common/strings.h"
#include "core/engine.h"
#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::plan {
namespace {

using core::Cluster;
using core::GpuAsk;
using core::PodRequest;
using core::testing::ClusterBuilder;
using core::testing::Pod;
using ::testing::HasSubstr;

std::unique_ptr<core::Policy> Make() { return *core::CreatePolicy("tessera", {}); }

// One 8-GPU server in rack r1, full: a whole-node job runs on it.
struct Full {
  Cluster cluster = ClusterBuilder()
                        .Node("dgx")
                        .Gpus(8, "A100-80GB")
                        .NvSwitch()
                        .Label("tessera.dev/rack", "r1")
                        .Build();
  std::vector<RunningPod> running;
  Full() {
    core::Engine e(cluster, Make());
    PodRequest job = Pod("job", GpuAsk::Whole(8));
    core::PlacementResult r = e.Place(job);
    TESSERA_CHECK(r.placed());
    running.push_back(RunningPod{job, r.placement, true});
  }
  ScaleUpInput Input() const {
    ScaleUpInput in;
    in.cluster = &cluster;
    in.make_policy = Make;
    in.running = running;
    return in;
  }
};

std::vector<core::NodeSpec> Templates() {
  Cluster t = ClusterBuilder()
                  .Node("hgx")
                  .Gpus(8, "H100-80GB")
                  .NvSwitch()
                  .Label("tessera.dev/rack", "new")
                  .Node("l4")
                  .Gpus(1, "L4", 24 * 1024)
                  .Label("tessera.dev/rack", "new")
                  .Build();
  return t.nodes().ToVector();
}

std::vector<PodRequest> RackGang(int size) {
  std::vector<PodRequest> gang;
  for (int i = 0; i < size; ++i) {
    PodRequest m = Pod(StrCat("train-", i), GpuAsk::Whole(1));
    m.gang = core::GangAsk{"train", size, "rack", true};
    gang.push_back(m);
  }
  return gang;
}

TEST(ScaleUp, CountsNodesOfEachTemplateAndRecommendsTheFewest) {
  Full f;
  ScaleUpInput in = f.Input();
  in.waiting = {RackGang(12), {Pod("infer", GpuAsk::Share(4 * 1024, 0))}};
  in.templates = Templates();
  ScaleUpOptions opts;
  opts.max_nodes = 8;
  absl::StatusOr<ScaleUpPlan> plan = PlanScaleUp(in, opts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->waiting_pods, 13);
  ASSERT_EQ(plan->options.size(), 2u);
  const TemplateOption& hgx = plan->options[0];
  EXPECT_EQ(hgx.name, "hgx");
  EXPECT_EQ(hgx.nodes, 2);
  EXPECT_EQ(hgx.gpus, 16);
  EXPECT_EQ(hgx.pods_placed, 13);
  EXPECT_TRUE(hgx.unplaced.empty());
  const TemplateOption& l4 = plan->options[1];
  EXPECT_EQ(l4.nodes, 1);
  EXPECT_EQ(l4.pods_placed, 1);
  ASSERT_EQ(l4.unplaced.size(), 1u);
  EXPECT_EQ(l4.unplaced[0].pods.size(), 12u);
  EXPECT_THAT(l4.unplaced[0].reason, HasSubstr("gang train"));
  EXPECT_EQ(plan->recommended, 0);
  EXPECT_TRUE(plan->all_placed);
  EXPECT_EQ(plan->reason, "add 2 x hgx (16 GPUs): every waiting pod (13) runs");
}

// An elastic gang (size 12, min 6, one rack) needs nodes for its min, not its size: one hgx
// starts it with 8 members, six L4s with 6; the plan says so and counts it as running.
TEST(ScaleUp, AnElasticGangNeedsNodesForItsMin) {
  Full f;
  ScaleUpInput in = f.Input();
  std::vector<PodRequest> gang = RackGang(12);
  for (PodRequest& m : gang) m.gang->min = 6;
  in.waiting = {gang};
  in.templates = Templates();
  ScaleUpOptions opts;
  opts.max_nodes = 8;
  absl::StatusOr<ScaleUpPlan> plan = PlanScaleUp(in, opts);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const TemplateOption& hgx = plan->options[0];
  EXPECT_EQ(hgx.nodes, 1);  // all 12 would need 2
  EXPECT_EQ(hgx.pods_placed, 8);
  EXPECT_TRUE(hgx.unplaced.empty());
  ASSERT_EQ(hgx.partial.size(), 1u);
  EXPECT_EQ(hgx.partial[0].started, 8);
  const TemplateOption& l4 = plan->options[1];
  EXPECT_EQ(l4.nodes, 6);
  EXPECT_EQ(l4.pods_placed, 6);
  ASSERT_EQ(l4.partial.size(), 1u);
  EXPECT_EQ(Describe(l4.partial[0]),
            "gang train starts with 6 of its 12 members (min 6); the others join as room frees up");
  EXPECT_EQ(plan->recommended, 0);
  EXPECT_TRUE(plan->all_placed);
  EXPECT_EQ(plan->reason,
            "add 1 x hgx (8 GPUs): every waiting pod or gang starts (8 of the 12 waiting pods "
            "run); gang train starts with 8 of its 12 members (min 6); the others join as room "
            "frees up");
}

TEST(ScaleUp, SharesPackOntoFewNodes) {
  // 20 shares of 4Gi wait: one L4 (24Gi) takes 6; four take them all. One hgx takes all 20.
  Full f;
  ScaleUpInput in = f.Input();
  for (int i = 0; i < 20; ++i) in.waiting.push_back({Pod(StrCat("s", i), GpuAsk::Share(4096, 0))});
  in.templates = Templates();
  absl::StatusOr<ScaleUpPlan> plan = PlanScaleUp(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->options[0].nodes, 1);
  EXPECT_EQ(plan->options[1].nodes, 4);
  EXPECT_EQ(plan->options[1].pods_placed, 20);
  EXPECT_EQ(plan->recommended, 0);  // 1 node before 4
}

TEST(ScaleUp, WhatNoTemplateCanRunIsNamed) {
  Full f;
  ScaleUpInput in = f.Input();
  in.waiting = {{Pod("huge", GpuAsk::Share(100 * 1024, 0))}};
  in.templates = Templates();
  absl::StatusOr<ScaleUpPlan> plan = PlanScaleUp(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->recommended, -1);
  EXPECT_FALSE(plan->all_placed);
  EXPECT_THAT(plan->reason, HasSubstr("no template lets any of the 1 waiting pods run"));
  EXPECT_THAT(plan->options[0].unplaced[0].reason, HasSubstr("100Gi"));
  EXPECT_EQ(plan->options[0].nodes, 0);
}

TEST(ScaleUp, NothingWaitingNeedsNothing) {
  Full f;
  ScaleUpInput in = f.Input();
  in.templates = Templates();
  absl::StatusOr<ScaleUpPlan> plan = PlanScaleUp(in);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->all_placed);
  EXPECT_EQ(plan->reason, "nothing waits: no nodes needed");
}

TEST(ScaleUp, BadTemplatesAreRefused) {
  Full f;
  ScaleUpInput in = f.Input();
  in.waiting = {{Pod("p", GpuAsk::Whole(1))}};
  in.templates = Templates();
  in.templates.push_back(in.templates[0]);
  EXPECT_THAT(PlanScaleUp(in).status().message(), HasSubstr("two node templates are named hgx"));
  in.templates = Templates();
  in.templates[0].cpu_milli = -1;
  EXPECT_THAT(PlanScaleUp(in).status().message(), HasSubstr("node template hgx"));
}

TEST(ScaleUp, CordonedNodesTakeNothing) {
  // A full server and an idle one that is cordoned: a waiting GPU pod needs a new node.
  Cluster cluster = ClusterBuilder()
                        .Node("dgx")
                        .Gpus(8, "A100-80GB")
                        .NvSwitch()
                        .Node("spare")
                        .Gpus(8, "A100-80GB")
                        .NvSwitch()
                        .Build();
  core::Engine e(cluster, Make());
  PodRequest job = Pod("job", GpuAsk::Whole(8));
  core::PlacementResult r = e.Place(job, core::Mode::kCommit);
  ASSERT_TRUE(r.placed());
  ScaleUpInput in;
  in.cluster = &cluster;
  in.make_policy = Make;
  in.running = {RunningPod{job, r.placement, true}};
  in.waiting = {{Pod("infer", GpuAsk::Whole(1))}};
  in.templates = Templates();
  absl::StatusOr<ScaleUpPlan> open = PlanScaleUp(in);
  ASSERT_TRUE(open.ok()) << open.status();
  ASSERT_GE(open->recommended, 0);
  EXPECT_EQ(open->options[open->recommended].nodes, 0) << open->reason;
  in.cordoned = {r.placement.node == core::NodeId(0) ? core::NodeId(1) : core::NodeId(0)};
  absl::StatusOr<ScaleUpPlan> closed = PlanScaleUp(in);
  ASSERT_TRUE(closed.ok()) << closed.status();
  ASSERT_GE(closed->recommended, 0);
  EXPECT_EQ(closed->options[closed->recommended].nodes, 1) << closed->reason;
  EXPECT_TRUE(closed->all_placed);
}

// Planned on the scheduler's engine (ScaleUpInput::base), what it holds beyond pods counts as
// there: a GPU it keeps spare (Engine::KeepSpares) is not free to a waiting pod, so the one free
// GPU of the full server does not run it; a node of the template does, keeping its own spare.
// Planned on the running pods alone, the spare GPU looks free: no new node.
TEST(ScaleUp, OnTheSchedulersEngineSparesAreNotFree) {
  Cluster cluster = ClusterBuilder().Node("dgx").Gpus(8, "A100-80GB").NvSwitch().Build();
  core::Engine base(cluster, Make());
  const PodRequest job = Pod("job", GpuAsk::Whole(7));
  core::PlacementResult r = base.Place(job);
  ASSERT_TRUE(r.placed());
  base.KeepSpares(1);
  ASSERT_EQ(base.spare_count(), 1);
  ScaleUpInput in;
  in.make_policy = Make;
  in.waiting = {{Pod("one", GpuAsk::Whole(1))}};
  in.templates = {Templates()[0]};
  in.base = &base;
  absl::StatusOr<ScaleUpPlan> plan = PlanScaleUp(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->all_placed);
  EXPECT_EQ(plan->options[0].nodes, 1) << plan->reason;
  EXPECT_EQ(base.spare_count(), 1);  // the base is not changed
  EXPECT_EQ(base.placed_count(), 1u);

  in.base = nullptr;
  in.cluster = &cluster;
  in.running = {RunningPod{job, r.placement, true}};
  plan = PlanScaleUp(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->options[0].nodes, 0) << plan->reason;  // no spares: GPU 7 is free

  // The same rule on the engine built from the running pods (tessera plan --from-cluster): the
  // plan is the base engine's.
  in.spares_per_domain = 1;
  plan = PlanScaleUp(in);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->all_placed);
  EXPECT_EQ(plan->options[0].nodes, 1) << plan->reason;
}

}  // namespace
}  // namespace tessera::plan
