#include "agent/dra/pool.h"

#include <fstream>
#include <set>
#include <sstream>

#include "agent/discovery/fake_gpus_file.h"
#include "agent/dra/names.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent::dra {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;

NodeGpus ReadGpus(const std::string& name) {
  const std::string path = std::string(TESSERA_SOURCE_DIR) + "/test/controlplane/gpus/" + name;
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<NodeGpus> gpus = ParseFakeGpusFile(text.str(), path);
  EXPECT_TRUE(gpus.ok()) << gpus.status();
  return *gpus;
}

std::vector<json> AllDevices(const Pool& pool) {
  std::vector<json> out;
  for (const json& s : pool.slices) {
    for (const json& d : s.value("devices", json::array())) out.push_back(d);
  }
  return out;
}

const json* Device(const std::vector<json>& devices, const std::string& name) {
  for (const json& d : devices) {
    if (d["name"] == name) return &d;
  }
  return nullptr;
}

TEST(Pool, H100NodePublishesWholeGpusMigPlacementsAndCounters) {
  NodeGpus gpus = ReadGpus("h100-8x-nvswitch.json");
  Pool pool =
      BuildPool(gpus, {.node_name = "node-a",
                       .mig_mode_switch = true,  // MIG placements of GPUs not in MIG mode too
                       .pcie_roots = {{gpus.gpus[0].spec.pci_bus_id, "pci0000:16"}}});
  EXPECT_EQ(pool.name, "node-a");
  // 8 whole GPUs and 25 MIG placements per H100 (7 + 7 + 4 + 3 + 2 + 1 + 1).
  EXPECT_EQ(pool.devices.size(), 8u * 26);
  // One counter slice (8 sets) and 208 devices at 64 per slice: 4 device slices.
  ASSERT_EQ(pool.slices.size(), 5u);
  EXPECT_EQ(pool.slices[0]["sharedCounters"].size(), 8u);
  EXPECT_FALSE(pool.slices[0].contains("devices"));
  for (size_t i = 1; i < 5; ++i) {
    EXPECT_FALSE(pool.slices[i].contains("sharedCounters"));
    EXPECT_LE(pool.slices[i]["devices"].size(), 64u);
  }
  for (const json& s : pool.slices) {
    EXPECT_EQ(s["driver"], "gpu.tessera.dev");
    EXPECT_EQ(s["nodeName"], "node-a");
    EXPECT_EQ(s["pool"]["name"], "node-a");
    EXPECT_EQ(s["pool"]["resourceSliceCount"], 5);
  }

  std::vector<json> devices = AllDevices(pool);
  ASSERT_EQ(devices.size(), pool.devices.size());
  std::set<std::string> names;
  for (const json& d : devices) names.insert(d["name"]);
  EXPECT_EQ(names.size(), devices.size()) << "device names are unique in the pool";

  const json* gpu0 = Device(devices, "gpu-0");
  ASSERT_NE(gpu0, nullptr);
  const json& a = (*gpu0)["attributes"];
  EXPECT_EQ(a["type"]["string"], "gpu");
  EXPECT_EQ(a["uuid"]["string"], "GPU-3fcb4b70-f79a-7ffc-e71b-9592244ececa");
  EXPECT_EQ(a["index"]["int"], 0);
  EXPECT_EQ(a["model"]["string"], "H100-80GB");
  EXPECT_EQ(a["productName"]["string"], "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(a["numaNode"]["int"], 0);
  EXPECT_EQ(a["pciBusID"]["string"], "00000000:1B:00.0");
  EXPECT_EQ(a["resource.kubernetes.io/pciBusID"]["string"], "0000:1b:00.0");
  EXPECT_EQ(a["resource.kubernetes.io/pcieRoot"]["string"], "pci0000:16");
  EXPECT_EQ(a["nvlinkDomain"]["string"], "node-a");  // every GPU joined by NVSwitch
  EXPECT_EQ(a["migCapable"]["bool"], true);
  EXPECT_EQ(a["migEnabled"]["bool"], false);
  EXPECT_EQ(a["driverVersion"]["version"], "570.133.20");
  EXPECT_EQ((*gpu0)["allowMultipleAllocations"], true);
  EXPECT_EQ((*gpu0)["capacity"]["memory"],
            json::parse(R"({"value": "81559Mi", "requestPolicy": {"default": "81559Mi",
                            "validRange": {"min": "1Mi", "step": "1Mi"}}})"));
  EXPECT_EQ((*gpu0)["capacity"]["compute"],
            json::parse(R"({"value": "100", "requestPolicy": {"default": "0",
                            "validRange": {"min": "0", "max": "100", "step": "1"}}})"));
  // The whole GPU takes every counter of its set: shares and MIG instances exclude each other.
  ASSERT_EQ((*gpu0)["consumesCounters"].size(), 1u);
  EXPECT_EQ((*gpu0)["consumesCounters"][0]["counterSet"], "gpu-0");
  EXPECT_EQ((*gpu0)["consumesCounters"][0]["counters"].size(), 9u);  // 8 slices + media engine
  EXPECT_EQ((*gpu0)["consumesCounters"][0]["counters"],
            pool.slices[0]["sharedCounters"][0]["counters"]);
  EXPECT_FALSE(Device(devices, "gpu-1")->contains("taints"));
  // Only GPU 0's root was known.
  EXPECT_FALSE(
      (*Device(devices, "gpu-1"))["attributes"].contains("resource.kubernetes.io/pcieRoot"));

  const json* mig = Device(devices, "gpu-2-mig-3g-40gb-4");
  ASSERT_NE(mig, nullptr);
  EXPECT_EQ((*mig)["attributes"]["type"]["string"], "mig");
  EXPECT_EQ((*mig)["attributes"]["profile"]["string"], "3g.40gb");
  EXPECT_EQ((*mig)["attributes"]["migStart"]["int"], 4);
  EXPECT_EQ((*mig)["attributes"]["parentIndex"]["int"], 2);
  EXPECT_EQ((*mig)["attributes"]["parentUUID"]["string"],
            "GPU-e427f474-114d-9fce-ff3f-3f8cfe53b312");
  EXPECT_FALSE(mig->contains("allowMultipleAllocations"));
  EXPECT_FALSE((*mig)["capacity"]["memory"].contains("requestPolicy"));
  EXPECT_EQ((*mig)["capacity"]["compute"]["value"], "42");  // 3 of 7 compute slices
  EXPECT_EQ((*mig)["consumesCounters"][0]["counterSet"], "gpu-2");
  std::vector<std::string> counters;
  for (const auto& [k, v] : (*mig)["consumesCounters"][0]["counters"].items())
    counters.push_back(k);
  EXPECT_THAT(counters,
              ElementsAre("memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7"));
  const json* me = Device(devices, "gpu-0-mig-1g-10gb-me-3");
  ASSERT_NE(me, nullptr);
  EXPECT_TRUE((*me)["consumesCounters"][0]["counters"].contains("media-engine"));

  const PoolDevice* found = pool.Find("gpu-2-mig-3g-40gb-4");
  ASSERT_NE(found, nullptr);
  EXPECT_TRUE(found->mig);
  EXPECT_EQ(found->gpu_index, 2);
  EXPECT_EQ(found->mig_profile, "3g.40gb");
  EXPECT_EQ(found->placement.start, 4);
  EXPECT_EQ(pool.Find("gpu-9"), nullptr);
}

