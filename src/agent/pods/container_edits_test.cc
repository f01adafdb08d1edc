#include "agent/pods/container_edits.h"

#include <map>

#include "agent/discovery/fake_gpus_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;

constexpr char kUid[] = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a30";

std::string Uuid(int i) { return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i); }

DiscoveredGpu Gpu(int index, int minor) {
  DiscoveredGpu g;
  g.spec.index = index;
  g.spec.uuid = Uuid(index);
  g.spec.model = "H100-80GB";
  g.minor = minor;
  return g;
}

GrantedGpu Granted(int index, int minor, int64_t memory_mib, int32_t compute_milli,
                   bool exclusive) {
  GrantedGpu g;
  g.gpu = Gpu(index, minor);
  g.assigned.grant.gpu = index;
  g.assigned.grant.memory_mib = memory_mib;
  g.assigned.grant.compute_milli = compute_milli;
  g.assigned.grant.exclusive = exclusive;
  g.assigned.uuid = Uuid(index);
  return g;
}

PodGrant Grant(std::vector<GrantedGpu> gpus, Sharing sharing) {
  PodGrant p;
  p.pod = PodRef{"team", "p", kUid, {}};
  p.gpus = std::move(gpus);
  p.sharing = sharing;
  return p;
}

EditsOptions Options() {
  EditsOptions o;
  o.dev_dir = "/host/dev";
  o.pods_dir = "/run/tessera/pods";
  o.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
    if (path == "/host/dev/nvidiactl") return DeviceNumber{'c', 195, 255};
    const std::string prefix = "/host/dev/nvidia";
    if (path.rfind(prefix, 0) == 0 && path.size() == prefix.size() + 1 &&
        std::isdigit(static_cast<unsigned char>(path.back()))) {
      return DeviceNumber{'c', 195, path.back() - '0'};
    }
    return absl::NotFoundError(path + ": No such file or directory");
  };
  o.driver.cuda = {"/usr/lib64/libcuda.so.580.95.05", "libcuda.so.1"};
  o.driver.nvml = {"/usr/lib64/libnvidia-ml.so.580.95.05", "libnvidia-ml.so.1"};
  o.driver.others = {
      {"/usr/lib64/libnvidia-ptxjitcompiler.so.580.95.05", "libnvidia-ptxjitcompiler.so.1"}};
  o.driver.shim_cuda = "/run/tessera/lib/libtessera-cuda.so";
  o.driver.shim_nvml = "/run/tessera/lib/libtessera-nvml.so";
  return o;
}

std::map<std::string, BindMount> Mounts(const ContainerEdits& e) {
  std::map<std::string, BindMount> m;
  for (const BindMount& b : e.mounts) m[b.container_path] = b;
  return m;
}

std::string Env(const ContainerEdits& e, const std::string& key) {
  for (const auto& [k, v] : e.env) {
    if (k == key) return v;
  }
  return "(unset)";
}

TEST(ContainerEdits, AShimShareGetsTheShimBeforeTheDriverAndItsSegments) {
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(Grant({Granted(1, 5, 4096, 300, false)}, Sharing::kShim), Options());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->devices.size(), 2u);
  EXPECT_EQ(e->devices[0], (DeviceNode{"/dev/nvidia5", 'c', 195, 5}));
  EXPECT_EQ(e->devices[1], (DeviceNode{"/dev/nvidiactl", 'c', 195, 255}));
  EXPECT_EQ(Env(*e, "NVIDIA_VISIBLE_DEVICES"), Uuid(1));
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "shim");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "4096");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_PERCENT"), "30");
  auto m = Mounts(*e);
  EXPECT_EQ(m.size(), 8u);
  EXPECT_EQ(m["/run/tessera/assignment.json"],
            (BindMount{std::string("/run/tessera/pods/") + kUid + "/assignment.json",
                       "/run/tessera/assignment.json", true}));
  // The segment's files one by one, never their folders (nothing for a container to create).
  const std::string limits = "/run/tessera/limits/" + Uuid(1) + ".limits";
  const std::string ledger = "/run/tessera/ledger/" + Uuid(1) + ".ledger";
  EXPECT_EQ(m[limits].host_path,
            std::string("/run/tessera/pods/") + kUid + "/limits/" + Uuid(1) + ".limits");
  EXPECT_TRUE(m[limits].read_only);
  EXPECT_EQ(m[ledger].host_path,
            std::string("/run/tessera/pods/") + kUid + "/ledger/" + Uuid(1) + ".ledger");
  EXPECT_FALSE(m[ledger].read_only);
  EXPECT_FALSE(m.contains("/run/tessera/limits"));
  EXPECT_FALSE(m.contains("/run/tessera/ledger"));
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.1"].host_path,
            "/run/tessera/lib/libtessera-cuda.so");
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"].host_path,
            "/run/tessera/lib/libtessera-nvml.so");
  EXPECT_EQ(m["/usr/local/lib/tessera/libtessera-real-cuda.so.1"].host_path,
            "/usr/lib64/libcuda.so.580.95.05");
  EXPECT_EQ(m["/usr/local/lib/tessera/libtessera-real-nvml.so.1"].host_path,
            "/usr/lib64/libnvidia-ml.so.580.95.05");
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1"].host_path,
            "/usr/lib64/libnvidia-ptxjitcompiler.so.580.95.05");
}

