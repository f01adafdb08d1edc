#include "core/engine.h"

#include "common/random.h"
#include "common/strings.h"
#include "core/testing/cluster_builder.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using ::testing::HasSubstr;
using testing::MakePolicy;
using testing::Pod;
using testing::RealityCheckCluster;
using testing::TwoNvSwitchServers;

TEST(Engine, PlacesAndReleases) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  PlacementResult r = e.Place(Pod("p", GpuAsk::Share(4096, 0)));
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(e.state().gpus_in_use(), 1);
  ASSERT_NE(e.Find("p"), nullptr);
  EXPECT_TRUE(e.Release("p").ok());
  EXPECT_EQ(e.state().gpus_in_use(), 0);
  EXPECT_EQ(e.Release("p").code(), absl::StatusCode::kNotFound);
  e.state().CheckInvariants();
}

TEST(Engine, NeverFitsSaysWhyInWordsAPersonCanActOn) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  PlacementResult big = e.Place(Pod("big", GpuAsk::Share(96 * 1024, 0)));
  EXPECT_EQ(big.outcome, Outcome::kNeverFits);
  EXPECT_EQ(big.reason, "needs 96Gi on one GPU; the largest GPU has 80Gi");

  PlacementResult many = e.Place(Pod("many", GpuAsk::Whole(9)));
  EXPECT_EQ(many.outcome, Outcome::kNeverFits);
  EXPECT_EQ(many.reason, "needs 9 GPUs on one node; the most any node has is 8");

  PodRequest model = Pod("model", GpuAsk::Whole(1));
  model.gpu_models = {"H100-80GB"};
  PlacementResult m = e.Place(model);
  EXPECT_EQ(m.outcome, Outcome::kNeverFits);
  EXPECT_THAT(m.reason, HasSubstr("no GPU of model H100-80GB in this cluster (it has: A100-80GB)"));

  PlacementResult cpu = e.Place(Pod("cpu", GpuAsk::None(), 500'000));
  EXPECT_EQ(cpu.outcome, Outcome::kNeverFits);
  EXPECT_EQ(cpu.reason, "needs 500 CPU on one node; the largest node has 128");

  // Fits the biggest node's CPU or its GPUs, but no node has both.
  PlacementResult both = e.Place(Pod("both", GpuAsk::Whole(8), 130'000));
  EXPECT_EQ(both.outcome, Outcome::kNeverFits);
  EXPECT_EQ(e.placed_count(), 0u);
}

TEST(Engine, NoFitNowCountsNodesByReason) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  ASSERT_TRUE(e.Place(Pod("w", GpuAsk::Whole(7))).placed());
  PlacementResult r = e.Place(Pod("x", GpuAsk::Whole(2), 100'000));
  EXPECT_EQ(r.outcome, Outcome::kNoFitNow);
  EXPECT_EQ(r.reason,
            "0/2 nodes can take it now: 1 too little CPU free (needs 100), 1 too few free GPUs "
            "(needs 2, at most 1 free on one node)");
}

TEST(Engine, TestOnlyModeChangesNothing) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("binpack"));
  PlacementResult r = e.Place(Pod("p", GpuAsk::Whole(2)), Mode::kTestOnly);
  EXPECT_TRUE(r.placed());
  EXPECT_EQ(e.state().gpus_in_use(), 0);
  EXPECT_EQ(e.Find("p"), nullptr);
}

TEST(Engine, ApplyModeDecidesAsCommitAndKeepsNoLedgerEntry) {
  Cluster c = RealityCheckCluster();
  for (const char* policy : {"tessera", "binpack", "whole-gpu"}) {
    Engine committed(c, MakePolicy(policy)), applied(c, MakePolicy(policy));
    std::vector<Placement> taken;
    for (int i = 0; i < 6; ++i) {
      const PodRequest p = Pod(StrCat("p", i), i % 2 ? GpuAsk::Whole(1) : GpuAsk::Share(8192, 0));
      PlacementResult a = committed.DecideOne(Ask::Pod(p));
      PlacementResult b = applied.DecideOne(Ask::Pod(p).As(Mode::kApply));
      ASSERT_TRUE(a.placed() && b.placed()) << policy;
      EXPECT_EQ(a.placement.node, b.placement.node) << policy;
      EXPECT_EQ(a.placement.gpus, b.placement.gpus) << policy;
      EXPECT_EQ(applied.Find(p.name), nullptr) << policy;  // no ledger entry
      taken.push_back(b.placement);
    }
    EXPECT_EQ(applied.state().gpus_in_use(), committed.state().gpus_in_use()) << policy;
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) applied.Unapply(*it);
    EXPECT_EQ(applied.state().gpus_in_use(), 0) << policy;
  }
}

std::vector<PodRequest> Gang(const std::string& name, int n, GpuAsk ask, std::string level,
                             bool required) {
  std::vector<PodRequest> members;
  for (int i = 0; i < n; ++i) {
    PodRequest p = Pod(name + "-" + std::to_string(i), ask);
    p.gang = GangAsk{name, n, level, required};
    members.push_back(p);
  }
  return members;
}

TEST(Engine, GangLandsInsideOneNvlinkDomain) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  auto results = e.PlaceGang(Gang("train", 8, GpuAsk::Whole(1), "nvlink-domain", true));
  for (const PlacementResult& r : results) {
    ASSERT_TRUE(r.placed()) << r.reason;
    EXPECT_EQ(c.node(r.placement.node).name, "nvswitch-0");
  }
  e.state().CheckInvariants();
}

