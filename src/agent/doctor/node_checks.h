// `tessera doctor node`: the preflight of one GPU node, run where the agent runs (on the host, or
// in the agent's pod with the same mounts and flags). It asks the questions the agent's own code
// asks, through the same functions (GPU discovery, FindDriverLibraries, StatDevice), and turns
// each answer into a Finding with what to do:
//
//   gpus            NVML loads and sees GPUs (or the --gpus-file of a test node reads)
//   device-nodes    /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidia<minor> of each GPU exist
//   driver-libraries libcuda.so.1 and libnvidia-ml.so.1 in the driver folders (containers get
//                   them; the CUDA shim enforces shares over them)
//   nri-socket      classic mode: the runtime's NRI socket accepts a connection (the agent puts
//                   GPUs into containers through it)
//   cdi-dir         DRA mode: the CDI spec folder exists and the agent can write it
//   kubelet-plugins DRA mode: the kubelet's plugins_registry folder exists
//   cgroup          the unified cgroup v2 hierarchy; cgroup v1 is a warning (kubelet 1.35+
//                   refuses it unless KubeletConfiguration failCgroupV1 is false, which this
//                   check cannot see), an unreadable /sys/fs/cgroup an error
//
// Nothing is changed on the node; every path is a flag, so a test plants a fault by pointing one
// at a folder it prepared.
#pragma once

#include <string>
#include <vector>

#include "agent/pods/driver_files.h"
#include "k8s/doctor/findings.h"

namespace tessera::agent {

struct NodeCheckOptions {
  std::string node_name;         // for the report
  std::string mode = "classic";  // classic (NRI delivery) or dra (kubelet plugin, CDI)
  std::string gpus_file;         // a test node's fake GPUs, instead of NVML
  std::string nvml_library = "libnvidia-ml.so.1";
  std::string dev_dir = "/dev";
  DriverFilesOptions driver;  // host_root, driver_lib_dirs
  std::string nri_socket = "/var/run/nri/nri.sock";
  bool no_nri = false;  // the agent runs with --no-nri: another component delivers
  std::string cdi_dir = "/var/run/cdi";
  std::string kubelet_dir = "/var/lib/kubelet";
  std::string cgroup_root = "/sys/fs/cgroup";
};

k8s::DoctorReport CheckNode(const NodeCheckOptions& options);

// The single checks, for tests. Each returns one finding (device-nodes may return several).
k8s::Finding CheckNriSocket(const std::string& socket);
k8s::Finding CheckCdiDir(const std::string& dir);
k8s::Finding CheckCgroup(const std::string& cgroup_root);

}  // namespace tessera::agent
