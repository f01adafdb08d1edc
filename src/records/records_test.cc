#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::records {
namespace {

using ::testing::HasSubstr;

Inventory TwoGpus() {
  Inventory inv;
  for (int i = 0; i < 2; ++i) {
    core::GpuSpec g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.model = "A100-80GB";
    g.memory_mib = 81920;
    g.sm_count = 108;
    g.numa_node = i;
    g.pci_bus_id = "00000000:0" + std::to_string(i) + ":00.0";
    inv.gpus.push_back(g);
  }
  inv.links = core::LinkMatrix::AllNvLink(2, 12);
  core::NicSpec nic;
  nic.name = "NIC0";
  nic.device = "mlx5_0";
  nic.gpu_links = {core::Link{core::LinkKind::kPxb, 0}, core::Link{core::LinkKind::kSys, 0}};
  inv.nics.push_back(nic);
  return inv;
}

TEST(Inventory, RoundTrips) {
  Inventory inv = TwoGpus();
  std::string json = InventoryToJson(inv);
  absl::StatusOr<Inventory> back = InventoryFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(InventoryToJson(*back), json);
  EXPECT_EQ(back->links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 12}));
  EXPECT_EQ(back->gpus[1].uuid, "GPU-1");
  EXPECT_EQ(back->nics[0].gpu_links[1].kind, core::LinkKind::kSys);
}

TEST(Inventory, UnhealthyGpusRoundTripAndHealthyOnesWriteNothing) {
  Inventory inv = TwoGpus();
  EXPECT_EQ(InventoryToJson(inv).find("health"), std::string::npos);
  inv.health = {GpuHealth{}, GpuHealth{false, {79}, "XID 79: GPU has fallen off the bus"}};
  std::string json = InventoryToJson(inv);
  EXPECT_NE(
      json.find(
          R"("health":{"healthy":false,"reason":"XID 79: GPU has fallen off the bus","xids":[79]})"),
      std::string::npos)
      << json;
  absl::StatusOr<Inventory> back = InventoryFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->healthy(0));
  EXPECT_FALSE(back->healthy(1));
  EXPECT_EQ(back->health, inv.health);
  EXPECT_EQ(InventoryToJson(*back), json);

  // Only GPU 0 unhealthy: GPU 1 gets a healthy entry, so health has one entry per GPU.
  inv.health = {GpuHealth{false, {48}, "XID 48"}};
  back = InventoryFromJson(InventoryToJson(inv));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->health.size(), 2u);
  EXPECT_FALSE(back->healthy(0));
  EXPECT_TRUE(back->healthy(1));

  // A healthy entry written by hand reads as no entry.
  nlohmann::json doc = nlohmann::json::parse(InventoryToJson(TwoGpus()));
  doc["gpus"][0]["health"] = {{"healthy", true}};
  back = InventoryFromJson(doc.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->health.empty());
}

