#include "agent/discovery/numa.h"

#include <charconv>
#include <filesystem>
#include <fstream>

namespace tessera::agent {
namespace {

std::optional<int32_t> Number(std::string_view s) {
  int32_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::vector<std::pair<int32_t, int32_t>>> ParseCpuRanges(std::string_view list,
                                                                       int32_t max_cpu) {
  std::vector<std::pair<int32_t, int32_t>> ranges;
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    const size_t dash = item.find('-');
    std::optional<int32_t> first = Number(item.substr(0, dash));
    std::optional<int32_t> last =
        dash == std::string_view::npos ? first : Number(item.substr(dash + 1));
    if (!first || !last || *last < *first || *last > max_cpu) return std::nullopt;
    ranges.emplace_back(*first, *last);
    if (comma == std::string_view::npos) return ranges;
    list.remove_prefix(comma + 1);
  }
}

std::optional<std::set<int32_t>> ParseCpuList(std::string_view list) {
  while (!list.empty() && (list.back() == '\n' || list.back() == ' ')) list.remove_suffix(1);
  std::set<int32_t> cpus;
  if (list.empty()) return cpus;
  // A range larger than any machine is malformed.
  auto ranges = ParseCpuRanges(list, (1 << 16) - 1);
  if (!ranges) return std::nullopt;
  for (const auto& [first, last] : *ranges) {
    for (int32_t c = first; c <= last; ++c) cpus.insert(c);
  }
  return cpus;
}

int32_t NumaNodeOfCpus(std::string_view cpu_affinity,
                       const std::map<int32_t, std::string>& node_cpus) {
  std::optional<std::set<int32_t>> affinity = ParseCpuList(cpu_affinity);
  if (!affinity || affinity->empty()) return -1;
  int32_t found = -1;
  for (const auto& [node, list] : node_cpus) {
    std::optional<std::set<int32_t>> cpus = ParseCpuList(list);
    if (!cpus) return -1;
    bool overlaps = false;
    for (int32_t c : *cpus) overlaps |= affinity->contains(c);
    if (!overlaps) continue;
    if (found != -1) return -1;  // the affinity spans nodes
    found = node;
  }
  return found;
}

std::map<int32_t, std::string> ReadNodeCpus(const std::string& sys_root) {
  namespace fs = std::filesystem;
  std::map<int32_t, std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(sys_root) / "devices/system/node", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    std::optional<int32_t> node = Number(std::string_view(name).substr(4));
    if (!node) continue;
    std::ifstream in(e.path() / "cpulist");
    std::string list;
    if (std::getline(in, list)) out[*node] = list;
  }
  return out;
}

}  // namespace tessera::agent
