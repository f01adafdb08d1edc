// Engine throughput: place-and-release on clusters of 8-GPU servers (hgx-h100), per policy, for
// share and whole-GPU requests. The cluster is first filled to about 60% of its GPUs, then each
// iteration releases the oldest live pod and places a new one in its place (steady state), so the
// figure is placements per second on a busy cluster, not on an empty one. The
// tessera-off-node0-* rows keep every pod off one node (a tainted control plane), given to the
// engine as a candidate list or as a NodeSet. GangPlaceRelease does the same with gangs of 8 whole
// GPUs that must each land inside one NVLink domain (the scheduler benchmark's gang phase): one
// iteration releases the oldest gang and places a new one, so its time is one gang decision; its
// tessera-off-0.5%-* rows keep the gangs off every 200th node (the nodes a churn of taints has
// tainted at one moment), as a candidate list (every domain tried against the list) or as a
// NodeSet (the domain index counts each domain's room inside the set). The tessera-spares-1 rows
// keep one hot spare per NVLink domain (Engine::KeepSpares).
//
//   bench/run_engine.sh   (build/release/bench/engine_bench with 5 repetitions, medians)
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/random.h"
#include "common/strings.h"
#include "core/engine.h"
#include "core/model/profiles.h"

namespace tessera::core {
namespace {

const Cluster& ClusterOf(int nodes) {
  static std::map<int, std::unique_ptr<Cluster>> cache;
  auto& c = cache[nodes];
  if (!c) {
    Profile p = *FindProfile("hgx-h100");
    std::vector<NodeSpec> specs;
    for (int i = 0; i < nodes; ++i) {
      NodeSpec n;
      n.name = StrCat("node-", i);
      n.cpu_milli = p.cpu_milli;
      n.memory_mib = p.memory_mib;
      n.gpus = p.gpus;
      n.links = p.links;
      specs.push_back(std::move(n));
    }
    c = std::make_unique<Cluster>(*Cluster::Create(std::move(specs)));
  }
  return *c;
}

enum Kind { kShare = 0, kWhole = 1 };

GpuAsk RandomAsk(Kind kind, Random& rng) {
  if (kind == kShare) {
    int64_t mem = 1024 * (1 + static_cast<int64_t>(rng.Uniform(20)));
    int32_t compute = rng.Uniform(2) ? 0 : static_cast<int32_t>(100 * (1 + rng.Uniform(5)));
    return GpuAsk::Share(mem, compute);
  }
  static constexpr int kCounts[] = {1, 1, 1, 1, 2, 2, 4, 8};
  return GpuAsk::Whole(kCounts[rng.Uniform(8)]);
}

// How pods are kept off node 0 (a tainted control-plane node, say), or not.
enum class Restrict { kNone, kCandidates, kNodeSet };

void BM_PlaceRelease(benchmark::State& state, std::string policy_name, Restrict restrict,
                     int spares_per_domain) {
  const int nodes = static_cast<int>(state.range(0));
  const Kind kind = static_cast<Kind>(state.range(1));
  const Cluster& cluster = ClusterOf(nodes);
  Engine engine(cluster, *CreatePolicy(policy_name, {}));
  engine.KeepSpares(spares_per_domain);
  std::vector<bool> allows(cluster.node_count(), true);
  allows[0] = false;
  const NodeSet node_set(allows);
  std::vector<Candidate> candidates;
  for (int i = 1; i < cluster.node_count(); ++i) candidates.push_back(Candidate{NodeId(i)});
  const std::vector<Candidate>* allowed = restrict == Restrict::kCandidates ? &candidates : nullptr;
  const NodeSet* set = restrict == Restrict::kNodeSet ? &node_set : nullptr;
  Random rng(42);
  // Fill to ~60% of GPU capacity (in GPUs for whole asks, in memory for shares).
  std::vector<PodRequest> live;
  const int64_t gpus = cluster.total_gpus();
  int64_t filled = 0;  // whole GPUs or MiB
  const int64_t target = kind == kWhole ? gpus * 6 / 10 : gpus * 81559 * 6 / 10;
  int next = 0, misses = 0;
  while (filled < target) {
    PodRequest p;
    p.name = StrCat("p", next++);
    p.cpu_milli = 1000;
    p.memory_mib = 4096;
    p.gpu = RandomAsk(kind, rng);
    if (!engine.Place(p).placed()) {  // setup: unrestricted (a scan per pod is slow)
      // With spares, an 8-GPU pod fits no 8-GPU node whose domain keeps one: skip such asks.
      if (spares_per_domain == 0 || ++misses > 100000) break;
      continue;
    }
    filled += kind == kWhole ? p.gpu.count : p.gpu.memory_mib;
    live.push_back(std::move(p));
  }
  // A pool of requests, so the timed loop does no allocation for names or random numbers.
  std::vector<GpuAsk> asks;
  for (int i = 0; i < 4096; ++i) asks.push_back(RandomAsk(kind, rng));
  size_t oldest = 0;
  int64_t placed = 0, failed = 0;
  size_t a = 0;
  for (auto _ : state) {
    PodRequest& slot = live[oldest];
    (void)engine.Release(slot.name);
    slot.gpu = asks[a++ & 4095];
    PlacementResult r = engine.Place(slot, Mode::kCommit, allowed, set);
    if (r.placed()) {
      ++placed;
    } else {
      ++failed;
    }
    oldest = (oldest + 1) % live.size();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["live_pods"] = static_cast<double>(live.size());
  state.counters["failed_share"] =
      placed + failed ? static_cast<double>(failed) / static_cast<double>(placed + failed) : 0;
}

// Gangs of `size` pods x 1 GPU, required inside one NVLink domain, on a cluster filled to ~60%
// of its GPUs with such gangs; each iteration releases the oldest gang and places a new one.
void BM_GangPlaceRelease(benchmark::State& state, Restrict restrict) {
  const int nodes = static_cast<int>(state.range(0));
  const int size = static_cast<int>(state.range(1));
  const Cluster& cluster = ClusterOf(nodes);
  Engine engine(cluster, *CreatePolicy("tessera", {}));
  std::vector<bool> allows(cluster.node_count(), true);
  std::vector<Candidate> candidates;
  for (int i = 0; i < cluster.node_count(); ++i) {
    allows[i] = i % 200 != 0;
    if (allows[i]) candidates.push_back(Candidate{NodeId(i)});
  }
  const NodeSet node_set(allows);
  const std::vector<Candidate>* allowed = restrict == Restrict::kCandidates ? &candidates : nullptr;
  const NodeSet* set = restrict == Restrict::kNodeSet ? &node_set : nullptr;
  auto gang = [&](int g) {
    std::vector<PodRequest> members(size);
    for (int m = 0; m < size; ++m) {
      PodRequest& p = members[m];
      p.name = StrCat("g", g, "-", m);
      p.cpu_milli = 100;
      p.memory_mib = 128;
      p.gpu = GpuAsk::Whole(1);
      p.gang = GangAsk{StrCat("g", g), size, "nvlink-domain", true};
    }
    return members;
  };
  std::vector<std::vector<PodRequest>> live;
  int next = 0;
  while (static_cast<int64_t>(live.size()) * size < cluster.total_gpus() * 6 / 10) {
    std::vector<PodRequest> members = gang(next++);
    if (!engine.PlaceGang(members, Mode::kCommit, nullptr, set)[0].placed()) break;
    live.push_back(std::move(members));
  }
  size_t oldest = 0;
  int64_t placed = 0, failed = 0;
  for (auto _ : state) {
    std::vector<PodRequest>& slot = live[oldest];
    for (const PodRequest& p : slot) (void)engine.Release(p.name);
    if (engine.PlaceGang(slot, Mode::kCommit, allowed, set)[0].placed()) {
      ++placed;
    } else {
      ++failed;
    }
    oldest = (oldest + 1) % live.size();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["live_pods"] = static_cast<double>(live.size() * size);
  state.counters["failed_share"] =
      placed + failed ? static_cast<double>(failed) / static_cast<double>(placed + failed) : 0;
}

void Register() {
  for (const char* policy : {"tessera", "binpack", "spread", "whole-gpu"}) {
    auto* b = benchmark::RegisterBenchmark(StrCat("PlaceRelease/", policy).c_str(), BM_PlaceRelease,
                                           std::string(policy), Restrict::kNone, 0);
    b->ArgNames({"nodes", "kind"});
    for (int nodes : {1000, 10000}) {
      for (int kind : {kShare, kWhole}) b->Args({nodes, kind});
    }
    b->Unit(benchmark::kMicrosecond);
    if (std::string(policy) == "whole-gpu") b->MinTime(0.2);
  }
  // Every pod kept off one node (node 0: a tainted control plane), as a candidate list (the
  // policy scans them) or as a NodeSet (its index stays in use).
  for (auto [label, how] : {std::pair{"tessera-off-node0-candidates", Restrict::kCandidates},
                            std::pair{"tessera-off-node0-nodeset", Restrict::kNodeSet}}) {
    auto* b = benchmark::RegisterBenchmark(StrCat("PlaceRelease/", label).c_str(), BM_PlaceRelease,
                                           std::string("tessera"), how, 0);
    b->ArgNames({"nodes", "kind"});
    for (int nodes : {1000, 10000}) {
      for (int kind : {kShare, kWhole}) b->Args({nodes, kind});
    }
    b->Unit(benchmark::kMicrosecond);
    if (how == Restrict::kCandidates) b->MinTime(0.2);
  }
  // Hot spares (Engine::KeepSpares): one GPU of every NVLink domain kept back, here one per node
  // (each hgx-h100 node is its own NVSwitch domain): 1,000 and 10,000 spares that move as pods
  // come and go. Against the tessera rows above, what spares cost each decision.
  {
    auto* b = benchmark::RegisterBenchmark("PlaceRelease/tessera-spares-1", BM_PlaceRelease,
                                           std::string("tessera"), Restrict::kNone, 1);
    b->ArgNames({"nodes", "kind"});
    for (int nodes : {1000, 10000}) {
      for (int kind : {kShare, kWhole}) b->Args({nodes, kind});
    }
    b->Unit(benchmark::kMicrosecond);
  }
  for (auto [label, how] : {std::pair{"tessera", Restrict::kNone},
                            std::pair{"tessera-off-0.5%-candidates", Restrict::kCandidates},
                            std::pair{"tessera-off-0.5%-nodeset", Restrict::kNodeSet}}) {
    auto* g = benchmark::RegisterBenchmark(StrCat("GangPlaceRelease/", label).c_str(),
                                           BM_GangPlaceRelease, how);
    g->ArgNames({"nodes", "size"});
    for (int nodes : {1000, 10000}) g->Args({nodes, 8});
    g->Unit(benchmark::kMicrosecond);
    if (how == Restrict::kCandidates) g->MinTime(0.2);
  }
}

}  // namespace
}  // namespace tessera::core

int main(int argc, char** argv) {
  tessera::core::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