std::string InventoryError(const std::string& json) {
  absl::StatusOr<Inventory> r = InventoryFromJson(json);
  EXPECT_FALSE(r.ok()) << json;
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(Inventory, BadRecordsNameTheField) {
  {
    nlohmann::json doc = nlohmann::json::parse(InventoryToJson(TwoGpus()));
    doc["gpus"][1]["health"] = {{"healthy", "no"}};
    EXPECT_THAT(InventoryError(doc.dump()),
                HasSubstr("gpu-inventory.gpus[1].health.healthy: expected true or false"));
    doc["gpus"][1]["health"] = {{"healthy", false}, {"xids", {-1}}};
    EXPECT_THAT(InventoryError(doc.dump()), HasSubstr("gpus[1].health.xids: expected positive"));
    doc["gpus"][1]["health"] = {{"xids", {79}}};
    EXPECT_THAT(InventoryError(doc.dump()),
                HasSubstr("gpu-inventory.gpus[1].health.healthy: expected true or false"));
  }
  EXPECT_THAT(InventoryError("{"), HasSubstr("gpu-inventory: not valid JSON at byte"));
  EXPECT_THAT(InventoryError("[]"), HasSubstr("gpu-inventory: expected an object"));
  EXPECT_THAT(InventoryError(R"({"version":2,"gpus":[],"links":[]})"),
              HasSubstr("version 2 is not supported"));
  EXPECT_THAT(
      InventoryError(
          R"({"version":1,"gpus":[{"index":0,"model":"A","memory_mib":"80Gi"}],"links":[["X"]]})"),
      HasSubstr("gpu-inventory.gpus[0].memory_mib: expected an integer, found \"80Gi\""));
  EXPECT_THAT(
      InventoryError(
          R"({"version":1,"gpus":[{"index":1,"model":"A","memory_mib":1}],"links":[["X"]]})"),
      HasSubstr("gpu-inventory.gpus[0].index: is 1, expected 0"));
  EXPECT_THAT(
      InventoryError(R"({"version":1,"gpus":[{"index":0,"model":"A","memory_mib":1}],"links":[]})"),
      HasSubstr("gpu-inventory.links: has 0 rows for 1 GPUs"));
  EXPECT_THAT(
      InventoryError(
          R"({"version":1,"gpus":[{"index":0,"model":"A","memory_mib":1},{"index":1,"model":"A","memory_mib":1}],"links":[["X","NV4"],["NV2","X"]]})"),
      HasSubstr("must be symmetric"));
  EXPECT_THAT(
      InventoryError(
          R"({"version":1,"gpus":[{"index":0,"model":"A","memory_mib":1},{"index":1,"model":"A","memory_mib":1}],"links":[["X","FAST"],["FAST","X"]]})"),
      HasSubstr("gpu-inventory.links[0][1]: unknown link \"FAST\""));
  EXPECT_THAT(
      InventoryError(
          R"({"version":1,"gpus":[{"index":0,"model":"A","memory_mib":0}],"links":[["X"]]})"),
      HasSubstr("memory_mib: must be positive"));
  EXPECT_THAT(
      InventoryError(
          R"({"version":1,"gpus":[{"index":0,"model":"A","memory_mib":1}],"links":[["X"]], "extra": 1e999})"),
      HasSubstr("not valid JSON"));
}

// A newer agent or scheduler may add fields: a reader of this version ignores them (Kubernetes API
// conventions), at every level, and still refuses what it cannot interpret.
TEST(Inventory, UnknownFieldsFromANewerWriterAreIgnored) {
  absl::StatusOr<Inventory> inv = InventoryFromJson(
      R"({"version":1,"written_by":"agent v9","gpus":[{"index":0,"model":"A100-80GB",)"
      R"("memory_mib":81920,"colour":"red","mig":{"enabled":false,"capable":true,"modes":[1]},)"
      R"("health":{"healthy":false,"xids":[79],"since":"2027-01-01T00:00:00Z"}}],)"
      R"("links":[["X"]],"nics":[{"name":"NIC0","links":["PIX"],"speed_gbps":400}]})");
  ASSERT_TRUE(inv.ok()) << inv.status();
  ASSERT_EQ(inv->gpus.size(), 1u);
  EXPECT_EQ(inv->gpus[0].memory_mib, 81920);
  EXPECT_FALSE(inv->healthy(0));
  ASSERT_EQ(inv->nics.size(), 1u);
  EXPECT_EQ(inv->nics[0].name, "NIC0");
  // Another version is not a newer writer's extra field: it cannot be interpreted.
  EXPECT_THAT(InventoryError(R"({"version":2,"gpus":[],"links":[]})"),
              HasSubstr("version 2 is not supported"));
}

TEST(Assignment, UnknownFieldsFromANewerWriterAreIgnored) {
  absl::StatusOr<Assignment> a = AssignmentFromJson(
      R"({"version":1,"node":"n1","decided_at":"2027-01-01T00:00:00Z","gpus":[{"index":2,)"
      R"("memory_mib":4096,"compute_milli":250,"exclusive":false,"nvlink_peers":[3]}]})");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->node, "n1");
  ASSERT_EQ(a->gpus.size(), 1u);
  EXPECT_EQ(a->gpus[0].grant, (core::GpuGrant{2, 4096, 250, false}));
  absl::StatusOr<Assignment> mig = AssignmentFromJson(
      R"({"version":1,"node":"n","gpus":[{"index":0,"memory_mib":9856,"compute_milli":142,)"
      R"("mig":{"profile":"1g.10gb","start":3,"gi":7}}],"mig_plan":{"create":true,"order":1}})");
  ASSERT_TRUE(mig.ok()) << mig.status();
  EXPECT_EQ(mig->gpus[0].mig_profile, "1g.10gb");
  EXPECT_TRUE(mig->mig_create);
  // What cannot be interpreted is still an error.
  EXPECT_FALSE(AssignmentFromJson(R"({"version":2,"node":"n","gpus":[]})").ok());
  EXPECT_FALSE(AssignmentFromJson(R"({"version":1,"gpus":[]})").ok());
  EXPECT_FALSE(AssignmentFromJson(R"({"version":1,"node":"n","gpus":[{"index":"0"}]})").ok());
}

