// What /metrics serves is built from names that come from the API server (node names, and
// through them label values): whatever they hold, every line of the exposition stays one
// well-formed sample or comment (the label value escaped), so a scraper can always read it.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <string_view>

#include "k8s/scheduler/metrics.h"

namespace {

// name{node="..."} value, with \\, \" and \n as the only escapes inside the quotes.
bool WellFormed(const std::string& line) {
  if (line.empty() || line[0] == '#') return true;
  size_t i = 0;
  while (i < line.size() && (std::isalnum(static_cast<unsigned char>(line[i])) || line[i] == '_')) {
    ++i;
  }
  if (i == 0) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      while (i < line.size() && line[i] != '=') ++i;
      if (i + 1 >= line.size() || line[i + 1] != '"') return false;
      i += 2;
      while (i < line.size() && line[i] != '"') {
        if (line[i] == '\\') {
          if (i + 1 >= line.size()) return false;
          char e = line[i + 1];
          if (e != '\\' && e != '"' && e != 'n') return false;
          ++i;
        }
        ++i;
      }
      if (i >= line.size()) return false;
      ++i;  // the closing quote
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i >= line.size()) return false;
    ++i;  // }
  }
  return i < line.size() && line[i] == ' ' && i + 1 < line.size();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  tessera::k8s::SchedulerMetrics metrics;
  std::vector<tessera::k8s::NodeGauges> nodes;
  size_t start = 0;
  while (start <= text.size() && nodes.size() < 64) {
    size_t end = text.find('\0', start);
    if (end == std::string_view::npos) end = text.size();
    tessera::k8s::NodeGauges g;
    g.node = std::string(text.substr(start, end - start));
    g.gpu_memory_allocated_mib = static_cast<int64_t>(end - start);
    g.inventory_valid = (end - start) % 2 == 0;
    nodes.push_back(std::move(g));
    start = end + 1;
  }
  metrics.SetNodes(std::move(nodes));
  metrics.decision_duration.Observe(static_cast<double>(size) * 1e-6);
  std::istringstream out(metrics.Render());
  std::string line;
  while (std::getline(out, line)) {
    if (!WellFormed(line)) std::abort();
  }
  return 0;
}
