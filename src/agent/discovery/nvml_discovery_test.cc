// The NVML backend against a stateful fake libnvidia-ml.so.1 (testing/fake_libnvidia_ml.cc),
// found by the dynamic loader through LD_LIBRARY_PATH (set by CTest) as the driver's library is.
#include "agent/discovery/nvml_discovery.h"

#include <dlfcn.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "core/model/mig.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "records/inventory.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr unsigned long long kMiB = 1ULL << 20;

class NvmlDiscoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The test holds the library too, for the control functions and so that its state outlives
    // each NvmlDiscovery.
    fake_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(fake_, nullptr) << "the fake libnvidia-ml.so.1 is not on LD_LIBRARY_PATH: "
                              << dlerror();
    inject_xid_ = reinterpret_cast<int (*)(unsigned, unsigned long long)>(
        dlsym(fake_, "tessera_fake_nvml_inject_xid"));
    set_lost_ =
        reinterpret_cast<int (*)(unsigned, int)>(dlsym(fake_, "tessera_fake_nvml_set_lost"));
    reload_ = reinterpret_cast<int (*)()>(dlsym(fake_, "tessera_fake_nvml_reload"));
    init_count_ = reinterpret_cast<int (*)()>(dlsym(fake_, "tessera_fake_nvml_init_count"));
    ASSERT_TRUE(inject_xid_ && set_lost_ && reload_ && init_count_);
  }

  void Configure(const json& config) {
    const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "fake_nvml";
    std::filesystem::create_directories(dir);
    path_ = (dir / "config.json").string();
    std::ofstream(path_) << config.dump(2);
    ::setenv("TESSERA_FAKE_NVML", path_.c_str(), 1);
  }

  // sysfs is the test's own folder (sys_), empty unless a test writes there.
  std::unique_ptr<NvmlDiscovery> Open() {
    absl::StatusOr<std::unique_ptr<NvmlDiscovery>> d =
        NvmlDiscovery::Open("libnvidia-ml.so.1", sys_.string());
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? std::move(*d) : nullptr;
  }

  static json Gpu(int i, const std::string& name, unsigned long long memory_mib) {
    char bus[32];
    std::snprintf(bus, sizeof(bus), "00000000:%02X:00.0", 0x18 + 0x10 * i);
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "GPU-6f1c2a9e-0000-4000-8000-%012d", i);
    return {{"uuid", uuid},
            {"name", name},
            {"memory_bytes", memory_mib * kMiB},
            {"pci_bus_id", bus},
            {"minor", i},
            {"numa_node", i / 2},
            {"cpus", i < 2 ? json{0, 1, 2, 3, 8, 9} : json{4, 5, 6, 7}}};
  }
  static std::string Bus(int i) { return Gpu(i, "", 1)["pci_bus_id"]; }

  static void* fake_;
  static int (*inject_xid_)(unsigned, unsigned long long);
  static int (*set_lost_)(unsigned, int);
  static int (*reload_)();
  static int (*init_count_)();
  std::string path_;
  std::filesystem::path sys_ = std::filesystem::path(::testing::TempDir()) / "fake_sys";

  void SetUp() override { std::filesystem::remove_all(sys_); }
  void TearDown() override { std::filesystem::remove_all(sys_); }
};

void* NvmlDiscoveryTest::fake_ = nullptr;
int (*NvmlDiscoveryTest::inject_xid_)(unsigned, unsigned long long) = nullptr;
int (*NvmlDiscoveryTest::set_lost_)(unsigned, int) = nullptr;
int (*NvmlDiscoveryTest::reload_)() = nullptr;
int (*NvmlDiscoveryTest::init_count_)() = nullptr;

json AllPcie(int n, int level) {
  json m = json::array();
  for (int i = 0; i < n; ++i) {
    json row = json::array();
    for (int k = 0; k < n; ++k) row.push_back(i == k ? 0 : level);
    m.push_back(row);
  }
  return m;
}

