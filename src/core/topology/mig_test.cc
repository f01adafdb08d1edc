// MIG: NVIDIA's profile tables and placement rules, the state's invariants, the fragmentation-
// aware choice, re-partitioning plans, and MIG through the engine and every policy.
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "common/random.h"
#include "common/strings.h"
#include "core/engine.h"
#include "core/testing/cluster_builder.h"
#include "core/topology/mig_select.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using ::testing::HasSubstr;
using testing::MakePolicy;
using testing::Pod;

// NVIDIA's tables, written out again from the MIG user guide and `nvidia-smi mig -lgip/-lgipp`
// output (independently of model/mig.cc): profile -> {allowed starts, memory MiB, slices}.
struct Published {
  std::set<int> starts;
  int64_t memory_mib;
  int size;
};
const std::map<std::string, std::map<std::string, Published>>& PublishedTables() {
  static const std::set<int> k1g = {0, 1, 2, 3, 4, 5, 6}, kEven = {0, 2, 4, 6}, k2g = {0, 2, 4},
                             k3g = {0, 4}, kZero = {0};
  static const std::map<std::string, std::map<std::string, Published>> kTables = {
      {"A100-40GB",
       {{"1g.5gb", {k1g, 4864, 1}},
        {"1g.5gb+me", {k1g, 4864, 1}},
        {"1g.10gb", {kEven, 9984, 2}},
        {"2g.10gb", {k2g, 9984, 2}},
        {"3g.20gb", {k3g, 20096, 4}},
        {"4g.20gb", {kZero, 20096, 4}},
        {"7g.40gb", {kZero, 40320, 8}}}},
      {"A100-80GB",
       {{"1g.10gb", {k1g, 9728, 1}},
        {"1g.10gb+me", {k1g, 9728, 1}},
        {"1g.20gb", {kEven, 19968, 2}},
        {"2g.20gb", {k2g, 19968, 2}},
        {"3g.40gb", {k3g, 40192, 4}},
        {"4g.40gb", {kZero, 40192, 4}},
        {"7g.80gb", {kZero, 80896, 8}}}},
      {"H100-80GB",
       {{"1g.10gb", {k1g, 9984, 1}},
        {"1g.10gb+me", {k1g, 9984, 1}},
        {"1g.20gb", {kEven, 20096, 2}},
        {"2g.20gb", {k2g, 20096, 2}},
        {"3g.40gb", {k3g, 40448, 4}},
        {"4g.40gb", {kZero, 40448, 4}},
        {"7g.80gb", {kZero, 81152, 8}}}},
      {"H200-141GB",
       {{"1g.18gb", {k1g, 16384, 1}},
        {"1g.18gb+me", {k1g, 16384, 1}},
        {"1g.35gb", {kEven, 33280, 2}},
        {"2g.35gb", {k2g, 33280, 2}},
        {"3g.71gb", {k3g, 71424, 4}},
        {"4g.71gb", {kZero, 71424, 4}},
        {"7g.141gb", {kZero, 143360, 8}}}},
  };
  return kTables;
}

TEST(Mig, TablesMatchWhatNvidiaPublishes) {
  for (const auto& [model_name, profiles] : PublishedTables()) {
    const MigModel* model = FindMigModel(model_name);
    ASSERT_NE(model, nullptr) << model_name;
    EXPECT_EQ(model->profiles.size(), profiles.size()) << model_name;
    for (const auto& [name, want] : profiles) {
      int p = model->Find(name);
      ASSERT_GE(p, 0) << model_name << " " << name;
      const MigProfile& got = model->profiles[p];
      EXPECT_EQ(got.memory_mib, want.memory_mib) << model_name << " " << name;
      EXPECT_EQ(got.size, want.size) << model_name << " " << name;
      for (int s = 0; s < kMigSlots; ++s) {
        EXPECT_EQ(got.may_start_at(s), want.starts.contains(s))
            << model_name << " " << name << "@" << s;
      }
    }
  }
  // nvidia-smi's product names find the same tables; other GPUs have none.
  EXPECT_EQ(FindMigModel("NVIDIA A100-SXM4-80GB")->model, "A100-80GB");
  EXPECT_EQ(FindMigModel("NVIDIA A100-SXM4-40GB")->model, "A100-40GB");
  EXPECT_EQ(FindMigModel("NVIDIA H100 80GB HBM3")->model, "H100-80GB");
  EXPECT_EQ(FindMigModel("NVIDIA H200")->model, "H200-141GB");
  EXPECT_EQ(FindMigModel("GH200 480GB"), nullptr);
  EXPECT_EQ(FindMigModel("L40S-48GB"), nullptr);
  EXPECT_EQ(FindMigModel("H100 NVL"), nullptr);
}

