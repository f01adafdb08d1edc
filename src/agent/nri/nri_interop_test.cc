// The agent's NRI plugin against the runtime side of NRI from containerd's own module
// (test/nri/runtime: github.com/containerd/nri v0.12.3 pkg/adaptation, as containerd v2.4.2 embeds
// it), over a real unix socket: registration, configuration, synchronization, CreateContainer
// answers merged by NRI as containerd would apply them, refusals as containerd would see them,
// RemovePodSandbox. CTest label `interop`; test/nri/build.sh builds the Go program (cached).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "agent/discovery/fake_gpus_file.h"
#include "agent/nri/delivery.h"
#include "agent/nri/plugin.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "records/assignment.h"
#include "shim/contract.h"
#include "shim/mount_namespace_testing.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A pod's ledger folder is a tmpfs the pod manager mounts: in this process's own mount namespace,
// gone with it even when the test fails (plain folders without the privilege).
const bool kPrivateMounts = shim::EnterPrivateMountNamespace();

struct Ran {
  int status = -1;
  std::string out;
};

Ran Shell(const std::string& command) {
  Ran r;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int s = pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  return r;
}

std::string Uuid(int i) { return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i); }

std::string Assignment(const std::string& node, int gpu, const std::string& uuid, int64_t memory) {
  records::Assignment a;
  a.node = node;
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.memory_mib = memory;
  g.uuid = uuid;
  a.gpus.push_back(g);
  return records::AssignmentToJson(a);
}

json Pod(const std::string& name, const std::string& uid, const std::string& assignment) {
  json p = {{"id", "sandbox-" + name},
            {"name", name},
            {"uid", uid},
            {"namespace", "team"},
            {"annotations", json::object()}};
  if (!assignment.empty()) p["annotations"]["tessera.dev/assignment"] = assignment;
  return p;
}

