// The incremental scale-up planner (scale_up.cc) against the planner it replaced, kept here as
// the reference: a scratch engine whose every added node rebuilds the domains and the policy's
// indexes (Engine::ChangeNodes forced onto its rebuild), and every waiting group tried on the
// whole cluster with its reason explained, after every node. Both must give the same plan, field
// by field (reasons included), on the cases below and on generated ones: gangs spanning free GPUs
// of the cluster and new nodes, rack gangs, elastic gangs, cordoned nodes, shares, MIG, templates
// whose labels make new domains (sorting first or last), join existing ones, or bring a new GPU
// model, several policies and max_nodes values.
#include <random>
#include <set>
#include <tuple>

#include "common/strings.h"
#include "core/engine.h"
#include "core/plan/scale_up.h"
#include "core/testing/cluster_builder.h"
#include "gtest/gtest.h"

namespace tessera::plan {
namespace {

using core::Cluster;
using core::Engine;
using core::GpuAsk;
using core::NodeSpec;
using core::PodRequest;
using core::testing::ClusterBuilder;
using core::testing::Pod;

namespace reference {

int GroupGpus(const std::vector<PodRequest>& group) {
  int gpus = 0;
  for (const PodRequest& p : group) gpus += std::max(1, p.gpu.gpu_count());
  return gpus;
}

int PlaceWaiting(Engine& engine, std::vector<const std::vector<PodRequest>*>& left,
                 std::vector<std::string>* reasons, int64_t* memory,
                 std::vector<PartialGang>* partial) {
  int placed = 0;
  std::vector<const std::vector<PodRequest>*> still;
  reasons->clear();
  for (const std::vector<PodRequest>* group : left) {
    const std::optional<core::GangAsk>& gang = group->front().gang;
    const bool elastic = gang && gang->elastic();
    std::vector<core::PlacementResult> r =
        engine.Decide(elastic ? core::Ask::ElasticGang(*group, {}) : core::Ask::Gang(*group));
    if (!r.empty() && r[0].placed()) {
      int n = 0;
      for (const core::PlacementResult& x : r) {
        if (!x.placed()) continue;
        ++n;
        for (const core::GpuGrant& g : x.placement.gpus) *memory += g.memory_mib;
      }
      placed += n;
      if (n < static_cast<int>(group->size())) {
        PartialGang g{gang->name, n, gang->size, gang->min_members(), {}};
        for (size_t i = 0; i < r.size(); ++i) {
          if (!r[i].placed()) g.waiting.push_back((*group)[i].name);
        }
        partial->push_back(std::move(g));
      }
      continue;
    }
    still.push_back(group);
    reasons->push_back(r.empty() ? "" : r[0].reason);
  }
  left = std::move(still);
  return placed;
}

absl::StatusOr<TemplateOption> Evaluate(const ScaleUpInput& in, const NodeSpec& t, int max_nodes) {
  Engine engine(*in.cluster, in.make_policy(), in.levels);
  for (const RunningPod& r : in.running) {
    absl::Status s = engine.Restore(r.request.name, r.placement);
    if (!s.ok()) return absl::InvalidArgumentError(s.message());
  }
  absl::Status cordoned = Cordon(engine, in.cordoned);
  if (!cordoned.ok()) return cordoned;
  TemplateOption out;
  out.name = t.name;
  std::vector<const std::vector<PodRequest>*> left;
  for (const std::vector<PodRequest>& g : in.waiting) left.push_back(&g);
  std::vector<std::string> reasons;
  int64_t memory = 0;
  out.pods_placed = PlaceWaiting(engine, left, &reasons, &memory, &out.partial);
  int idle = 0;
  for (int n = 1; n <= max_nodes && !left.empty(); ++n) {
    NodeSpec spec = t;
    spec.name = StrCat(t.name, "-new-", n - 1);
    core::NodeChanges changes;
    changes.add.push_back(std::move(spec));
    // A cordon left as it is: the change is no longer additions alone, so the engine rebuilds
    // its domains and the policy re-attaches, as every node addition did before.
    const core::NodeId first(0);
    changes.cordon.emplace_back(first, !engine.state().accepts_pods(first));
    absl::Status s = engine.ChangeNodes(std::move(changes));
    if (!s.ok()) return absl::InvalidArgumentError(s.message());
    int placed = PlaceWaiting(engine, left, &reasons, &memory, &out.partial);
    if (placed > 0) {
      out.pods_placed += placed;
      out.nodes = n;
      idle = 0;
      continue;
    }
    int patience = 1;
    for (const std::vector<PodRequest>* g : left) {
      patience = std::max(
          patience, (GroupGpus(*g) + std::max(1, t.gpu_count()) - 1) / std::max(1, t.gpu_count()));
    }
    if (++idle >= patience) break;
  }
  out.gpus = out.nodes * t.gpu_count();
  out.memory_granted_mib = memory;
  for (size_t i = 0; i < left.size(); ++i) {
    Unplaced u;
    for (const PodRequest& p : *left[i]) u.pods.push_back(p.name);
    u.reason = reasons[i];
    out.unplaced.push_back(std::move(u));
  }
  return out;
}

// PlanScaleUp's choice among the options, as it was (unchanged by the incremental planner).
absl::StatusOr<ScaleUpPlan> PlanScaleUp(const ScaleUpInput& in, const ScaleUpOptions& options) {
  ScaleUpPlan plan;
  for (const std::vector<PodRequest>& g : in.waiting) plan.waiting_pods += g.size();
  for (const NodeSpec& t : in.templates) {
    absl::StatusOr<TemplateOption> o = Evaluate(in, t, options.max_nodes);
    if (!o.ok()) return o.status();
    plan.options.push_back(*std::move(o));
  }
  if (plan.waiting_pods == 0) {
    plan.all_placed = true;
    plan.reason = "nothing waits: no nodes needed";
    return plan;
  }
  for (size_t i = 0; i < plan.options.size(); ++i) {
    const TemplateOption& o = plan.options[i];
    if (o.pods_placed == 0) continue;
    if (plan.recommended < 0) {
      plan.recommended = static_cast<int>(i);
      continue;
    }
    const TemplateOption& b = plan.options[plan.recommended];
    if (std::make_tuple(-o.pods_placed, o.nodes, o.gpus) <
        std::make_tuple(-b.pods_placed, b.nodes, b.gpus)) {
      plan.recommended = static_cast<int>(i);
    }
  }
  if (plan.recommended < 0) {
    plan.reason = StrCat("no template lets any of the ", plan.waiting_pods,
                         " waiting pods run (up to ", options.max_nodes, " nodes of each)");
    return plan;
  }
  const TemplateOption& best = plan.options[plan.recommended];
  plan.all_placed = best.unplaced.empty();
  const std::string add = best.nodes == 0
                              ? std::string("no new node")
                              : StrCat(best.nodes, " x ", best.name, " (", best.gpus, " GPUs)");
  plan.reason = !plan.all_placed
                    ? StrCat("add ", add, ": ", best.pods_placed, " of the ", plan.waiting_pods,
                             " waiting pods run; no template runs them all")
                : best.partial.empty()
                    ? StrCat("add ", add, ": every waiting pod (", plan.waiting_pods, ") runs")
                    : StrCat("add ", add, ": every waiting pod or gang starts (", best.pods_placed,
                             " of the ", plan.waiting_pods, " waiting pods run)");
  for (const PartialGang& g : best.partial) StrAppend(&plan.reason, "; ", Describe(g));
  return plan;
}

}  // namespace reference

// Field by field, so that a difference names itself.
void ExpectSamePlan(const ScaleUpPlan& want, const ScaleUpPlan& got) {
  EXPECT_EQ(got.waiting_pods, want.waiting_pods);
  EXPECT_EQ(got.recommended, want.recommended);
  EXPECT_EQ(got.all_placed, want.all_placed);
  EXPECT_EQ(got.reason, want.reason);
  ASSERT_EQ(got.options.size(), want.options.size());
  for (size_t i = 0; i < want.options.size(); ++i) {
    const TemplateOption& w = want.options[i];
    const TemplateOption& g = got.options[i];
    SCOPED_TRACE(StrCat("template ", w.name));
    EXPECT_EQ(g.name, w.name);
    EXPECT_EQ(g.nodes, w.nodes);
    EXPECT_EQ(g.gpus, w.gpus);
    EXPECT_EQ(g.pods_placed, w.pods_placed);
    EXPECT_EQ(g.memory_granted_mib, w.memory_granted_mib);
    ASSERT_EQ(g.unplaced.size(), w.unplaced.size());
    for (size_t u = 0; u < w.unplaced.size(); ++u) {
      EXPECT_EQ(g.unplaced[u].pods, w.unplaced[u].pods);
      EXPECT_EQ(g.unplaced[u].reason, w.unplaced[u].reason);
    }
    ASSERT_EQ(g.partial.size(), w.partial.size());
    for (size_t p = 0; p < w.partial.size(); ++p) {
      EXPECT_EQ(Describe(g.partial[p]), Describe(w.partial[p]));
      EXPECT_EQ(g.partial[p].waiting, w.partial[p].waiting);
    }
  }
}

// Both planners on `in`, the incremental one also given the cluster as an engine that holds the
// running pods (ScaleUpInput::base, as the scheduler plans); the plan.
ScaleUpPlan Both(const ScaleUpInput& in, int max_nodes) {
  ScaleUpOptions options;
  options.max_nodes = max_nodes;
  absl::StatusOr<ScaleUpPlan> want = reference::PlanScaleUp(in, options);
  absl::StatusOr<ScaleUpPlan> got = PlanScaleUp(in, options);
  EXPECT_TRUE(want.ok()) << want.status();
  EXPECT_TRUE(got.ok()) << got.status();
  if (!want.ok() || !got.ok()) return {};
  ExpectSamePlan(*want, *got);
  core::Engine base(*in.cluster, in.make_policy(), in.levels);
  for (const RunningPod& r : in.running) {
    EXPECT_TRUE(base.Restore(r.request.name, r.placement).ok());
  }
  EXPECT_TRUE(Cordon(base, in.cordoned).ok());
  ScaleUpInput from_engine{.make_policy = in.make_policy,
                           .waiting = in.waiting,
                           .templates = in.templates,
                           .base = &base};
  absl::StatusOr<ScaleUpPlan> on_base = PlanScaleUp(from_engine, options);
  EXPECT_TRUE(on_base.ok()) << on_base.status();
  if (!on_base.ok()) return {};
  SCOPED_TRACE("on the cluster as an engine (ScaleUpInput::base)");
  ExpectSamePlan(*want, *on_base);
  return *got;
}

std::function<std::unique_ptr<core::Policy>()> Policy(std::string name) {
  return [name] { return *core::CreatePolicy(name, {}); };
}

PodRequest Member(std::string gang, int size, int i, GpuAsk ask, std::string level = "",
                  bool required = false, int min = 0) {
  PodRequest m = Pod(StrCat(gang, "-", i), ask);
  m.gang = core::GangAsk{gang, size, std::move(level), required, min};
  return m;
}

std::vector<PodRequest> Gang(std::string name, const std::vector<int>& gpus, std::string level = "",
                             bool required = false, int min = 0) {
  std::vector<PodRequest> out;
  const int size = static_cast<int>(gpus.size());
  for (int i = 0; i < size; ++i) {
    out.push_back(Member(name, size, i, GpuAsk::Whole(gpus[i]), level, required, min));
  }
  return out;
}

// Racks r1 and r2 of 8-GPU servers, each running a 7-GPU pod (one GPU free on each), an idle
// L4 server in r2 that is cordoned, and the running pods as the scheduler would hold them.
struct Racks {
  Cluster cluster = ClusterBuilder()
                        .Node("a1")
                        .Gpus(8, "A100-80GB")
                        .NvSwitch()
                        .Label("tessera.dev/rack", "r1")
                        .Node("a2")
                        .Gpus(8, "A100-80GB")
                        .NvSwitch()
                        .Label("tessera.dev/rack", "r1")
                        .Node("b1")
                        .Gpus(8, "A100-80GB")
                        .NvSwitch()
                        .Label("tessera.dev/rack", "r2")
                        .Node("l4")
                        .Gpus(4, "L4", 24 * 1024)
                        .Label("tessera.dev/rack", "r2")
                        .Build();
  std::vector<RunningPod> running;
  Racks() {
    Engine e(cluster, *core::CreatePolicy("tessera", {}));
    for (const char* node : {"a1", "a2", "b1"}) {
      PodRequest p = Pod(StrCat("run-", node), GpuAsk::Whole(7));
      std::vector<core::Candidate> only = {{cluster.FindNode(node), ~0ULL}};
      core::PlacementResult r = e.Place(p, core::Mode::kCommit, &only);
      TESSERA_CHECK(r.placed());
      running.push_back(RunningPod{p, r.placement, false});
    }
  }
  ScaleUpInput Input(std::string policy = "tessera") const {
    ScaleUpInput in;
    in.cluster = &cluster;
    in.make_policy = Policy(std::move(policy));
    in.running = running;
    in.cordoned = {cluster.FindNode("l4")};
    return in;
  }
};

NodeSpec Template(std::string name, int gpus, std::string model, std::string rack,
                  bool nvswitch = true) {
  ClusterBuilder b;
  b.Node(std::move(name)).Gpus(gpus, std::move(model));
  if (nvswitch) b.NvSwitch();
  if (!rack.empty()) b.Label("tessera.dev/rack", std::move(rack));
  return b.Build().nodes()[0];
}

// A gang without topology of a 4-GPU and two 1-GPU members: nothing in the cluster holds the
// 4-GPU member, and a 4-GPU node holds the 4-GPU member alone. With the cluster's free single
// GPUs it runs on one new node; tried on the new nodes only it would need two.
TEST(ScaleUpReference, AGangSpansFreeGpusOfTheClusterAndANewNode) {
  Racks r;
  ScaleUpInput in = r.Input();
  in.waiting = {Gang("g", {4, 1, 1})};
  in.templates = {Template("quad", 4, "H100-80GB", "new")};
  ScaleUpPlan plan = Both(in, 8);
  ASSERT_EQ(plan.options.size(), 1u);
  EXPECT_EQ(plan.options[0].nodes, 1);
  EXPECT_EQ(plan.options[0].pods_placed, 3);
}

// A rack gang needs 10 GPUs inside rack r1 (2 free there): one 8-GPU node labelled r1 joins
// the rack's domain and makes it; a node labelled r3 makes a domain of its own and needs two.
TEST(ScaleUpReference, ARackGangUsesTheRacksFreeGpusWithANodeThatJoinsIt) {
  Racks r;
  ScaleUpInput in = r.Input();
  in.waiting = {Gang("rg", {2, 2, 2, 2, 1, 1}, "rack", true)};
  in.templates = {Template("hgx-r1", 8, "H100-80GB", "r1"),
                  Template("hgx-r3", 8, "H100-80GB", "r3")};
  ScaleUpPlan plan = Both(in, 4);
  ASSERT_EQ(plan.options.size(), 2u);
  EXPECT_EQ(plan.options[0].nodes, 1);
  EXPECT_EQ(plan.options[1].nodes, 2);
  EXPECT_EQ(plan.recommended, 0);
}

// Labels that make a domain sorting before the existing ones (rack a0: the engine rebuilds its
// domains), a rack-scale NVLink domain (the policy re-derives its order), a GPU model the
// cluster does not have (a new class for the waste model), and templates with no label.
TEST(ScaleUpReference, TemplatesWhoseLabelsMakeNewDomains) {
  Racks r;
  ScaleUpInput in = r.Input();
  in.waiting = {{Pod("one", GpuAsk::Whole(1))},          Gang("rg", {2, 2}, "rack", true),
                {Pod("s1", GpuAsk::Share(8 * 1024, 0))}, Gang("nv", {4, 4}, "nvlink-domain", false),
                {Pod("cpu", GpuAsk::None(), 4000)},      {Pod("big", GpuAsk::Whole(8))}};
  NodeSpec nvl = Template("nvl", 4, "H100-80GB", "");
  nvl.labels["tessera.dev/nvlink-domain"] = "nvl-1";
  NodeSpec l40s = ClusterBuilder().Node("l40s").Profile("l40s-4gpu").Build().nodes()[0];
  in.templates = {Template("a0", 8, "H100-80GB", "a0"), nvl, l40s,
                  Template("plain", 2, "A100-80GB", "", false)};
  for (int max_nodes : {0, 1, 2, 3, 8}) {
    SCOPED_TRACE(StrCat("max_nodes ", max_nodes));
    Both(in, max_nodes);
  }
}

// Elastic gangs start with their min on the nodes added; shares pack; the L4 pods fit only the
// cordoned L4 server or new L4 nodes.
TEST(ScaleUpReference, ElasticGangsSharesAndModels) {
  Racks r;
  ScaleUpInput in = r.Input();
  std::vector<PodRequest> elastic = Gang("el", {1, 1, 1, 1, 1, 1, 1, 1}, "rack", true, 4);
  PodRequest l4 = Pod("l4-only", GpuAsk::Share(12 * 1024, 0));
  l4.gpu_models = {"L4"};
  in.waiting = {elastic,
                {l4},
                {Pod("s2", GpuAsk::Share(30 * 1024, 0))},
                {Pod("s3", GpuAsk::Share(30 * 1024, 0))},
                {Pod("w2", GpuAsk::Whole(2))}};
  in.templates = {Template("quad", 4, "H100-80GB", "new"), Template("l4s", 2, "L4", "new", false)};
  for (int max_nodes : {1, 2, 6}) {
    SCOPED_TRACE(StrCat("max_nodes ", max_nodes));
    Both(in, max_nodes);
  }
}

// Policies whose choice is not per node (binpack, spread, fgd) take the full tries; tessera
// takes the narrow ones. All agree with the reference.
TEST(ScaleUpReference, EveryPolicyAgrees) {
  Racks r;
  for (const std::string policy : {"tessera", "binpack", "spread", "fgd"}) {
    SCOPED_TRACE(policy);
    ScaleUpInput in = r.Input(policy);
    in.waiting = {{Pod("w1", GpuAsk::Whole(2))},
                  Gang("g", {4, 1, 1}),
                  {Pod("s1", GpuAsk::Share(20 * 1024, 0))},
                  {Pod("w8", GpuAsk::Whole(8))}};
    in.templates = {Template("quad", 4, "H100-80GB", "new"), Template("hgx", 8, "H100-80GB", "r2")};
    Both(in, 6);
  }
}

// Generated cases: a small cluster partly used, some nodes cordoned, a mix of waiting pods and
// gangs, a few templates; the two planners agree on every one.
struct Generator {
  std::mt19937 rng;
  explicit Generator(uint32_t seed) : rng(seed) {}
  int Int(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  template <typename T>
  const T& Pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(Int(0, static_cast<int>(v.size()) - 1))];
  }