// What `nvidia-smi mig -lgip` and `nvidia-smi mig -lgipp` printed on a real H200 (driver
// 580.159.04, MIG mode disabled, captured on a lent machine on 2026-11-30), read back here line by
// line: the H200 table has exactly these profiles, ids, memory, SMs, instance counts and start
// slots.
constexpr std::string_view kH200Lgip =
    R"(+-------------------------------------------------------------------------------+
| GPU instance profiles:                                                        |
| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                                Free/Total   GiB              CE    JPEG  OFA  |
|===============================================================================|
|   0  MIG 1g.18gb         19     7/7        16.00      No     16     1     0   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.18gb+me      20     1/1        16.00      No     16     1     0   |
|                                                               1     1     1   |
+-------------------------------------------------------------------------------+
|   0  MIG 1g.35gb         15     4/4        32.50      No     26     1     0   |
|                                                               1     1     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 2g.35gb         14     3/3        32.50      No     32     2     0   |
|                                                               2     2     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 3g.71gb          9     2/2        69.75      No     60     3     0   |
|                                                               3     3     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 4g.71gb          5     1/1        69.75      No     64     4     0   |
|                                                               4     4     0   |
+-------------------------------------------------------------------------------+
|   0  MIG 7g.141gb         0     1/1        140.00     No     132    7     0   |
|                                                               8     7     1   |
+-------------------------------------------------------------------------------+
)";
constexpr std::string_view kH200Lgipp = R"(GPU  0 Profile ID 19 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 20 Placements: {0,1,2,3,4,5,6}:1
GPU  0 Profile ID 15 Placements: {0,2,4,6}:2
GPU  0 Profile ID 14 Placements: {0,2,4}:2
GPU  0 Profile ID  9 Placements: {0,4}:4
GPU  0 Profile ID  5 Placement : {0}:4
GPU  0 Profile ID  0 Placement : {0}:8
)";

TEST(Mig, H200TableMatchesWhatARealH200Prints) {
  const MigModel* model = FindMigModel("NVIDIA H200");
  ASSERT_NE(model, nullptr);
  std::istringstream lgip{std::string(kH200Lgip)};
  std::string line;
  int rows = 0;
  while (std::getline(lgip, line)) {
    std::istringstream in(line);
    std::string bar, gpu, mig, name, id, instances, gib, p2p, sm;
    if (!(in >> bar >> gpu >> mig >> name >> id >> instances >> gib >> p2p >> sm) || mig != "MIG") {
      continue;
    }
    ++rows;
    const int p = model->Find(name);
    ASSERT_GE(p, 0) << name;
    const MigProfile& got = model->profiles[p];
    EXPECT_EQ(got.id, std::stoi(id)) << name;
    EXPECT_EQ(got.memory_mib, static_cast<int64_t>(std::stod(gib) * 1024)) << name;
    EXPECT_EQ(got.sm_count, std::stoi(sm)) << name;
    const int per_gpu = got.max_per_gpu;
    EXPECT_EQ(StrCat(per_gpu, "/", per_gpu), instances) << name;
  }
  EXPECT_EQ(rows, static_cast<int>(model->profiles.size()));

  std::istringstream lgipp{std::string(kH200Lgipp)};
  rows = 0;
  while (std::getline(lgipp, line)) {
    // "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2"
    const size_t id_at = line.find("ID") + 2, brace = line.find('{'), close = line.find('}');
    ASSERT_NE(brace, std::string::npos) << line;
    const int id = std::stoi(line.substr(id_at, line.find('P', id_at) - id_at));
    const MigProfile* prof = nullptr;
    for (const MigProfile& p : model->profiles) {
      if (p.id == id) prof = &p;
    }
    ASSERT_NE(prof, nullptr) << line;
    ++rows;
    uint8_t starts = 0;
    std::istringstream list(line.substr(brace + 1, close - brace - 1));
    for (std::string s; std::getline(list, s, ',');)
      starts |= static_cast<uint8_t>(1u << std::stoi(s));
    EXPECT_EQ(prof->starts, starts) << line;
    EXPECT_EQ(prof->size, std::stoi(line.substr(close + 2))) << line;
  }
  EXPECT_EQ(rows, static_cast<int>(model->profiles.size()));
}

