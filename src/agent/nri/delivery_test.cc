#include "agent/nri/delivery.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "agent/discovery/fake_gpus_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "records/assignment.h"
#include "shim/mount_namespace_testing.h"

namespace tessera::agent {
namespace {

// Pods' ledger folders are tmpfs mounts: this process's own, gone with it.
const bool kPrivateMounts = shim::EnterPrivateMountNamespace();

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::shared_ptr<const NodeGpus> FourGpus() {
  // minors differ from indices, as they may on real machines
  std::string text = R"({"version": 1, "gpus": [)";
  for (int i = 0; i < 4; ++i) {
    if (i) text += ",";
    text += R"({"index": )" + std::to_string(i) + R"(, "minor": )" + std::to_string(i + 4) +
            R"(, "uuid": "GPU-6f1c2a9e-0000-4000-8000-00000000000)" + std::to_string(i) +
            R"(", "model": "H100-80GB", "memory_mib": 81559})";
  }
  text += R"(], "links": [["X","NV18","NV18","NV18"],["NV18","X","NV18","NV18"],)"
          R"(["NV18","NV18","X","NV18"],["NV18","NV18","NV18","X"]]})";
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(text, "test");
  EXPECT_TRUE(node.ok()) << node.status();
  return std::make_shared<const NodeGpus>(*node);
}

std::string Uuid(int i) { return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i); }

std::string AssignmentJson(const std::string& node, std::vector<int> gpus, int64_t memory_mib,
                           int32_t compute_milli, bool exclusive,
                           const std::string& uuid_override = "") {
  records::Assignment a;
  a.node = node;
  for (int g : gpus) {
    records::AssignedGpu ag;
    ag.grant.gpu = g;
    ag.grant.memory_mib = memory_mib;
    ag.grant.compute_milli = compute_milli;
    ag.grant.exclusive = exclusive;
    ag.uuid = uuid_override.empty() ? Uuid(g) : uuid_override;
    a.gpus.push_back(ag);
  }
  return records::AssignmentToJson(a);
}

nri::PodSandbox Pod(const std::string& name, const std::string& assignment) {
  nri::PodSandbox p;
  p.id = "s-" + name;
  p.name = name;
  p.ns = "team";
  p.uid = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3" + std::to_string(name.size() % 10);
  if (!assignment.empty()) p.annotations["tessera.dev/assignment"] = assignment;
  return p;
}

nri::Container Ctr(std::vector<std::string> env = {}) {
  nri::Container c;
  c.id = "c";
  c.name = "main";
  c.env = std::move(env);
  return c;
}

class DeliveryTest : public ::testing::Test {
 protected:
  DeliveryTest() {
    dir_ = fs::path(::testing::TempDir()) / "delivery_test";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    options_.node_name = "n1";
    options_.sized_ledger_folders = kPrivateMounts;
    options_.edits.dev_dir = "/host/dev";
    options_.edits.pods_dir = (dir_ / "pods").string();
    options_.mps.root = (dir_ / "mps").string();
    // The driver and the installed shim, as host paths (the runtime bind-mounts them).
    options_.edits.driver.cuda = {"/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05", "libcuda.so.1"};
    options_.edits.driver.nvml = {"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05",
                                  "libnvidia-ml.so.1"};
    options_.edits.driver.shim_cuda = "/run/tessera/lib/libtessera-cuda.so";
    options_.edits.driver.shim_nvml = "/run/tessera/lib/libtessera-nvml.so";
    // The host's device nodes: GPUs at 195:<minor>, nvidiactl 195:255, nvidia-uvm 511:0; no
    // nvidia-uvm-tools.
    options_.edits.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
      if (path == "/host/dev/nvidiactl") return DeviceNumber{'c', 195, 255};
      if (path == "/host/dev/nvidia-uvm") return DeviceNumber{'c', 511, 0};
      const std::string prefix = "/host/dev/nvidia";
      if (path.rfind(prefix, 0) == 0 && path.size() == prefix.size() + 1 &&
          std::isdigit(static_cast<unsigned char>(path.back()))) {
        return DeviceNumber{'c', 195, path.back() - '0'};
      }
      return absl::NotFoundError(path + ": No such file or directory");
    };
  }
  ~DeliveryTest() override { shim::RemoveTestTree(dir_); }

  // A pod manager with the options as they are now, and the node's GPUs unless `gpus` is false.
  std::unique_ptr<PodManager> Pods(bool gpus = true) {
    auto pods = std::make_unique<PodManager>(options_);
    if (gpus) pods->SetGpus(FourGpus());
    return pods;
  }
  std::string pods_dir() const { return options_.edits.pods_dir; }

  fs::path dir_;
  PodManagerOptions options_;
};

