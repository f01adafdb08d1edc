// The agent's parsers of /proc for host PIDs never crash and name only well-formed owners: a
// container shapes part of what they read (its command name in /proc/<pid>/stat, its cgroup
// names in a cgroup namespace of its own). The input is cut in three at the first two NUL bytes:
// a /proc/<pid>/cgroup, a /proc/<pid>/status and a /proc/<pid>/stat.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "agent/procs/host_processes.h"
#include "shim/segments.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  const size_t first = all.find('\0');
  std::string_view cgroup = all.substr(0, first);
  std::string_view rest = first == std::string_view::npos ? "" : all.substr(first + 1);
  const size_t second = rest.find('\0');
  std::string_view status = rest.substr(0, second);
  std::string_view stat = second == std::string_view::npos ? "" : rest.substr(second + 1);
  using namespace tessera;
  if (auto owner = agent::ParseCgroupOwner(cgroup)) {
    if (owner->pod_uid.size() != 36) std::abort();
    for (size_t i = 0; i < 36; ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash ? owner->pod_uid[i] != '-'
               : !std::isxdigit(static_cast<unsigned char>(owner->pod_uid[i]))) {
        std::abort();
      }
    }
    if (owner->container_id.size() > 128) std::abort();
    for (char c : owner->container_id) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) std::abort();
    }
  }
  for (uint32_t pid : shim::ParseNsPids(status)) {
    if (pid == 0) std::abort();
  }
  (void)agent::ParseStartTime(stat);
  (void)agent::ParseStartTime(cgroup);
  return 0;
}