// Every profile of every model, at every start slice 0..7, on an empty MIG GPU: the state takes
// it exactly where NVIDIA allows it, and refuses it everywhere else.
TEST(Mig, EveryProfileOnEveryStartItMayAndMayNotTake) {
  int accepted = 0, refused = 0;
  for (const auto& [model_name, profiles] : PublishedTables()) {
    Cluster c = ClusterBuilder().Node("n").Gpus(1, model_name).Mig().Build();
    ClusterState state(c);
    const MigModel& model = *c.mig_model(NodeId(0), 0);
    for (const auto& [name, want] : profiles) {
      const int p = model.Find(name);
      for (int s = 0; s < kMigSlots; ++s) {
        MigPlan create;
        create.create = true;
        Placement pl =
            MakeMigPlacement(state, Pod("p", GpuAsk::Mig(name)), NodeId(0), 0,
                             MigPlacement{static_cast<int8_t>(p), static_cast<int8_t>(s)}, create);
        std::string why;
        const bool ok = state.CanApply(pl, &why);
        EXPECT_EQ(ok, want.starts.contains(s))
            << model_name << " " << name << "@" << s << ": " << why;
        if (ok) {
          ++accepted;
          state.Apply(pl);
          state.CheckInvariants();
          EXPECT_EQ(state.mig(NodeId(0), 0).assigned, model.profiles[p].slots(s));
          state.Revert(pl);
          EXPECT_TRUE(state.mig(NodeId(0), 0).instances.empty());
        } else {
          ++refused;
          EXPECT_THAT(why, HasSubstr("cannot start at slice"));
        }
        // The layout check of a cluster file says the same.
        absl::Status layout = ValidateMigInstances(
            model, {MigPlacement{static_cast<int8_t>(p), static_cast<int8_t>(s)}}, "GPU 0");
        EXPECT_EQ(layout.ok(), want.starts.contains(s)) << model_name << " " << name << "@" << s;
      }
    }
  }
  // Per model: 7 + 7 + 4 + 3 + 2 + 1 + 1 = 25 allowed (profile, start) pairs of 56.
  EXPECT_EQ(accepted, 4 * 25);  // 4 models
  EXPECT_EQ(refused, 4 * (56 - 25));
}

TEST(Mig, InstancesNeverShareASlice) {
  Cluster c = ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Mig().Build();
  const MigModel& m = *c.mig_model(NodeId(0), 0);
  auto at = [&](const char* name, int start) {
    return MigPlacement{static_cast<int8_t>(m.Find(name)), static_cast<int8_t>(start)};
  };
  EXPECT_TRUE(ValidateMigInstances(m, {at("4g.40gb", 0), at("3g.40gb", 4)}, "g").ok());
  EXPECT_TRUE(ValidateMigInstances(m, {at("3g.40gb", 0), at("3g.40gb", 4)}, "g").ok());
  EXPECT_TRUE(ValidateMigInstances(
                  m, {at("2g.20gb", 0), at("2g.20gb", 2), at("2g.20gb", 4), at("1g.10gb", 6)}, "g")
                  .ok());
  EXPECT_THAT(
      std::string(ValidateMigInstances(m, {at("3g.40gb", 0), at("4g.40gb", 0)}, "g").message()),
      HasSubstr("4g.40gb@0 overlaps another instance"));
  // 3g at 4 takes slices 4..7, so 1g.20gb at 6 (slices 6..7) cannot join it.
  EXPECT_FALSE(ValidateMigInstances(m, {at("3g.40gb", 4), at("1g.20gb", 6)}, "g").ok());
  // 3g at 0 takes slices 0..3 (4 memory slices, 3 compute): a 1g at 3 cannot join it.
  EXPECT_FALSE(ValidateMigInstances(m, {at("3g.40gb", 0), at("1g.10gb", 3)}, "g").ok());
  EXPECT_THAT(
      std::string(
          ValidateMigInstances(m, {at("1g.10gb+me", 0), at("1g.10gb+me", 1)}, "g").message()),
      HasSubstr("more than one +me instance"));
  // Seven 1g.10gb fill every start; an eighth has none left.
  std::vector<MigPlacement> seven;
  for (int s = 0; s < 7; ++s) seven.push_back(at("1g.10gb", s));
  EXPECT_TRUE(ValidateMigInstances(m, seven, "g").ok());
  // The state refuses an overlapping grant too, with the reason.
  Cluster d = ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Mig({{"3g.40gb", 4}}).Build();
  ClusterState state(d);
  MigPlan create;
  create.create = true;
  std::string why;
  EXPECT_FALSE(state.CanApply(MakeMigPlacement(state, Pod("p", GpuAsk::Mig("1g.20gb")), NodeId(0),
                                               0, at("1g.20gb", 6), create),
                              &why));
  EXPECT_THAT(why, HasSubstr("memory slices 6..7 are taken by other instances"));
}

