// The DRA driver's MIG claims on NVML's backend: NvmlDiscovery (through the real dynamic loader,
// against the stateful fake libnvidia-ml.so.1 of agent/discovery/testing) discovers the GPUs and
// carries out the MIG changes, as `tessera agent --dra` does on a node with NVIDIA's driver.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/discovery/nvml_discovery.h"
#include "agent/dra/driver.h"
#include "agent/dra/driver_testing.h"
#include "agent/dra/names.h"
#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::FakeClaims;
using testing::FreshTestDir;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;
using testing::Uid;

// A claim allocated one device of this node's pool.
json Claim(const std::string& name, int uid, const std::string& device) {
  return testing::Claim(name, uid, {{{"device", device}}});
}

json Gpu(int i, json mig) {
  return {{"uuid", fmt::format("GPU-6f1c2a9e-0000-4000-8000-{:012d}", i)},
          {"name", "NVIDIA H100 80GB HBM3"},
          {"memory_bytes", 81559ULL << 20},
          {"pci_bus_id", fmt::format("00000000:{:02X}:00.0", 0x18 + 0x10 * i)},
          {"minor", i},
          {"numa_node", 0},
          {"mig", mig}};
}

class DriverNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir("dra-nvml", &options_);
    options_.edits.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
      const std::string name = path.substr(path.rfind('/') + 1);
      if (name == "nvidiactl") return DeviceNumber{'c', 195, 255};
      if (name.rfind("nvidia-", 0) == 0) return absl::NotFoundError(path + ": no such file");
      return DeviceNumber{'c', 195, std::stoll(name.substr(6))};
    };
  }
  // GPU 0 in MIG mode (an administrator turned it on) with `instances`, GPU 1 not.
  void StartNvml(json instances = json::array()) {
    std::ofstream(dir_ / "nvml.json") << json{
        {"gpus", {Gpu(0, {{"current", 1}, {"instances", instances}}), Gpu(1, {{"current", 0}})}},
        {"pcie", {{0, 50}, {50, 0}}}}.dump();
    ::setenv("TESSERA_FAKE_NVML", (dir_ / "nvml.json").c_str(), 1);
    absl::StatusOr<std::unique_ptr<NvmlDiscovery>> nvml = NvmlDiscovery::Open("libnvidia-ml.so.1");
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    nvml_ = std::move(*nvml);
    options_.mig = nvml_.get();  // what `tessera agent --dra` passes for NVML
  }
  void TearDown() override {
    nvml_.reset();
    shim::RemoveTestTree(dir_);
  }

  // What the agent's loop gives the driver: discovery now, and the pool built from it.
  void Rediscover(DraDriver& d) {
    absl::StatusOr<NodeGpus> found = nvml_->Discover();
    ASSERT_TRUE(found.ok()) << found.status();
    gpus_ = std::make_shared<const NodeGpus>(*found);
    d.SetGpus(gpus_,
              std::make_shared<const Pool>(BuildPool(
                  *gpus_, {.node_name = "node-a", .mig_mode_switch = options_.mig_mode_switch})));
  }
  std::unique_ptr<DraDriver> NewDriver() {
    auto d = std::make_unique<DraDriver>(claims_, options_);
    Rediscover(*d);
    EXPECT_TRUE(d->Restore().ok());
    return d;
  }
  DraDriver::ClaimAnswer PrepareOne(DraDriver& d, const std::string& name) {
    const json& c = claims_.claims.at("ns/" + name);
    ClaimRef ref{"ns", c["metadata"]["uid"], name};
    return d.Prepare({ref})[ref.uid];
  }
  json SpecOf(const std::string& uid) {
    std::ifstream in(options_.cdi_dir + "/k8s.gpu.tessera.dev-gpu_" + uid + ".json");
    return json::parse(in);
  }

  fs::path dir_;
  FakeClaims claims_;
  DriverOptions options_;
  std::unique_ptr<NvmlDiscovery> nvml_;
  std::shared_ptr<const NodeGpus> gpus_;
};