TEST(Engine, FailedGangRollsBackExactly) {
  Cluster c = RealityCheckCluster();
  for (const char* policy : {"tessera", "binpack", "spread"}) {
    Engine e(c, MakePolicy(policy));
    ASSERT_TRUE(e.Place(Pod("a", GpuAsk::Whole(1))).placed());
    ASSERT_TRUE(e.Place(Pod("b", GpuAsk::Share(10'000, 300))).placed());
    // Snapshot what is free.
    std::vector<GpuState> before;
    for (int n = 0; n < c.node_count(); ++n) {
      for (const GpuState& g : e.state().gpus(NodeId(n))) before.push_back(g);
    }
    int64_t cpu_before = e.state().allocated_cpu_milli();
    // 9 GPUs are free in total, but the gang needs 10 whole GPUs: the last member fails.
    auto results = e.PlaceGang(Gang("g", 10, GpuAsk::Whole(1), "", false));
    for (const PlacementResult& r : results) {
      EXPECT_EQ(r.outcome, Outcome::kNoFitNow) << policy;
      EXPECT_THAT(r.reason, HasSubstr("gang g: member g-"));
    }
    std::vector<GpuState> after;
    for (int n = 0; n < c.node_count(); ++n) {
      for (const GpuState& g : e.state().gpus(NodeId(n))) after.push_back(g);
    }
    ASSERT_EQ(before.size(), after.size());
    for (size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(before[i].free_memory_mib, after[i].free_memory_mib);
      EXPECT_EQ(before[i].free_compute_milli, after[i].free_compute_milli);
      EXPECT_EQ(before[i].grants, after[i].grants);
    }
    EXPECT_EQ(cpu_before, e.state().allocated_cpu_milli());
    EXPECT_EQ(e.placed_count(), 2u);
    e.state().CheckInvariants();
    // And the policy's indexes were restored too: later requests go exactly where they go on
    // an engine that never saw the gang.
    Engine fresh(c, MakePolicy(policy));
    ASSERT_TRUE(fresh.Place(Pod("a", GpuAsk::Whole(1))).placed());
    ASSERT_TRUE(fresh.Place(Pod("b", GpuAsk::Share(10'000, 300))).placed());
    for (const PodRequest& probe : {Pod("c", GpuAsk::Whole(2)), Pod("d", GpuAsk::Share(1000, 0)),
                                    Pod("e", GpuAsk::Whole(4)), Pod("f", GpuAsk::None())}) {
      PlacementResult x = e.Place(probe);
      PlacementResult y = fresh.Place(probe);
      ASSERT_EQ(x.outcome, y.outcome) << policy << " " << probe.name;
      EXPECT_EQ(x.placement.node, y.placement.node) << policy << " " << probe.name;
      EXPECT_EQ(x.placement.gpus, y.placement.gpus) << policy << " " << probe.name;
    }
  }
}

// Everything a what-if could leave behind: free amounts, grants, MIG instances and the ledger.
struct StateSnapshot {
  std::vector<GpuState> gpus;
  std::vector<std::vector<std::pair<MigPlacement, bool>>> mig;
  int64_t cpu = 0, memory = 0;
  size_t placed = 0;

  static StateSnapshot Of(const Engine& e) {
    StateSnapshot s;
    const ClusterState& st = e.state();
    for (int n = 0; n < st.node_count(); ++n) {
      s.cpu += st.free_cpu_milli(NodeId(n));
      s.memory += st.free_memory_mib(NodeId(n));
      for (int g = 0; g < static_cast<int>(st.gpus(NodeId(n)).size()); ++g) {
        s.gpus.push_back(st.gpu(NodeId(n), g));
        std::vector<std::pair<MigPlacement, bool>> instances;
        for (const MigGpuState::Instance& i : st.mig(NodeId(n), g).instances) {
          instances.emplace_back(i.placement, i.assigned);
        }
        s.mig.push_back(std::move(instances));
      }
    }
    s.placed = e.placed_count();
    return s;
  }
  void ExpectEq(const StateSnapshot& o, const std::string& what) const {
    ASSERT_EQ(gpus.size(), o.gpus.size()) << what;
    for (size_t i = 0; i < gpus.size(); ++i) {
      EXPECT_EQ(gpus[i].free_memory_mib, o.gpus[i].free_memory_mib) << what << " GPU " << i;
      EXPECT_EQ(gpus[i].free_compute_milli, o.gpus[i].free_compute_milli) << what << " GPU " << i;
      EXPECT_EQ(gpus[i].grants, o.gpus[i].grants) << what << " GPU " << i;
      EXPECT_EQ(gpus[i].exclusive, o.gpus[i].exclusive) << what << " GPU " << i;
      EXPECT_EQ(mig[i], o.mig[i]) << what << " MIG instances of GPU " << i;
    }
    EXPECT_EQ(cpu, o.cpu) << what;
    EXPECT_EQ(memory, o.memory) << what;
    EXPECT_EQ(placed, o.placed) << what;
  }
};

// PlaceGang in test-only mode (a what-if for preemption and defragmentation) reverts exactly, for
// policies that place a gang together and for those that place its members one by one, and also
// when the members create MIG instances or destroy idle ones to make room.
TEST(Engine, GangWhatIfRevertsExactlyEvenMigInstances) {
  // A MIG GPU with one idle 3g.40gb at slice 4 and nothing else configured, and a plain node.
  Cluster c = ClusterBuilder()
                  .Node("mig")
                  .Gpus(2, "A100-80GB")
                  .Mig({{"3g.40gb", 4}})
                  .Node("plain")
                  .Gpus(2, "A100-80GB")
                  .Build();
  for (std::string_view policy : PolicyNames()) {
    Engine e(c, MakePolicy(policy));
    ASSERT_TRUE(e.Place(Pod("cpu", GpuAsk::None())).placed()) << policy;
    const StateSnapshot before = StateSnapshot::Of(e);
    // Members that create 1g.10gb instances in unconfigured slices and (the 4g.40gb) destroy the
    // idle 3g.40gb in its way, plus a whole GPU.
    std::vector<PodRequest> members = Gang("w", 4, GpuAsk::Mig("1g.10gb"), "", false);
    members[1].gpu = GpuAsk::Mig("4g.40gb");
    members[2].gpu = GpuAsk::Mig("4g.40gb");
    members[3].gpu = GpuAsk::Whole(1);
    std::vector<PlacementResult> results = e.PlaceGang(members, Mode::kTestOnly);
    ASSERT_EQ(results.size(), members.size());
    bool created = false;
    for (const PlacementResult& r : results) {
      if (r.placed() && r.placement.mig_plan.create) created = true;
    }
    EXPECT_TRUE(created || !results[0].placed()) << policy << ": the what-if creates instances";
    before.ExpectEq(StateSnapshot::Of(e), std::string(policy));
    e.state().CheckInvariants();
    // The same what-if again gives the same answer: nothing it did before is in its way.
    std::vector<PlacementResult> again = e.PlaceGang(members, Mode::kTestOnly);
    for (size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(again[i].outcome, results[i].outcome) << policy;
      EXPECT_EQ(again[i].placement.gpus, results[i].placement.gpus) << policy;
    }
    before.ExpectEq(StateSnapshot::Of(e), std::string(policy) + " (twice)");
  }
}

TEST(Engine, GangRequiredDomainTooSmallNeverFits) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  auto results = e.PlaceGang(Gang("big", 9, GpuAsk::Whole(1), "nvlink-domain", true));
  EXPECT_EQ(results[0].outcome, Outcome::kNeverFits);
  EXPECT_EQ(results[0].reason, "gang big needs 9 GPUs inside one nvlink-domain; the largest has 8");
}

TEST(Engine, GangRequiredDomainBusyDoesNotFitNow) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  ASSERT_TRUE(e.Place(Pod("w", GpuAsk::Whole(1))).placed());   // best fit: lands on pcie-0
  ASSERT_TRUE(e.Place(Pod("w2", GpuAsk::Whole(2))).placed());  // only nvswitch-0 has 2 free
  auto results = e.PlaceGang(Gang("t", 8, GpuAsk::Whole(1), "nvlink-domain", true));
  EXPECT_EQ(results[0].outcome, Outcome::kNoFitNow);
  EXPECT_THAT(results[0].reason, HasSubstr("no nvlink-domain has room for all 8 members now"));
  // Preferred falls back to anywhere: 7 GPUs are free in all.
  auto pref = e.PlaceGang(Gang("p", 7, GpuAsk::Whole(1), "nvlink-domain", false));
  EXPECT_TRUE(pref[0].placed()) << pref[0].reason;
}

TEST(Engine, GangUnknownLevelIsAnError) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  auto results = e.PlaceGang(Gang("g", 2, GpuAsk::Whole(1), "galaxy", true));
  EXPECT_EQ(results[0].outcome, Outcome::kNeverFits);
  EXPECT_THAT(results[0].reason, HasSubstr("unknown topology level \"galaxy\""));
}

TEST(Engine, GangPicksTheBestFittingRack) {
  Cluster c = ClusterBuilder()
                  .Node("r1-a")
                  .Gpus(8, "A100-80GB")
                  .NvSwitch()
                  .Label("tessera.dev/rack", "r1")
                  .Node("r1-b")
                  .Gpus(8, "A100-80GB")
                  .NvSwitch()
                  .Label("tessera.dev/rack", "r1")
                  .Node("r2-a")
                  .Gpus(8, "A100-80GB")
                  .NvSwitch()
                  .Label("tessera.dev/rack", "r2")
                  .Build();
  Engine e(c, MakePolicy("tessera"));
  // 12 GPUs in one rack: only r1 has 16; r2 has 8.
  auto results = e.PlaceGang(Gang("g", 12, GpuAsk::Whole(1), "rack", true));
  for (const PlacementResult& r : results) {
    ASSERT_TRUE(r.placed()) << r.reason;
    EXPECT_EQ(c.node(r.placement.node).labels.at("tessera.dev/rack"), "r1");
  }
  // 4 more in one rack: r1 has 4 left, r2 has 8: best fit takes r1, leaving r2 whole.
  auto more = e.PlaceGang(Gang("h", 4, GpuAsk::Whole(1), "rack", true));
  for (const PlacementResult& r : more) {
    ASSERT_TRUE(r.placed()) << r.reason;
    EXPECT_EQ(c.node(r.placement.node).labels.at("tessera.dev/rack"), "r1");
  }
}

// What a scheduler's node selectors and taints leave: a pod, and a gang with each of its topology
// domains, only use the allowed nodes.
TEST(Engine, AllowedNodesRestrictPodsAndGangs) {
  Cluster c = TwoNvSwitchServers();
  Engine e(c, MakePolicy("tessera"));
  std::vector<Candidate> only_b = {Candidate{c.FindNode("b")}};
  PlacementResult r = e.Place(Pod("p", GpuAsk::Whole(1)), Mode::kCommit, &only_b);
  ASSERT_TRUE(r.placed()) << r.reason;
  EXPECT_EQ(r.placement.node, c.FindNode("b"));

  std::vector<PodRequest> gang;
  for (int i = 0; i < 4; ++i) {
    PodRequest m = Pod("g" + std::to_string(i), GpuAsk::Whole(1));
    m.gang = GangAsk{"g", 4, "nvlink-domain", true};
    gang.push_back(m);
  }
  std::vector<PlacementResult> g = e.PlaceGang(gang, Mode::kCommit, &only_b);
  ASSERT_TRUE(g[0].placed()) << g[0].reason;
  for (const PlacementResult& m : g) EXPECT_EQ(m.placement.node, c.FindNode("b"));
  // b has 3 GPUs left: a gang of 4 allowed only there does not fit, though a has 8 free.
  for (PodRequest& m : gang) m.name += "-again";
  std::vector<PlacementResult> none = e.PlaceGang(gang, Mode::kCommit, &only_b);
  EXPECT_FALSE(none[0].placed());
  EXPECT_EQ(e.placed_count(), 5u);
  // Some GPUs of a node only.
  std::vector<Candidate> gpus_0_1 = {Candidate{c.FindNode("a"), 0b11}};
  PodRequest two = Pod("two", GpuAsk::Whole(2));
  PlacementResult t = e.Place(two, Mode::kCommit, &gpus_0_1);
  ASSERT_TRUE(t.placed()) << t.reason;
  EXPECT_EQ(t.placement.gpu_mask(), 0b11u);
  EXPECT_FALSE(e.Place(Pod("three", GpuAsk::Whole(1)), Mode::kCommit, &gpus_0_1).placed());
  e.state().CheckInvariants();
}

TEST(Engine, RestoreRebuildsTheLedger) {
  Cluster c = RealityCheckCluster();
  Engine first(c, MakePolicy("tessera"));
  PlacementResult r = first.Place(Pod("p", GpuAsk::Share(4096, 100)));
  ASSERT_TRUE(r.placed());
  Engine second(c, MakePolicy("tessera"));
  ASSERT_TRUE(second.Restore("p", r.placement).ok());
  EXPECT_EQ(second.Restore("p", r.placement).code(), absl::StatusCode::kAlreadyExists);
  Placement over = r.placement;
  over.gpus[0].memory_mib = 80000;
  EXPECT_EQ(second.Restore("q", over).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(second.state().allocated_gpu_memory_mib(), 4096);
}

// A NodeSet restricts a pod exactly as the same nodes given as candidates do, for every policy:
// the set keeps the policy's index in use, the candidates make it scan, and both must choose the
// same node and GPUs (the index answers what a full scan would).
TEST(Engine, NodeSetPlacesExactlyAsTheSameCandidates) {
  ClusterBuilder b;
  for (int i = 0; i < 40; ++i) {
    b.Node("n" + std::to_string(i)).Cpu(32 + 16 * (i % 3)).Gpus(i % 5 == 0 ? 2 : 8, "A100-80GB");
  }
  const Cluster c = b.Build();
  std::vector<bool> allows(c.node_count());
  std::vector<Candidate> candidates;
  for (int i = 0; i < c.node_count(); ++i) {
    allows[i] = i % 7 != 3 && i != 0;  // the first node (say, the tainted control plane) and 5 more
    if (allows[i]) candidates.push_back(Candidate{NodeId(i)});
  }
  const NodeSet set(allows);
  EXPECT_EQ(set.size(), static_cast<int>(candidates.size()));
  for (const std::string& name : PolicyNames()) {
    SCOPED_TRACE(name);
    Engine with_set(c, MakePolicy(name));
    Engine with_candidates(c, MakePolicy(name));
    Random rng(5);
    std::vector<std::string> live;
    for (int i = 0; i < 600; ++i) {
      if (!live.empty() && rng.Uniform(3) == 0) {
        const size_t k = rng.Uniform(live.size());
        ASSERT_TRUE(with_set.Release(live[k]).ok());
        ASSERT_TRUE(with_candidates.Release(live[k]).ok());
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
      const int kind = static_cast<int>(rng.Uniform(3));
      const GpuAsk ask = kind == 0   ? GpuAsk::Share(1024 * (1 + rng.Uniform(40)), 0)
                         : kind == 1 ? GpuAsk::Whole(1 << rng.Uniform(4))
                                     : GpuAsk::None();
      const PodRequest pod = Pod("p" + std::to_string(i), ask, 1000 * (1 + rng.Uniform(8)));
      // Pods without restriction in between, as in a real cluster.
      const bool restricted = rng.Uniform(4) != 0;
      PlacementResult a = with_set.Place(pod, Mode::kCommit, nullptr, restricted ? &set : nullptr);
      PlacementResult r =
          with_candidates.Place(pod, Mode::kCommit, restricted ? &candidates : nullptr);
      ASSERT_EQ(a.placed(), r.placed()) << "pod " << i << ": " << a.reason << " / " << r.reason;
      if (!a.placed()) continue;
      ASSERT_EQ(a.placement.node, r.placement.node) << "pod " << i;
      ASSERT_EQ(a.placement.gpu_mask(), r.placement.gpu_mask()) << "pod " << i;
      if (restricted) {
        EXPECT_TRUE(set.Contains(a.placement.node)) << "pod " << i;
      }
      live.push_back(pod.name);
    }
  }
}

TEST(Engine, NodeSetExcludedNodesAreCountedInTheReason) {
  Cluster c =
      ClusterBuilder().Node("a").Gpus(8, "A100-80GB").Node("b").Gpus(2, "A100-80GB").Build();
  Engine e(c, MakePolicy("tessera"));
  const NodeSet only_b({false, true});
  PlacementResult r = e.Place(Pod("four", GpuAsk::Whole(4)), Mode::kCommit, nullptr, &only_b);
  EXPECT_EQ(r.outcome, Outcome::kNoFitNow);
  EXPECT_THAT(r.reason, HasSubstr("0/2 nodes can take it now"));
  EXPECT_THAT(r.reason,
              HasSubstr("1 excluded by the pod's tolerations, nodeSelector or node affinity"));
  EXPECT_THAT(r.reason, HasSubstr("1 too few free GPUs"));
  EXPECT_TRUE(e.Place(Pod("two", GpuAsk::Whole(2)), Mode::kCommit, nullptr, &only_b).placed());
  EXPECT_EQ(e.Find("two")->node, c.FindNode("b"));
  // Two sets with the same nodes are still two sets (each its own id).
  EXPECT_NE(NodeSet({false, true}).id(), only_b.id());
}

// A set changed after the engine used it is another set: the decision follows the change (the
// policies' caches are keyed by the set's id; a scheduler narrows one set as it steers a pod).
TEST(Engine, ANodeSetChangedAfterUseIsDecidedAnew) {
  Cluster c =
      ClusterBuilder().Node("a").Gpus(4, "A100-80GB").Node("b").Gpus(4, "A100-80GB").Build();
  Engine e(c, MakePolicy("tessera"));
  NodeSet set({false, true});
  const uint64_t before = set.id();
  EXPECT_EQ(e.Place(Pod("one", GpuAsk::Whole(1)), Mode::kTestOnly, nullptr, &set).placement.node,
            c.FindNode("b"));
  set.Set(c.FindNode("b"), false);
  set.Set(c.FindNode("a"), true);
  EXPECT_NE(set.id(), before);
  PlacementResult r = e.Place(Pod("one", GpuAsk::Whole(1)), Mode::kTestOnly, nullptr, &set);
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(r.placement.node, c.FindNode("a"));
  set.Set(c.FindNode("a"), false);
  EXPECT_FALSE(e.Place(Pod("one", GpuAsk::Whole(1)), Mode::kTestOnly, nullptr, &set).placed());
}

// Uniform in [lo, hi).
int Pick(Random& rnd, int lo, int hi) { return lo + static_cast<int>(rnd.Uniform(hi - lo)); }

// A cluster of GPU nodes of different shapes, racks and NVLink domains, for the node-change and
// gang-index tests.
Cluster MixedCluster(int nodes) {
  ClusterBuilder b;
  for (int i = 0; i < nodes; ++i) {
    b.Node(StrCat("n", i)).Label("tessera.dev/rack", StrCat("r", i % 5));
    if (i % 3 == 0) {
      b.Gpus(8, "A100-80GB").NvSwitch();
    } else if (i % 3 == 1) {
      b.Gpus(4, "A100-80GB");
    } else {
      b.Gpus(2, "H100-80GB").NvSwitch(18);
    }
  }
  return b.Build();
}

// A fixed list of probe requests.
std::vector<PodRequest> Probes(int salt) {
  std::vector<PodRequest> out;
  Random rnd(static_cast<uint64_t>(salt));
  for (int i = 0; i < 40; ++i) {
    out.push_back(Pod(StrCat("probe-", salt, "-", i),
                      Pick(rnd, 0, 2) == 0 ? GpuAsk::Whole(Pick(rnd, 1, 3))
                                           : GpuAsk::Share(Pick(rnd, 1, 40) * 1024, 0)));
  }
  return out;
}

// What an engine answers, pod by pod, for the probes (each committed).
std::vector<std::string> Answers(Engine& e, int salt) {
  std::vector<std::string> out;
  for (const PodRequest& p : Probes(salt)) {
    PlacementResult r = e.Place(p);
    std::string line = r.placed() ? e.cluster().node(r.placement.node).name : "-";
    for (const GpuGrant& g : r.placement.gpus) StrAppend(&line, "/", g.gpu);
    out.push_back(line);
  }
  return out;
}

// Nodes added, re-labelled, resized and removed in place leave the engine exactly where an engine
// built with the final nodes and the same pods would be: the pods on untouched nodes stay, the
// policy keeps what it learned (the tessera policy's request mix: its answers match an engine
// that saw the same requests), and every later answer is the same.
TEST(Engine, NodeChangesInPlaceMatchAnEngineBuiltWithTheNewNodes) {
  for (std::string_view policy : {"tessera", "binpack", "spread", "whole-gpu"}) {
    Cluster c = MixedCluster(12);
    Engine e(c, MakePolicy(policy));
    Answers(e, 1);  // pods on the first nodes
    NodeChanges changes;
    NodeSpec added = MixedCluster(13).node(NodeId(12));
    changes.add.push_back(added);
    NodeSpec relabelled = c.node(NodeId(4));
    relabelled.labels["team"] = "vision";  // no topology level reads it
    changes.update.emplace_back(NodeId(4), relabelled);
    NodeSpec resized = c.node(NodeId(7));
    resized.cpu_milli += 8000;
    changes.update.emplace_back(NodeId(7), resized);
    changes.remove.push_back(NodeId(10));
    std::vector<NodeId> ids;
    std::vector<std::string> released;
    ASSERT_TRUE(e.ChangeNodes(changes, &ids, &released).ok()) << policy;
    ASSERT_EQ(ids, std::vector<NodeId>{NodeId(12)});
    for (const std::string& pod : released) {
      EXPECT_EQ(e.Find(pod), nullptr) << pod;
    }
    EXPECT_FALSE(e.cluster().live(NodeId(10)));
    EXPECT_FALSE(e.cluster().FindNode("n10").valid());
    EXPECT_EQ(e.cluster().FindNode("n12"), NodeId(12));
    e.state().CheckInvariants();

    // The same nodes built from scratch (node 10 a removed slot), a policy that saw the same
    // requests (test-only placements teach it without placing), and what e holds restored.
    std::vector<NodeSpec> specs = c.nodes().ToVector();
    specs[4] = relabelled;
    specs[7] = resized;
    specs.push_back(added);
    Cluster fresh_cluster = *Cluster::Create(specs);
    Engine fresh(fresh_cluster, MakePolicy(policy));
    ASSERT_TRUE(fresh.ChangeNodes(NodeChanges{{NodeId(10)}, {}, {}, {}}).ok());
    for (const PodRequest& p : Probes(1)) (void)fresh.Place(p, Mode::kTestOnly);
    for (int i = 0; i < 40; ++i) {
      const std::string name = StrCat("probe-1-", i);
      if (const Placement* held = e.Find(name)) {
        ASSERT_TRUE(fresh.Restore(name, *held).ok()) << policy << " " << name;
      }
    }
    EXPECT_EQ(Answers(e, 2), Answers(fresh, 2)) << policy;
  }
}

// The domains of every level, as text: names, nodes and GPUs, in order.
std::string DomainsText(const Engine& e) {
  std::string out;
  for (size_t l = 0; l < e.domains().levels().size(); ++l) {
    for (const Domain& d : e.domains().domains(static_cast<int>(l))) {
      StrAppend(&out, l, ":", d.name, "(", d.gpu_count, ")");
      for (const Candidate& c : d.candidates) StrAppend(&out, " ", c.node.value(), "/", c.gpu_mask);
      out += ";";
    }
  }
  return out;
}

// Nodes only added join the domains and the policy's order in place (Engine::AppendNodes,
// Policy::OnNodesAdded): the engine is then as one that rebuilt them (a change that also cordons,
// here a cordon left as it is, takes the rebuild), whatever the new node's labels: a rack that
// exists, a new rack sorting last (appended) or first (rebuilt), a rack-scale NVLink domain (the
// tessera policy re-derives its order), a GPU model the cluster lacks, none. Every later answer,
// pods and gangs, is the same.
TEST(Engine, NodesOnlyAddedJoinInPlaceAsARebuildWould) {
  std::vector<NodeSpec> adds;
  auto node = [&](std::string name, int gpus, std::string model, std::string rack) {
    ClusterBuilder b;
    b.Node(std::move(name)).Gpus(gpus, std::move(model)).NvSwitch();
    if (!rack.empty()) b.Label("tessera.dev/rack", std::move(rack));
    adds.push_back(b.Build().nodes()[0]);
  };
  node("x0", 8, "A100-80GB", "r2");
  node("x1", 8, "H100-80GB", "r9");
  node("x2", 4, "A100-80GB", "r9");
  node("x3", 8, "H100-80GB", "");
  node("x4", 2, "L4", "a");
  node("x5", 8, "H100-80GB", "r0");
  NodeSpec nvl = adds[3];
  nvl.name = "x6";
  nvl.labels["tessera.dev/nvlink-domain"] = "nvl-a";
  adds.push_back(nvl);
  nvl.name = "x7";
  adds.push_back(nvl);
  for (std::string_view policy : {"tessera", "binpack", "spread"}) {
    Cluster c = MixedCluster(12);
    Engine in_place(c, MakePolicy(policy));
    Engine rebuilt(c, MakePolicy(policy));
    ASSERT_EQ(Answers(in_place, 1), Answers(rebuilt, 1));
    for (size_t i = 0; i < adds.size(); ++i) {
      SCOPED_TRACE(StrCat(policy, " after ", adds[i].name));
      ASSERT_TRUE(in_place.ChangeNodes(NodeChanges{{}, {}, {adds[i]}, {}}).ok());
      const NodeId first(0);
      ASSERT_TRUE(rebuilt
                      .ChangeNodes(NodeChanges{
                          {}, {}, {adds[i]}, {{first, !rebuilt.state().accepts_pods(first)}}})
                      .ok());
      EXPECT_EQ(DomainsText(in_place), DomainsText(rebuilt));
      in_place.state().CheckInvariants();
      // A few pods each time, committed, and rack and NVLink gangs as what-ifs.
      std::vector<std::string> a, b;
      for (const PodRequest& p : Probes(static_cast<int>(10 + i))) {
        if (a.size() == 6) break;
        for (Engine* e : {&in_place, &rebuilt}) {
          PlacementResult r = e->Place(p);
          std::string line = r.placed() ? e->cluster().node(r.placement.node).name : r.reason;
          for (const GpuGrant& g : r.placement.gpus) StrAppend(&line, "/", g.gpu);
          (e == &in_place ? a : b).push_back(line);
        }
      }
      for (const std::string level : {"rack", "nvlink-domain"}) {
        for (int size : {2, 5, 9}) {
          std::vector<PodRequest> gang =
              Gang(StrCat("g", i, level, size), size, GpuAsk::Whole(1), level, size != 5);
          for (Engine* e : {&in_place, &rebuilt}) {
            std::vector<PlacementResult> r = e->PlaceGang(gang, Mode::kTestOnly);
            std::string line = r[0].placed() ? "" : r[0].reason;
            for (const PlacementResult& m : r) StrAppend(&line, " ", m.placement.node.value());
            (e == &in_place ? a : b).push_back(line);
          }
        }
      }
      EXPECT_EQ(a, b);
    }
  }
}

// A copy of an engine under a new policy answers as an engine built afresh with the same pods
// restored and the same node cordoned; what it places is its own.
TEST(Engine, ACopyUnderANewPolicyIsAsBuiltAfresh) {
  for (std::string_view policy : {"tessera", "binpack", "spread", "fgd"}) {
    SCOPED_TRACE(policy);
    Cluster c = MixedCluster(12);
    Engine base(c, MakePolicy(policy));
    Answers(base, 1);
    ASSERT_TRUE(base.ChangeNodes(NodeChanges{{}, {}, {}, {{NodeId(3), true}}}).ok());
    Engine copy(base, MakePolicy(policy));
    Engine fresh(c, MakePolicy(policy));
    for (int i = 0; i < 40; ++i) {
      const std::string name = StrCat("probe-1-", i);
      if (const Placement* held = base.Find(name)) ASSERT_TRUE(fresh.Restore(name, *held).ok());
    }
    ASSERT_TRUE(fresh.ChangeNodes(NodeChanges{{}, {}, {}, {{NodeId(3), true}}}).ok());
    const size_t held = base.placed_count();
    EXPECT_EQ(copy.placed_count(), held);
    EXPECT_EQ(Answers(copy, 2), Answers(fresh, 2));
    EXPECT_EQ(base.placed_count(), held);  // the copy's pods are its own
    copy.state().CheckInvariants();
    base.state().CheckInvariants();
  }
}

// The same after the base's nodes changed in place (added at the end, joined in place by the
// policy's OnNodesAdded; then a rack-scale NVLink pair, which re-derives the order): a copy takes
// its base's node order (Policy::AttachCopy) and must answer as an engine built afresh on the same
// nodes.
TEST(Engine, ACopyOfAnEngineWhoseNodesChangedIsAsBuiltAfresh) {
  auto node = [](std::string name, int gpus, std::string model, std::string domain) {
    ClusterBuilder b;
    b.Node(std::move(name)).Gpus(gpus, std::move(model)).NvSwitch();
    if (!domain.empty()) b.Label("tessera.dev/nvlink-domain", std::move(domain));
    return b.Build().nodes()[0];
  };
  for (std::string_view policy : {"tessera", "binpack"}) {
    SCOPED_TRACE(policy);
    Engine base(MixedCluster(12), MakePolicy(policy));
    Answers(base, 1);
    ASSERT_TRUE(base.ChangeNodes(NodeChanges{{}, {}, {node("x0", 8, "H100-80GB", "")}, {}}).ok());
    ASSERT_TRUE(base.ChangeNodes(NodeChanges{{}, {}, {node("x1", 2, "L4", "")}, {}}).ok());
    for (int round = 0; round < 2; ++round) {
      Engine copy(base, MakePolicy(policy));
      Engine fresh(base.cluster(), MakePolicy(policy));
      for (int i = 0; i < 40; ++i) {
        const std::string name = StrCat("probe-1-", i);
        if (const Placement* held = base.Find(name)) ASSERT_TRUE(fresh.Restore(name, *held).ok());
      }
      EXPECT_EQ(copy.placed_count(), base.placed_count());
      EXPECT_EQ(Answers(copy, 2 + round), Answers(fresh, 2 + round)) << "round " << round;
      copy.state().CheckInvariants();
      // Then two nodes of one rack-scale NVLink domain: the order is derived again.
      ASSERT_TRUE(
          base.ChangeNodes(NodeChanges{{},
                                       {},
                                       {node(StrCat("nvl-", round, "-0"), 4, "GB200", "nvl"),
                                        node(StrCat("nvl-", round, "-1"), 4, "GB200", "nvl")},
                                       {}})
              .ok());
    }
  }
}

// A cordoned node takes no new pods (the reason says so) and keeps its own; uncordoned, it is used.
TEST(Engine, CordonedNodesKeepTheirPodsAndTakeNoNewOnes) {
  Cluster c = RealityCheckCluster();
  Engine e(c, MakePolicy("tessera"));
  ASSERT_TRUE(e.Place(Pod("p", GpuAsk::Whole(2))).placed());
  const NodeId nv = c.FindNode("nvswitch-0");
  ASSERT_TRUE(e.ChangeNodes(NodeChanges{{}, {}, {}, {{nv, true}}}).ok());
  EXPECT_NE(e.Find("p"), nullptr);
  PlacementResult r = e.Place(Pod("big", GpuAsk::Whole(4)));
  EXPECT_EQ(r.outcome, Outcome::kNoFitNow);  // not never: uncordoning makes room
  EXPECT_THAT(r.reason, HasSubstr("1 cordoned"));
  ASSERT_TRUE(e.ChangeNodes(NodeChanges{{}, {}, {}, {{nv, false}}}).ok());
  EXPECT_TRUE(e.Place(Pod("big", GpuAsk::Whole(4))).placed());
}

// One round of a random workload: six pods placed (whole GPUs or shares), some of the previous
// round's released.
void FillSomeFreeSome(Engine& e, Random& rnd, int round) {
  for (int k = 0; k < 6; ++k) {
    PodRequest p =
        Pod(StrCat("f", round, "-", k),
            Pick(rnd, 0, 2) ? GpuAsk::Whole(Pick(rnd, 1, 4))
                            : GpuAsk::Share(Pick(rnd, 1, 60) * 1024, Pick(rnd, 0, 5) * 100));
    e.Place(p);
    if (Pick(rnd, 0, 3) == 0) (void)e.Release(StrCat("f", round - 1, "-", k));
  }
}

// A gang of 2-8 members asking alike (whole GPUs or shares), in one rack or NVLink domain,
// required or preferred.
std::vector<PodRequest> RandomGang(Random& rnd, int round) {
  const std::string level = Pick(rnd, 0, 2) ? "rack" : "nvlink-domain";
  const bool required = Pick(rnd, 0, 3) != 0;
  GpuAsk ask = Pick(rnd, 0, 2) ? GpuAsk::Whole(Pick(rnd, 1, 3))
                               : GpuAsk::Share(Pick(rnd, 1, 40) * 1024, 250);
  return Gang(StrCat("g", round), Pick(rnd, 2, 9), ask, level, required);
}

// The gang domain index finds exactly the domain the full scan finds (the best fit: least free
// compute left, ties to the first domain), on many random states and gang shapes.
TEST(Engine, GangDomainIndexChoosesAsTheFullScan) {
  Cluster c = MixedCluster(30);
  for (std::string_view policy : {"tessera", "binpack", "spread"}) {
    Engine e(c, MakePolicy(policy));
    Random rnd(7);
    std::vector<Candidate> everywhere;
    for (int n = 0; n < c.node_count(); ++n) everywhere.push_back(Candidate{NodeId(n)});
    for (int round = 0; round < 60; ++round) {
      FillSomeFreeSome(e, rnd, round);
      const std::vector<PodRequest> gang = RandomGang(rnd, round);
      std::vector<PlacementResult> indexed = e.PlaceGang(gang, Mode::kTestOnly);
      std::vector<PlacementResult> scanned = e.PlaceGang(gang, Mode::kTestOnly, &everywhere);
      ASSERT_EQ(indexed[0].outcome, scanned[0].outcome) << policy << " round " << round;
      for (size_t i = 0; i < gang.size(); ++i) {
        EXPECT_EQ(indexed[i].placement.node, scanned[i].placement.node)
            << policy << " round " << round << " member " << i;
        EXPECT_EQ(indexed[i].placement.gpus, scanned[i].placement.gpus)
            << policy << " round " << round << " member " << i;
      }
    }
    e.state().CheckInvariants();
  }
}

// A gang restricted by a NodeSet counts each domain's room over its nodes in the set: rack r1
// has 16 GPUs free but only 8 in the set, r2 has 12 free, all in the set. Without the set, r2 is
// the best fit for 8 GPUs (4 left against 8); with it, r1 is (none left).
TEST(Engine, GangWithANodeSetCountsEachDomainsRoomInsideTheSet) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Gpus(8, "A100-80GB")
                  .Label("tessera.dev/rack", "r1")
                  .Node("b")
                  .Gpus(8, "A100-80GB")
                  .Label("tessera.dev/rack", "r1")
                  .Node("c")
                  .Gpus(8, "A100-80GB")
                  .Label("tessera.dev/rack", "r2")
                  .Node("d")
                  .Gpus(8, "A100-80GB")
                  .Label("tessera.dev/rack", "r2")
                  .Build();
  Engine e(c, MakePolicy("tessera"));
  std::vector<bool> on_d(4, false);
  on_d[c.FindNode("d").value()] = true;
  const NodeSet only_d(on_d);
  ASSERT_TRUE(e.Place(Pod("busy", GpuAsk::Whole(4)), Mode::kCommit, nullptr, &only_d).placed());
  const NodeSet not_b({true, false, true, true});
  const std::vector<PodRequest> gang = Gang("g", 8, GpuAsk::Whole(1), "rack", true);
  for (const PlacementResult& r : e.PlaceGang(gang, Mode::kTestOnly)) {
    ASSERT_TRUE(r.placed()) << r.reason;
    EXPECT_EQ(c.node(r.placement.node).labels.at("tessera.dev/rack"), "r2");
  }
  for (const PlacementResult& r : e.PlaceGang(gang, Mode::kCommit, nullptr, &not_b)) {
    ASSERT_TRUE(r.placed()) << r.reason;
    EXPECT_EQ(r.placement.node, c.FindNode("a"));
  }
  // r1 has nothing left in the set and r2 12 GPUs of its 16: a gang of 13 does not fit now.
  std::vector<PlacementResult> none =
      e.PlaceGang(Gang("h", 13, GpuAsk::Whole(1), "rack", true), Mode::kCommit, nullptr, &not_b);
  EXPECT_EQ(none[0].outcome, Outcome::kNoFitNow);
  EXPECT_THAT(none[0].reason, HasSubstr("no rack has room for all 13 members now"));
  EXPECT_EQ(e.placed_count(), 9u);
  e.state().CheckInvariants();
}

// The domain index with a NodeSet finds a domain as good as the scan over the same nodes given
// as candidates (least room left inside the set; the two may break ties differently), places
// only on nodes in the set, and leaves the engine as it was in test-only mode, on many random
// states, gang shapes and sets.
TEST(Engine, GangDomainIndexWithANodeSetChoosesAsWellAsTheScan) {
  Cluster c = MixedCluster(30);
  for (std::string_view policy : {"tessera", "binpack", "spread"}) {
    Engine e(c, MakePolicy(policy));
    Random rnd(11);
    for (int round = 0; round < 80; ++round) {
      FillSomeFreeSome(e, rnd, round);
      // A set leaving out a tenth to a half of the nodes.
      std::vector<bool> allows(c.node_count());
      std::vector<Candidate> listed;
      const int out_of_ten = Pick(rnd, 1, 6);
      for (int n = 0; n < c.node_count(); ++n) {
        allows[n] = Pick(rnd, 0, 10) >= out_of_ten;
        if (allows[n]) listed.push_back(Candidate{NodeId(n)});
      }
      const NodeSet set(allows);
      const std::vector<PodRequest> gang = RandomGang(rnd, round);
      const std::string& level = gang[0].gang->level;
      const bool required = gang[0].gang->required;
      const std::string trace = StrCat(policy, " round ", round);
      const int64_t allocated_before = e.state().allocated_gpu_memory_mib();
      std::vector<PlacementResult> indexed = e.PlaceGang(gang, Mode::kTestOnly, nullptr, &set);
      std::vector<PlacementResult> scanned = e.PlaceGang(gang, Mode::kTestOnly, &listed);
      EXPECT_EQ(e.state().allocated_gpu_memory_mib(), allocated_before) << trace;
      ASSERT_EQ(indexed[0].outcome, scanned[0].outcome)
          << trace << ": " << indexed[0].reason << " / " << scanned[0].reason;
      if (!indexed[0].placed()) continue;
      // The room each choice left in its domain, inside the set: the same (best fit).
      auto room_left = [&](const std::vector<PlacementResult>& results) {
        const int l = e.domains().LevelIndex(level);
        const Placement& first = results[0].placement;
        for (const Domain& d : e.domains().domains(l)) {
          int64_t room = 0;
          bool holds = false;
          for (const Candidate& cand : d.candidates) {
            if (cand.node == first.node && (cand.gpu_mask & first.gpu_mask()) != 0) holds = true;
            if (!set.Contains(cand.node)) continue;
            std::span<const GpuState> gpus = e.state().gpus(cand.node);
            for (uint64_t m = cand.gpu_mask & c.node(cand.node).all_gpus_mask(); m; m &= m - 1) {
              if (!gpus[__builtin_ctzll(m)].exclusive)
                room += gpus[__builtin_ctzll(m)].free_compute_milli;
            }
          }
          if (holds) return room;
        }
        return int64_t{-1};
      };
      if (required) {
        EXPECT_EQ(room_left(indexed), room_left(scanned)) << trace;
      }
      for (const PlacementResult& r : indexed) EXPECT_TRUE(set.Contains(r.placement.node)) << trace;
    }
    e.state().CheckInvariants();
  }
}

// The what-if of preemption: the decision were some pods gone, with the engine left exactly as
// it was (MIG instances included), for every policy.
TEST(Engine, WhatIfDecidesAsIfPodsWereGoneAndChangesNothing) {
  Cluster c = ClusterBuilder()
                  .Node("mig")
                  .Gpus(1, "A100-80GB")
                  .Mig({{"3g.40gb", 4}})
                  .Node("plain")
                  .Gpus(2, "A100-80GB")
                  .Build();
  for (std::string_view policy : PolicyNames()) {
    Engine e(c, MakePolicy(policy));
    ASSERT_TRUE(e.Place(Pod("w", GpuAsk::Whole(1))).placed()) << policy;
    std::vector<std::string> shares;  // whole-gpu takes a GPU for the first and has none left
    for (int i = 0; i < 4; ++i) {
      if (e.Place(Pod(StrCat("s", i), GpuAsk::Share(20 * 1024, 0))).placed()) {
        shares.push_back(StrCat("s", i));
      }
    }
    ASSERT_FALSE(shares.empty()) << policy;
    const bool mig = e.Place(Pod("m", GpuAsk::Mig("4g.40gb"))).placed();
    const StateSnapshot before = StateSnapshot::Of(e);
    EXPECT_FALSE(e.Place(Pod("big", GpuAsk::Whole(2)), Mode::kTestOnly).placed()) << policy;
    // Without the shares a whole GPU is free again; without one of them two are not.
    const std::vector<std::string> s0 = {"s0"}, m = {"m"};
    PlacementResult one =
        e.DecideOne(Ask::Pod(Pod("one", GpuAsk::Whole(1))).Without(shares).TestOnly());
    EXPECT_TRUE(one.placed()) << policy;
    before.ExpectEq(StateSnapshot::Of(e), StrCat(policy, " after one"));
    EXPECT_FALSE(
        e.DecideOne(Ask::Pod(Pod("big", GpuAsk::Whole(2))).Without(s0).TestOnly()).placed())
        << policy;
    shares.push_back("w");
    shares.push_back("nobody");  // holds nothing: ignored
    PlacementResult two =
        e.DecideOne(Ask::Pod(Pod("big", GpuAsk::Whole(2))).Without(shares).TestOnly());
    EXPECT_TRUE(two.placed()) << policy;
    before.ExpectEq(StateSnapshot::Of(e), StrCat(policy, " after two"));
    if (mig) {
      EXPECT_TRUE(
          e.DecideOne(Ask::Pod(Pod("m2", GpuAsk::Mig("7g.80gb"))).Without(m).TestOnly()).placed())
          << policy;
    }
    std::vector<PodRequest> gang = Gang("g", 2, GpuAsk::Whole(1), "", false);
    EXPECT_TRUE(e.Decide(Ask::Gang(gang).Without(shares).TestOnly())[0].placed()) << policy;
    // An elastic gang's what-if (min 1 of 2): it starts with what fits, and leaves nothing.
    std::vector<PodRequest> elastic = Gang("el", 2, GpuAsk::Whole(1), "", false);
    for (PodRequest& x : elastic) x.gang->min = 1;
    EXPECT_TRUE(e.Decide(Ask::ElasticGang(elastic, {}).Without(shares).TestOnly())[0].placed())
        << policy;
    before.ExpectEq(StateSnapshot::Of(e), std::string(policy));
    e.state().CheckInvariants();
  }
}

}  // namespace
}  // namespace tessera::core