TEST_F(NvmlDiscoveryTest, NvSwitchServerAsNvidiaSmiShowsIt) {
  json gpus = json::array();
  for (int i = 0; i < 4; ++i) {
    json g = Gpu(i, "NVIDIA H100 80GB HBM3", 81559);
    g["nvlinks"] = json(std::vector<std::string>(18, "switch"));
    gpus.push_back(g);
  }
  // Only the versioned memory call answers: its struct layout and version must be right.
  Configure({{"driver_version", "580.95.05"},
             {"cuda_version", 13000},
             {"gpus", gpus},
             {"pcie", AllPcie(4, 50)},
             {"unsupported", {"nvmlDeviceGetMemoryInfo"}}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  EXPECT_THAT(d->Describe(), HasSubstr("driver 580.95.05"));
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->driver_version, "580.95.05");
  EXPECT_EQ(node->cuda_version, "13.0");
  ASSERT_EQ(node->gpus.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const DiscoveredGpu& g = node->gpus[i];
    EXPECT_EQ(g.spec.index, i);
    EXPECT_EQ(g.spec.uuid, Gpu(i, "", 1)["uuid"]);
    EXPECT_EQ(g.product_name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g.spec.model, "H100-80GB");
    EXPECT_EQ(g.spec.memory_mib, 81559);
    EXPECT_EQ(g.spec.sm_count, 132);  // NVML answers SM counts for MIG devices only
    EXPECT_EQ(g.spec.pci_bus_id, Bus(i));
    EXPECT_EQ(g.minor, i);
    EXPECT_EQ(g.spec.numa_node, i / 2);
    EXPECT_EQ(g.spec.cpu_affinity, i < 2 ? "0-3,8-9" : "4-7");
    EXPECT_TRUE(g.health.healthy);
    EXPECT_FALSE(g.spec.mig_enabled);
    for (int k = 0; k < 4; ++k) {
      if (k != i) {
        EXPECT_EQ(node->links.at(i, k), (core::Link{core::LinkKind::kNvLink, 18}));
      }
    }
  }
  // What it publishes reads back.
  absl::StatusOr<records::Inventory> inv =
      records::InventoryFromJson(records::InventoryToJson(node->ToInventory()));
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->gpus.size(), 4u);
}

