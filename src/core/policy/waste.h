// Expected stranded GPU capacity: how much of a node's free GPU capacity the workload mix is
// unlikely ever to use. tessera's placement objective (tessera.cc).
//
// FGD's fragmentation counts, for each typical task, the free capacity that task could not use,
// weighted by the task's popularity: a leftover of 0.19 GPU that only 1% of tasks fit counts
// 0.99 x 0.19, and a leftover of 0.5 that half the tasks fit counts 0.5 x 0.5. But a busy cluster
// offers each leftover many arrivals: the 0.5 will almost surely be filled, the 0.19 almost surely
// not. This measure weighs each free piece by the chance that none of the next K arrivals fits it:
//
//   waste(n) = sum over partly used GPUs g of  L_g x (1 - q_n(L_g))^K
//            + k x 1000 x (1 - qw_n(k))^K      for the k fully free GPUs
//            + c x max(0, T - cpu_free / cpu_per_gpu)   (free GPU the free CPU cannot feed)
//
// where q_n(L) is the share of the mix (by popularity) that fits a GPU with L milli-GPU free on n
// (a one-GPU task of at most L milli-GPU, a model n has, CPU within what n has free), qw_n(k) the
// share that fits k free GPUs, T the node's free milli-GPU and cpu_per_gpu the mix's CPU per GPU.
// K = 50: a piece is offered many arrivals before the cluster fills, so only pieces that hardly
// any task fits count: one that 1% of the mix fits is 61% stranded, 5% fits 8%, 10% fits 0.5%.
// K and c = 0.3 were chosen on the FGD paper's default trace and hold on all its variants
// (bench/results/tessera-tuning.md: K = 3 gave 95.94% on default, 40 to 100 give 96.24-96.25%).
//
// Evaluation is a table lookup per GPU: the tables (per class of nodes with the same accessible
// tasks, per CPU threshold of the mix, per milli-GPU 0..1000) are rebuilt when the mix changes.
// Example: mix {0.5-GPU task 70%, 1-GPU task 30%}, plenty of CPU: a GPU with 0.4 free wastes
// 400 x (1 - 0)^50 = 400; one with 0.6 free wastes 600 x (1 - 0.7)^50 = 0 (1e-24); a free GPU
// wastes 0.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/cluster.h"
#include "core/policy/typical.h"

namespace tessera::core {

class WasteModel {
 public:
  struct Params {
    double horizon = 50;      // K
    double cpu_weight = 0.3;  // c
  };

  WasteModel() = default;
  WasteModel(const Cluster& cluster, const std::vector<TypicalTask>& mix, Params params);

  // Nodes `first`.. were added to `cluster` (the one this was built for, with `mix`): true when
  // each is of a class the model has and the largest node is as large, the model then being
  // exactly the one a rebuild would make (classes are numbered by their first node); false,
  // changing nothing, otherwise (rebuild it).
  bool AddNodes(const Cluster& cluster, int first, const std::vector<TypicalTask>& mix);

  // Expected stranded milli-GPU of `node` with `cpu_free` milli-CPU free and `left` milli-GPU free
  // per GPU (GpuMilliLeft's figure: 1000 = fully free).
  double Waste(NodeId node, int64_t cpu_free, const int32_t* left, int gpus) const;

 private:
  // Index of the CPU threshold: how many of the mix's distinct GPU-task CPU sizes fit in `cpu`.
  int CpuIndex(int64_t cpu) const;
  const double* Share(int cls, int ci) const {
    return share_.data() + (static_cast<size_t>(cls) * cpu_levels_ + ci) * 1001;
  }
  const double* Whole(int cls, int ci) const {
    return whole_.data() + (static_cast<size_t>(cls) * cpu_levels_ + ci) * (max_gpus_ + 1);
  }

  Params params_;
  std::vector<int64_t> cpu_sizes_;  // distinct CPU sizes of the mix's GPU tasks, ascending
  int cpu_levels_ = 1;              // cpu_sizes_.size() + 1
  int max_gpus_ = 0;
  double cpu_per_gpu_ = 0;  // milli-CPU per GPU of the mix; 0 = no GPU tasks
  std::vector<int32_t> node_class_;
  std::vector<double> share_;  // [class][cpu level][milli 0..1000]
  std::vector<double> whole_;  // [class][cpu level][free GPUs 0..max]
  // Per class: '1' for each task of the mix its nodes' GPUs run.
  std::vector<std::string> patterns_;
};

}  // namespace tessera::core