TEST(NriInterop, ContainerdsNriRuntimeGetsEachPodsOwnGpus) {
  const Ran built = Shell(std::string(TESSERA_SOURCE_DIR) + "/test/nri/build.sh");
  ASSERT_EQ(built.status, 0) << "test/nri/build.sh failed: " << built.out;
  std::string runtime = built.out;
  while (!runtime.empty() && runtime.back() == '\n') runtime.pop_back();

  const fs::path dir = fs::path(::testing::TempDir()) / "nri_interop";
  shim::RemoveTestTree(dir);
  fs::create_directories(dir);
  const std::string socket = (dir / "nri.sock").string();

  // A node with two GPUs whose device nodes are /dev/null's (as the node harness makes them).
  absl::StatusOr<NodeGpus> gpus = ParseFakeGpusFile(
      R"({"version": 1, "gpus": [
          {"index": 0, "uuid": ")" +
          Uuid(0) + R"(", "model": "H100-80GB", "memory_mib": 81559},
          {"index": 1, "uuid": ")" +
          Uuid(1) + R"(", "model": "H100-80GB", "memory_mib": 81559}],
          "links": [["X", "NV18"], ["NV18", "X"]]})",
      "interop");
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  fs::create_directories(dir / "dev");
  for (const char* name : {"nvidia0", "nvidia1", "nvidiactl"}) {
    fs::create_symlink("/dev/null", dir / "dev" / name);
  }
  PodManagerOptions options;
  options.node_name = "n1";
  options.sized_ledger_folders = kPrivateMounts;
  options.edits.dev_dir = (dir / "dev").string();
  options.edits.pods_dir = (dir / "pods").string();
  options.mps.root = (dir / "mps").string();
  // The driver and the installed shim, as host paths the runtime would bind-mount.
  options.edits.driver.cuda = {"/usr/lib/libcuda.so.580.95.05", "libcuda.so.1"};
  options.edits.driver.nvml = {"/usr/lib/libnvidia-ml.so.580.95.05", "libnvidia-ml.so.1"};
  options.edits.driver.shim_cuda = "/run/tessera/lib/libtessera-cuda.so";
  options.edits.driver.shim_nvml = "/run/tessera/lib/libtessera-nvml.so";
  PodManager pods(options);
  pods.SetGpus(std::make_shared<const NodeGpus>(*gpus));
  Delivery delivery(DeliveryOptions{}, pods);
  nri::NriPluginOptions plugin_options;
  plugin_options.socket_path = socket;
  plugin_options.reconnect_min = std::chrono::milliseconds(50);
  plugin_options.reconnect_max = std::chrono::milliseconds(200);
  nri::NriPlugin plugin(plugin_options, delivery);
  std::atomic<bool> stop{false};
  std::thread serving([&] { plugin.Run(stop); });

  const std::string uid_a = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3a";
  const std::string uid_b = "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3b";
  const std::string record_a = Assignment("n1", 0, Uuid(0), 4096);
  json cases = json::array();
  cases.push_back({{"name", "share-a"},
                   {"pod", Pod("share-a", uid_a, record_a)},
                   {"container", {{"id", "c-a"}, {"name", "main"}, {"env", {"PATH=/bin"}}}}});
  cases.push_back({{"name", "share-b"},
                   {"pod", Pod("share-b", uid_b, Assignment("n1", 1, Uuid(1), 8192))},
                   {"container", {{"id", "c-b"}, {"name", "main"}, {"env", json::array()}}}});
  cases.push_back({{"name", "wrong-gpu"},
                   {"pod", Pod("wrong", "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3c",
                               Assignment("n1", 1, "GPU-00000000-0000-4000-8000-00000000dead", 1))},
                   {"container", {{"id", "c-w"}, {"name", "main"}, {"env", json::array()}}}});
  cases.push_back({{"name", "plain"},
                   {"pod", Pod("plain", "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3d", "")},
                   {"container", {{"id", "c-p"}, {"name", "main"}, {"env", {"A=b"}}}}});
  cases.push_back(
      {{"name", "sneaky"},
       {"pod", Pod("sneaky", "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a3e", "")},
       {"container", {{"id", "c-s"}, {"name", "main"}, {"env", {"NVIDIA_VISIBLE_DEVICES=all"}}}}});
  json input = {{"socket", socket},
                {"existing", {Pod("share-a", uid_a, record_a)}},
                {"cases", cases},
                {"remove", {Pod("share-b", uid_b, "")}}};
  const std::string input_path = (dir / "cases.json").string();
  std::ofstream(input_path) << input.dump();

  const Ran ran =
      Shell("timeout 120 " + runtime + " " + input_path + " 2>" + (dir / "runtime.log").string());
  stop.store(true);
  serving.join();
  std::ifstream log_file(dir / "runtime.log");
  std::string log((std::istreambuf_iterator<char>(log_file)), {});
  ASSERT_EQ(ran.status, 0) << ran.out << "\nruntime log:\n" << log;

  std::map<std::string, json> results;
  json removed;
  std::istringstream lines(ran.out);
  for (std::string line; std::getline(lines, line);) {
    json j = json::parse(line);
    if (j.contains("case")) results[j["case"]] = j;
    if (j.contains("removed")) removed = j["removed"];
  }
  ASSERT_EQ(results.size(), 5u) << ran.out;

  const json& a = results["share-a"];
  ASSERT_FALSE(a.contains("error")) << a;
  EXPECT_THAT(a["env"], ::testing::Contains(json{"NVIDIA_VISIBLE_DEVICES", Uuid(0)}));
  EXPECT_THAT(a["env"], ::testing::Contains(json{"TESSERA_GPU_MEMORY_LIMIT_MIB", "4096"}));
  ASSERT_EQ(a["devices"].size(), 2u) << a;
  EXPECT_EQ(a["devices"][0], (json{{"path", "/dev/nvidia0"},
                                   {"type", "c"},
                                   {"major", 1},
                                   {"minor", 3},
                                   {"file_mode", 0666}}));
  EXPECT_EQ(a["devices"][1]["path"], "/dev/nvidiactl");
  std::map<std::string, json> mounts;
  for (const json& m : a["mounts"]) mounts[m["destination"]] = m;
  ASSERT_EQ(mounts.size(), 7u) << a["mounts"];
  EXPECT_EQ(mounts["/run/tessera/assignment.json"]["source"],
            (dir / "pods" / uid_a / "assignment.json").string());
  EXPECT_EQ(mounts["/usr/lib/x86_64-linux-gnu/libcuda.so.1"]["source"],
            "/run/tessera/lib/libtessera-cuda.so");
  // Each shared GPU's ledger file on its own, never the folder (a container could plant names in
  // a folder it writes).
  const std::string ledger_in_container =
      std::string(shim::contract::kLedgerDir) + "/" + Uuid(0) + shim::contract::kLedgerSuffix;
  ASSERT_TRUE(mounts.count(ledger_in_container)) << a["mounts"];
  EXPECT_EQ(mounts[ledger_in_container]["source"],
            (dir / "pods" / uid_a / "ledger" / (Uuid(0) + shim::contract::kLedgerSuffix)).string());
  EXPECT_FALSE(mounts.count(shim::contract::kLedgerDir)) << a["mounts"];

  const json& b = results["share-b"];
  EXPECT_THAT(b["env"], ::testing::Contains(json{"NVIDIA_VISIBLE_DEVICES", Uuid(1)}));
  EXPECT_THAT(b["env"], ::testing::Contains(json{"TESSERA_GPU_MEMORY_LIMIT_MIB", "8192"}));
  EXPECT_EQ(b["devices"][0]["path"], "/dev/nvidia1");

  // containerd fails the container with the plugin's message.
  ASSERT_TRUE(results["wrong-gpu"].contains("error")) << results["wrong-gpu"];
  EXPECT_THAT(results["wrong-gpu"]["error"].get<std::string>(),
              HasSubstr("tessera: pod team/wrong is assigned GPU "
                        "GPU-00000000-0000-4000-8000-00000000dead, which node n1 does not have"));

  EXPECT_FALSE(results["plain"].contains("error"));
  EXPECT_TRUE(!results["plain"].contains("devices") || results["plain"]["devices"].empty());
  EXPECT_THAT(results["sneaky"]["env"],
              ::testing::Contains(json{"NVIDIA_VISIBLE_DEVICES", "void"}));

  EXPECT_EQ(removed, 1);
  EXPECT_TRUE(fs::exists(dir / "pods" / uid_a));
  EXPECT_FALSE(fs::exists(dir / "pods" / uid_b));  // RemovePodSandbox took its files
  EXPECT_EQ(plugin.registered(), 1);
  shim::RemoveTestTree(dir);
}

}  // namespace
}  // namespace tessera::agent
