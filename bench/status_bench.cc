// `tessera status` at scale, less the API server: the time from the two lists' objects (as the
// API server returns them) to the printed table and JSON document, on N nodes of 8 GPUs with
// bound shares and whole GPUs and some pending pods (bench/run_status.sh drives it).
//
//   status_bench [--nodes 10000] [--runs 5]
//
// Prints one JSON line: the counts, and per stage the median seconds over the runs: decode (the
// objects into a ClusterSnapshot, as ReadSnapshot does per list item), status (ComputeStatus:
// the ledger rebuilt, per-GPU grants, pending pods, stranded memory), text (RenderStatusText) and
// json (StatusToJson, dumped).
#include <algorithm>
#include <chrono>
#include <iostream>

#include "CLI/CLI.hpp"
#include "common/strings.h"
#include "k8s/snapshot/snapshot.h"
#include "k8s/status/status.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::NodeObject;
using testing::PodObject;

records::Assignment Grant(const std::string& node, int gpu, int64_t memory_mib,
                          int32_t compute_milli, bool exclusive) {
  records::Assignment a;
  a.node = node;
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.memory_mib = memory_mib;
  g.grant.compute_milli = compute_milli;
  g.grant.exclusive = exclusive;
  g.uuid = StrCat("GPU-", node, "-", gpu);
  a.gpus.push_back(g);
  return a;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  CLI::App app("tessera status at scale, without the API server");
  int nodes = 10'000;
  int runs = 5;
  app.add_option("--nodes", nodes)->check(CLI::Range(1, 1'000'000));
  app.add_option("--runs", runs)->check(CLI::Range(1, 100));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::off);

  // Per node: GPUs 0-3 shared by two 20Gi pods each, GPUs 4-5 held whole, 6-7 free.
  std::vector<json> node_objects, pod_objects;
  for (int n = 0; n < nodes; ++n) {
    const std::string name = StrCat("gpu-", n);
    node_objects.push_back(
        NodeObject(name).Gpus(8).NvSwitch().Cpu("128").Memory("1Ti").Ready().Json());
    for (int g = 0; g < 4; ++g) {
      for (int k = 0; k < 2; ++k) {
        pod_objects.push_back(PodObject(StrCat("ns-", n % 100), StrCat("share-", n, "-", g, "-", k))
                                  .Limit("tessera.dev/gpu-memory", "20Gi")
                                  .Limit("tessera.dev/gpu-compute", "25")
                                  .Request("cpu", "2")
                                  .Assigned(Grant(name, g, 20 * 1024, 250, false))
                                  .Json());
      }
    }
    for (int g = 4; g < 6; ++g) {
      pod_objects.push_back(PodObject(StrCat("ns-", n % 100), StrCat("whole-", n, "-", g))
                                .Limit("tessera.dev/gpu", "1")
                                .Request("cpu", "8")
                                .Assigned(Grant(name, g, 81920, 1000, true))
                                .Json());
    }
  }
  const int pending = std::max(1, nodes / 10);
  for (int i = 0; i < pending; ++i) {
    PodObject p("queue", StrCat("wait-", i));
    if (i % 2 == 0) {
      p.Limit("tessera.dev/gpu", "8").Unschedulable("0/N nodes are available: no 8 free GPUs");
    } else {
      p.Limit("tessera.dev/gpu-memory", "70Gi");
    }
    pod_objects.push_back(p.Created("2026-03-01T10:00:00Z").Json());
  }

  std::vector<double> decode, status, text, json_s;
  size_t text_bytes = 0, json_bytes = 0;
  int64_t stranded = 0;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    ClusterSnapshot snap = ClusterSnapshot::FromObjects(node_objects, pod_objects);
    auto t1 = std::chrono::steady_clock::now();
    absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, StatusOptions{});
    if (!s.ok()) {
      std::cerr << s.status() << "\n";
      return 1;
    }
    auto t2 = std::chrono::steady_clock::now();
    text_bytes = RenderStatusText(*s).size();
    auto t3 = std::chrono::steady_clock::now();
    json_bytes = StatusToJson(*s).dump().size();
    auto t4 = std::chrono::steady_clock::now();
    stranded = s->totals.stranded_mib;
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    decode.push_back(sec(t0, t1));
    status.push_back(sec(t1, t2));
    text.push_back(sec(t2, t3));
    json_s.push_back(sec(t3, t4));
  }
  json out = {{"nodes", nodes},
              {"gpus", nodes * 8},
              {"pods", pod_objects.size()},
              {"pending", pending},
              {"runs", runs},
              {"decode_s", Median(decode)},
              {"status_s", Median(status)},
              {"text_s", Median(text)},
              {"json_s", Median(json_s)},
              {"total_s", Median(decode) + Median(status) + Median(text)},
              {"text_bytes", text_bytes},
              {"json_bytes", json_bytes},
              {"stranded_mib", stranded}};
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace tessera::k8s

int main(int argc, char** argv) { return tessera::k8s::Main(argc, argv); }
