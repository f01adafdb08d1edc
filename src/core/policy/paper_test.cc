// The FGD paper's policies, the typical task set, FGD's fragmentation measure, tessera's waste
// model and the shape index: the worked examples of their headers, and properties.
#include <cmath>
#include <map>
#include <set>

#include "common/random.h"
#include "core/engine.h"
#include "core/policy/fragmentation.h"
#include "core/policy/shape_index.h"
#include "core/policy/typical.h"
#include "core/policy/waste.h"
#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using testing::MakePolicy;
using testing::Pod;

// The score a policy gives `node` for `request` in the engine's current state.
double ScoreOn(Engine& e, const PodRequest& request, const std::string& node) {
  Query q(e.state(), request);
  NodeId id = e.cluster().FindNode(node);
  NodeFit fit = CheckNode(e.state(), q, id);
  EXPECT_TRUE(fit.ok()) << node;
  std::optional<NodeChoice> c = e.policy().ScoreNode(e.state(), q, id, fit);
  EXPECT_TRUE(c.has_value()) << node;
  return c ? c->score : -1;
}

// Grants a fraction of GPU `gpu` on `node` to a filler pod, with `cpu` milli-CPU.
void Fill(Engine& e, const std::string& node, int gpu, int32_t milli, int64_t cpu,
          const std::string& name) {
  NodeId id = e.cluster().FindNode(node);
  Placement p;
  p.node = id;
  p.cpu_milli = cpu;
  const int64_t memory = e.cluster().node(id).gpus[gpu].memory_mib;
  if (milli >= 1000) {
    p.gpus.push_back(GpuGrant{gpu, memory, 1000, true});
  } else {
    p.gpus.push_back(GpuGrant{gpu, memory * milli / 1000, milli, false});
  }
  ASSERT_TRUE(e.Restore(name, p).ok());
}

TEST(DotProd, HeaderExample) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Cpu(8)
                  .Gpus(1, "A100-80GB")
                  .Node("b")
                  .Cpu(96)
                  .Gpus(8, "A100-80GB")
                  .Build();
  Engine e(c, MakePolicy("dotprod"));
  PodRequest p = Pod("p", GpuAsk::Whole(1), 4000);
  EXPECT_EQ(ScoreOn(e, p, "a"), 99);
  EXPECT_EQ(ScoreOn(e, p, "b"), 92);
  EXPECT_EQ(c.node(e.Place(p).placement.node).name, "a");
}

TEST(BestFit, HeaderExample) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Cpu(12)
                  .Gpus(1, "A100-80GB")
                  .Node("b")
                  .Cpu(64)
                  .Gpus(8, "A100-80GB")
                  .Build();
  Engine e(c, MakePolicy("bestfit"));
  Fill(e, "a", 0, 200, 2000, "filler");
  PodRequest p = Pod("p", GpuAsk::Fraction(500), 2000);
  EXPECT_EQ(ScoreOn(e, p, "a"), 95);  // s = 0.03125 + 0.01875
  EXPECT_EQ(ScoreOn(e, p, "b"), 28);
  EXPECT_EQ(c.node(e.Place(p).placement.node).name, "a");
}

TEST(GpuPacking, HeaderExampleAndTiers) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Gpus(2, "A100-80GB")
                  .Node("b")
                  .Gpus(2, "A100-80GB")
                  .Node("c")
                  .Gpus(8, "A100-80GB")
                  .Build();
  Engine e(c, MakePolicy("gpu-packing"));
  Fill(e, "a", 0, 600, 1000, "filler");
  PodRequest share = Pod("s", GpuAsk::Fraction(250));
  EXPECT_EQ(ScoreOn(e, share, "a"), 96);  // uses the shared GPU with 0.4 free
  EXPECT_EQ(ScoreOn(e, share, "b"), 31);  // untouched 2-GPU node: 33 - 2
  EXPECT_EQ(ScoreOn(e, share, "c"), 25);  // untouched 8-GPU node: 33 - 8
  PodRequest whole = Pod("w", GpuAsk::Whole(1));
  EXPECT_EQ(ScoreOn(e, whole, "a"), 49);  // used node, one fully free GPU: 50 - 1
  PlacementResult r = e.Place(share);
  EXPECT_EQ(c.node(r.placement.node).name, "a");
  EXPECT_EQ(r.placement.gpus[0].gpu, 0);
}