TEST(Assignment, RoundTripsAndValidates) {
  Assignment a;
  a.node = "n1";
  a.gpus.push_back(AssignedGpu{core::GpuGrant{3, 4096, 250, false}, "GPU-3"});
  std::string json = AssignmentToJson(a);
  absl::StatusOr<Assignment> back = AssignmentFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->node, "n1");
  EXPECT_EQ(back->gpus[0].grant, (core::GpuGrant{3, 4096, 250, false}));
  EXPECT_EQ(back->gpus[0].uuid, "GPU-3");

  EXPECT_FALSE(AssignmentFromJson(R"({"version":1,"node":"","gpus":[]})").ok());
  absl::StatusOr<Assignment> bad = AssignmentFromJson(
      R"({"version":1,"node":"n","gpus":[{"index":0,"memory_mib":1,"compute_milli":1001}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("assignment.gpus[0].compute_milli: must be 0..1000"));
}

// A share enforced by MPS says so in its record ("sharing": "mps"), so that a restarted scheduler
// keeps MPS and shim shares on different GPUs; a record without it is a shim share.
TEST(Assignment, TheSharingModeRoundTrips) {
  Assignment a;
  a.node = "n1";
  core::GpuGrant mps{0, 4096, 250, false};
  mps.mode = core::ShareMode::kMps;
  a.gpus.push_back(AssignedGpu{mps, "GPU-0"});
  std::string json = AssignmentToJson(a);
  EXPECT_THAT(json, HasSubstr(R"("sharing":"mps")"));
  absl::StatusOr<Assignment> back = AssignmentFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gpus[0].grant.mode, core::ShareMode::kMps);
  absl::StatusOr<Assignment> old = AssignmentFromJson(
      R"({"version":1,"node":"n","gpus":[{"index":0,"memory_mib":1,"compute_milli":1}]})");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->gpus[0].grant.mode, core::ShareMode::kShim);
  absl::StatusOr<Assignment> bad = AssignmentFromJson(
      R"({"version":1,"node":"n","gpus":[{"index":0,"memory_mib":1,"compute_milli":1,"sharing":"x"}]})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("gpus[0].sharing"));
}

TEST(Assignment, GangMemberRecordRoundTripsAndOldRecordsStillRead) {
  Assignment a;
  a.node = "n1";
  a.gpus.push_back(AssignedGpu{core::GpuGrant{0, 81920, 1000, true}, "GPU-0"});
  a.gang = GangRecord{"train", 8, 4, 5};
  absl::StatusOr<Assignment> back = AssignmentFromJson(AssignmentToJson(a));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);
  EXPECT_THAT(AssignmentToJson(a),
              HasSubstr(R"("gang":{"min":4,"name":"train","running":5,"size":8})"));
  // A record without it (written before elastic gangs) reads as before.
  Assignment old = a;
  old.gang.reset();
  EXPECT_THAT(AssignmentToJson(old), ::testing::Not(HasSubstr("gang")));
  absl::StatusOr<Assignment> o = AssignmentFromJson(
      R"({"version":1,"node":"n1","gpus":[{"index":0,"uuid":"GPU-0","memory_mib":81920,)"
      R"("compute_milli":1000,"exclusive":true}]})");
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(*o, old);
  // Unknown fields inside it are ignored; what cannot be interpreted names the field.
  absl::StatusOr<Assignment> newer = AssignmentFromJson(
      R"({"version":1,"node":"n","gpus":[],"gang":{"name":"g","size":8,"min":4,"running":6,)"
      R"("epoch":3}})");
  ASSERT_TRUE(newer.ok()) << newer.status();
  EXPECT_EQ(newer->gang->running, 6);
  absl::StatusOr<Assignment> bad = AssignmentFromJson(
      R"({"version":1,"node":"n","gpus":[],"gang":{"name":"g","size":8,"min":4,"running":9}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("assignment.gang.running: must be 1..8 (size)"));
  EXPECT_FALSE(
      AssignmentFromJson(R"({"version":1,"node":"n","gpus":[],"gang":{"name":"g","size":8,"min":9,)"
                         R"("running":5}})")
          .ok());
  EXPECT_FALSE(AssignmentFromJson(R"({"version":1,"node":"n","gpus":[],"gang":"g"})").ok());
}

