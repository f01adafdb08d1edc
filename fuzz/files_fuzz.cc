// Cluster and workload files: the readers never crash, whatever the YAML.
#include <cstdint>
#include <string_view>

#include "core/model/cluster.h"
#include "sim/cluster_file.h"
#include "sim/workload_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto c = tessera::sim::ParseClusterYaml(text, "fuzz"); c.ok()) {
    (void)tessera::core::Cluster::Create(c->nodes);
  }
  if (auto w = tessera::sim::ParseWorkloadYaml(text, "fuzz"); w.ok()) {
    for (const auto& job : w->jobs) {
      if (job.replicas <= 64) (void)tessera::sim::ExpandJob(job);
    }
  }
  return 0;
}
