#include "agent/nri/delivery.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/discovery/fake_gpus_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "records/assignment.h"

namespace tessera::agent {
namespace {

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
    options_.dev_dir = "/host/dev";
    options_.pods_dir = (dir_ / "pods").string();
    // The host's device nodes: GPUs at 195:<minor>, nvidiactl 195:255, nvidia-uvm 511:0; no
    // nvidia-uvm-tools.
    options_.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
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
  ~DeliveryTest() override { fs::remove_all(dir_); }

  fs::path dir_;
  DeliveryOptions options_;
};

std::string Env(const nri::ContainerAdjustment& a, const std::string& key) {
  for (const auto& [k, v] : a.env) {
    if (k == key) return v;
  }
  return "(unset)";
}

TEST_F(DeliveryTest, AShareGetsItsGpuItsLimitsAndItsRecord) {
  Delivery d(options_);
  d.SetGpus(FourGpus());
  const std::string record = AssignmentJson("n1", {2}, 4096, 250, false);
  nri::PodSandbox pod = Pod("share", record);
  absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(pod, Ctr());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->devices.size(), 3u);
  EXPECT_EQ(a->devices[0], (nri::LinuxDevice{"/dev/nvidia6", "c", 195, 6, 0666u, {}, {}}));
  EXPECT_EQ(a->devices[1].path, "/dev/nvidiactl");
  EXPECT_EQ(a->devices[2].path, "/dev/nvidia-uvm");
  EXPECT_EQ(Env(*a, "NVIDIA_VISIBLE_DEVICES"), Uuid(2));
  EXPECT_EQ(Env(*a, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "4096");
  EXPECT_EQ(Env(*a, "TESSERA_GPU_COMPUTE_PERCENT"), "25");
  ASSERT_EQ(a->mounts.size(), 1u);
  EXPECT_EQ(a->mounts[0].destination, "/run/tessera/assignment.json");
  EXPECT_THAT(a->mounts[0].options, ::testing::Contains("ro"));
  std::ifstream in(a->mounts[0].source);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), record);
  EXPECT_EQ(a->mounts[0].source, options_.pods_dir + "/" + pod.uid + "/assignment.json");
  EXPECT_EQ(d.delivered(), 1);

  // The pod goes: its files go.
  d.RemovePodSandbox(pod);
  EXPECT_FALSE(fs::exists(fs::path(options_.pods_dir) / pod.uid));
}

TEST_F(DeliveryTest, WholeGpusGetNoLimitsAndEveryContainerTheSame) {
  Delivery d(options_);
  d.SetGpus(FourGpus());
  nri::PodSandbox pod = Pod("train", AssignmentJson("n1", {0, 3}, 81559, 1000, true));
  absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(pod, Ctr());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Env(*a, "NVIDIA_VISIBLE_DEVICES"), Uuid(0) + "," + Uuid(3));
  EXPECT_EQ(Env(*a, "TESSERA_GPU_MEMORY_LIMIT_MIB"), "(unset)");
  EXPECT_EQ(a->devices[0].path, "/dev/nvidia4");
  EXPECT_EQ(a->devices[1].path, "/dev/nvidia7");
  nri::Container sidecar = Ctr();
  sidecar.name = "sidecar";
  absl::StatusOr<nri::ContainerAdjustment> b = d.CreateContainer(pod, sidecar);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->devices, a->devices);
  EXPECT_EQ(b->env, a->env);
}

TEST_F(DeliveryTest, CdiModeNamesTheDevicesInstead) {
  options_.cdi_kind = "nvidia.com/gpu";
  Delivery d(options_);
  d.SetGpus(FourGpus());
  absl::StatusOr<nri::ContainerAdjustment> a =
      d.CreateContainer(Pod("cdi", AssignmentJson("n1", {1}, 81559, 1000, true)), Ctr());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->devices.empty());
  EXPECT_EQ(a->cdi_devices, std::vector<std::string>{"nvidia.com/gpu=" + Uuid(1)});
}

TEST_F(DeliveryTest, RecordsThatCannotBeHonouredFailTheContainerAndSayWhy) {
  Delivery d(options_);
  auto error = [&](const std::string& record) {
    absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(Pod("p", record), Ctr());
    EXPECT_FALSE(a.ok());
    return a.ok() ? std::string() : std::string(a.status().message());
  };
  EXPECT_THAT(error(AssignmentJson("n1", {0}, 1, 0, false)),
              HasSubstr("has not discovered this node's GPUs yet"));
  d.SetGpus(FourGpus());
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
  options_.lookup = [](const std::string& path) -> absl::StatusOr<DeviceNumber> {
    return absl::NotFoundError(path + ": No such file or directory");
  };
  Delivery no_nodes(options_);
  no_nodes.SetGpus(FourGpus());
  absl::StatusOr<nri::ContainerAdjustment> a =
      no_nodes.CreateContainer(Pod("p", AssignmentJson("n1", {0}, 1, 0, false)), Ctr());
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("the device node of GPU 0 (" + Uuid(0) +
                                              ") is missing on node n1: "
                                              "/host/dev/nvidia4: No such file or directory"));
  EXPECT_EQ(d.refused(), 5);
}

TEST_F(DeliveryTest, PodsWithoutARecordGetNoGpusFromTheNvidiaRuntimeEither) {
  Delivery d(options_);
  d.SetGpus(FourGpus());
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
  Delivery d(options_);
  d.SetGpus(FourGpus());
  std::vector<nri::PodSandbox> pods;
  for (int i = 0; i < 20; ++i) {
    nri::PodSandbox p = Pod("p" + std::to_string(i), AssignmentJson("n1", {i % 4}, 4096, 0, false));
    p.uid = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a" + std::to_string(10 + i);
    pods.push_back(p);
  }
  std::vector<std::thread> threads;
  std::vector<std::string> got(20);
  for (int i = 0; i < 20; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<nri::ContainerAdjustment> a = d.CreateContainer(pods[i], Ctr());
      got[i] = a.ok() ? Env(*a, "NVIDIA_VISIBLE_DEVICES") : std::string(a.status().message());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(got[i], Uuid(i % 4)) << i;
}

TEST_F(DeliveryTest, SynchronizeRemovesFilesOfPodsThatAreGone) {
  Delivery d(options_);
  d.SetGpus(FourGpus());
  nri::PodSandbox alive = Pod("alive", AssignmentJson("n1", {0}, 4096, 0, false));
  nri::PodSandbox gone = Pod("gone-longer-name", AssignmentJson("n1", {1}, 4096, 0, false));
  ASSERT_TRUE(d.CreateContainer(alive, Ctr()).ok());
  ASSERT_TRUE(d.CreateContainer(gone, Ctr()).ok());
  fs::create_directories(fs::path(options_.pods_dir) / "not-a-pod");
  d.Synchronize({alive}, {});
  EXPECT_TRUE(fs::exists(fs::path(options_.pods_dir) / alive.uid));
  EXPECT_FALSE(fs::exists(fs::path(options_.pods_dir) / gone.uid));
  EXPECT_TRUE(fs::exists(fs::path(options_.pods_dir) / "not-a-pod"));  // not ours: left alone
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