TEST(Inventory, MigInstancesRoundTripAndAreValidated) {
  Inventory inv = TwoGpus();
  inv.gpus[1].mig_enabled = true;
  const core::MigModel& m = *core::FindMigModel("A100-80GB");
  inv.gpus[1].mig_layout = {core::MigPlacement{static_cast<int8_t>(m.Find("3g.40gb")), 4},
                            core::MigPlacement{static_cast<int8_t>(m.Find("1g.10gb")), 0}};
  std::string json = InventoryToJson(inv);
  EXPECT_THAT(
      json,
      HasSubstr(
          R"("mig":{"capable":true,"enabled":true,"instances":[{"profile":"3g.40gb","start":4},{"profile":"1g.10gb","start":0}]})"));
  absl::StatusOr<Inventory> back = InventoryFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gpus[1].mig_layout, inv.gpus[1].mig_layout);
  EXPECT_EQ(InventoryToJson(*back), json);
  const std::string head = R"({"version":1,"links":[["X"]],"gpus":[{"index":0,"model":")";
  EXPECT_THAT(
      InventoryError(head + R"(L40S-48GB","memory_mib":46068,"mig":{"enabled":true}}]})"),
      HasSubstr("gpu-inventory.gpus[0].mig.enabled: tessera has no MIG profiles for L40S-48GB"));
  EXPECT_THAT(
      InventoryError(
          head +
          R"(H100-80GB","memory_mib":81559,"mig":{"enabled":true,"instances":[{"profile":"4g.40gb","start":4}]}}]})"),
      HasSubstr("gpu-inventory.gpus[0].mig.instances: 4g.40gb cannot start at slice 4"));
  EXPECT_THAT(
      InventoryError(
          head +
          R"(H100-80GB","memory_mib":81559,"mig":{"enabled":true,"instances":[{"profile":"1g.5gb","start":0}]}}]})"),
      HasSubstr("gpu-inventory.gpus[0].mig.instances[0].profile: \"1g.5gb\" is not a H100-80GB MIG "
                "profile"));
  EXPECT_THAT(
      InventoryError(head +
                     R"(H100-80GB","memory_mib":81559,"mig":{"enabled":false,"instances":[]}}]})"),
      HasSubstr("mig.instances: only when enabled is true"));
}

TEST(Assignment, MigInstanceAndPlanRoundTripThroughTheCluster) {
  core::NodeSpec n;
  n.name = "a100-7";
  n.cpu_milli = 64000;
  n.memory_mib = 1 << 20;
  for (int i = 0; i < 2; ++i) {
    core::GpuSpec g;
    g.index = i;
    g.uuid = "GPU-" + std::to_string(i);
    g.model = "A100-80GB";
    g.memory_mib = 81920;
    g.mig_enabled = i == 1;
    n.gpus.push_back(g);
  }
  core::Cluster cluster = *core::Cluster::Create({n});
  const core::MigModel& m = *cluster.mig_model(core::NodeId(0), 1);
  core::Placement p;
  p.node = core::NodeId(0);
  p.gpus.push_back(core::GpuGrant{1, 40192, 428, false,
                                  core::MigPlacement{static_cast<int8_t>(m.Find("3g.40gb")), 4}});
  p.mig_plan.create = true;
  p.mig_plan.destroy = {core::MigPlacement{static_cast<int8_t>(m.Find("1g.10gb")), 4}};
  Assignment a = MakeAssignment(cluster, p);
  std::string json = AssignmentToJson(a);
  EXPECT_THAT(json, HasSubstr(R"("mig":{"profile":"3g.40gb","start":4})"));
  EXPECT_THAT(
      json, HasSubstr(R"("mig_plan":{"create":true,"destroy":[{"profile":"1g.10gb","start":4}]})"));
  absl::StatusOr<Assignment> back = AssignmentFromJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  absl::StatusOr<core::Placement> again = AssignmentToPlacement(cluster, *back);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->gpus[0], p.gpus[0]);
  EXPECT_EQ(again->mig_plan, p.mig_plan);
  // Naming a GPU that is not in MIG mode, or a profile it does not have, is an error.
  Assignment wrong = a;
  wrong.gpus[0].grant.gpu = 0;
  EXPECT_THAT(std::string(AssignmentToPlacement(cluster, wrong).status().message()),
              HasSubstr("GPU 0 of a100-7 is not in MIG mode"));
  EXPECT_THAT(
      std::string(
          AssignmentFromJson(
              R"({"version":1,"node":"n","gpus":[{"index":0,"memory_mib":1,"compute_milli":1,"mig":{"profile":"9g.1tb","start":0}}]})")
              .status()
              .message()),
      HasSubstr("assignment.gpus[0].mig.profile: \"9g.1tb\" is not a MIG profile tessera knows"));
}

}  // namespace
}  // namespace tessera::records