TEST(Mig, ClusterRejectsBadLayoutsAndUnknownModels) {
  NodeSpec n;
  n.name = "n";
  n.cpu_milli = 1000;
  n.memory_mib = 1024;
  GpuSpec g;
  g.model = "L40S-48GB";
  g.memory_mib = 46068;
  g.mig_enabled = true;
  n.gpus = {g};
  absl::StatusOr<Cluster> c = Cluster::Create({n});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("node n GPU 0: MIG is enabled but tessera has no MIG profiles for "
                        "L40S-48GB (it has: A100-40GB, A100-80GB, H100-80GB, H200-141GB)"));
  n.gpus[0].model = "H100-80GB";
  n.gpus[0].mig_layout = {MigPlacement{1, 2}};  // 4g.40gb at 2
  c = Cluster::Create({n});
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("node n GPU 0: 4g.40gb cannot start at slice 2 on H100-80GB (allowed "
                        "starts: 0)"));
}

// The next start a policy picks for a MIG ask on node 0, as "profile@start" on GPU g.
std::string Next(Engine& e, const std::string& pod, const std::string& profile) {
  PlacementResult r = e.Place(Pod(pod, GpuAsk::Mig(profile)));
  if (!r.placed()) return "pending: " + r.reason;
  const GpuGrant& g = r.placement.gpus[0];
  const MigModel& m = *e.cluster().mig_model(r.placement.node, g.gpu);
  return "GPU" + std::to_string(g.gpu) + " " + MigPlacementName(m, g.mig);
}

TEST(Mig, SmallSlicesKeepRoomForLargeOnes) {
  Cluster c = ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Mig().Build();
  // On an empty GPU a 1g.10gb costs the 7g and a 3g anywhere; at slice 6 it keeps the 4g and all
  // three 2g (at 0 it would cost every profile).
  MigChoice first = *ChooseMig(ClusterState(c), NodeId(0), 1, "1g.10gb", MigPreference::kLeastLoss);
  EXPECT_EQ(first.placement.start, 6);
  EXPECT_EQ(first.cost, 1);
  // tessera keeps the 4g.40gb possible after three 1g; first fit (whole-gpu) does not.
  Engine t(c, MakePolicy("tessera"));
  Engine w(c, MakePolicy("whole-gpu"));
  for (int i = 0; i < 3; ++i) {
    Next(t, "s" + std::to_string(i), "1g.10gb");
    Next(w, "s" + std::to_string(i), "1g.10gb");
  }
  EXPECT_EQ(Next(t, "big", "4g.40gb"), "GPU0 4g.40gb@0");
  EXPECT_THAT(Next(w, "big", "4g.40gb"), HasSubstr("pending"));
  // The three 1g went to slices 4, 5 and 6; with the 4g that is all 7 compute slices.
  for (int s : {4, 5, 6}) {
    EXPECT_TRUE(t.state().mig(NodeId(0), 0).Find(MigPlacement{5, static_cast<int8_t>(s)}));
  }
  EXPECT_THAT(Next(t, "s3", "1g.10gb"), HasSubstr("pending"));
  t.state().CheckInvariants();
  w.state().CheckInvariants();
}