TEST(ContainerEdits, WholeGpusGetTheDriverAsItIs) {
  absl::StatusOr<ContainerEdits> e = ContainerEditsFor(
      Grant({Granted(0, 0, 81559, 1000, true), Granted(3, 3, 81559, 1000, true)}, Sharing::kNone),
      Options());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "NVIDIA_VISIBLE_DEVICES"), Uuid(0) + "," + Uuid(3));
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "(unset)");
  auto m = Mounts(*e);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.1"].host_path,
            "/usr/lib64/libcuda.so.580.95.05");
  EXPECT_EQ(m.count("/run/tessera/limits"), 0u);
}

TEST(ContainerEdits, WithCdiTheShimStandsAtTheFileTheSonameResolvesTo) {
  EditsOptions o = Options();
  o.cdi_kind = "nvidia.com/gpu";
  o.driver_version = "580.95.05";
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(Grant({Granted(1, 5, 4096, 0, false)}, Sharing::kShim), o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->devices.empty());
  EXPECT_EQ(e->cdi_devices, std::vector<std::string>{"nvidia.com/gpu=" + Uuid(1)});
  auto m = Mounts(*e);
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05"].host_path,
            "/run/tessera/lib/libtessera-cuda.so");
  EXPECT_EQ(m.count("/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1"), 0u);  // CDI's
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_PERCENT"), "(unset)");  // no compute share
}

TEST(ContainerEdits, AMigInstanceIsNamedByItsDeviceAndTwoOnOneGpuShareTheNode) {
  GrantedGpu a = Granted(1, 5, 9984, 0, true);
  a.assigned.mig_profile = "1g.10gb";
  a.assigned.mig_start = 0;
  a.mig_uuid = "MIG-0a1b2c3d-0000-4000-8000-000000000001";
  GrantedGpu b = a;
  b.assigned.mig_start = 1;
  b.mig_uuid = "MIG-0a1b2c3d-0000-4000-8000-000000000002";
  absl::StatusOr<ContainerEdits> e = ContainerEditsFor(Grant({a, b}, Sharing::kNone), Options());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "NVIDIA_VISIBLE_DEVICES"), a.mig_uuid + "," + b.mig_uuid);
  ASSERT_EQ(e->devices.size(), 2u);
  EXPECT_EQ(e->devices[0].path, "/dev/nvidia5");

  b.mig_uuid.clear();
  e = ContainerEditsFor(Grant({a, b}, Sharing::kNone), Options());
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("whose identity (MIG-...) the agent does not know"));
}

TEST(ContainerEdits, MpsClientsGetTheDaemonsEditsAndNoShim) {
  mps::ContainerEdits client;
  client.env = {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"},
                {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"}};
  client.mounts = {{"/run/tessera/mps/" + Uuid(1) + "/pipe", "/tmp/nvidia-mps", false}};
  absl::StatusOr<ContainerEdits> e = ContainerEditsFor(
      Grant({Granted(1, 5, 4096, 300, false)}, Sharing::kMps), Options(), &client);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "mps");
  EXPECT_EQ(Env(*e, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
  auto m = Mounts(*e);
  EXPECT_EQ(m["/tmp/nvidia-mps"].host_path, "/run/tessera/mps/" + Uuid(1) + "/pipe");
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.1"].host_path,
            "/usr/lib64/libcuda.so.580.95.05");
  EXPECT_FALSE(
      ContainerEditsFor(Grant({Granted(1, 5, 4096, 300, false)}, Sharing::kMps), Options()).ok());
}

TEST(ContainerEdits, AShimShareOnANodeWithoutTheShimIsRefused) {
  EditsOptions o = Options();
  o.driver.shim_cuda.clear();
  o.driver.nvml = {};
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(Grant({Granted(1, 5, 4096, 0, false)}, Sharing::kShim), o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(),
              HasSubstr("cannot put the shim into its containers: the driver's libnvidia-ml.so.1, "
                        "libtessera-cuda.so not found"));
}

TEST(ContainerEdits, AMissingDeviceNodeIsNamed) {
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(Grant({Granted(1, 12, 81559, 1000, true)}, Sharing::kNone), Options());
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("the device node of GPU 1 (" + Uuid(1) +
                                              ") is missing: /host/dev/nvidia12"));
}

}  // namespace
}  // namespace tessera::agent