TEST_F(NvmlDiscoveryTest, DirectNvLinksAndPcieRelations) {
  json gpus = json::array();
  for (int i = 0; i < 4; ++i) gpus.push_back(Gpu(i, "NVIDIA A100 80GB PCIe", 81920));
  // NVLink bridges: 0-1 and 2-3, four links each (one of 2's is down), the rest PCIe.
  gpus[0]["nvlinks"] = {"gpu:" + Bus(1), "gpu:" + Bus(1), "gpu:" + Bus(1), "gpu:" + Bus(1)};
  gpus[1]["nvlinks"] = {"gpu:" + Bus(0), "gpu:" + Bus(0), "gpu:" + Bus(0), "gpu:" + Bus(0)};
  gpus[2]["nvlinks"] = {"gpu:" + Bus(3), "off", "gpu:" + Bus(3), "gpu:" + Bus(3)};
  gpus[3]["nvlinks"] = {"gpu:" + Bus(2), "gpu:" + Bus(2), "gpu:" + Bus(2), "off"};
  gpus[0]["sm_count"] = 108;
  json pcie = {{0, 10, 40, 50}, {10, 0, 20, 50}, {40, 20, 0, 30}, {50, 50, 30, 0}};
  Configure({{"gpus", gpus}, {"pcie", pcie}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  using core::LinkKind;
  EXPECT_EQ(node->gpus[0].spec.model, "A100-PCIE-80GB");
  EXPECT_EQ(node->gpus[0].spec.sm_count, 108);
  EXPECT_EQ(node->links.at(0, 1), (core::Link{LinkKind::kNvLink, 4}));
  EXPECT_EQ(node->links.at(2, 3), (core::Link{LinkKind::kNvLink, 3}));
  EXPECT_EQ(node->links.at(0, 2), (core::Link{LinkKind::kNode, 0}));
  EXPECT_EQ(node->links.at(0, 3), (core::Link{LinkKind::kSys, 0}));
  EXPECT_EQ(node->links.at(1, 2), (core::Link{LinkKind::kPxb, 0}));
  EXPECT_EQ(node->links.at(3, 1), (core::Link{LinkKind::kSys, 0}));
}

TEST_F(NvmlDiscoveryTest, OlderDriversAnswerWithTheOriginalCalls) {
  json g = Gpu(0, "NVIDIA GB200", 189471);
  g["fabric"] = {{"cluster_uuid", "b7f0e0a1123444bc8def0123456789ab"}, {"clique_id", 7}};
  json g1 = Gpu(1, "NVIDIA GB200", 189471);
  g1["fabric"] = g["fabric"];
  Configure({{"gpus", {g, g1}},
             {"pcie", AllPcie(2, 40)},
             {"unsupported",
              {"nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetNumaNodeId",
               "nvmlDeviceGetGpuFabricInfoV", "nvmlSystemGetDriverVersion"}}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->gpus[0].spec.memory_mib, 189471);  // nvmlDeviceGetMemoryInfo
  EXPECT_EQ(node->gpus[0].spec.numa_node, -1);       // no NVML answer, no sysfs entry
  EXPECT_EQ(node->gpus[0].spec.model, "GB200");
  ASSERT_TRUE(node->gpus[0].has_fabric);  // nvmlDeviceGetGpuFabricInfo
  EXPECT_EQ(node->NvLinkDomain(), "b7f0e0a1-1234-44bc-8def-0123456789ab.7");
  EXPECT_EQ(node->fabric_note, "");
}

// What an H200 in a VM showed (bench/results/gpu/h200-2026-12-04/gpu_check): NVML has no NUMA node
// for the GPU, the PCI device's numa_node is -1, and nvidia-smi topo -m prints NUMA Affinity 0, the
// node of the GPU's CPUs. The agent said -1 and the GPU check failed on it.
TEST_F(NvmlDiscoveryTest, WithoutANodeFromTheDriverOrThePciDeviceTheNodeOfItsCpusIsTaken) {
  json g0 = Gpu(0, "NVIDIA H200", 143771);
  json g2 = Gpu(2, "NVIDIA H200", 143771);
  g0.erase("numa_node");
  g2.erase("numa_node");
  Configure({{"gpus", {g0, g2}}, {"pcie", AllPcie(2, 40)}});
  auto write = [&](const std::filesystem::path& file, const std::string& text) {
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file) << text << "\n";
  };
  write(sys_ / "bus/pci/devices" / Bus(0).substr(4) / "numa_node", "-1");
  // GPU 0's CPUs (0-3,8-9) are node 0's; GPU 2's (4-7) span nodes 0 and 1: no guess.
  write(sys_ / "devices/system/node/node0/cpulist", "0-5,8-9");
  write(sys_ / "devices/system/node/node1/cpulist", "6-7,10-11");
  auto d = Open();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ(node->gpus[0].spec.numa_node, 0);
  EXPECT_EQ(node->gpus[1].spec.numa_node, -1);
}

TEST_F(NvmlDiscoveryTest, FabricCliquesThatDisagreeGiveNoDomain) {
  json g0 = Gpu(0, "NVIDIA GB200", 189471);
  json g1 = Gpu(1, "NVIDIA GB200", 189471);
  json g2 = Gpu(2, "NVIDIA GB200", 189471);
  g0["fabric"] = {{"cluster_uuid", "b7f0e0a1123444bc8def0123456789ab"}, {"clique_id", 7}};
  g1["fabric"] = {{"cluster_uuid", "b7f0e0a1123444bc8def0123456789ab"}, {"clique_id", 8}};
  g2["fabric"] = {{"cluster_uuid", "b7f0e0a1123444bc8def0123456789ab"},
                  {"clique_id", 7},
                  {"state", 2}};  // still registering: no clique yet
  Configure({{"gpus", {g0, g1, g2}}, {"pcie", AllPcie(3, 40)}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_FALSE(node->gpus[2].has_fabric);
  EXPECT_EQ(node->NvLinkDomain(), "");
  EXPECT_THAT(node->fabric_note, HasSubstr("different NVLink fabric cliques"));
}

TEST_F(NvmlDiscoveryTest, MigInstancesAsConfigured) {
  json a100 = Gpu(0, "NVIDIA A100-SXM4-80GB", 81920);
  a100["mig"] = {{"current", 1},
                 {"instances",
                  {{{"profile_id", 9}, {"start", 4}, {"size", 4}},
                   {{"profile_id", 19}, {"start", 1}, {"size", 1}},
                   {{"profile_id", 19}, {"start", 0}, {"size", 1}}}}};
  json off = Gpu(1, "NVIDIA A100-SXM4-80GB", 81920);
  off["mig"] = {{"current", 0}};
  json l4 = Gpu(2, "NVIDIA L4", 23034);
  l4["mig"] = {{"current", 1}};
  json odd = Gpu(3, "NVIDIA A100-SXM4-80GB", 81920);
  odd["mig"] = {{"current", 1},
                {"instances",
                 {{{"profile_id", 5}, {"start", 0}, {"size", 4}},
                  {{"profile_id", 9}, {"start", 4}, {"size", 4}},
                  {{"profile_id", 19}, {"start", 6}, {"size", 1}}}}};
  Configure({{"gpus", {a100, off, l4, odd}}, {"pcie", AllPcie(4, 50)}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  const core::GpuSpec& spec = node->gpus[0].spec;
  EXPECT_TRUE(spec.mig_enabled);
  ASSERT_EQ(spec.mig_layout.size(), 3u);
  const core::MigModel* model = core::FindMigModel("A100-80GB");
  EXPECT_EQ(core::MigPlacementName(*model, spec.mig_layout[0]), "1g.10gb@0");
  EXPECT_EQ(core::MigPlacementName(*model, spec.mig_layout[1]), "1g.10gb@1");
  EXPECT_EQ(core::MigPlacementName(*model, spec.mig_layout[2]), "3g.40gb@4");
  EXPECT_FALSE(node->gpus[1].spec.mig_enabled);
  EXPECT_TRUE(node->gpus[1].health.healthy);
  // MIG on a GPU tessera has no table for: not used, and the reason says so.
  EXPECT_FALSE(node->gpus[2].health.healthy);
  EXPECT_THAT(node->gpus[2].health.reason, HasSubstr("no MIG profile table for NVIDIA L4"));
  EXPECT_FALSE(node->gpus[2].spec.mig_enabled);
  // Instances that overlap (a 3g at 4 over a 4g at 0 is fine, the 1g at 6 collides with the 3g).
  EXPECT_FALSE(node->gpus[3].health.healthy);
  EXPECT_THAT(node->gpus[3].health.reason, HasSubstr("MIG instances do not fit"));
  absl::StatusOr<records::Inventory> inv =
      records::InventoryFromJson(records::InventoryToJson(node->ToInventory()));
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_FALSE(inv->healthy(2));
  EXPECT_TRUE(inv->gpus[0].mig_enabled);
}

TEST_F(NvmlDiscoveryTest, XidEventsAreClassifiedAndNeverHeldByDiscovery) {
  Configure(
      {{"gpus", {Gpu(0, "NVIDIA H100 80GB HBM3", 81559), Gpu(1, "NVIDIA H100 80GB HBM3", 81559)}},
       {"pcie", AllPcie(2, 30)}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Discover().ok());  // registers for events
  absl::StatusOr<WaitResult> quiet = d->Wait(std::chrono::milliseconds(20));
  ASSERT_TRUE(quiet.ok()) << quiet.status();
  EXPECT_TRUE(quiet->events.empty());

  ASSERT_EQ(inject_xid_(1, 13), 0);  // an application's own fault
  absl::StatusOr<WaitResult> app = d->Wait(std::chrono::seconds(5));
  ASSERT_TRUE(app.ok()) << app.status();
  ASSERT_EQ(app->events.size(), 1u);
  EXPECT_EQ(app->events[0].gpu_index, 1);
  EXPECT_EQ(app->events[0].xid, 13);
  EXPECT_EQ(app->events[0].klass.cause, FaultCause::kApplication);
  EXPECT_FALSE(app->events[0].critical());
  EXPECT_TRUE(app->events[0].mig.empty());
  EXPECT_FALSE(app->changed);
  EXPECT_TRUE(d->Discover()->gpus[1].health.healthy);

  ASSERT_EQ(inject_xid_(1, 79), 0);
  ASSERT_EQ(inject_xid_(1, 79), 0);
  absl::StatusOr<WaitResult> bad = d->Wait(std::chrono::seconds(5));
  ASSERT_TRUE(bad.ok()) << bad.status();
  ASSERT_EQ(bad->events.size(), 2u);  // both queued events, in one answer
  EXPECT_TRUE(bad->events[0].critical());
  EXPECT_EQ(bad->events[0].klass.action, "RESTART_BM");
  EXPECT_EQ(bad->events[0].uuid, Gpu(1, "", 1)["uuid"]);
  EXPECT_EQ(bad->events[0].text, "XID 79: GPU has fallen off the bus");
  EXPECT_TRUE(bad->changed) << "a hardware XID: discover again";
  // What an XID means over time is the agent's health tracker's: discovery reports what the
  // driver says now, and the driver says nothing else here.
  EXPECT_TRUE(d->Discover()->gpus[1].health.healthy);
}

TEST_F(NvmlDiscoveryTest, AMigInstancesXidNamesTheInstance) {
  json a100 = Gpu(0, "NVIDIA A100-SXM4-80GB", 81920);
  a100["mig"] = {{"current", 1},
                 {"instances",
                  {{{"profile_id", 19}, {"start", 0}, {"size", 1}},
                   {{"profile_id", 9}, {"start", 4}, {"size", 4}}}}};
  Configure({{"gpus", {a100}}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Discover().ok());
  auto inject_mig = reinterpret_cast<int (*)(unsigned, unsigned long long, unsigned, unsigned)>(
      dlsym(fake_, "tessera_fake_nvml_inject_mig_xid"));
  ASSERT_NE(inject_mig, nullptr);
  ASSERT_EQ(inject_mig(0, 31, 2, 0), 0);  // GPU instance 2: the second listed, 3g.40gb at 4
  absl::StatusOr<WaitResult> w = d->Wait(std::chrono::seconds(5));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->events.size(), 1u);
  EXPECT_EQ(w->events[0].mig, "3g.40gb@4");
  EXPECT_EQ(w->events[0].klass.cause, FaultCause::kApplication);
}

TEST_F(NvmlDiscoveryTest, TheDriversHealthConditionsAndAReset) {
  json gpus = json::array();
  for (int i = 0; i < 3; ++i) gpus.push_back(Gpu(i, "NVIDIA H100 80GB HBM3", 81559));
  gpus[0]["recovery_action"] = 0;
  gpus[1]["remapped_rows"] = {{"corrected", 0}, {"uncorrected", 1}, {"pending", true}};
  gpus[2]["retired_pages_pending"] = true;
  Configure({{"gpus", gpus}, {"pcie", AllPcie(3, 50)}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_TRUE(node->gpus[0].conditions.empty());
  EXPECT_TRUE(node->gpus[0].health.healthy);
  ASSERT_EQ(node->gpus[1].conditions.size(), 1u);
  EXPECT_EQ(node->gpus[1].conditions[0].condition, HealthCondition::kRowRemapPending);
  EXPECT_THAT(node->gpus[1].health.reason, HasSubstr("1 uncorrectable rows remapped"));
  EXPECT_EQ(node->gpus[1].fault, FaultEffect::kDrain);
  ASSERT_EQ(node->gpus[2].conditions.size(), 1u);
  EXPECT_EQ(node->gpus[2].conditions[0].condition, HealthCondition::kRetiredPagesPending);

  // The driver decides GPU 0 needs a reset: the field changes and XID 154 says so.
  auto set_action = reinterpret_cast<int (*)(unsigned, int)>(
      dlsym(fake_, "tessera_fake_nvml_set_recovery_action"));
  auto reset = reinterpret_cast<int (*)(unsigned)>(dlsym(fake_, "tessera_fake_nvml_reset"));
  ASSERT_TRUE(set_action && reset);
  ASSERT_EQ(set_action(0, 1), 0);
  absl::StatusOr<WaitResult> w = d->Wait(std::chrono::seconds(5));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_EQ(w->events.size(), 1u);
  EXPECT_EQ(w->events[0].xid, 154);
  EXPECT_TRUE(w->changed);
  node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_EQ(node->gpus[0].conditions.size(), 1u);
  EXPECT_EQ(node->gpus[0].conditions[0].condition, HealthCondition::kRecoveryReset);
  EXPECT_EQ(node->gpus[0].fault, FaultEffect::kFail);
  EXPECT_FALSE(node->gpus[0].health.healthy);

  // The GPUs are reset: nothing left.
  for (unsigned i = 0; i < 3; ++i) ASSERT_EQ(reset(i), 0);
  node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(node->gpus[i].conditions.empty()) << i;
    EXPECT_TRUE(node->gpus[i].health.healthy) << i;
  }
}

TEST_F(NvmlDiscoveryTest, AnNvLinkDownLeavesThePairWithWhatLiesUnder) {
  json gpus = json::array();
  for (int i = 0; i < 2; ++i) gpus.push_back(Gpu(i, "NVIDIA H100 NVL", 95830));
  gpus[0]["nvlinks"] = {"gpu:" + Bus(1), "gpu:" + Bus(1)};
  gpus[1]["nvlinks"] = {"gpu:" + Bus(0), "gpu:" + Bus(0)};
  Configure({{"gpus", gpus}, {"pcie", AllPcie(2, 50)}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->Discover()->links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 2}));
  auto set_nvlink = reinterpret_cast<int (*)(unsigned, unsigned, int)>(
      dlsym(fake_, "tessera_fake_nvml_set_nvlink"));
  ASSERT_NE(set_nvlink, nullptr);
  ASSERT_EQ(set_nvlink(0, 0, 0), 0);
  EXPECT_EQ(d->Discover()->links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 2}))
      << "the peer still counts both";
  ASSERT_EQ(set_nvlink(1, 0, 0), 0);
  ASSERT_EQ(set_nvlink(0, 1, 0), 0);
  ASSERT_EQ(set_nvlink(1, 1, 0), 0);
  EXPECT_EQ(d->Discover()->links.at(0, 1), (core::Link{core::LinkKind::kSys, 0}));
  for (unsigned g = 0; g < 2; ++g) {
    for (unsigned l = 0; l < 2; ++l) ASSERT_EQ(set_nvlink(g, l, 1), 0);
  }
  EXPECT_EQ(d->Discover()->links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 2}));
}

TEST_F(NvmlDiscoveryTest, MigReconfigurationIsAChange) {
  json a100 = Gpu(0, "NVIDIA A100-SXM4-80GB", 81920);
  a100["mig"] = {{"current", 1}, {"instances", json::array()}};
  Configure({{"gpus", {a100}}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Discover().ok());
  a100["mig"]["instances"] = {{{"profile_id", 0}, {"start", 0}, {"size", 8}}};
  std::ofstream(path_) << json{{"gpus", {a100}}}.dump();
  ASSERT_EQ(reload_(), 0);
  absl::StatusOr<WaitResult> w = d->Wait(std::chrono::seconds(5));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->changed);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok());
  ASSERT_EQ(node->gpus[0].spec.mig_layout.size(), 1u);
  EXPECT_EQ(node->gpus[0].spec.mig_layout[0].start, 0);
}

TEST_F(NvmlDiscoveryTest, ALostGpuKeepsItsIndexAndIsUnhealthy) {
  json gpus = json::array();
  for (int i = 0; i < 3; ++i) gpus.push_back(Gpu(i, "NVIDIA H100 80GB HBM3", 81559));
  Configure({{"gpus", gpus}, {"pcie", {{0, 10, 50}, {10, 0, 50}, {50, 50, 0}}}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  ASSERT_TRUE(d->Discover().ok());
  ASSERT_EQ(set_lost_(1, 1), 0);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_EQ(node->gpus.size(), 3u);
  EXPECT_TRUE(node->gpus[0].health.healthy);
  EXPECT_TRUE(node->gpus[2].health.healthy);
  const DiscoveredGpu& lost = node->gpus[1];
  EXPECT_FALSE(lost.health.healthy);
  EXPECT_THAT(lost.health.reason, HasSubstr("GPU is lost"));
  EXPECT_EQ(lost.spec.uuid, Gpu(1, "", 1)["uuid"]);  // as it was last seen
  EXPECT_EQ(lost.spec.index, 1);
  EXPECT_EQ(node->links.at(0, 1), (core::Link{core::LinkKind::kPix, 0}));  // as last seen
  EXPECT_EQ(node->links.at(0, 2), (core::Link{core::LinkKind::kSys, 0}));
  ASSERT_EQ(set_lost_(1, 0), 0);
}

TEST_F(NvmlDiscoveryTest, ClearErrorsWithoutDriverOrGpus) {
  absl::StatusOr<std::unique_ptr<NvmlDiscovery>> missing =
      NvmlDiscovery::Open("libnvidia-ml-that-is-not-there.so.1");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot load NVML"));
  EXPECT_THAT(missing.status().message(), HasSubstr("Is the NVIDIA driver installed?"));

  Configure({{"init_error", 9}, {"gpus", json::array()}});
  absl::StatusOr<std::unique_ptr<NvmlDiscovery>> unloaded =
      NvmlDiscovery::Open("libnvidia-ml.so.1");
  ASSERT_FALSE(unloaded.ok());
  EXPECT_THAT(unloaded.status().message(),
              HasSubstr("nvmlInit failed: Driver Not Loaded (NVML error 9): the NVIDIA kernel "
                        "module is not loaded"));
  EXPECT_EQ(init_count_(), 0);

  Configure({{"gpus", json::array()}});
  auto d = Open();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> none = d->Discover();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("NVML reports no GPU on this node"));
}

TEST_F(NvmlDiscoveryTest, ShutsNvmlDownWhenDone) {
  Configure({{"gpus", {Gpu(0, "NVIDIA H100 80GB HBM3", 81559)}}});
  {
    auto d = Open();
    ASSERT_NE(d, nullptr);
    ASSERT_TRUE(d->Discover().ok());
    EXPECT_EQ(init_count_(), 1);
  }
  EXPECT_EQ(init_count_(), 0);
}

// MIG changes through NVML, against the fake's driver-like MIG state (placements, overlaps,
// compute instances, MIG device UUIDs).
class NvmlMigTest : public NvmlDiscoveryTest {
 protected:
  // GPU 0: an H100 in MIG mode with `instances`; GPU 1: an H100 with MIG off.
  std::unique_ptr<NvmlDiscovery> OpenH100s(json instances = json::array(),
                                           json extra = json::object()) {
    h100_ = Gpu(0, "NVIDIA H100 80GB HBM3", 81559);
    h100_["mig"] = {{"current", 1}, {"instances", instances}};
    off_ = Gpu(1, "NVIDIA H100 80GB HBM3", 81559);
    off_["mig"] = {{"current", 0}};
    json config = {{"gpus", {h100_, off_}}, {"pcie", AllPcie(2, 50)}};
    config.update(extra);
    Configure(config);
    auto d = Open();
    if (d) {
      EXPECT_TRUE(d->Discover().ok());  // registers for MIG events
    }
    return d;
  }
  static std::vector<std::string> Layout(const DiscoveredGpu& g) {
    const core::MigModel* model = core::FindMigModel(g.spec.model);
    std::vector<std::string> out;
    for (const core::MigPlacement& p : g.spec.mig_layout) {
      out.push_back(core::MigPlacementName(*model, p));
    }
    return out;
  }
  std::string Uuid(int i) { return Gpu(i, "", 1)["uuid"]; }
  json h100_, off_;
};

TEST_F(NvmlMigTest, CreatesAnInstanceAtItsPlacementAndDiscoveryListsIt) {
  auto d = OpenH100s();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<DiscoveredGpu> after = d->ReconfigureMig(Uuid(0), {}, {"3g.40gb", 4});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(Layout(*after), ElementsAre("3g.40gb@4"));
  ASSERT_EQ(after->mig_uuids.size(), 1u);
  EXPECT_THAT(after->mig_uuids[0], StartsWith("MIG-"));
  after = d->ReconfigureMig(Uuid(0), {}, {"1g.10gb", 0});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(Layout(*after), ElementsAre("1g.10gb@0", "3g.40gb@4"));
  // Discovery sees what was created, with the same identities (read from the MIG devices).
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_THAT(Layout(node->gpus[0]), ElementsAre("1g.10gb@0", "3g.40gb@4"));
  EXPECT_EQ(node->gpus[0].mig_uuids, after->mig_uuids);
  EXPECT_NE(node->gpus[0].mig_uuids[0], node->gpus[0].mig_uuids[1]);
  EXPECT_TRUE(node->gpus[0].health.healthy);
  // Each creation was a MIG configuration change for the agent's loop.
  absl::StatusOr<WaitResult> w = d->Wait(std::chrono::seconds(5));
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(w->changed);
}

TEST_F(NvmlMigTest, OverlapsAndBadPlacementsAreRefusedAsTheDriverRefusesThem) {
  auto d = OpenH100s({{{"profile_id", 9}, {"start", 4}, {"uuid", "MIG-admin"}}});
  ASSERT_NE(d, nullptr);
  // Slices 4-5 belong to the 3g at 4.
  absl::StatusOr<DiscoveredGpu> over = d->ReconfigureMig(Uuid(0), {}, {"2g.20gb", 4});
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(over.status().message(), HasSubstr("MIG instance 2g.20gb@4 on GPU 0 (" + Uuid(0) +
                                                 "): the driver has no room for it"));
  EXPECT_THAT(over.status().message(), HasSubstr("memory slices 4-5 overlap"));
  EXPECT_THAT(over.status().message(), HasSubstr("profile 9 at slice 4"));
  EXPECT_THAT(over.status().message(), HasSubstr("nvidia-smi mig -i 0 -dci"));
  // A 3g starts at 0 or 4 only.
  absl::StatusOr<DiscoveredGpu> odd = d->ReconfigureMig(Uuid(0), {}, {"3g.40gb", 2});
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(odd.status().message(), HasSubstr("does not place 3g.40gb at slice 2 (its "
                                                "placements start at 0, 4"));
  // A profile the GPU does not have.
  absl::StatusOr<DiscoveredGpu> unknown = d->ReconfigureMig(Uuid(0), {}, {"3g.20gb", 0});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("has no MIG profile 3g.20gb"));
  // Nothing changed, and the administrator's instance is untouched.
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok());
  EXPECT_THAT(Layout(node->gpus[0]), ElementsAre("3g.40gb@4"));
  EXPECT_THAT(node->gpus[0].mig_uuids, ElementsAre("MIG-admin"));
}

TEST_F(NvmlMigTest, DestroyTakesTheComputeInstanceThenTheGpuInstance) {
  auto d = OpenH100s({{{"profile_id", 19}, {"start", 0}}, {{"profile_id", 9}, {"start", 4}}});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<DiscoveredGpu> after = d->DestroyMig(Uuid(0), {"3g.40gb", 4});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(Layout(*after), ElementsAre("1g.10gb@0"));
  absl::StatusOr<DiscoveredGpu> again = d->DestroyMig(Uuid(0), {"3g.40gb", 4});
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kNotFound);
  // What a plan does: the idle 1g goes, a 7g over the whole GPU comes.
  after = d->ReconfigureMig(Uuid(0), {{"1g.10gb", 0}}, {"7g.80gb", 0});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(Layout(*after), ElementsAre("7g.80gb@0"));
  ASSERT_EQ(after->mig_uuids.size(), 1u);
  EXPECT_THAT(after->mig_uuids[0], StartsWith("MIG-"));
}