TEST(Pool, PcieNodeHasNoNvlinkDomainNoCountersAndFitsOneSlice) {
  NodeGpus gpus = ReadGpus("l40s-2x-pcie.json");
  Pool pool = BuildPool(gpus, {.node_name = "node-b"});
  ASSERT_EQ(pool.slices.size(), 1u);
  ASSERT_EQ(pool.slices[0]["devices"].size(), 2u);
  for (const json& d : pool.slices[0]["devices"]) {
    EXPECT_FALSE(d["attributes"].contains("nvlinkDomain")) << d.dump();
    EXPECT_FALSE(d.contains("consumesCounters"));
    EXPECT_EQ(d["attributes"]["migCapable"]["bool"], false);
    EXPECT_EQ(d["attributes"]["driverVersion"]["version"], "580.95.5");  // "580.95.05"
  }
  EXPECT_EQ(pool.slices[0]["pool"]["resourceSliceCount"], 1);
}

TEST(Pool, WithoutMigDevicesTheWholeGpusConsumeNoCounters) {
  NodeGpus gpus = ReadGpus("h100-8x-nvswitch.json");
  Pool pool = BuildPool(gpus, {.node_name = "n", .mig_devices = false});
  EXPECT_EQ(pool.devices.size(), 8u);
  ASSERT_EQ(pool.slices.size(), 1u);
  EXPECT_FALSE(pool.slices[0]["devices"][0].contains("consumesCounters"));
  EXPECT_EQ(pool.slices[0]["devices"][0]["attributes"]["migCapable"]["bool"], true);
}