  Cluster MakeCluster() {
    ClusterBuilder b;
    const int n = Int(2, 8);
    for (int i = 0; i < n; ++i) {
      b.Node(StrCat("n", i));
      switch (Int(0, 3)) {
        case 0:
          b.Gpus(8, "A100-80GB").NvSwitch();
          break;
        case 1:
          b.Gpus(Int(1, 4), "L4", 24 * 1024);
          break;
        case 2:
          b.Gpus(4, "H100-80GB").NvSwitch();
          break;
        default:
          b.Gpus(2, "A100-80GB");
          break;
      }
      const int rack = Int(0, 3);
      if (rack > 0) b.Label("tessera.dev/rack", StrCat("r", rack));
    }
    return b.Build();
  }

  GpuAsk Ask() {
    switch (Int(0, 5)) {
      case 0:
        return GpuAsk::Share(Pick<int64_t>({4096, 10240, 20480, 40960}), 0);
      case 1:
        return GpuAsk::None();
      case 2:
        return GpuAsk::Whole(Pick<int>({4, 8}));
      default:
        return GpuAsk::Whole(Pick<int>({1, 2}));
    }
  }

  std::vector<RunningPod> Fill(const Cluster& cluster) {
    Engine e(cluster, *core::CreatePolicy("binpack", {}));
    std::vector<RunningPod> out;
    const int pods = Int(0, 3 * cluster.node_count());
    for (int i = 0; i < pods; ++i) {
      PodRequest p = Pod(StrCat("run-", i), Ask());
      core::PlacementResult r = e.Place(p);
      if (r.placed()) out.push_back(RunningPod{p, r.placement, false});
    }
    return out;
  }

