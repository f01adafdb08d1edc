// Statistical tests on generated workloads: properties that must hold on average over many
// seeds, not just on one hand-picked case.
#include <map>

#include "common/random.h"
#include "core/engine.h"
#include "core/testing/cluster_builder.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;
using testing::Pod;

// Half NVSwitch servers, half PCIe servers, some CPU-only nodes.
Cluster MixedCluster() {
  ClusterBuilder b;
  for (int i = 0; i < 8; ++i)
    b.Node("nv" + std::to_string(i)).Cpu(128).Gpus(8, "A100-80GB").NvSwitch();
  for (int i = 0; i < 8; ++i) b.Node("pcie" + std::to_string(i)).Cpu(64).Gpus(4, "A100-80GB");
  for (int i = 0; i < 4; ++i) b.Node("cpu" + std::to_string(i)).Cpu(64).Gpus(0, "none");
  return b.Build();
}

struct Outcome {
  int placed = 0;
  int gpus_in_use = 0;
  int whole_nvswitch_nodes_free = 0;  // NVSwitch servers with all 8 GPUs free at the end
  int big_jobs_placed = 0;            // 8-GPU pods placed after the shares
};

// A burst of inference shares and CPU-only pods, then 8-GPU training pods.
Outcome RunMix(const Cluster& c, const char* policy, uint64_t seed) {
  Engine e(c, *CreatePolicy(policy, {}));
  Random rng(seed);
  Outcome o;
  for (int i = 0; i < 120; ++i) {
    PodRequest p =
        rng.Uniform(5) == 0
            ? Pod("c" + std::to_string(i), GpuAsk::None(), 2000 + 500 * rng.Uniform(8))
            : Pod("s" + std::to_string(i), GpuAsk::Share(1024 * (2 + rng.Uniform(14)), 0), 1000);
    o.placed += e.Place(p).placed();
  }
  for (int n = 0; n < c.node_count(); ++n) {
    if (c.node(NodeId(n)).gpu_count() == 8 && e.state().whole_free_count(NodeId(n)) == 8) {
      ++o.whole_nvswitch_nodes_free;
    }
  }
  o.gpus_in_use = e.state().gpus_in_use();
  for (int i = 0; i < 8; ++i) {
    o.big_jobs_placed += e.Place(Pod("big" + std::to_string(i), GpuAsk::Whole(8), 8000)).placed();
  }
  return o;
}

TEST(PolicyStatistics, TesseraKeepsNvswitchServersWholeAndFitsMoreBigJobs) {
  Cluster c = MixedCluster();
  constexpr int kSeeds = 30;
  std::map<std::string, int> free_nodes, big, gpus;  // totals over the seeds
  for (const char* policy : {"tessera", "binpack", "spread", "whole-gpu"}) {
    for (uint64_t seed = 1; seed <= kSeeds; ++seed) {
      Outcome o = RunMix(c, policy, seed);
      free_nodes[policy] += o.whole_nvswitch_nodes_free;
      big[policy] += o.big_jobs_placed;
      gpus[policy] += o.gpus_in_use;
      if (std::string(policy) != "whole-gpu") {
        EXPECT_EQ(o.placed, 120) << policy << " " << seed;
      }
    }
  }
  // Every share fits on the PCIe servers' GPUs, so tessera leaves every NVSwitch server whole and
  // all eight 8-GPU jobs fit; binpack and spread break some of them up.
  EXPECT_EQ(free_nodes["tessera"], 8 * kSeeds);
  EXPECT_EQ(big["tessera"], 8 * kSeeds);
  EXPECT_LT(big["spread"], big["tessera"]);
  EXPECT_LE(big["binpack"], big["tessera"]);
  EXPECT_LT(big["whole-gpu"], big["tessera"]);
  // Packing: tessera uses no more GPUs than binpack on average, far fewer than spread.
  EXPECT_LE(gpus["tessera"], gpus["binpack"] + kSeeds / 2);
  EXPECT_LT(gpus["tessera"], gpus["spread"] / 2);
}

}  // namespace
}  // namespace tessera::core