TEST(GpuClustering, HeaderExample) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Gpus(2, "A100-80GB")
                  .Node("b")
                  .Gpus(8, "A100-80GB")
                  .Node("w")
                  .Gpus(2, "A100-80GB")
                  .Build();
  Engine e(c, MakePolicy("gpu-clustering"));
  ASSERT_TRUE(e.Restore("s0",
                        [&] {
                          Placement p;
                          p.node = c.FindNode("a");
                          p.gpus.push_back(GpuGrant{0, 40960, 500, false});
                          return p;
                        }())
                  .ok());
  ASSERT_TRUE(e.Restore("w0",
                        [&] {
                          Placement p;
                          p.node = c.FindNode("w");
                          p.gpus.push_back(GpuGrant{0, 81920, 1000, true});
                          return p;
                        }())
                  .ok());
  PodRequest share = Pod("s", GpuAsk::Fraction(300));
  EXPECT_EQ(ScoreOn(e, share, "a"), 95);  // shares only: 75 + 25 x 6500 / 8000
  EXPECT_EQ(ScoreOn(e, share, "b"), 25);  // untouched
  EXPECT_EQ(ScoreOn(e, share, "w"), 21);  // hosts only 1-gpu pods: 0 + 25 x 7000 / 8000
  PodRequest one = Pod("o", GpuAsk::Whole(1));
  EXPECT_EQ(ScoreOn(e, one, "w"), 96);  // the same kind only: 75 + 21
  EXPECT_EQ(ScoreOn(e, one, "a"), 20);  // another kind only: 0 + 25 x 6500 / 8000
  // Releasing the share forgets the kind: node a is untouched again.
  ASSERT_TRUE(e.Release("s0").ok());
  EXPECT_EQ(ScoreOn(e, share, "a"), 43);  // 25 + 25 x 6000 / 8000
}

TEST(Fgd, HeaderExample) {
  Cluster c =
      ClusterBuilder().Node("a").Gpus(2, "A100-80GB").Node("b").Gpus(2, "A100-80GB").Build();
  PolicyOptions o;
  o.typical_tasks = {TypicalTask{1000, 1000, 1, {}, 1.0}};
  Engine e(c, MakePolicy("fgd", o));
  Fill(e, "a", 1, 400, 1000, "filler");  // GPU 1 of a has 600 free
  PodRequest p = Pod("p", GpuAsk::Fraction(500));
  EXPECT_EQ(ScoreOn(e, p, "a"), 62);
  EXPECT_EQ(ScoreOn(e, p, "b"), 37);
  PlacementResult r = e.Place(p);
  EXPECT_EQ(c.node(r.placement.node).name, "a");
  EXPECT_EQ(r.placement.gpus[0].gpu, 1);
}

TEST(Fgd, LearnsTheMixWhenNoneIsGiven) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Gpus(8, "A100-80GB")
                  .Node("b")
                  .Gpus(8, "A100-80GB")
                  .Node("c")
                  .Gpus(8, "A100-80GB")
                  .Build();
  Engine e(c, MakePolicy("fgd"));
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(
        e.Place(Pod("p" + std::to_string(i), GpuAsk::Fraction(i % 2 ? 300 : 700))).placed());
  }
  // 20 x 0.7 + 20 x 0.3 pair up exactly: 20 GPUs, no more.
  EXPECT_EQ(e.state().gpus_in_use(), 20);
  e.state().CheckInvariants();
}

TEST(PaperPolicies, TiesFollowASeededNodeOrder) {
  ClusterBuilder b;
  for (int i = 0; i < 16; ++i) b.Node("n" + std::to_string(i)).Gpus(8, "A100-80GB");
  Cluster c = b.Build();
  std::set<std::string> first_nodes;
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    PolicyOptions o;
    o.seed = seed;
    Engine e(c, MakePolicy("bestfit", o));
    Engine again(c, MakePolicy("bestfit", o));
    PlacementResult r = e.Place(Pod("p", GpuAsk::Whole(1)));
    EXPECT_EQ(r.placement.node, again.Place(Pod("p", GpuAsk::Whole(1))).placement.node);
    first_nodes.insert(c.node(r.placement.node).name);
    // Packing: the next pod goes to the same node (its score is now higher).
    EXPECT_EQ(e.Place(Pod("q", GpuAsk::Whole(1))).placement.node, r.placement.node);
  }
  EXPECT_GT(first_nodes.size(), 3u) << "the order is drawn from the seed";
}

TEST(RandomPolicy, UniformOverFeasibleNodesAndReproducible) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Gpus(2, "A100-80GB")
                  .Node("b")
                  .Gpus(2, "A100-80GB")
                  .Node("c")
                  .Gpus(2, "A100-80GB")
                  .Node("small")
                  .Cpu(1)
                  .Gpus(2, "A100-80GB")
                  .Build();
  PolicyOptions o;
  o.seed = 5;
  Engine e(c, MakePolicy("random", o));
  Engine twin(c, MakePolicy("random", o));
  std::map<std::string, int> hits;
  for (int i = 0; i < 3000; ++i) {
    PodRequest p = Pod("p", GpuAsk::Fraction(100), 2000);  // too much CPU for "small"
    PlacementResult r = e.Place(p, Mode::kTestOnly);
    ASSERT_TRUE(r.placed());
    EXPECT_EQ(r.placement.node, twin.Place(p, Mode::kTestOnly).placement.node);
    ++hits[c.node(r.placement.node).name];
  }
  EXPECT_EQ(hits.count("small"), 0u);
  for (const char* n : {"a", "b", "c"}) {
    EXPECT_NEAR(hits[n], 1000, 150) << n;  // 1000 +- ~5 standard deviations
  }
}

