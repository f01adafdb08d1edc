// Time to choose the GPUs of one multi-GPU pod on one node (core/topology/gpu_select.h).
//
//   BM_Select/<profile>/<N>        GpuSetSelector::Select on a prepared node, all GPUs free
//   BM_SelectMixed/<profile>/<N>   the same over 64 fixed random free patterns with >= N free
//   BM_SelectGpuSet/<profile>/<N>  the one-off call (prepares the node each time), all free
// Profiles: the 8-GPU built-ins (dgx-a100, hgx-h100, pcie-8gpu) for N = 1..8, and 16-GPU nodes
// for N = 1..16: "nvswitch-16" (all pairs NV6, 2 NUMA nodes, like DGX-2), "pcie-16" (pairs per
// PCIe switch, 4 switches per socket) and "random-16" (a fixed random topology as in
// gpu_select_test.cc). Target (issue 4): under 20 microseconds per call on 8-GPU servers.
#include <vector>

#include "benchmark/benchmark.h"
#include "common/random.h"
#include "core/model/profiles.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {
namespace {

NodeSpec ProfileNode(const std::string& name) {
  Profile p = *FindProfile(name);
  NodeSpec n;
  n.name = name;
  n.gpus = p.gpus;
  n.links = p.links;
  return n;
}

NodeSpec Node16(int kind) {
  NodeSpec n;
  n.name = "node16";
  for (int i = 0; i < 16; ++i) {
    GpuSpec g;
    g.index = i;
    g.model = "V100-32GB";
    g.memory_mib = 32768;
    g.numa_node = i / 8;
    n.gpus.push_back(g);
  }
  if (kind == 0) {
    n.links = LinkMatrix::AllNvLink(16, 6);
  } else if (kind == 1) {
    n.links = LinkMatrix::Pcie(16, 2, 4);
  } else {
    Random rng(7);
    n.links = LinkMatrix(16);
    static const LinkKind kPcie[] = {LinkKind::kPix, LinkKind::kPxb, LinkKind::kPhb,
                                     LinkKind::kNode, LinkKind::kSys};
    for (int i = 0; i < 16; ++i) {
      n.gpus[i].numa_node = static_cast<int>(rng.Uniform(4));
      for (int j = i + 1; j < 16; ++j) {
        bool nv = (i / 8 == j / 8) ? rng.Uniform(4) != 0 : rng.Uniform(8) == 0;
        n.links.Set(i, j,
                    nv ? Link{LinkKind::kNvLink, static_cast<uint8_t>(1 + rng.Uniform(18))}
                       : Link{kPcie[rng.Uniform(5)], 0});
      }
    }
  }
  return n;
}

const NodeSpec& NodeByIndex(int i) {
  static const std::vector<NodeSpec> kNodes = {ProfileNode("dgx-a100"),
                                               ProfileNode("hgx-h100"),
                                               ProfileNode("pcie-8gpu"),
                                               Node16(0),
                                               Node16(1),
                                               Node16(2)};
  return kNodes[i];
}
const char* const kNames[] = {"dgx-a100",    "hgx-h100", "pcie-8gpu",
                              "nvswitch-16", "pcie-16",  "random-16"};

void BM_Select(benchmark::State& state) {
  const NodeSpec& node = NodeByIndex(static_cast<int>(state.range(0)));
  const int count = static_cast<int>(state.range(1));
  GpuSetSelector selector(node);
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        selector.Select(node.all_gpus_mask(), count, GpuTopology::kAny, false));
  }
  state.SetLabel(kNames[state.range(0)]);
}

void BM_SelectMixed(benchmark::State& state) {
  const NodeSpec& node = NodeByIndex(static_cast<int>(state.range(0)));
  const int count = static_cast<int>(state.range(1));
  GpuSetSelector selector(node);
  Random rng(11);
  std::vector<uint64_t> patterns;
  while (patterns.size() < 64) {
    uint64_t free = rng.Next() & node.all_gpus_mask();
    if (__builtin_popcountll(free) >= count) patterns.push_back(free);
  }
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(selector.Select(patterns[i++ & 63], count, GpuTopology::kAny, false));
  }
  state.SetLabel(kNames[state.range(0)]);
}

void BM_SelectGpuSet(benchmark::State& state) {
  const NodeSpec& node = NodeByIndex(static_cast<int>(state.range(0)));
  const int count = static_cast<int>(state.range(1));
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        SelectGpuSet(node, node.all_gpus_mask(), count, GpuTopology::kAny, false));
  }
  state.SetLabel(kNames[state.range(0)]);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int node = 0; node < 6; ++node) {
    const int gpus = node < 3 ? 8 : 16;
    for (int count = 1; count <= gpus; ++count) b->Args({node, count});
  }
}

BENCHMARK(BM_Select)->Apply(Args);
BENCHMARK(BM_SelectMixed)->Apply(Args);
BENCHMARK(BM_SelectGpuSet)->Apply(Args);

}  // namespace
}  // namespace tessera::core

BENCHMARK_MAIN();