TEST(Mig, PartlyUsedGpuFirstSoAnEmptyOneStaysWhole) {
  Cluster c = ClusterBuilder().Node("n").Gpus(2, "H100-80GB").Mig().Build();
  Engine e(c, MakePolicy("tessera"));
  EXPECT_EQ(Next(e, "a", "2g.20gb"), "GPU0 2g.20gb@4");
  // Another small slice joins GPU 0 (it costs no 7g there any more)...
  EXPECT_THAT(Next(e, "b", "1g.10gb"), HasSubstr("GPU0"));
  // ... so GPU 1 takes a 7g.80gb.
  EXPECT_EQ(Next(e, "c", "7g.80gb"), "GPU1 7g.80gb@0");
  // Spread prefers the emptier GPU instead.
  Engine s(c, MakePolicy("spread"));
  Next(s, "a", "2g.20gb");
  EXPECT_THAT(Next(s, "b", "1g.10gb"), HasSubstr("GPU1"));
}

TEST(Mig, IdleInstancesAreReusedThenRepartitionedWithAPlan) {
  // mig-parted configured seven 1g.10gb on each GPU; none is assigned yet.
  std::vector<std::pair<std::string, int>> seven;
  for (int s = 0; s < 7; ++s) seven.emplace_back("1g.10gb", s);
  Cluster c = ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Mig(seven).Build();
  Engine e(c, MakePolicy("tessera"));
  // A 1g.10gb takes an idle instance: no change to the configuration.
  PlacementResult small = e.Place(Pod("small", GpuAsk::Mig("1g.10gb")));
  ASSERT_TRUE(small.placed());
  EXPECT_FALSE(small.placement.mig_plan.create);
  EXPECT_TRUE(small.placement.mig_plan.destroy.empty());
  EXPECT_EQ(small.placement.gpus[0].mig.start, 6);  // the one whose use costs least
  // A 3g.40gb fits only by destroying idle 1g instances: a re-partitioning plan.
  PlacementResult big = e.Place(Pod("big", GpuAsk::Mig("3g.40gb")));
  ASSERT_TRUE(big.placed()) << big.reason;
  EXPECT_TRUE(big.placement.mig_plan.repartition());
  EXPECT_EQ(DescribeMigPlan(e.state(), big.placement),
            "node n GPU 0: destroy idle 1g.10gb@0, 1g.10gb@1, 1g.10gb@2, 1g.10gb@3; create "
            "3g.40gb@0");
  const MigGpuState& m = e.state().mig(NodeId(0), 0);
  EXPECT_EQ(m.instances.size(), 4u);  // 1g@4, 1g@5, 1g@6 (assigned), 3g@0 (assigned)
  EXPECT_EQ(m.assigned, 0b0100'1111);
  e.state().CheckInvariants();
  // Released, the 3g stays configured and idle for the next one.
  ASSERT_TRUE(e.Release("big").ok());
  EXPECT_EQ(e.state().mig(NodeId(0), 0).instances.size(), 4u);
  PlacementResult again = e.Place(Pod("again", GpuAsk::Mig("3g.40gb")));
  ASSERT_TRUE(again.placed());
  EXPECT_FALSE(again.placement.mig_plan.create);
  e.state().CheckInvariants();
}

TEST(Mig, CreatingInFreeSlicesBeatsRepartitioningAnotherGpu) {
  std::vector<std::pair<std::string, int>> layout;
  for (int s = 0; s < 7; ++s) layout.emplace_back("1g.10gb", s);
  Cluster c = ClusterBuilder()
                  .Node("configured")
                  .Gpus(1, "A100-80GB")
                  .Mig(layout)
                  .Node("empty")
                  .Gpus(1, "A100-80GB")
                  .Mig()
                  .Build();
  Engine e(c, MakePolicy("tessera"));
  PlacementResult r = e.Place(Pod("p", GpuAsk::Mig("2g.20gb")));
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(c.node(r.placement.node).name, "empty");
  EXPECT_TRUE(r.placement.mig_plan.create);
  EXPECT_FALSE(r.placement.mig_plan.repartition());
}

TEST(Mig, WhatIfAndGangRollbackRestoreTheConfigurationExactly) {
  std::vector<std::pair<std::string, int>> layout;
  for (int s = 0; s < 7; ++s) layout.emplace_back("1g.10gb", s);
  Cluster c = ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Mig(layout).Build();
  Engine e(c, MakePolicy("tessera"));
  PlacementResult r = e.Place(Pod("big", GpuAsk::Mig("7g.80gb")), Mode::kTestOnly);
  ASSERT_TRUE(r.placed());
  EXPECT_EQ(r.placement.mig_plan.destroy.size(), 7u);
  EXPECT_EQ(e.state().mig(NodeId(0), 0).instances.size(), 7u);
  EXPECT_EQ(e.state().mig(NodeId(0), 0).configured, 0b0111'1111);
  // A gang whose second member cannot fit: the first member's re-partition is undone.
  std::vector<PodRequest> gang = {Pod("g0", GpuAsk::Mig("7g.80gb")),
                                  Pod("g1", GpuAsk::Mig("1g.10gb"))};
  for (PodRequest& p : gang) p.gang = GangAsk{"g", 2, "", false};
  auto results = e.PlaceGang(gang);
  EXPECT_EQ(results[0].outcome, Outcome::kNoFitNow);
  EXPECT_EQ(e.state().mig(NodeId(0), 0).instances.size(), 7u);
  EXPECT_EQ(e.state().mig(NodeId(0), 0).assigned, 0);
  e.state().CheckInvariants();
}

TEST(Mig, MigGpusTakeMigOnlyAndSayWhy) {
  Cluster c = ClusterBuilder()
                  .Node("mig")
                  .Gpus(1, "A100-80GB")
                  .Mig()
                  .Node("plain")
                  .Gpus(1, "L40S-48GB")
                  .Build();
  Engine e(c, MakePolicy("tessera"));
  // A whole GPU goes to the plain node; a share too; a MIG slice to the MIG node.
  PlacementResult whole = e.Place(Pod("w", GpuAsk::Whole(1)));
  ASSERT_TRUE(whole.placed());
  EXPECT_EQ(c.node(whole.placement.node).name, "plain");
  PlacementResult share = e.Place(Pod("s", GpuAsk::Share(1024, 0)));
  EXPECT_EQ(share.outcome, Outcome::kNoFitNow);
  EXPECT_THAT(share.reason, HasSubstr("1 only GPUs in MIG mode (they take MIG instances only)"));
  PlacementResult slice = e.Place(Pod("m", GpuAsk::Mig("1g.10gb")));
  ASSERT_TRUE(slice.placed());
  EXPECT_EQ(c.node(slice.placement.node).name, "mig");
  EXPECT_EQ(slice.placement.gpus[0].memory_mib, 9728);
  EXPECT_EQ(slice.placement.gpus[0].compute_milli, 142);
  // Profiles the cluster does not offer never fit, with the profiles it does.
  PlacementResult wrong = e.Place(Pod("x", GpuAsk::Mig("1g.5gb")));
  EXPECT_EQ(wrong.outcome, Outcome::kNeverFits);
  EXPECT_THAT(wrong.reason, HasSubstr("no MIG-enabled GPU offers profile 1g.5gb (A100-80GB: "
                                      "7g.80gb, 4g.40gb, 3g.40gb, 2g.20gb, 1g.20gb, 1g.10gb, "
                                      "1g.10gb+me)"));
  // A cluster without MIG GPUs says so.
  Cluster plain = ClusterBuilder().Node("p").Gpus(2, "A100-80GB").Build();
  Engine p(plain, MakePolicy("binpack"));
  PlacementResult none = p.Place(Pod("m", GpuAsk::Mig("1g.10gb")));
  EXPECT_EQ(none.outcome, Outcome::kNeverFits);
  EXPECT_EQ(none.reason, "needs a MIG 1g.10gb instance; no GPU in this cluster is in MIG mode");
  // And one with MIG GPUs only refuses whole GPUs, pointing at MIG.
  Cluster all_mig = ClusterBuilder().Node("m").Gpus(2, "H100-80GB").Mig().Build();
  Engine m(all_mig, MakePolicy("spread"));
  PlacementResult two = m.Place(Pod("t", GpuAsk::Whole(2)));
  EXPECT_EQ(two.outcome, Outcome::kNeverFits);
  EXPECT_THAT(two.reason, HasSubstr("in MIG mode: ask for a MIG profile (tessera.dev/mig)"));
}

TEST(Mig, AssignedInstancesBlockAndTheReasonSaysSo) {
  Cluster c = ClusterBuilder().Node("n").Gpus(1, "H100-80GB").Mig().Build();
  Engine e(c, MakePolicy("tessera"));
  ASSERT_TRUE(e.Place(Pod("a", GpuAsk::Mig("4g.40gb"))).placed());
  ASSERT_TRUE(e.Place(Pod("b", GpuAsk::Mig("3g.40gb"))).placed());
  PlacementResult r = e.Place(Pod("c", GpuAsk::Mig("1g.10gb")));
  EXPECT_EQ(r.outcome, Outcome::kNoFitNow);
  EXPECT_THAT(r.reason, HasSubstr("no MIG GPU with the memory slices free for 1g.10gb"));
  ASSERT_TRUE(e.Release("a").ok());
  PlacementResult after = e.Place(Pod("c", GpuAsk::Mig("1g.10gb")));
  ASSERT_TRUE(after.placed());
  // The idle 4g@0 is in the way of any 1g at 0..3: a re-partition of idle slices.
  EXPECT_TRUE(after.placement.mig_plan.repartition());
  e.state().CheckInvariants();
}

TEST(Mig, RestoreRebuildsInstancesFromAssignments) {
  Cluster c = ClusterBuilder().Node("n").Gpus(1, "A100-80GB").Mig({{"1g.10gb", 0}}).Build();
  Engine first(c, MakePolicy("tessera"));
  PlacementResult r = first.Place(Pod("p", GpuAsk::Mig("3g.40gb")));
  ASSERT_TRUE(r.placed());
  Engine second(c, MakePolicy("tessera"));
  Placement recorded = r.placement;
  recorded.mig_plan = MigPlan{};  // an assignment record names the instance, not the plan
  ASSERT_TRUE(second.Restore("p", recorded).ok());
  second.state().CheckInvariants();
  EXPECT_EQ(second.state().mig(NodeId(0), 0).assigned, first.state().mig(NodeId(0), 0).assigned);
}

// Random MIG asks and releases under every policy: invariants hold after every step.
TEST(Mig, RandomChurnKeepsInvariants) {
  Cluster c = ClusterBuilder()
                  .Node("a")
                  .Gpus(4, "A100-80GB")
                  .Mig({{"3g.40gb", 4}})
                  .Node("h")
                  .Gpus(2, "H100-80GB")
                  .Mig()
                  .Node("s")
                  .Gpus(2, "A100-40GB")
                  .Mig({{"1g.5gb", 0}, {"1g.5gb", 1}})
                  .Build();
  const std::vector<std::string> asks = {"1g.10gb", "1g.20gb",    "2g.20gb", "3g.40gb", "4g.40gb",
                                         "7g.80gb", "1g.10gb+me", "1g.5gb",  "2g.10gb", "3g.20gb"};
  for (const std::string& policy : PolicyNames()) {
    Engine e(c, MakePolicy(policy));
    Random rng(42);
    std::vector<std::string> live;
    int placed = 0, plans = 0;
    for (int step = 0; step < 400; ++step) {
      if (!live.empty() && rng.Uniform(3) == 0) {
        size_t k = rng.Uniform(live.size());
        ASSERT_TRUE(e.Release(live[k]).ok());
        live.erase(live.begin() + k);
      } else {
        std::string name = "p" + std::to_string(step);
        PlacementResult r = e.Place(Pod(name, GpuAsk::Mig(asks[rng.Uniform(asks.size())])));
        if (r.placed()) {
          live.push_back(name);
          ++placed;
          plans += r.placement.mig_plan.repartition();
        }
      }
      e.state().CheckInvariants();
    }
    EXPECT_GT(placed, 50) << policy;
    EXPECT_GT(plans, 0) << policy;
  }
}

}  // namespace
}  // namespace tessera::core
