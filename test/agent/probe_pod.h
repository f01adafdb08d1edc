// The probe pod of the agent's e2e tests (agent_nodes_e2e_test, helm_install_e2e_test): a
// container in tessera.local/cuda-probe:1 (probe_image.sh) that runs test/shim's shim_client over
// the fake driver (test/fake_cuda) and writes what it got to its termination message:
// NVIDIA_VISIBLE_DEVICES, the share's environment, and the driver's answers (cuMemGetInfo,
// cuDeviceTotalMem, an allocation beyond the cap, whether the CUDA shim answered).
//
// The fake driver's "hardware" is a machine file per node (fake_machine.h) in
// <machines_dir>/<node>/machine, mounted by a hostPath volume and picked by the node the pod
// landed on (the downward API). The fake driver sees every GPU of its machine file, where the real
// one sees only the device nodes the container was given; the probe narrows it with
// CUDA_VISIBLE_DEVICES set to NVIDIA_VISIBLE_DEVICES, as the NVIDIA container toolkit's device
// selection would.
#pragma once

#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "common/strings.h"
#include "nlohmann/json.hpp"

namespace tessera::e2e {

constexpr char kProbeImage[] = "tessera.local/cuda-probe:1";

// What the probe reported (its termination message), parsed.
struct ProbeReport {
  std::string raw;
  std::map<std::string, std::string> env;  // visible, sharing, limit_mib
  std::vector<std::string> answers;        // shim_client's, one per command
  bool ok = false;
};

// The probe's commands; its answers come in this order.
//   0 init  1 alloc a 1MiB  2 meminfo  3 totalmem  4 alloc big <cap>  5 status  6 exit
inline ProbeReport ParseProbeReport(const std::string& message) {
  ProbeReport r;
  r.raw = message;
  std::istringstream in(message);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (line.rfind("ok", 0) == 0 || line.rfind("err", 0) == 0) {
      r.answers.push_back(line);
    } else if (eq != std::string::npos && line.find(' ') > eq) {
      r.env[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  r.ok = r.answers.size() >= 6;
  return r;
}

// The numbers of an "ok a b c" answer.
inline std::vector<int64_t> ProbeNumbers(const std::string& answer) {
  std::vector<int64_t> out;
  std::istringstream in(
      answer.substr(answer.find(' ') == std::string::npos ? answer.size() : answer.find(' ')));
  int64_t v;
  while (in >> v) out.push_back(v);
  return out;
}

// The container's script; `extra_script` runs after the report is written.
inline std::string ProbeScript(const std::string& extra_script = "") {
  return StrCat(R"(export CUDA_VISIBLE_DEVICES="$NVIDIA_VISIBLE_DEVICES"
cap=$(( ${TESSERA_GPU_MEMORY_LIMIT_MIB:-0} * 1048576 ))
[ "$cap" -gt 0 ] || cap=1099511627776
{
  echo "visible=$NVIDIA_VISIBLE_DEVICES"
  echo "sharing=${TESSERA_GPU_SHARING:-none}"
  echo "limit_mib=${TESSERA_GPU_MEMORY_LIMIT_MIB:-}"
  printf 'init\nalloc a 1048576\nmeminfo\ntotalmem\nalloc big %s\nstatus\nexit\n' "$cap" |
    shim_client 2>&1 | cut -c1-200
} >/dev/termination-log 2>&1
)",
                extra_script);
}

// A probe pod for `scheduler` that finds its node's machine file under `machines_dir`; `limits`
// its tessera resources, `annotations` (gangs).
inline nlohmann::json ProbePodOnAnyNode(const std::string& ns, const std::string& name,
                                        const std::string& scheduler,
                                        const std::string& machines_dir,
                                        const std::map<std::string, std::string>& limits,
                                        const std::map<std::string, std::string>& annotations = {},
                                        const std::string& extra_script = "") {
  using nlohmann::json;
  json node_env = {{"name", "NODE"},
                   {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}};
  return {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", {{"name", name}, {"namespace", ns}, {"annotations", annotations}}},
      {"spec",
       {{"schedulerName", scheduler},
        {"restartPolicy", "Never"},
        {"automountServiceAccountToken", false},
        {"terminationGracePeriodSeconds", 1},
        {"containers",
         {{{"name", "main"},
           {"image", kProbeImage},
           {"imagePullPolicy", "Never"},
           {"command", {"/bin/sh", "-c", ProbeScript(extra_script)}},
           {"env",
            {node_env,
             {{"name", "TESSERA_FAKE_GPU_MACHINE"}, {"value", "/run/fake-gpu/$(NODE)/machine"}}}},
           {"resources", {{"limits", limits}}},
           {"volumeMounts", {{{"name", "fake-gpu"}, {"mountPath", "/run/fake-gpu"}}}}}}},
        {"volumes",
         {{{"name", "fake-gpu"},
           {"hostPath", {{"path", machines_dir}, {"type", "Directory"}}}}}}}}};
}

}  // namespace tessera::e2e
