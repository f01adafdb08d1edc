// HostProcesses: who a host process is, for everything in the agent that starts from a host PID
// (the PIDs the GPU driver reports through NVML) and needs the pod behind it:
//   - the memory backstop (pods/memory_backstop.h): NVML's per-process used memory, summed by pod;
//   - the ledger reaper (shim/segments.h): the host PID of a ledger slot, checked to be a process
//     of the slot's own pod;
//   - per-pod GPU time (issue 34: nvmlDeviceGetProcessUtilization by pod) and XID attribution
//     (issue 30: the PID in an application XID -> the pod that caused it) are meant to use it too.
//
// It reads the host's /proc (`proc_root`): the agent must run in the host's PID namespace
// (DaemonSet `hostPID: true`; InHostPidNamespace says whether it does). A PID is identified with
// its start time (field 22 of /proc/<pid>/stat), so a PID reused by another process is never
// taken for the one that was cached.
//
//   OwnerOf(pid)        pod UID and container ID, from /proc/<pid>/cgroup: the kubelet's cgroup
//                       names for both cgroup drivers and both cgroup versions
//                         cgroupfs  .../kubepods[/<qos>]/pod<UID>/<container ID>
//                         systemd   .../kubepods-<qos>-pod<UID_with_underscores>.slice/
//                                   cri-containerd-<container ID>.scope (or crio-, docker-)
//   HostPidOf(ns, pid)  the host PID of the process that is `pid` in the PID namespace whose
//                       inode is `ns` (shim::HostPidIndex: /proc/<pid>/ns/pid and the NSpid line
//                       of its status), from one scan of /proc per Refresh, made only when asked
//                       (a ledger full of made-up identities costs one scan, not one per slot)
//   PodsWithProcesses() the UIDs of the pods that have a process on the host (a running pod
//                       always has one: its sandbox's pause process), from one scan of /proc
//
// Not thread-safe: one owner (the pod manager's maintenance, under its lock). The parsers are pure
// and fuzzed (fuzz/host_processes_fuzz.cc): /proc/<pid>/cgroup and status of a container's
// process are partly the container's to shape (its command name, its cgroup namespace), so they
// are parsed as untrusted text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shim/segments.h"

namespace tessera::agent {

// The pod and container a host process belongs to.
struct ProcessOwner {
  std::string pod_uid;       // "8d1c...-...": dashes, as the API server writes it
  std::string container_id;  // the runtime's ID (64 hex digits); empty for a pod-level cgroup
  bool operator==(const ProcessOwner&) const = default;
};

// The owner named by the text of /proc/<pid>/cgroup, or nullopt for a process of no pod.
std::optional<ProcessOwner> ParseCgroupOwner(std::string_view proc_pid_cgroup);
// Field 22 of /proc/<pid>/stat (start time in clock ticks); nullopt when unreadable.
std::optional<uint64_t> ParseStartTime(std::string_view proc_pid_stat);

class HostProcesses {
 public:
  explicit HostProcesses(std::string proc_root = "/proc");

  // The pod and container of host process `pid`; nullopt for a process of no pod (or gone).
  std::optional<ProcessOwner> OwnerOf(uint32_t pid);

  // The pods with at least one process now (one scan of /proc; owners cached as OwnerOf's).
  std::set<std::string> PodsWithProcesses();

  // Forgets what one scan found: the next HostPidOf scans /proc again (once).
  void Refresh();
  // The host PID of the process `ns_pid` of the PID namespace `pidns_inode`.
  std::optional<uint32_t> HostPidOf(uint64_t pidns_inode, uint32_t ns_pid);

  // True when `proc_root` shows the host's PID namespace: the agent's own NSpid has one entry (a
  // process in a container's PID namespace has two or more).
  bool InHostPidNamespace() const;

  const std::string& proc_root() const { return proc_root_; }

 private:
  struct Cached {
    uint64_t start_time = 0;
    std::optional<ProcessOwner> owner;
  };
  std::optional<uint64_t> StartTimeOf(uint32_t pid) const;

  std::string proc_root_;
  std::map<uint32_t, Cached> owners_;  // by host PID, checked against the start time
  shim::HostPidIndex index_;
};

}  // namespace tessera::agent