  std::vector<std::vector<PodRequest>> Waiting() {
    std::vector<std::vector<PodRequest>> out;
    const int groups = Int(1, 10);
    for (int i = 0; i < groups; ++i) {
      const int kind = Int(0, 9);
      if (kind < 6) {
        PodRequest p = Pod(StrCat("w", i), Ask());
        if (Int(0, 6) == 0 && p.gpu.kind != GpuAsk::Kind::kNone) p.gpu_models = {"L4"};
        out.push_back({p});
        continue;
      }
      std::vector<int> gpus(static_cast<size_t>(Int(2, 5)));
      for (int& g : gpus) g = Pick<int>({1, 1, 2, 4});
      const std::string level = Pick<std::string>({"", "rack", "nvlink-domain"});
      const bool required = !level.empty() && Int(0, 1) == 1;
      const int min = kind == 9 ? Int(1, static_cast<int>(gpus.size()) - 1) : 0;
      out.push_back(Gang(StrCat("g", i), gpus, level, required, min));
    }
    return out;
  }

  std::vector<NodeSpec> Templates() {
    std::vector<NodeSpec> pool = {
        Template("hgx", 8, "H100-80GB", "new"),
        Template("hgx-r1", 8, "H100-80GB", "r1"),
        Template("quad-a0", 4, "A100-80GB", "a0"),
        Template("l4", 1, "L4", "", false),
        Template("pair", 2, "A100-80GB", "r2", false),
        ClusterBuilder().Node("l40s").Profile("l40s-4gpu").Build().nodes()[0]};
    NodeSpec nvl = Template("nvl", 4, "H100-80GB", "r3");
    nvl.labels["tessera.dev/nvlink-domain"] = "nvl-1";
    pool.push_back(nvl);
    std::vector<NodeSpec> out;
    std::set<std::string> names;
    const int n = Int(1, 3);
    for (int i = 0; i < n; ++i) {
      const NodeSpec& t = Pick(pool);
      if (names.insert(t.name).second) out.push_back(t);
    }
    return out;
  }
};

TEST(ScaleUpReference, GeneratedCasesAgree) {
  for (uint32_t seed = 1; seed <= 120; ++seed) {
    SCOPED_TRACE(StrCat("seed ", seed));
    Generator gen(seed);
    Cluster cluster = gen.MakeCluster();
    ScaleUpInput in;
    in.cluster = &cluster;
    in.make_policy = Policy(seed % 4 == 0 ? "binpack" : "tessera");
    in.running = gen.Fill(cluster);
    for (int n = 0; n < cluster.node_count(); ++n) {
      if (gen.Int(0, 5) == 0) in.cordoned.push_back(core::NodeId(n));
    }
    in.waiting = gen.Waiting();
    in.templates = gen.Templates();
    Both(in, gen.Pick<int>({0, 1, 2, 4, 8}));
    if (HasFailure()) return;  // one seed's differences are enough to read
  }
}

}  // namespace
}  // namespace tessera::plan