std::string Env(const nri::ContainerAdjustment& a, const std::string& key) {
  for (const auto& [k, v] : a.env) {
    if (k == key) return v;
  }
  return "(unset)";
}

TEST_F(DeliveryTest, AShareGetsItsGpuItsLimitsItsRecordAndTheShim) {
  auto pods = Pods();
  Delivery d(DeliveryOptions{}, *pods);
  const std::string record = AssignmentJson("n1", {2}, 4096, 250, false);
  nri::PodSandbox pod = Pod("share", record);
  absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(pod, Ctr());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->devices.size(), 3u);
  EXPECT_EQ(a->devices[0], (nri::LinuxDevice{"/dev/nvidia6", "c", 195, 6, 0666u, {}, {}}));
  EXPECT_EQ(a->devices[1].path, "/dev/nvidiactl");
  EXPECT_EQ(a->devices[2].path, "/dev/nvidia-uvm");
  EXPECT_EQ(Env(*a, "NVIDIA_VISIBLE_DEVICES"), Uuid(2));
  EXPECT_EQ(Env(*a, "TESSERA_GPU_SHARING"), "shim");
  EXPECT_EQ(Env(*a, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "4096");
  EXPECT_EQ(Env(*a, "TESSERA_GPU_COMPUTE_PERCENT"), "25");
  EXPECT_EQ(Env(*a, "TESSERA_GPU_COMPUTE_MODE"), "hard-cap");
  std::map<std::string, nri::Mount> mounts;
  for (const nri::Mount& m : a->mounts) mounts[m.destination] = m;
  ASSERT_EQ(mounts.size(), 7u);
  const nri::Mount& rec = mounts["/run/tessera/assignment.json"];
  EXPECT_EQ(rec.type, "bind");
  EXPECT_THAT(rec.options, ::testing::Contains("ro"));
  EXPECT_EQ(rec.source, pods_dir() + "/" + pod.uid + "/assignment.json");
  std::ifstream in(rec.source);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), record);
  // The shim stands at the driver's names; the real driver behind it; the pod's segments.
  EXPECT_EQ(mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"].source,
            "/run/tessera/lib/libtessera-cuda.so");
  EXPECT_EQ(mounts["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"].source,
            "/run/tessera/lib/libtessera-nvml.so");
  EXPECT_EQ(mounts["/usr/local/lib/tessera/libtessera-real-cuda.so.1"].source,
            "/usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05");
  EXPECT_EQ(mounts["/usr/local/lib/tessera/libtessera-real-nvml.so.1"].source,
            "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.95.05");
  // The segment's files one by one, never their folders (the container cannot create names).
  EXPECT_FALSE(mounts.contains("/run/tessera/limits"));
  EXPECT_FALSE(mounts.contains("/run/tessera/ledger"));
  EXPECT_THAT(mounts["/run/tessera/limits/" + Uuid(2) + ".limits"].options,
              ::testing::Contains("ro"));
  EXPECT_THAT(mounts["/run/tessera/ledger/" + Uuid(2) + ".ledger"].options,
              ::testing::Contains("rw"));
  EXPECT_TRUE(fs::exists(pods_dir() + "/" + pod.uid + "/limits/" + Uuid(2) + ".limits"));
  EXPECT_TRUE(fs::exists(pods_dir() + "/" + pod.uid + "/ledger/" + Uuid(2) + ".ledger"));
  EXPECT_EQ(d.delivered(), 1);

  // The pod goes: its files and segments go.
  d.RemovePodSandbox(pod);
  EXPECT_FALSE(fs::exists(fs::path(pods_dir()) / pod.uid));
  EXPECT_EQ(pods->pod_count(), 0u);
}

