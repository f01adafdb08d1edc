// Temporary driver.
#include <cstdio>
#include <cstdlib>

#include "core/engine.h"
#include "core/policy/shape_index.h"
#include "sim/fgd_replay.h"

using namespace tessera;

int main(int argc, char** argv) {
  std::string dir = std::string(TESSERA_SHARED_DIR) + "/traces/alibaba-gpu-v2023/";
  std::string workload = argc > 1 ? argv[1] : "default";
  std::string policy = argc > 2 ? argv[2] : "fgd";
  int seeds = argc > 3 ? atoi(argv[3]) : 1;
  auto nodes = sim::ReadAlibabaNodes(dir + "openb_node_list_gpu_node.csv");
  auto cluster = core::Cluster::Create(*nodes);
  auto trace = sim::ReadAlibabaPods(dir + "openb_pod_list_" + workload + ".csv");
  if (!trace.ok()) { fprintf(stderr, "%s\n", std::string(trace.status().message()).c_str()); return 2; }
  sim::FgdRunOptions o;
  o.policy = policy;
  o.typical_tasks = sim::TraceTypicalTasks(*trace, *cluster);
  std::vector<sim::FgdRunResult> runs;
  for (int s = 42; s < 42 + seeds; ++s) {
    o.seed = s;
    auto r = sim::RunFgdProtocol(*cluster, *trace, o);
    if (!r.ok()) { fprintf(stderr, "%s\n", std::string(r.status().message()).c_str()); return 2; }
    printf("%s %s seed %d: alloc %.2f frag %.2f failed %ld pods %ld  %.3fs\n", workload.c_str(),
           policy.c_str(), s, r->final_allocation, r->fragmentation_rate, (long)r->failed_pods,
           (long)r->pods, r->seconds);
    runs.push_back(*r);
  }
  auto m = sim::MeanOfRuns(runs);
  for (auto& [x, y] : m.curve) if (x >= 78 && (x % 2 == 0 || x == 95)) printf(" %d:%.2f", x, y);
  printf("\n");
  printf("MEAN %s %s: alloc %.2f frag %.2f  %.3fs\n", workload.c_str(), policy.c_str(),
         m.final_allocation, m.fragmentation_rate, m.seconds);
}
