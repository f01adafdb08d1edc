// Classic mode's MIG plans on NVML's backend: the pod manager carries out an assignment's plan
// through NvmlDiscovery (the real dynamic loader, the stateful fake libnvidia-ml.so.1 of
// agent/discovery/testing), as `tessera agent` does on a node with NVIDIA's driver.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/discovery/nvml_discovery.h"
#include "agent/pods/pod_manager.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Uuid(int i) { return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i); }
std::string Uid(int i) { return "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a" + std::to_string(10 + i); }

json Gpu(int i, json mig) {
  return {{"uuid", Uuid(i)},
          {"name", "NVIDIA H100 80GB HBM3"},
          {"memory_bytes", 81559ULL << 20},
          {"pci_bus_id", i == 0 ? "00000000:18:00.0" : "00000000:28:00.0"},
          {"minor", i},
          {"mig", mig}};
}

PodRef Pod(int i, records::Assignment a) {
  a.node = "n1";
  PodRef p{"team", "p" + std::to_string(i), Uid(i), {}};
  p.annotations["tessera.dev/assignment"] = records::AssignmentToJson(a);
  return p;
}

records::Assignment MigPlan(const std::string& profile, int start,
                            std::vector<records::MigInstanceRecord> destroy) {
  records::AssignedGpu g;
  g.grant.gpu = 1;
  g.grant.exclusive = true;
  g.uuid = Uuid(1);
  g.mig_profile = profile;
  g.mig_start = start;
  records::Assignment a;
  a.gpus = {g};
  a.mig_create = true;
  a.mig_destroy = std::move(destroy);
  return a;
}

std::string Env(const ContainerEdits& e, const std::string& key) {
  for (const auto& [k, v] : e.env) {
    if (k == key) return v;
  }
  return "(unset)";
}

class PodManagerNvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-pods-nvml-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    fs::create_directories(dir_ / "dev");
    for (const char* n : {"nvidia0", "nvidia1", "nvidiactl"}) {
      fs::create_symlink("/dev/null", dir_ / "dev" / n);
    }
    // GPU 0 plain, GPU 1 in MIG mode with 1g.10gb (profile id 19) at slices 0 and 1.
    std::ofstream(dir_ / "nvml.json") << json{
        {"gpus",
         {Gpu(0, {{"current", 0}}),
          Gpu(1, {{"current", 1},
                  {"instances",
                   {{{"profile_id", 19}, {"start", 0}}, {{"profile_id", 19}, {"start", 1}}}}})}},
        {"pcie", {{0, 50}, {50, 0}}}}.dump();
    ::setenv("TESSERA_FAKE_NVML", (dir_ / "nvml.json").c_str(), 1);
    absl::StatusOr<std::unique_ptr<NvmlDiscovery>> nvml = NvmlDiscovery::Open("libnvidia-ml.so.1");
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    nvml_ = std::move(*nvml);
    options_.node_name = "n1";
    options_.edits.dev_dir = (dir_ / "dev").string();
    options_.pods_dir = (dir_ / "pods").string();
    options_.edits.driver.cuda = {"/usr/lib64/libcuda.so.580.95.05", "libcuda.so.1"};
    options_.edits.driver.nvml = {"/usr/lib64/libnvidia-ml.so.580.95.05", "libnvidia-ml.so.1"};
  }
  void TearDown() override {
    nvml_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::unique_ptr<PodManager> Manager() {
    auto m = std::make_unique<PodManager>(options_, nvml_.get());
    absl::StatusOr<NodeGpus> gpus = nvml_->Discover();
    EXPECT_TRUE(gpus.ok()) << gpus.status();
    m->SetGpus(std::make_shared<const NodeGpus>(*gpus));
    return m;
  }

  fs::path dir_;
  PodManagerOptions options_;
  std::unique_ptr<NvmlDiscovery> nvml_;
};

TEST_F(PodManagerNvmlTest, AMigPlanIsCarriedOutThroughNvml) {
  auto m = Manager();
  absl::StatusOr<std::optional<ContainerEdits>> e =
      m->Prepare(Pod(1, MigPlan("3g.40gb", 0, {{"1g.10gb", 0}, {"1g.10gb", 1}})));
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string visible = Env(**e, "NVIDIA_VISIBLE_DEVICES");
  EXPECT_THAT(visible, StartsWith("MIG-"));
  EXPECT_EQ((*e)->devices[0].path, "/dev/nvidia1");
  absl::StatusOr<NodeGpus> now = nvml_->Discover();
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_EQ(now->gpus[1].spec.mig_layout.size(), 1u);
  EXPECT_EQ(now->gpus[1].spec.mig_layout[0].start, 0);
  EXPECT_EQ(now->gpus[1].mig_uuids, std::vector<std::string>{visible});
}

TEST_F(PodManagerNvmlTest, APlanTheDriverRefusesSaysWhyAndWhatItDestroyed) {
  auto m = Manager();
  // Slice 1 stays taken by the 1g.10gb there: a 3g.40gb at 0 does not fit.
  absl::StatusOr<std::optional<ContainerEdits>> e =
      m->Prepare(Pod(2, MigPlan("3g.40gb", 0, {{"1g.10gb", 0}})));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("creating MIG instance 3g.40gb@0 on GPU " + Uuid(1)));
  EXPECT_THAT(e.status().message(), HasSubstr("the driver has no room for it"));
  EXPECT_THAT(e.status().message(), HasSubstr("(destroyed before: 1g.10gb@0)"));
}

}  // namespace
}  // namespace tessera::agent