TEST(PaperPolicies, PlaceGangMembersOneByOne) {
  for (std::string_view name :
       {"random", "dotprod", "gpu-clustering", "gpu-packing", "bestfit", "fgd"}) {
    EXPECT_FALSE(MakePolicy(name)->places_gangs_together()) << name;
  }
}

TEST(TypicalTasks, HeaderExample) {
  std::vector<PodRequest> requests;
  for (int i = 0; i < 6; ++i) requests.push_back(Pod("w", GpuAsk::Whole(1), 4000));
  for (int i = 0; i < 3; ++i) requests.push_back(Pod("s", GpuAsk::Fraction(500), 2000));
  requests.push_back(Pod("c", GpuAsk::None(), 1000));
  std::vector<TypicalTask> t = TypicalTasksOf(requests, 0.9, 81920);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].gpu_milli, 1000);
  EXPECT_EQ(t[0].cpu_milli, 4000);
  EXPECT_NEAR(t[0].weight, 2.0 / 3.0, 1e-12);
  EXPECT_EQ(t[1].gpu_milli, 500);
  EXPECT_NEAR(t[1].weight, 1.0 / 3.0, 1e-12);
  // Coverage 1: every group, weights are plain shares; ties go to the larger shape first.
  requests.push_back(Pod("c2", GpuAsk::None(), 3000));
  requests.push_back(Pod("c3", GpuAsk::None(), 3000));
  requests.push_back(Pod("c4", GpuAsk::None(), 1000));
  std::vector<TypicalTask> all = TypicalTasksOf(requests, 1.0, 81920);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[2].cpu_milli, 3000);  // 2 each: {3 CPU} before {1 CPU}
  EXPECT_EQ(all[3].cpu_milli, 1000);
  double sum = 0;
  for (const TypicalTask& x : all) sum += x.weight;
  EXPECT_NEAR(sum, 1.0, 1e-12);
  // A pod asking no CPU counts 100m, as kube-scheduler's non-zero request does.
  EXPECT_EQ(TypicalTasksOf(std::vector<PodRequest>{Pod("z", GpuAsk::None(), 0)}, 1, 0)[0].cpu_milli,
            100);
}

TEST(TaskMix, FollowsTheStream) {
  TaskMix mix(0.95, 64);
  EXPECT_TRUE(mix.Observe(Pod("a", GpuAsk::Whole(1)), 81920));
  EXPECT_EQ(mix.tasks().size(), 1u);
  for (int i = 0; i < 200; ++i) mix.Observe(Pod("b", GpuAsk::Fraction(500)), 81920);
  // The window holds the last 64 requests: only halves now.
  ASSERT_EQ(mix.tasks().size(), 1u);
  EXPECT_EQ(mix.tasks()[0].gpu_milli, 500);
}

TEST(Fragmentation, HeaderExample) {
  Cluster c = ClusterBuilder().Node("n").Gpus(3, "A100-80GB").Build();
  FragmentationMeasure m(c, {TypicalTask{1000, 500, 1, {}, 0.6}, TypicalTask{1000, 0, 0, {}, 0.4}});
  const int32_t left[] = {1000, 300, 0};
  FragmentationMeasure::Amounts a = m.NodeAmounts(NodeId(0), 64000, left);
  EXPECT_DOUBLE_EQ(FragmentationMeasure::Fragment(a), 700);
  EXPECT_DOUBLE_EQ(a[FragmentationMeasure::kQ3Satisfied], 600);
  EXPECT_DOUBLE_EQ(FragmentationMeasure::Idle(a), 1300);
  // Not enough CPU for the 0.5 task: all of its share of the free GPU is fragment (Q4).
  a = m.NodeAmounts(NodeId(0), 500, left);
  EXPECT_DOUBLE_EQ(a[FragmentationMeasure::kQ4LackCpu], 0.6 * 1300);
  // A task for another model finds no access.
  FragmentationMeasure t4(c, {TypicalTask{1000, 500, 1, {"T4"}, 1.0}});
  EXPECT_DOUBLE_EQ(t4.NodeAmounts(NodeId(0), 64000, left)[FragmentationMeasure::kNoAccess], 1300);
}

