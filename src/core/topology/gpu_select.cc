#include "core/topology/gpu_select.h"

#include <algorithm>
#include <climits>
#include <tuple>

namespace tessera::core {
namespace {

bool PairMeets(const NodeSpec& node, int i, int j, GpuTopology level) {
  Link l = node.links.at(i, j);
  switch (level) {
    case GpuTopology::kAny: return true;
    case GpuTopology::kNvLink: return l.kind == LinkKind::kNvLink;
    case GpuTopology::kPcieSwitch: return l.kind == LinkKind::kNvLink || l.kind == LinkKind::kPix;
    case GpuTopology::kNuma: {
      int a = node.gpus[i].numa_node, b = node.gpus[j].numa_node;
      if (a >= 0 && b >= 0) return a == b;
      return l.kind != LinkKind::kSys;
    }
  }
  return false;
}

struct Score {
  int32_t bottleneck;
  int64_t remaining_connectivity;
  int numa_spread;  // fewer is better
  auto key() const { return std::make_tuple(bottleneck, remaining_connectivity, -numa_spread); }
};

}  // namespace

bool MeetsTopology(const NodeSpec& node, uint64_t mask, GpuTopology level) {
  if (level == GpuTopology::kAny) return true;
  for (uint64_t a = mask; a; a &= a - 1) {
    int i = __builtin_ctzll(a);
    for (uint64_t b = a & (a - 1); b; b &= b - 1) {
      if (!PairMeets(node, i, __builtin_ctzll(b), level)) return false;
    }
  }
  return true;
}

int32_t BottleneckGBps(const NodeSpec& node, uint64_t mask) {
  int32_t worst = INT32_MAX;
  NvLinkGeneration gen =
      node.gpus.empty() ? NvLinkGeneration::kNv3 : NvLinkGenerationForModel(node.gpus[0].model);
  for (uint64_t a = mask; a; a &= a - 1) {
    int i = __builtin_ctzll(a);
    for (uint64_t b = a & (a - 1); b; b &= b - 1) {
      worst = std::min(worst, LinkBandwidthGBps(node.links.at(i, __builtin_ctzll(b)), gen));
    }
  }
  return worst;
}

namespace {

int64_t RemainingConnectivity(const NodeSpec& node, uint64_t remaining, NvLinkGeneration gen) {
  int64_t total = 0;
  for (uint64_t a = remaining; a; a &= a - 1) {
    int i = __builtin_ctzll(a);
    int32_t best = 0;
    for (uint64_t b = remaining & ~(1ULL << i); b; b &= b - 1) {
      best = std::max(best, LinkBandwidthGBps(node.links.at(i, __builtin_ctzll(b)), gen));
    }
    total += best;
  }
  return total;
}

int NumaSpread(const NodeSpec& node, uint64_t mask) {
  uint64_t seen = 0;
  for (uint64_t a = mask; a; a &= a - 1) {
    int numa = node.gpus[__builtin_ctzll(a)].numa_node;
    seen |= 1ULL << (numa < 0 ? 63 : std::min(numa, 62));
  }
  return __builtin_popcountll(seen);
}

}  // namespace

std::optional<uint64_t> SelectGpuSet(const NodeSpec& node, uint64_t free_mask, int count,
                                     GpuTopology level, bool required) {
  free_mask &= node.all_gpus_mask();
  const int free = __builtin_popcountll(free_mask);
  if (count <= 0 || free < count) return std::nullopt;
  int free_idx[kMaxGpusPerNode];
  int k = 0;
  for (uint64_t a = free_mask; a; a &= a - 1) free_idx[k++] = __builtin_ctzll(a);
  if (count == free) {
    if (required && !MeetsTopology(node, free_mask, level)) return std::nullopt;
    return free_mask;
  }
  NvLinkGeneration gen = NvLinkGenerationForModel(node.gpus[0].model);

  // Enumerate combinations of `count` among the free GPUs (in increasing index order, so the
  // first best found has the lowest indices).
  std::optional<uint64_t> best;
  Score best_score{};
  int pos[kMaxGpusPerNode];
  for (int i = 0; i < count; ++i) pos[i] = i;
  while (true) {
    uint64_t mask = 0;
    for (int i = 0; i < count; ++i) mask |= 1ULL << free_idx[pos[i]];
    if (!required || MeetsTopology(node, mask, level)) {
      Score s{BottleneckGBps(node, mask), RemainingConnectivity(node, free_mask & ~mask, gen),
              NumaSpread(node, mask)};
      if (!best || s.key() > best_score.key()) {
        best = mask;
        best_score = s;
      }
    }
    int i = count - 1;
    while (i >= 0 && pos[i] == free - count + i) --i;
    if (i < 0) break;
    ++pos[i];
    for (int j = i + 1; j < count; ++j) pos[j] = pos[j - 1] + 1;
  }
  return best;
}

}  // namespace tessera::core
