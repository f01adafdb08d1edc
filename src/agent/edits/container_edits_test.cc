#include "agent/edits/container_edits.h"

#include <map>

#include "agent/edits/edits_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;

using testing::GpuUuid;
using testing::kPodUid;
using testing::TestGpu;
using testing::TestGrant;
using testing::TestNode;

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
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 4096, 300, false)}, Sharing::kShim), TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->devices.size(), 2u);
  EXPECT_EQ(e->devices[0], (DeviceNode{"/dev/nvidia5", 'c', 195, 5, "/host/dev/nvidia5"}));
  EXPECT_EQ(e->devices[1], (DeviceNode{"/dev/nvidiactl", 'c', 195, 255, "/host/dev/nvidiactl"}));
  EXPECT_EQ(Env(*e, "NVIDIA_VISIBLE_DEVICES"), GpuUuid(1));
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "shim");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "4096");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_PERCENT"), "30");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_MODE"), "hard-cap");
  auto m = Mounts(*e);
  EXPECT_EQ(m.size(), 8u);
  EXPECT_EQ(m["/run/tessera/assignment.json"],
            (BindMount{std::string("/run/tessera/pods/") + kPodUid + "/assignment.json",
                       "/run/tessera/assignment.json", true}));
  // The segment's files one by one, never their folders (nothing for a container to create).
  const std::string limits = "/run/tessera/limits/" + GpuUuid(1) + ".limits";
  const std::string ledger = "/run/tessera/ledger/" + GpuUuid(1) + ".ledger";
  EXPECT_EQ(m[limits].host_path,
            std::string("/run/tessera/pods/") + kPodUid + "/limits/" + GpuUuid(1) + ".limits");
  EXPECT_TRUE(m[limits].read_only);
  EXPECT_EQ(m[ledger].host_path,
            std::string("/run/tessera/pods/") + kPodUid + "/ledger/" + GpuUuid(1) + ".ledger");
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

// Two shares of GPU 1 (one segment) and one of GPU 2: each shared GPU's limits and ledger files
// once, a whole GPU none, and never a segment folder.
TEST(ContainerEdits, EachSharedGpusSegmentFilesAreMountedOnce) {
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 4096, 300, false), TestGpu(1, 5, 2048, 0, false),
                                   TestGpu(2, 6, 8192, 0, false), TestGpu(3, 7, 81559, 1000, true)},
                                  Sharing::kShim),
                        TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  std::vector<std::string> segments;
  for (const BindMount& m : e->mounts) {
    if (m.container_path.starts_with("/run/tessera/l")) segments.push_back(m.container_path);
  }
  EXPECT_EQ(segments, (std::vector<std::string>{"/run/tessera/limits/" + GpuUuid(1) + ".limits",
                                                "/run/tessera/ledger/" + GpuUuid(1) + ".ledger",
                                                "/run/tessera/limits/" + GpuUuid(2) + ".limits",
                                                "/run/tessera/ledger/" + GpuUuid(2) + ".ledger"}));
}

TEST(ContainerEdits, WholeGpusGetTheDriverAsItIs) {
  absl::StatusOr<ContainerEdits> e = ContainerEditsFor(
      TestGrant({TestGpu(0, 0, 81559, 1000, true), TestGpu(3, 3, 81559, 1000, true)},
                Sharing::kNone),
      TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "NVIDIA_VISIBLE_DEVICES"), GpuUuid(0) + "," + GpuUuid(3));
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "(unset)");
  auto m = Mounts(*e);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.1"].host_path,
            "/usr/lib64/libcuda.so.580.95.05");
  EXPECT_EQ(m.count("/run/tessera/limits"), 0u);
}

TEST(ContainerEdits, WithCdiTheShimStandsAtTheFileTheSonameResolvesTo) {
  EditsOptions o = TestNode();
  o.cdi_kind = "nvidia.com/gpu";
  o.driver_version = "580.95.05";
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 4096, 0, false)}, Sharing::kShim), o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->devices.empty());
  EXPECT_EQ(e->cdi_devices, std::vector<std::string>{"nvidia.com/gpu=" + GpuUuid(1)});
  auto m = Mounts(*e);
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05"].host_path,
            "/run/tessera/lib/libtessera-cuda.so");
  EXPECT_EQ(m.count("/usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.1"), 0u);  // CDI's
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_PERCENT"), "(unset)");  // no compute share
}

TEST(ContainerEdits, AMigInstanceIsNamedByItsDeviceAndTwoOnOneGpuShareTheNode) {
  ContainerGrant::Gpu a = TestGpu(1, 5, 9984, 0, true);
  a.mig_profile = "1g.10gb";
  a.mig_start = 0;
  a.mig_uuid = "MIG-0a1b2c3d-0000-4000-8000-000000000001";
  ContainerGrant::Gpu b = a;
  b.mig_start = 1;
  b.mig_uuid = "MIG-0a1b2c3d-0000-4000-8000-000000000002";
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(TestGrant({a, b}, Sharing::kNone), TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "NVIDIA_VISIBLE_DEVICES"), a.mig_uuid + "," + b.mig_uuid);
  ASSERT_EQ(e->devices.size(), 2u);
  EXPECT_EQ(e->devices[0].path, "/dev/nvidia5");

  b.mig_uuid.clear();
  e = ContainerEditsFor(TestGrant({a, b}, Sharing::kNone), TestNode());
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("whose identity (MIG-...) the agent does not know"));
}

