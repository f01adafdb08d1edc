#include "agent/procs/host_processes.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "shim/ledger.h"

namespace tessera::agent {
namespace {

// Reads at most `limit` bytes of a small /proc file; empty when it cannot be read.
std::string ReadSmall(const std::string& path, size_t limit = 8192) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return "";
  std::string out(limit, '\0');
  size_t got = 0;
  while (got < limit) {
    ssize_t n = ::read(fd, out.data() + got, limit - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// A pod UID as the kubelet writes it into cgroup names: 8-4-4-4-12 hex digits, with '-' (cgroupfs)
// or '_' (systemd) between the groups. Returns it with dashes, or empty.
std::string PodUidAt(std::string_view s) {
  if (s.size() != 36) return "";
  std::string uid(s);
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool sep = i == 8 || i == 13 || i == 18 || i == 23;
    if (sep) {
      if (uid[i] != '-' && uid[i] != '_') return "";
      uid[i] = '-';
    } else if (!IsHex(uid[i])) {
      return "";
    }
  }
  return uid;
}

// The pod UID a cgroup path component names ("pod<UID>" or "kubepods-<qos>-pod<UID>.slice").
std::string PodUidOfComponent(std::string_view c) {
  if (c.size() > 6 && c.substr(c.size() - 6) == ".slice") c.remove_suffix(6);
  const size_t at = c.rfind("pod");
  if (at == std::string_view::npos || (at != 0 && c[at - 1] != '-')) return "";
  return PodUidAt(c.substr(at + 3));
}

// The container ID a cgroup path component names ("<id>" or "<runtime>-<id>.scope").
std::string ContainerIdOfComponent(std::string_view c) {
  if (c.size() > 6 && c.substr(c.size() - 6) == ".scope") {
    c.remove_suffix(6);
    const size_t dash = c.rfind('-');
    if (dash == std::string_view::npos) return "";
    c.remove_prefix(dash + 1);
  }
  if (c.empty() || c.size() > 128) return "";
  for (char ch : c) {
    if (!IsHex(ch)) return "";
  }
  return std::string(c);
}

std::optional<ProcessOwner> OwnerOfPath(std::string_view path) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    if (slash > start) parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  for (size_t i = parts.size(); i-- > 0;) {
    std::string uid = PodUidOfComponent(parts[i]);
    if (uid.empty()) continue;
    ProcessOwner owner{std::move(uid), ""};
    if (i + 1 < parts.size()) owner.container_id = ContainerIdOfComponent(parts[i + 1]);
    return owner;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ProcessOwner> ParseCgroupOwner(std::string_view text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    // "<hierarchy>:<controllers>:<path>"; the path may itself contain ':'.
    const size_t first = line.find(':');
    if (first == std::string_view::npos) continue;
    const size_t second = line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    if (auto owner = OwnerOfPath(line.substr(second + 1))) return owner;
  }
  return std::nullopt;
}

std::optional<uint64_t> ParseStartTime(std::string_view stat) {
  const uint64_t ticks = shim::StatStartTimeTicks(stat);
  if (ticks == 0) return std::nullopt;
  return ticks;
}

HostProcesses::HostProcesses(std::string proc_root)
    : proc_root_(std::move(proc_root)), index_(proc_root_) {}

std::optional<uint64_t> HostProcesses::StartTimeOf(uint32_t pid) const {
  return ParseStartTime(ReadSmall(proc_root_ + "/" + std::to_string(pid) + "/stat", 1024));
}

std::optional<ProcessOwner> HostProcesses::OwnerOf(uint32_t pid) {
  if (pid == 0) return std::nullopt;
  std::optional<uint64_t> start = StartTimeOf(pid);
  if (!start) {
    owners_.erase(pid);
    return std::nullopt;
  }
  auto it = owners_.find(pid);
  if (it != owners_.end() && it->second.start_time == *start) return it->second.owner;
  Cached c;
  c.start_time = *start;
  c.owner = ParseCgroupOwner(ReadSmall(proc_root_ + "/" + std::to_string(pid) + "/cgroup"));
  // Read the start time again: a PID reused between the two reads is not cached.
  if (StartTimeOf(pid) != start) return std::nullopt;
  if (owners_.size() > 65536) owners_.clear();  // PIDs of dead processes accumulate otherwise
  owners_[pid] = c;
  return c.owner;
}

std::set<std::string> HostProcesses::PodsWithProcesses() {
  std::set<std::string> out;
  DIR* d = ::opendir(proc_root_.c_str());
  if (d == nullptr) return out;
  std::vector<uint32_t> pids;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const unsigned long pid = std::strtoul(e->d_name, &end, 10);
    if (end != e->d_name && *end == '\0' && pid > 0 && pid <= UINT32_MAX) {
      pids.push_back(static_cast<uint32_t>(pid));
    }
  }
  ::closedir(d);
  for (uint32_t pid : pids) {
    if (std::optional<ProcessOwner> owner = OwnerOf(pid)) out.insert(std::move(owner->pod_uid));
  }
  return out;
}

void HostProcesses::Refresh() { index_ = shim::HostPidIndex(proc_root_); }

std::optional<uint32_t> HostProcesses::HostPidOf(uint64_t pidns_inode, uint32_t ns_pid) {
  return index_.Find(pidns_inode, ns_pid);
}

bool HostProcesses::InHostPidNamespace() const {
  return shim::ParseNsPids(ReadSmall(proc_root_ + "/self/status")).size() == 1;
}

}  // namespace tessera::agent
