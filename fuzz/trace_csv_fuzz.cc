// The Alibaba trace readers (CSV) never crash, and what they accept is consistent: nodes build a
// valid cluster; pods have sane GPU asks and times; errors name the file.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/strings.h"
#include "core/model/cluster.h"
#include "sim/trace/alibaba.h"
#include "sim/trace/csv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string source = "fuzz.csv";
  auto table = tessera::sim::CsvTable::Parse(text, source);
  if (table.ok()) {
    for (const tessera::sim::CsvRow& row : table->rows()) {
      if (row.cells.size() != table->header().size()) std::abort();
    }
  } else if (tessera::FromAbsl(table.status().message()).find(source) != 0) {
    std::abort();
  }

  auto nodes = tessera::sim::ParseAlibabaNodes(text, source);
  if (nodes.ok()) {
    if (nodes->empty()) std::abort();
    if (!tessera::core::Cluster::Create(*nodes).ok()) std::abort();
  } else if (tessera::FromAbsl(nodes.status().message()).find(source) != 0) {
    std::abort();
  }

  auto pods = tessera::sim::ParseAlibabaPods(text, source);
  if (pods.ok()) {
    if (pods->pods.empty()) std::abort();
    for (const tessera::sim::TracePod& p : pods->pods) {
      if (p.num_gpu < 0 || p.gpu_milli < 0 || p.gpu_milli > 1000) std::abort();
      if ((p.num_gpu == 0) != (p.gpu_milli == 0)) std::abort();
      if (p.num_gpu > 1 && p.gpu_milli != 1000) std::abort();
      if (p.creation_time && p.deletion_time && *p.deletion_time < *p.creation_time) std::abort();
      tessera::core::PodRequest r = tessera::sim::ToPodRequest(p, p.name);
      if (r.gpu.gpu_count() != p.num_gpu) std::abort();
      if (r.gpu.compute_milli_total() != p.total_gpu_milli()) std::abort();
    }
  } else if (tessera::FromAbsl(pods.status().message()).find(source) != 0) {
    std::abort();
  }
  return 0;
}