TEST_F(DeliveryTest, AShareWithoutTheShimOnTheNodeIsRefused) {
  options_.edits.driver = DriverLibraries{};
  auto pods = Pods();
  Delivery d(DeliveryOptions{}, *pods);
  absl::StatusOr<nri::ContainerAdjustment> a =
      d.CreateContainer(Pod("share", AssignmentJson("n1", {2}, 4096, 0, false)), Ctr());
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(),
              HasSubstr("tessera: pod team/share has a share of a GPU, enforced by the CUDA shim, "
                        "but the agent cannot put the shim into its containers"));
  EXPECT_EQ(d.refused(), 1);
  EXPECT_FALSE(fs::exists(fs::path(pods_dir()) / Pod("share", "").uid));  // nothing left behind
}

TEST_F(DeliveryTest, WholeGpusGetNoLimitsAndEveryContainerTheSame) {
  auto pods = Pods();
  Delivery d(DeliveryOptions{}, *pods);
  nri::PodSandbox pod = Pod("train", AssignmentJson("n1", {0, 3}, 81559, 1000, true));
  absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(pod, Ctr());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Env(*a, "NVIDIA_VISIBLE_DEVICES"), Uuid(0) + "," + Uuid(3));
  EXPECT_EQ(Env(*a, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "(unset)");
  EXPECT_EQ(Env(*a, "TESSERA_GPU_SHARING"), "(unset)");
  EXPECT_EQ(a->devices[0].path, "/dev/nvidia4");
  EXPECT_EQ(a->devices[1].path, "/dev/nvidia7");
  // The real driver at its own names, no shim.
  for (const nri::Mount& m : a->mounts) {
    EXPECT_THAT(m.source, ::testing::Not(HasSubstr("tessera-cuda"))) << m.destination;
  }
  nri::Container sidecar = Ctr();
  sidecar.name = "sidecar";
  absl::StatusOr<nri::ContainerAdjustment> b = d.CreateContainer(pod, sidecar);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->devices, a->devices);
  EXPECT_EQ(b->env, a->env);
  EXPECT_EQ(b->mounts, a->mounts);
}

TEST_F(DeliveryTest, CdiModeNamesTheDevicesInstead) {
  options_.edits.cdi_kind = "nvidia.com/gpu";
  auto pods = Pods();
  Delivery d(DeliveryOptions{}, *pods);
  absl::StatusOr<nri::ContainerAdjustment> a =
      d.CreateContainer(Pod("cdi", AssignmentJson("n1", {1}, 81559, 1000, true)), Ctr());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->devices.empty());
  EXPECT_EQ(a->cdi_devices, std::vector<std::string>{"nvidia.com/gpu=" + Uuid(1)});
}

TEST_F(DeliveryTest, RecordsThatCannotBeHonouredFailTheContainerAndSayWhy) {
  auto pods = Pods(/*gpus=*/false);
  Delivery d(DeliveryOptions{}, *pods);
  auto error = [&](const std::string& record) {
    absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(Pod("p", record), Ctr());
    EXPECT_FALSE(a.ok());
    return a.ok() ? std::string() : std::string(a.status().message());
  };
  EXPECT_THAT(error(AssignmentJson("n1", {0}, 1, 0, false)),
              HasSubstr("has not discovered this node's GPUs yet"));
  pods->SetGpus(FourGpus());
  EXPECT_THAT(error(AssignmentJson("n2", {0}, 1, 0, false)),
              HasSubstr("tessera: pod team/p is assigned GPUs on node n2, not on this node (n1)"));
  EXPECT_THAT(
      error(AssignmentJson("n1", {1}, 1, 0, false, "GPU-00000000-0000-4000-8000-00000000dead")),
      HasSubstr("is assigned GPU GPU-00000000-0000-4000-8000-00000000dead, which node n1 "
                "does not have (it has GPU-6f1c2a9e"));
  EXPECT_THAT(
      error(AssignmentJson("n1", {1}, 1, 0, false, Uuid(2))),
      HasSubstr("is assigned GPU " + Uuid(2) + " as index 1, but it is index 2 on node n1"));
  EXPECT_THAT(error("{not json"), HasSubstr("its tessera.dev/assignment cannot be read"));
  EXPECT_EQ(d.refused(), 5);
  EXPECT_FALSE(fs::exists(pods_dir()));  // nothing written for a refused pod

  options_.edits.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
    return absl::NotFoundError(path + ": No such file or directory");
  };
  auto no_nodes = Pods();
  Delivery nd(DeliveryOptions{}, *no_nodes);
  absl::StatusOr<nri::ContainerAdjustment> a =
      nd.CreateContainer(Pod("p", AssignmentJson("n1", {0}, 1, 0, false)), Ctr());
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("the device node of GPU 0 (" + Uuid(0) +
                                              ") is missing: "
                                              "/host/dev/nvidia4: No such file or directory"));
}