TEST(ContainerEdits, MpsClientsGetTheDaemonsEditsAndNoShim) {
  mps::ContainerEdits client;
  client.env = {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"},
                {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "30"}};
  client.mounts = {{"/run/tessera/mps/" + GpuUuid(1) + "/pipe", "/tmp/nvidia-mps", false}};
  absl::StatusOr<ContainerEdits> e = ContainerEditsFor(
      TestGrant({TestGpu(1, 5, 4096, 300, false)}, Sharing::kMps), TestNode(), &client);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "mps");
  EXPECT_EQ(Env(*e, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
  auto m = Mounts(*e);
  EXPECT_EQ(m["/tmp/nvidia-mps"].host_path, "/run/tessera/mps/" + GpuUuid(1) + "/pipe");
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.1"].host_path,
            "/usr/lib64/libcuda.so.580.95.05");
  EXPECT_FALSE(
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 4096, 300, false)}, Sharing::kMps), TestNode())
          .ok());
}

TEST(ContainerEdits, AShimShareOnANodeWithoutTheShimIsRefused) {
  EditsOptions o = TestNode();
  o.driver.shim_cuda.clear();
  o.driver.nvml = {};
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 4096, 0, false)}, Sharing::kShim), o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(),
              HasSubstr("cannot put the shim into its containers: the driver's libnvidia-ml.so.1, "
                        "libtessera-cuda.so not found"));
}

TEST(ContainerEdits, TheLimitsInTheEnvironmentAreThoseOfTheSharesOfOneGpu) {
  // Two shares of one GPU (a DRA claim may hold two) count together; a whole GPU beside them
  // adds nothing; a compute share of all of the GPU is no cap.
  ContainerGrant g = TestGrant({TestGpu(1, 1, 4096, 250, false), TestGpu(1, 1, 2048, 0, false),
                                TestGpu(2, 2, 81559, 1000, true)},
                               Sharing::kShim);
  g.work_conserving = true;
  absl::StatusOr<ContainerEdits> e = ContainerEditsFor(g, TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "NVIDIA_VISIBLE_DEVICES"), GpuUuid(1) + "," + GpuUuid(2));
  EXPECT_EQ(Env(*e, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "6144");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_PERCENT"), "25");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_MODE"), "work-conserving");
  ASSERT_EQ(e->gpu_nodes.size(), 3u);
  EXPECT_EQ(e->gpu_nodes[0], e->gpu_nodes[1]);  // one node for the GPU of both shares
  EXPECT_EQ(e->devices[e->gpu_nodes[2]].path, "/dev/nvidia2");

  e = ContainerEditsFor(TestGrant({TestGpu(1, 1, 4096, 1000, false)}, Sharing::kShim), TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "4096");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_PERCENT"), "(unset)");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_COMPUTE_MODE"), "(unset)");

  // Shares of two GPUs: no single limit to tell.
  e = ContainerEditsFor(
      TestGrant({TestGpu(1, 1, 4096, 250, false), TestGpu(2, 2, 4096, 250, false)}, Sharing::kShim),
      TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "shim");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "(unset)");
}

TEST(ContainerEdits, AnUnenforcedShareGetsItsLimitsToReadAndTheDriverAsItIs) {
  absl::StatusOr<ContainerEdits> e = ContainerEditsFor(
      TestGrant({TestGpu(1, 5, 4096, 300, false)}, Sharing::kUnenforced), TestNode());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(Env(*e, "TESSERA_GPU_SHARING"), "unenforced");
  EXPECT_EQ(Env(*e, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "4096");
  auto m = Mounts(*e);
  EXPECT_EQ(m["/usr/lib/x86_64-linux-gnu/libcuda.so.1"].host_path,
            "/usr/lib64/libcuda.so.580.95.05");
  EXPECT_EQ(m.count("/run/tessera/limits"), 0u);
}

TEST(ContainerEdits, AShimFileThatWentMissingRefusesTheShareWithItsPath) {
  EditsOptions o = TestNode();
  o.host_root = "/host";
  std::vector<std::string> looked;
  o.file_exists = [&looked](const std::string& path) {
    looked.push_back(path);
    return path != "/host/run/tessera/lib/libtessera-nvml.so";
  };
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 4096, 0, false)}, Sharing::kShim), o);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(),
              HasSubstr("the NVML shim /run/tessera/lib/libtessera-nvml.so is missing on this "
                        "node: the share cannot be enforced"));
  EXPECT_THAT(looked, ::testing::Contains("/host/run/tessera/lib/libtessera-cuda.so"));
  // Whole GPUs do not need the shim.
  EXPECT_TRUE(
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 81559, 1000, true)}, Sharing::kNone), o).ok());
  // A shim share needs its segments' folder.
  ContainerGrant g = TestGrant({TestGpu(1, 5, 4096, 0, false)}, Sharing::kShim);
  g.segments_dir.clear();
  e = ContainerEditsFor(g, TestNode());
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("holds a share but no folder for the shim"));
}

TEST(ContainerEdits, DeviceNodesAreNamedByTheirHostPaths) {
  EditsOptions o = TestNode();
  o.host_root = "/host";  // the agent sees the host's /dev at /host/dev
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(TestGrant({TestGpu(1, 5, 81559, 1000, true)}, Sharing::kNone), o);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->devices[0], (DeviceNode{"/dev/nvidia5", 'c', 195, 5, "/dev/nvidia5"}));
  EXPECT_EQ(e->gpu_nodes, std::vector<int>{0});
}

TEST(ContainerEdits, AMissingDeviceNodeIsNamed) {
  absl::StatusOr<ContainerEdits> e =
      ContainerEditsFor(TestGrant({TestGpu(1, 12, 81559, 1000, true)}, Sharing::kNone), TestNode());
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("the device node of GPU 1 (" + GpuUuid(1) +
                                              ") is missing: /host/dev/nvidia12"));
}

}  // namespace
}  // namespace tessera::agent