TEST_F(NvmlMigTest, AnInstanceInUseIsNotDestroyed) {
  auto d = OpenH100s({{{"profile_id", 9}, {"start", 0}, {"busy", true}}});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<DiscoveredGpu> busy = d->DestroyMig(Uuid(0), {"3g.40gb", 0});
  ASSERT_FALSE(busy.ok());
  EXPECT_THAT(busy.status().message(), HasSubstr("MIG instance 3g.40gb@0 on GPU 0 (" + Uuid(0) +
                                                 "): a process still runs on it"));
  EXPECT_THAT(Layout(d->Discover()->gpus[0]), ElementsAre("3g.40gb@0"));
}

TEST_F(NvmlMigTest, AGpuInstanceLeftWithoutComputeInstanceIsCompleted) {
  // A creation interrupted between its two steps (the agent killed): the GPU instance is there
  // without a MIG device, so without an identity.
  auto d = OpenH100s({{{"profile_id", 14}, {"start", 2}, {"compute_instance", false}}});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<NodeGpus> node = d->Discover();
  ASSERT_TRUE(node.ok());
  EXPECT_THAT(Layout(node->gpus[0]), ElementsAre("2g.20gb@2"));
  EXPECT_THAT(node->gpus[0].mig_uuids, ElementsAre(""));
  absl::StatusOr<DiscoveredGpu> after = d->ReconfigureMig(Uuid(0), {}, {"2g.20gb", 2});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_THAT(Layout(*after), ElementsAre("2g.20gb@2"));
  EXPECT_THAT(after->mig_uuids[0], StartsWith("MIG-"));
}