TEST_F(DeliveryTest, PodsWithoutARecordGetNoGpusFromTheNvidiaRuntimeEither) {
  auto pods = Pods();
  Delivery d(DeliveryOptions{}, *pods);
  absl::StatusOr<nri::ContainerAdjustment> plain = d.CreateContainer(Pod("web", ""), Ctr({"A=b"}));
  ASSERT_TRUE(plain.ok());
  EXPECT_TRUE(plain->empty());
  absl::StatusOr<nri::ContainerAdjustment> sneaky =
      d.CreateContainer(Pod("sneaky", ""), Ctr({"NVIDIA_VISIBLE_DEVICES=all"}));
  ASSERT_TRUE(sneaky.ok());
  EXPECT_EQ(Env(*sneaky, "NVIDIA_VISIBLE_DEVICES"), "void");
  EXPECT_TRUE(sneaky->devices.empty());
  nri::PodSandbox monitor = Pod("dcgm", "");
  monitor.ns = "gpu-operator";
  absl::StatusOr<nri::ContainerAdjustment> exempt =
      d.CreateContainer(monitor, Ctr({"NVIDIA_VISIBLE_DEVICES=all"}));
  ASSERT_TRUE(exempt.ok());
  EXPECT_TRUE(exempt->empty());
}

TEST_F(DeliveryTest, TwentyPodsCreatedAtOnceEachGetTheirOwn) {
  auto pods = Pods();
  Delivery d(DeliveryOptions{}, *pods);
  std::vector<nri::PodSandbox> sandboxes;
  for (int i = 0; i < 20; ++i) {
    nri::PodSandbox p = Pod("p" + std::to_string(i), AssignmentJson("n1", {i % 4}, 4096, 0, false));
    p.uid = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a" + std::to_string(10 + i);
    sandboxes.push_back(p);
  }
  std::vector<std::thread> threads;
  std::vector<std::string> got(20), limits(20);
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(sandboxes[i], Ctr());
      got[i] = a.ok() ? Env(*a, "NVIDIA_VISIBLE_DEVICES") : std::string(a.status().message());
      if (a.ok()) {
        for (const nri::Mount& m : a->mounts) {
          if (m.destination == "/run/tessera/limits/" + Uuid(i % 4) + ".limits") {
            limits[i] = m.source;
          }
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(got[i], Uuid(i % 4)) << i;
    EXPECT_EQ(limits[i], pods_dir() + "/" + sandboxes[i].uid + "/limits/" + Uuid(i % 4) + ".limits")
        << i;
  }
  EXPECT_EQ(pods->pod_count(), 20u);
}

TEST_F(DeliveryTest, SynchronizeRemovesFilesOfPodsThatAreGone) {
  auto pods = Pods();
  Delivery d(DeliveryOptions{}, *pods);
  nri::PodSandbox alive = Pod("alive", AssignmentJson("n1", {0}, 4096, 0, false));
  nri::PodSandbox gone = Pod("gone-longer-name", AssignmentJson("n1", {1}, 4096, 0, false));
  ASSERT_TRUE(d.CreateContainer(alive, Ctr()).ok());
  ASSERT_TRUE(d.CreateContainer(gone, Ctr()).ok());
  fs::create_directories(fs::path(pods_dir()) / "not-a-pod");
  d.Synchronize({alive}, {});
  EXPECT_TRUE(fs::exists(fs::path(pods_dir()) / alive.uid));
  EXPECT_FALSE(fs::exists(fs::path(pods_dir()) / gone.uid));
  EXPECT_TRUE(fs::exists(fs::path(pods_dir()) / "not-a-pod"));  // not ours: left alone
  EXPECT_EQ(pods->pod_count(), 1u);
}

TEST(StatDevice, ReadsTheHostsNodes) {
  absl::StatusOr<DeviceNumber> null = StatDevice("/dev/null");
  ASSERT_TRUE(null.ok()) << null.status();
  EXPECT_EQ(null->type, 'c');
  EXPECT_EQ(null->major, 1);
  EXPECT_EQ(null->minor, 3);
  EXPECT_EQ(StatDevice("/nonexistent/nvidia0").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatDevice("/etc/hostname").status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::agent