TEST(WasteModel, HeaderExample) {
  Cluster c = ClusterBuilder().Node("n").Cpu(512).Gpus(3, "A100-80GB").Build();
  WasteModel w(c, {TypicalTask{1000, 500, 1, {}, 0.7}, TypicalTask{1000, 1000, 1, {}, 0.3}}, {});
  const int32_t piece_04[] = {400, 0, 0};
  const int32_t piece_06[] = {600, 0, 0};
  const int32_t whole[] = {1000, 0, 0};
  EXPECT_NEAR(w.Waste(NodeId(0), 512000, piece_04, 3), 400, 1e-9);
  EXPECT_NEAR(w.Waste(NodeId(0), 512000, piece_06, 3), 600 * std::pow(0.3, 50), 1e-9);
  EXPECT_GT(w.Waste(NodeId(0), 512000, piece_06, 3), 0);
  EXPECT_NEAR(w.Waste(NodeId(0), 512000, whole, 3), 0, 1e-9);
  // With no CPU left nothing fits: everything free is stranded, and the CPU term adds its part.
  const double no_cpu = w.Waste(NodeId(0), 0, whole, 3);
  EXPECT_NEAR(no_cpu, 1000 + 0.3 * 1000, 1e-9);
}

// The shape index returns exactly what a full scan of its evaluations would, through log
// compaction and eviction.
TEST(ShapeIndex, EqualsTheFullScan) {
  ClusterBuilder b;
  for (int i = 0; i < 150; ++i) b.Node("n" + std::to_string(i)).Gpus(2, "A100-80GB");
  Cluster c = b.Build();
  ClusterState state(c);
  Random rng(3);
  std::vector<int32_t> rank(150);
  for (int i = 0; i < 150; ++i) rank[i] = (i * 37) % 150;  // a permutation
  ShapeIndex index;
  index.Attach(state, rank, /*uniform=*/true, /*max_entries=*/150 * 3);  // room for 3 shapes
  // The "policy": a score per (shape, node) that changes whenever the node changes.
  std::map<std::pair<int, int>, int64_t> salt;
  auto eval_for = [&](int shape) {
    return [&, shape](NodeId n) {
      NodeEval e;
      const int64_t v = (state.version(n) * 7 + shape * 13 + n.value() * 3) % 11;
      if (v == 0) return e;  // infeasible
      e.status = v == 1 ? NodeEval::kDeclined : NodeEval::kScored;
      e.score = v % 4;  // many ties
      e.gpus = static_cast<uint64_t>(shape);
      return e;
    };
  };
  std::vector<Placement> live;
  for (int step = 0; step < 3000; ++step) {
    if (!live.empty() && rng.Uniform(3) == 0) {
      size_t k = rng.Uniform(live.size());
      state.Revert(live[k]);
      index.NodeChanged(live[k].node);
      live.erase(live.begin() + static_cast<long>(k));
    } else {
      Placement p;
      p.node = NodeId(static_cast<int>(rng.Uniform(150)));
      p.cpu_milli = 1;
      if (state.CanApply(p)) {
        state.Apply(p);
        index.NodeChanged(p.node);
        live.push_back(p);
      }
    }
    const int shape = static_cast<int>(rng.Uniform(5));  // 5 shapes, room for 3: evictions
    RequestShape key;
    key.cpu_milli = shape;
    auto eval = eval_for(shape);
    NodeId got;
    std::optional<NodeEval> best = index.Best(state, key, eval, &got, nullptr);
    int64_t want_key = ShapeIndex::kNone;
    int want = -1, scored = 0;
    for (int i = 0; i < 150; ++i) {
      NodeEval e = eval(NodeId(i));
      if (e.status != NodeEval::kScored) continue;
      ++scored;
      int64_t k = index.Key(e.score, NodeId(i));
      if (k > want_key) {
        want_key = k;
        want = i;
      }
    }
    ASSERT_EQ(best.has_value(), want >= 0) << step;
    if (want >= 0) {
      ASSERT_EQ(got.value(), want) << step;
    }
    // Uniform choice: a scored node, the k-th in node order.
    NodeId pick;
    std::optional<NodeEval> u = index.UniformScored(
        state, key, eval, [](int32_t n) { return n - 1; }, &pick);
    ASSERT_EQ(u.has_value(), scored > 0);
    if (u) {
      int last = -1;
      for (int i = 0; i < 150; ++i) {
        if (eval(NodeId(i)).status == NodeEval::kScored) last = i;
      }
      ASSERT_EQ(pick.value(), last) << step;
    }
  }
  EXPECT_LE(index.cached_shapes(), 3u);
}

}  // namespace
}  // namespace tessera::core