TEST_F(NvmlMigTest, AComputeInstanceThatCannotBeMadeTakesItsGpuInstanceWithIt) {
  auto d = OpenH100s(json::array(), {{"errors", {{"nvmlGpuInstanceCreateComputeInstance", 23}}}});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<DiscoveredGpu> after = d->ReconfigureMig(Uuid(0), {}, {"4g.40gb", 0});
  ASSERT_FALSE(after.ok());
  EXPECT_THAT(after.status().message(),
              HasSubstr("its compute instance (profile 3, 4 slices): "
                        "nvmlGpuInstanceCreateComputeInstance: Insufficient resources"));
  EXPECT_TRUE(d->Discover()->gpus[0].spec.mig_layout.empty());  // rolled back
}

TEST_F(NvmlMigTest, NvmlErrorsSayWhatToDo) {
  auto d =
      OpenH100s(json::array(), {{"errors", {{"nvmlDeviceCreateGpuInstanceWithPlacement", 4}}}});
  ASSERT_NE(d, nullptr);
  absl::StatusOr<DiscoveredGpu> denied = d->ReconfigureMig(Uuid(0), {}, {"1g.10gb", 3});
  ASSERT_FALSE(denied.ok());
  EXPECT_THAT(denied.status().message(),
              HasSubstr("nvmlDeviceCreateGpuInstanceWithPlacement: Insufficient Permissions (NVML "
                        "error 4): MIG changes need root"));
  absl::StatusOr<DiscoveredGpu> off = d->ReconfigureMig(Uuid(1), {}, {"1g.10gb", 3});
  ASSERT_FALSE(off.ok());
  EXPECT_THAT(off.status().message(),
              HasSubstr("the GPU is not in MIG mode (nvidia-smi -i 1 -mig 1)"));
  absl::StatusOr<DiscoveredGpu> nowhere = d->SetMigMode("GPU-not-here", true);
  ASSERT_FALSE(nowhere.ok());
  EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(NvmlMigTest, MigModeTurnsOnAndOffAndSaysWhenAResetIsPending) {
  auto d = OpenH100s();
  ASSERT_NE(d, nullptr);
  absl::StatusOr<DiscoveredGpu> on = d->SetMigMode(Uuid(1), true);
  ASSERT_TRUE(on.ok()) << on.status();
  EXPECT_TRUE(on->spec.mig_enabled);
  ASSERT_TRUE(d->ReconfigureMig(Uuid(1), {}, {"1g.20gb", 6}).ok());
  absl::StatusOr<DiscoveredGpu> busy = d->SetMigMode(Uuid(1), false);
  ASSERT_FALSE(busy.ok());
  EXPECT_THAT(busy.status().message(), HasSubstr("still has GPU instances (profile 15 at slice 6"));
  ASSERT_TRUE(d->DestroyMig(Uuid(1), {"1g.20gb", 6}).ok());
  absl::StatusOr<DiscoveredGpu> off = d->SetMigMode(Uuid(1), false);
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->spec.mig_enabled);

  // A GPU whose mode change needs a reset (a VM with the GPU passed through), or is busy.
  off_["mig"]["activation"] = 16;
  h100_["mig"] = {{"current", 0}, {"activation", 19}};
  std::ofstream(path_) << json{{"gpus", {h100_, off_}}, {"pcie", AllPcie(2, 50)}}.dump();
  ASSERT_EQ(reload_(), 0);
  absl::StatusOr<DiscoveredGpu> pending = d->SetMigMode(Uuid(1), true);
  ASSERT_FALSE(pending.ok());
  EXPECT_THAT(pending.status().message(), HasSubstr("MIG mode of GPU 1 (" + Uuid(1) +
                                                    ") is set on but takes effect only "
                                                    "after a GPU reset"));
  EXPECT_THAT(pending.status().message(), HasSubstr("nvidia-smi -i 1 -r"));
  EXPECT_FALSE(d->Discover()->gpus[1].spec.mig_enabled);
  absl::StatusOr<DiscoveredGpu> later = d->ReconfigureMig(Uuid(1), {}, {"1g.10gb", 0});
  ASSERT_FALSE(later.ok());
  EXPECT_THAT(later.status().message(), HasSubstr("MIG mode is set on but waits for a GPU reset"));
  absl::StatusOr<DiscoveredGpu> in_use = d->SetMigMode(Uuid(0), true);
  ASSERT_FALSE(in_use.ok());
  EXPECT_THAT(in_use.status().message(), HasSubstr("cannot be turned on now: the GPU is in use"));
}

}  // namespace
}  // namespace tessera::agent