TEST(Pool, MigPlacementsOfAGpuNotInMigModeOnlyWhenTheAgentMaySwitchIt) {
  NodeGpus gpus = ReadGpus("h100-8x-nvswitch.json");
  gpus.gpus[2].spec.mig_enabled = true;
  Pool pool = BuildPool(gpus, {.node_name = "n"});
  // GPU 2 in MIG mode: its 25 placements; the others: their whole device only, and no counters.
  EXPECT_EQ(pool.devices.size(), 7u + 25u);
  EXPECT_NE(pool.Find("gpu-2-mig-1g-10gb-0"), nullptr);
  EXPECT_EQ(pool.Find("gpu-0-mig-1g-10gb-0"), nullptr);
  for (const json& s : pool.slices) {
    for (const json& d : s.value("devices", json::array())) {
      if (d["name"] == "gpu-0") {
        EXPECT_FALSE(d.contains("consumesCounters"));
      }
    }
  }
  Pool switching = BuildPool(gpus, {.node_name = "n", .mig_mode_switch = true});
  EXPECT_EQ(switching.devices.size(), 7u + 8u * 25u);
}

TEST(Pool, UnhealthyGpuIsTaintedAndMigModeGpuOffersOnlyInstances) {
  NodeGpus gpus = ReadGpus("h100-8x-nvswitch.json");
  gpus.gpus[3].health = {false, {79}, "XID 79: GPU has fallen off the bus"};
  gpus.gpus[5].spec.mig_enabled = true;
  Pool pool = BuildPool(gpus, {.node_name = "n", .mig_mode_switch = true});
  std::vector<json> devices = AllDevices(pool);
  const json* bad = Device(devices, "gpu-3");
  ASSERT_NE(bad, nullptr);
  EXPECT_EQ((*bad)["taints"],
            json::parse(R"([{"key": "gpu.tessera.dev/unhealthy", "value": "xid-79",
                             "effect": "NoSchedule"}])"));
  EXPECT_TRUE(Device(devices, "gpu-3-mig-7g-80gb-0")->contains("taints"));
  EXPECT_FALSE(pool.Find("gpu-3")->healthy);
  EXPECT_EQ(pool.Find("gpu-3")->health_reason, "XID 79: GPU has fallen off the bus");
  EXPECT_EQ(Device(devices, "gpu-5"), nullptr) << "a GPU in MIG mode is no whole GPU";
  EXPECT_NE(Device(devices, "gpu-5-mig-1g-10gb-6"), nullptr);
}

// Under the fault policy evict a failed GPU's devices are tainted NoExecute (kube-controller-
// manager then ends the pods of the claims that do not tolerate it); a draining GPU's stay
// NoSchedule, and without the option every unhealthy GPU's devices are NoSchedule. The taint's
// value names the condition when no XID explains it.
TEST(Pool, AFailedGpuIsTaintedNoExecuteOnlyWhenThePolicyEvicts) {
  NodeGpus gpus = ReadGpus("h100-8x-nvswitch.json");
  gpus.gpus[1].health = {false, {48}, "XID 48: double bit ECC error"};
  gpus.gpus[1].fault = FaultEffect::kFail;
  gpus.gpus[2].conditions = {Condition(HealthCondition::kGpuLost, "GPU is lost")};
  gpus.gpus[2].health = {false, {}, "GPU is lost"};
  gpus.gpus[2].fault = FaultEffect::kFail;
  gpus.gpus[4].health = {false, {4242}, "XID 4242"};
  gpus.gpus[4].fault = FaultEffect::kDrain;
  auto taint = [](const Pool& pool, const std::string& device) {
    std::vector<json> devices = AllDevices(pool);
    const json* d = Device(devices, device);
    return d == nullptr ? json() : d->value("taints", json::array());
  };
  Pool evict = BuildPool(gpus, {.node_name = "n", .no_execute_on_failure = true});
  EXPECT_EQ(taint(evict, "gpu-1"),
            json::parse(R"([{"key": "gpu.tessera.dev/unhealthy", "value": "xid-48",
                             "effect": "NoExecute"}])"));
  EXPECT_EQ(taint(evict, "gpu-2"),
            json::parse(R"([{"key": "gpu.tessera.dev/unhealthy", "value": "gpu-lost",
                             "effect": "NoExecute"}])"));
  EXPECT_EQ(taint(evict, "gpu-4")[0]["effect"], "NoSchedule") << "draining: the pods stay";
  EXPECT_EQ(taint(evict, "gpu-0"), json::array());
  Pool cordon = BuildPool(gpus, {.node_name = "n"});
  EXPECT_EQ(taint(cordon, "gpu-1")[0]["effect"], "NoSchedule");
  EXPECT_EQ(taint(cordon, "gpu-2")[0]["effect"], "NoSchedule");
}