TEST_F(DriverNvmlTest, AMigClaimGetsItsInstanceFromNvmlAndUnprepareDestroysIt) {
  StartNvml();
  auto d = NewDriver();
  claims_.claims["ns/mig"] = Claim("mig", 40, "gpu-0-mig-3g-40gb-4");
  DraDriver::ClaimAnswer answer = PrepareOne(*d, "mig");
  ASSERT_EQ(answer.error, "");
  ASSERT_EQ(answer.devices.size(), 1u);
  EXPECT_TRUE(answer.devices[0].mig_created);
  const std::string mig_uuid = answer.devices[0].mig_uuid;
  EXPECT_THAT(mig_uuid, StartsWith("MIG-"));
  EXPECT_THAT(SpecOf(Uid(40))["containerEdits"]["env"].dump(),
              HasSubstr("NVIDIA_VISIBLE_DEVICES=" + mig_uuid + "\""));
  // NVML lists it: GPU instance 3g.40gb at slice 4, with that MIG device.
  absl::StatusOr<NodeGpus> node = nvml_->Discover();
  ASSERT_TRUE(node.ok());
  ASSERT_EQ(node->gpus[0].spec.mig_layout.size(), 1u);
  EXPECT_EQ(node->gpus[0].spec.mig_layout[0].start, 4);
  EXPECT_EQ(node->gpus[0].mig_uuids, std::vector<std::string>{mig_uuid});

  // An overlapping placement on the same GPU is refused by the driver before NVML is asked.
  claims_.claims["ns/over"] = Claim("over", 41, "gpu-0-mig-1g-10gb-5");
  EXPECT_THAT(PrepareOne(*d, "over").error, HasSubstr("still prepared on this node"));

  EXPECT_EQ(d->Unprepare({{"ns", Uid(40), "mig"}})[Uid(40)], "");
  node = nvml_->Discover();
  ASSERT_TRUE(node.ok());
  EXPECT_THAT(node->gpus[0].spec.mig_layout, IsEmpty());
  EXPECT_TRUE(node->gpus[0].spec.mig_enabled);  // the administrator's MIG mode stays
}

TEST_F(DriverNvmlTest, MigModeIsSwitchedThroughNvmlWhenThePolicyAllowsIt) {
  options_.mig_mode_switch = true;
  StartNvml();
  auto d = NewDriver();
  claims_.claims["ns/mig"] = Claim("mig", 50, "gpu-1-mig-1g-10gb-3");
  DraDriver::ClaimAnswer answer = PrepareOne(*d, "mig");
  ASSERT_EQ(answer.error, "");
  EXPECT_THAT(answer.devices[0].mig_uuid, StartsWith("MIG-"));
  absl::StatusOr<NodeGpus> node = nvml_->Discover();
  ASSERT_TRUE(node.ok());
  EXPECT_TRUE(node->gpus[1].spec.mig_enabled);
  EXPECT_EQ(node->gpus[1].spec.mig_layout.size(), 1u);
  EXPECT_EQ(d->Unprepare({{"ns", Uid(50), "mig"}})[Uid(50)], "");
  node = nvml_->Discover();
  ASSERT_TRUE(node.ok());
  EXPECT_FALSE(node->gpus[1].spec.mig_enabled);  // off again with its last instance
}

// A GPU instance at the claim's placement without its compute instance (someone's creation cut
// short): it has no MIG device, so no identity to give the container; the driver has it completed.
TEST_F(DriverNvmlTest, AGpuInstanceWithoutComputeInstanceIsCompletedForTheClaim) {
  StartNvml({{{"profile_id", 9}, {"start", 4}, {"compute_instance", false}}});
  auto d = NewDriver();
  EXPECT_EQ(gpus_->gpus[0].mig_uuids, std::vector<std::string>{""});
  claims_.claims["ns/mig"] = Claim("mig", 60, "gpu-0-mig-3g-40gb-4");
  DraDriver::ClaimAnswer answer = PrepareOne(*d, "mig");
  ASSERT_EQ(answer.error, "");
  EXPECT_THAT(answer.devices[0].mig_uuid, StartsWith("MIG-"));
  EXPECT_FALSE(answer.devices[0].mig_created);  // not the driver's: kept after the claim
  EXPECT_EQ(d->Unprepare({{"ns", Uid(60), "mig"}})[Uid(60)], "");
  absl::StatusOr<NodeGpus> node = nvml_->Discover();
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->gpus[0].mig_uuids, std::vector<std::string>{answer.devices[0].mig_uuid});
}

}  // namespace
}  // namespace tessera::agent::dra
