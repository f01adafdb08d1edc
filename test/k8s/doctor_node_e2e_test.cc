// `tessera doctor node` inside a real harness node (kubelet, containerd with NRI, fake GPUs), as
// it runs where the agent runs: clean, then each fault planted (a missing NRI socket, device
// nodes, driver libraries, CDI folder, a GPU description that cannot be read).
#include <algorithm>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const Node& GpuNode() { return ControlPlane::Shared().nodes().at(0); }

struct Doctor {
  int status = -1;
  json report;
  std::string err;
};

// Runs `tessera doctor node` in the node with the agent's flags for it; `changed` flag/value
// pairs replace the flag of the same name (or are added).
Doctor RunDoctor(const std::vector<std::pair<std::string, std::string>>& changed) {
  const Node& node = GpuNode();
  std::vector<std::pair<std::string, std::string>> flags = {
      {"--node-name", node.name},
      {"--gpus-file", node.fake_gpus},
      {"--dev-dir", node.dev_dir},
      {"--driver-lib-dir", TESSERA_FAKE_DRIVER_DIR}};
  for (const auto& [flag, value] : changed) {
    auto it =
        std::find_if(flags.begin(), flags.end(), [&](const auto& f) { return f.first == flag; });
    if (it != flags.end()) {
      it->second = value;
    } else {
      flags.emplace_back(flag, value);
    }
  }
  std::vector<std::string> argv = {TESSERA_BINARY, "doctor", "node", "-o", "json"};
  for (const auto& [flag, value] : flags) {
    argv.push_back(flag);
    argv.push_back(value);
  }
  CommandResult r = ControlPlane::Shared().NodeExec(node.name, argv);
  Doctor d;
  d.status = r.exit_code;
  d.err = r.err;
  d.report = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(d.report.is_discarded()) << r.out << r.err;
  return d;
}

json Finding(const Doctor& d, const std::string& check) {
  for (const json& f : d.report["findings"]) {
    if (f["check"] == check) return f;
  }
  return json();
}

TEST(DoctorNode, CleanThenEachFaultPlanted) {
  Doctor clean = RunDoctor({});
  ASSERT_EQ(clean.status, 0) << clean.report.dump(2) << clean.err;
  EXPECT_EQ(clean.report["errors"], 0);
  EXPECT_EQ(clean.report["target"], GpuNode().name);
  EXPECT_THAT(Finding(clean, "gpus")["what"].get<std::string>(), HasSubstr("8 GPUs (H100-80GB)"));
  EXPECT_EQ(Finding(clean, "nri-socket")["severity"], "ok");  // the node's containerd, NRI on
  EXPECT_EQ(Finding(clean, "device-nodes")["severity"], "ok");
  EXPECT_EQ(Finding(clean, "driver-libraries")["severity"], "ok");
  // The harness's nodes run on cgroup v1 (hybrid) with failCgroupV1: false: a warning, not an
  // error (test/controlplane/README.md, Limits).
  EXPECT_EQ(Finding(clean, "cgroup")["severity"], "warning");
  EXPECT_THAT(Finding(clean, "cgroup")["fix"].get<std::string>(), HasSubstr("failCgroupV1: false"));

  // The runtime's NRI socket is elsewhere (NRI off): an error with the containerd setting.
  Doctor no_nri = RunDoctor({{"--nri-socket", "/var/run/nri/absent.sock"}});
  EXPECT_EQ(no_nri.status, 4);
  EXPECT_EQ(Finding(no_nri, "nri-socket")["severity"], "error");
  EXPECT_THAT(Finding(no_nri, "nri-socket")["fix"].get<std::string>(),
              HasSubstr("io.containerd.nri.v1.nri"));

  // Device nodes and driver libraries missing.
  const std::string empty = StrCat(GpuNode().dir, "/doctor-empty");
  std::filesystem::create_directories(empty);
  Doctor no_dev = RunDoctor({{"--dev-dir", empty}, {"--driver-lib-dir", empty}});
  EXPECT_EQ(no_dev.status, 4);
  EXPECT_THAT(Finding(no_dev, "device-nodes")["what"].get<std::string>(),
              HasSubstr(empty + "/nvidiactl"));
  EXPECT_EQ(Finding(no_dev, "driver-libraries")["severity"], "error");

  // DRA mode: the node's CDI folder and kubelet plugin registry are there; a CDI folder that
  // does not exist is an error.
  Doctor dra = RunDoctor({{"--mode", "dra"}});
  EXPECT_EQ(dra.status, 0) << dra.report.dump(2);
  EXPECT_EQ(Finding(dra, "cdi-dir")["severity"], "ok");
  EXPECT_EQ(Finding(dra, "kubelet-plugins")["severity"], "ok");
  EXPECT_TRUE(Finding(dra, "nri-socket").is_null());
  Doctor no_cdi = RunDoctor({{"--mode", "dra"}, {"--cdi-dir", "/var/run/cdi-absent"}});
  EXPECT_EQ(no_cdi.status, 4);
  EXPECT_THAT(Finding(no_cdi, "cdi-dir")["fix"].get<std::string>(),
              HasSubstr("mkdir -p /var/run/cdi-absent"));

  // No GPUs to discover.
  Doctor no_gpus = RunDoctor({{"--gpus-file", StrCat(empty, "/gpus.json")}});
  EXPECT_EQ(no_gpus.status, 4);
  EXPECT_EQ(Finding(no_gpus, "gpus")["severity"], "error");
  std::filesystem::remove_all(empty);
}

}  // namespace
}  // namespace tessera::e2e
