#include "k8s/status/agent_usage.h"

#include <cstdlib>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "common/strings.h"

namespace tessera::k8s {
namespace {

constexpr std::string_view kMemory = "tessera_agent_pod_gpu_memory_used_bytes";
constexpr std::string_view kDriverMemory = "tessera_agent_pod_gpu_memory_driver_bytes";
constexpr std::string_view kBusy = "tessera_agent_pod_gpu_busy_seconds_total";
constexpr std::string_view kIdle = "tessera_agent_pod_gpu_idle";

// The labels of a sample line after its name ("{a=\"x\",b=\"y\"} 1"), and the rest of the line
// after the closing brace; false when they cannot be read.
bool ReadLabels(std::string_view s, std::map<std::string, std::string>* labels,
                std::string_view* rest) {
  if (s.empty() || s[0] != '{') return false;
  size_t i = 1;
  while (i < s.size() && s[i] != '}') {
    const size_t eq = s.find('=', i);
    if (eq == std::string_view::npos || eq + 1 >= s.size() || s[eq + 1] != '"') return false;
    std::string name(s.substr(i, eq - i));
    std::string value;
    size_t j = eq + 2;
    for (; j < s.size() && s[j] != '"'; ++j) {
      if (s[j] == '\\' && j + 1 < s.size()) {
        ++j;
        value += s[j] == 'n' ? '\n' : s[j];
      } else {
        value += s[j];
      }
    }
    if (j >= s.size()) return false;
    (*labels)[std::move(name)] = std::move(value);
    i = j + 1;
    if (i < s.size() && s[i] == ',') ++i;
  }
  if (i >= s.size()) return false;
  *rest = s.substr(i + 1);
  return true;
}

}  // namespace

absl::Status AddAgentMetrics(std::string_view text, AgentUsage* usage) {
  int line_no = 0;
  std::set<const PodGpuUsage*> from_shim;  // the shim's figure wins over the driver's
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    const size_t brace = line.find('{');
    if (brace == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, brace);
    if (name != kMemory && name != kDriverMemory && name != kBusy && name != kIdle) continue;
    std::map<std::string, std::string> labels;
    std::string_view rest;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(
          StrCat("line ", line_no, " of the agent's /metrics: ", why, ": ", line));
    };
    if (!ReadLabels(line.substr(brace), &labels, &rest)) return bad("its labels cannot be read");
    while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
    const std::string_view value_text = rest.substr(0, rest.find(' '));
    double value = 0;
    if (!absl::SimpleAtod(absl::string_view(value_text.data(), value_text.size()), &value))
      return bad("its value is not a number");
    if (!labels.contains("namespace") || !labels.contains("pod") || !labels.contains("uuid")) {
      return bad("it has no namespace, pod or uuid label");
    }
    PodGpuUsage& u = (*usage)[{StrCat(labels["namespace"], "/", labels["pod"]), labels["uuid"]}];
    if (name == kMemory) {
      u.memory_used_bytes = static_cast<int64_t>(value);
      from_shim.insert(&u);
    } else if (name == kDriverMemory) {
      if (!from_shim.contains(&u)) u.memory_used_bytes = static_cast<int64_t>(value);
    } else if (name == kBusy) {
      u.busy_seconds = value;
    } else {
      u.idle = static_cast<int32_t>(value);
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::k8s