TEST(Pool, ManyPlainGpusSplitAt128DevicesPerSlice) {
  NodeGpus gpus;
  const int n = 200;  // more than one slice holds; no MIG table for the model
  gpus.links = core::LinkMatrix(n);
  for (int i = 0; i < n; ++i) {
    DiscoveredGpu g;
    g.spec.index = i;
    g.spec.uuid = "GPU-" + std::to_string(i);
    g.spec.model = "T4";
    g.spec.memory_mib = 15360;
    gpus.gpus.push_back(g);
  }
  Pool pool = BuildPool(gpus, {.node_name = "big"});
  ASSERT_EQ(pool.slices.size(), 2u);
  EXPECT_EQ(pool.slices[0]["devices"].size(), 128u);
  EXPECT_EQ(pool.slices[1]["devices"].size(), 72u);
  EXPECT_EQ(pool.slices[1]["devices"][0]["capacity"]["memory"]["value"], "15Gi");
}

TEST(Pool, NvlinkIslandsAreNamedPerIslandAndFabricWins) {
  NodeGpus gpus;
  gpus.links = core::LinkMatrix(4);
  for (int i = 0; i < 4; ++i) {
    DiscoveredGpu g;
    g.spec.index = i;
    gpus.gpus.push_back(g);
  }
  gpus.links.Set(0, 1, core::Link{core::LinkKind::kNvLink, 4});
  gpus.links.Set(2, 3, core::Link{core::LinkKind::kNvLink, 4});
  EXPECT_THAT(NvlinkDomains(gpus, "pairs"),
              ElementsAre("pairs.0", "pairs.0", "pairs.2", "pairs.2"));
  gpus.links.Set(2, 3, core::Link{core::LinkKind::kPix, 0});
  EXPECT_THAT(NvlinkDomains(gpus, "one"), ElementsAre("one", "one", "", ""));
  for (DiscoveredGpu& g : gpus.gpus) {
    g.has_fabric = true;
    g.fabric = {"b7f0e0a1-1234-4abc-8def-0123456789ab", 3};
  }
  EXPECT_THAT(NvlinkDomains(gpus, "one"), ElementsAre("b7f0e0a1-1234-4abc-8def-0123456789ab.3",
                                                      "b7f0e0a1-1234-4abc-8def-0123456789ab.3",
                                                      "b7f0e0a1-1234-4abc-8def-0123456789ab.3",
                                                      "b7f0e0a1-1234-4abc-8def-0123456789ab.3"));
  // A long node name still makes a valid (<= 64 characters), distinct value.
  for (DiscoveredGpu& g : gpus.gpus) g.has_fabric = false;
  const std::string long_name(100, 'x');
  std::vector<std::string> long_domains = NvlinkDomains(gpus, long_name);
  EXPECT_EQ(long_domains[0].size(), 64u);
}

TEST(Pool, Helpers) {
  EXPECT_EQ(MibQuantity(81920), "80Gi");
  EXPECT_EQ(MibQuantity(81559), "81559Mi");
  EXPECT_EQ(MibQuantity(1024 * 1024), "1Ti");
  EXPECT_EQ(MibQuantity(0), "0Mi");
  EXPECT_EQ(DriverSemver("580.95.05"), "580.95.5");
  EXPECT_EQ(DriverSemver("535.104"), "535.104.0");
  EXPECT_EQ(DriverSemver("570.133.20"), "570.133.20");
  EXPECT_EQ(DriverSemver("r570"), "");
  EXPECT_EQ(DriverSemver(""), "");
  EXPECT_EQ(DriverSemver("1.2.3.4"), "");
  EXPECT_EQ(StandardPciBusId("00000000:1B:00.0"), "0000:1b:00.0");
  EXPECT_EQ(StandardPciBusId("0000:ca:00.0"), "0000:ca:00.0");
  EXPECT_EQ(StandardPciBusId("1B:00.0"), "");
  EXPECT_EQ(MigDeviceName(1, "1g.10gb+me", 3), "gpu-1-mig-1g-10gb-me-3");
  EXPECT_EQ(GpuDeviceName(7), "gpu-7");
}

}  // namespace
}  // namespace tessera::agent::dra
