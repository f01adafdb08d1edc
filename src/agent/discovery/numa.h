// The NUMA node a GPU is attached to, as nvidia-smi topo -m prints it ("NUMA Affinity"), where the
// PCI device itself does not say.
//
// The discovery asks NVML (nvmlDeviceGetNumaNodeId), then the PCI device's sysfs numa_node. In a
// virtual machine or on a single-socket host without NUMA information the kernel reports -1 there
// (NUMA_NO_NODE), while nvidia-smi still prints the node whose CPUs are the GPU's CPU affinity
// (seen on an H200 VM: sysfs -1, nvidia-smi 0). NumaNodeOfCpus makes the same inference: the one
// node whose CPUs overlap the GPU's CPU affinity; -1 when none or several do (the affinity spans
// sockets), so a guess is never made.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tessera::agent {

// The ranges of a kernel CPU list ("0-3,8,10-11" -> {0,3},{8,8},{10,11}); nullopt for a malformed
// list (an empty one included) or a CPU number over `max_cpu`.
std::optional<std::vector<std::pair<int32_t, int32_t>>> ParseCpuRanges(std::string_view list,
                                                                       int32_t max_cpu);
// The CPUs of a kernel CPU list as sysfs writes it (a trailing newline allowed; empty: none);
// nullopt for a malformed list or one naming a CPU over 65535.
std::optional<std::set<int32_t>> ParseCpuList(std::string_view list);

// The one node of `node_cpus` (node -> its CPU list, as /sys/devices/system/node/node<N>/cpulist
// holds it) whose CPUs overlap `cpu_affinity`; -1 when none or several do, or a list is malformed.
int32_t NumaNodeOfCpus(std::string_view cpu_affinity,
                       const std::map<int32_t, std::string>& node_cpus);

// node -> cpulist from <sys_root>/devices/system/node/node<N>/cpulist (empty when unreadable).
std::map<int32_t, std::string> ReadNodeCpus(const std::string& sys_root = "/sys");

}  // namespace tessera::agent
