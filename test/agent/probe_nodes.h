// Harness nodes ready for probe pods (probe_pod.h): the image tessera.local/cuda-probe:1 built by
// probe_image.sh and imported into each node, and each node's fake driver machine
// (test/fake_cuda/fake_machine.h: its GPUs as the node's description lists them) in
// <machines_dir>/<node>/machine, where ProbePodOnAnyNode's hostPath volume finds it. Used by the
// agent's e2e tests and the soak (test/soak).
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "fake_cuda/fake_machine.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {

// The files probe_image.sh puts into the image (the shim's test client, the fake driver's
// libraries, the CUDA shim).
struct ProbeImageFiles {
  std::string shim_client, fake_cuda, fake_nvml, shim_library;
};

// Builds the image into `work_dir`, imports it into `nodes` and writes their machines; "" or
// what went wrong.
inline std::string PrepareProbeNodes(const ControlPlane& cp, const std::vector<std::string>& nodes,
                                     const std::string& work_dir, const std::string& machines_dir,
                                     const ProbeImageFiles& files) {
  namespace fs = std::filesystem;
  const std::string image = work_dir + "/cuda-probe.tar";
  CommandResult built =
      RunCommand({TESSERA_SOURCE_DIR "/test/agent/probe_image.sh", image, files.shim_client,
                  files.fake_cuda, files.fake_nvml, files.shim_library});
  if (!built.ok()) return StrCat("probe_image.sh: ", built.out, built.err);
  for (const std::string& node : nodes) {
    CommandResult imported = cp.NodeExec(node, {"ctr", "-n", "k8s.io", "images", "import", image});
    if (!imported.ok()) return StrCat("import into ", node, ": ", imported.out, imported.err);
    std::ifstream in(cp.FindNode(node)->fake_gpus);
    std::stringstream text;
    text << in.rdbuf();
    const nlohmann::json gpus = nlohmann::json::parse(text.str(), nullptr, false);
    if (gpus.is_discarded()) return StrCat("the GPU description of ", node, " is not JSON");
    std::vector<fake::DeviceSpec> devices;
    for (const nlohmann::json& g : gpus["gpus"]) {
      fake::DeviceSpec d;
      d.uuid = g["uuid"];
      d.name = g.value("name", "fake");
      d.total_bytes = g["memory_mib"].get<uint64_t>() << 20;
      d.sm_count = g.value("sm_count", 100);
      devices.push_back(d);
    }
    const std::string dir = machines_dir + "/" + node;
    fs::create_directories(dir);
    const std::string err = fake::CreateMachine(dir + "/machine", devices);
    if (!err.empty()) return StrCat("fake machine of ", node, ": ", err);
    ::chmod((dir + "/machine").c_str(), 0666);
  }
  return "";
}

}  // namespace tessera::e2e
