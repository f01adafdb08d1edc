#include "core/topology/gpu_select.h"

#include <algorithm>
#include <climits>

namespace tessera::core {
namespace {

bool PairMeets(const NodeSpec& node, int i, int j, GpuTopology level) {
  Link l = node.links.at(i, j);
  switch (level) {
    case GpuTopology::kAny:
    case GpuTopology::kNode:
      return true;
    case GpuTopology::kNvLink:
      return l.kind == LinkKind::kNvLink;
    case GpuTopology::kPcieSwitch:
      return l.kind == LinkKind::kNvLink || l.kind == LinkKind::kPix;
    case GpuTopology::kNuma: {
      int a = node.gpus[i].numa_node, b = node.gpus[j].numa_node;
      if (a >= 0 && b >= 0) return a == b;
      return l.kind != LinkKind::kSys;
    }
  }
  return false;
}

int LevelSlot(GpuTopology level) {
  switch (level) {
    case GpuTopology::kNvLink:
      return 0;
    case GpuTopology::kPcieSwitch:
      return 1;
    case GpuTopology::kNuma:
      return 2;
    case GpuTopology::kAny:
    case GpuTopology::kNode:
      return -1;
  }
  return -1;
}

inline int Ctz(uint64_t m) { return __builtin_ctzll(m); }
inline int Pop(uint64_t m) { return __builtin_popcountll(m); }

// Whether `cand` holds a clique of `need` more GPUs under `adj` (every pair adjacent).
bool HasClique(const uint64_t* adj, uint64_t cand, int need) {
  if (need == 0) return true;
  while (cand && Pop(cand) >= need) {
    int v = Ctz(cand);
    cand &= cand - 1;
    if (HasClique(adj, cand & adj[v], need - 1)) return true;
  }
  return false;
}

// The branch-and-bound search of the second phase (see the header).
class Search {
 public:
  Search(const GpuSetSelector& s, uint64_t free, int count, const uint64_t* adj)
      : s_(s), free_(free), count_(count), adj_(adj) {}

  uint64_t Run() {
    Dfs(0, free_, 0);
    return best_mask_;
  }

 private:
  // Best link of r to another GPU of `pool`, 0 when none: the first bandwidth level, highest
  // first, at which r reaches a GPU of the pool.
  int32_t BestLink(int r, uint64_t pool) const {
    pool &= ~(1ULL << r);
    if (!pool) return 0;
    const int levels = s_.level_count();
    const uint64_t* reach = s_.reach(r);
    for (int l = 0; l < levels; ++l) {
      if (reach[l] & pool) return s_.level(l);
    }
    return 0;
  }

  int64_t Remaining(uint64_t remaining) const {
    int64_t total = 0;
    for (uint64_t a = remaining; a; a &= a - 1) total += BestLink(Ctz(a), remaining);
    return total;
  }

  uint64_t NumaBits(uint64_t mask) const {
    uint64_t bits = 0;
    for (uint64_t a = mask; a; a &= a - 1) bits |= s_.numa_bit(Ctz(a));
    return bits;
  }

  // The fewest NUMA nodes any completion spans: those already spanned, plus as few more as can
  // supply the GPUs still needed (largest groups of candidates first).
  int NumaLowerBound(uint64_t chosen, uint64_t cand, int need) const {
    const uint64_t spanned = NumaBits(chosen);
    int lb = Pop(spanned);
    int short_by = need;
    int others[kMaxGpusPerNode];
    int nothers = 0;
    uint64_t seen = 0;
    for (uint64_t a = cand; a; a &= a - 1) {
      uint64_t bit = s_.numa_bit(Ctz(a));
      if (bit & spanned) {
        --short_by;
      } else if (!(seen & bit)) {
        seen |= bit;
        others[nothers++] = Pop(cand & s_.numa_members(bit));
      }
    }
    if (short_by <= 0) return std::max(lb, 1);
    std::sort(others, others + nothers, std::greater<int>());
    for (int i = 0; i < nothers && short_by > 0; ++i) {
      short_by -= others[i];
      ++lb;
    }
    return lb;
  }

  // Whether (rem, numa) beats the best so far; equal does not (it would come later).
  bool Beats(int64_t rem, int numa) const {
    if (!found_) return true;
    if (rem != best_rem_) return rem > best_rem_;
    return numa < best_numa_;
  }

  void Dfs(uint64_t chosen, uint64_t cand, int depth) {
    const int need = count_ - depth;
    if (need == 0) {
      int64_t rem = Remaining(free_ & ~chosen);
      int numa = Pop(NumaBits(chosen));
      if (Beats(rem, numa)) {
        found_ = true;
        best_rem_ = rem;
        best_numa_ = numa;
        best_mask_ = chosen;
      }
      return;
    }
    if (Pop(cand) < need) return;
    if (found_) {
      // Upper bound on the remaining connectivity of any completion: GPUs that can no longer be
      // taken stay free for sure; of the candidates, all but `need` stay, at best the ones with
      // the largest terms. Every term is bounded by the best link among GPUs not yet taken.
      const uint64_t pool = free_ & ~chosen;
      int64_t bound = 0;
      int32_t terms[kMaxGpusPerNode];
      int nterms = 0;
      for (uint64_t a = pool; a; a &= a - 1) {
        int r = Ctz(a);
        int32_t b = BestLink(r, pool);
        if (cand & (1ULL << r)) {
          terms[nterms++] = b;
        } else {
          bound += b;
        }
      }
      const int keep = nterms - need;
      if (keep > 0) {
        std::partial_sort(terms, terms + keep, terms + nterms, std::greater<int32_t>());
        for (int i = 0; i < keep; ++i) bound += terms[i];
      }
      if (!Beats(bound, NumaLowerBound(chosen, cand, need))) return;
    }
    for (uint64_t c = cand; c && Pop(c) >= need; c &= c - 1) {
      int v = Ctz(c);
      // Twins (GPUs with the same links to every other GPU and the same NUMA node) are
      // interchangeable: a set taking v but not a lower free twin scores the same as the set
      // taking that twin instead, which comes first. Only the lowest free twins are tried.
      if (s_.lower_twins(v) & free_ & ~chosen) continue;
      Dfs(chosen | (1ULL << v), (c & (c - 1)) & adj_[v], depth + 1);
    }
  }

  const GpuSetSelector& s_;
  const uint64_t free_;
  const int count_;
  const uint64_t* adj_;
  bool found_ = false;
  int64_t best_rem_ = 0;
  int best_numa_ = 0;
  uint64_t best_mask_ = 0;
};

}  // namespace

bool MeetsTopology(const NodeSpec& node, uint64_t mask, GpuTopology level) {
  if (level == GpuTopology::kAny || level == GpuTopology::kNode) return true;
  for (uint64_t a = mask; a; a &= a - 1) {
    int i = Ctz(a);
    for (uint64_t b = a & (a - 1); b; b &= b - 1) {
      if (!PairMeets(node, i, Ctz(b), level)) return false;
    }
  }
  return true;
}

int32_t BottleneckGBps(const NodeSpec& node, uint64_t mask) {
  int32_t worst = INT32_MAX;
  NvLinkGeneration gen =
      node.gpus.empty() ? NvLinkGeneration::kNv3 : NvLinkGenerationForModel(node.gpus[0].model);
  for (uint64_t a = mask; a; a &= a - 1) {
    int i = Ctz(a);
    for (uint64_t b = a & (a - 1); b; b &= b - 1) {
      worst = std::min(worst, LinkBandwidthGBps(node.links.at(i, Ctz(b)), gen));
    }
  }
  return worst;
}

GpuSetSelector::GpuSetSelector(const NodeSpec& node)
    : n_(node.gpu_count()), all_(node.all_gpus_mask()) {
  bw_.assign(static_cast<size_t>(n_) * n_, 0);
  NvLinkGeneration gen =
      node.gpus.empty() ? NvLinkGeneration::kNv3 : NvLinkGenerationForModel(node.gpus[0].model);
  for (auto& m : meets_) m.assign(n_, 0);
  numa_bit_.assign(n_, 0);
  for (int i = 0; i < n_; ++i) {
    int numa = node.gpus[i].numa_node;
    const int bit = numa < 0 ? 63 : std::min(numa, 62);
    numa_bit_[i] = 1ULL << bit;
    numa_members_[bit] |= 1ULL << i;
    for (int j = 0; j < n_; ++j) {
      if (i == j) continue;
      int32_t b = LinkBandwidthGBps(node.links.at(i, j), gen);
      bw_[i * n_ + j] = b;
      if (j > i) distinct_.push_back(b);
      for (GpuTopology level :
           {GpuTopology::kNvLink, GpuTopology::kPcieSwitch, GpuTopology::kNuma}) {
        if (PairMeets(node, i, j, level)) meets_[LevelSlot(level)][i] |= 1ULL << j;
      }
    }
  }
  // Twins: same NUMA node and the same link to every third GPU.
  lower_twins_.assign(n_, 0);
  for (int i = 0; i < n_; ++i) {
    for (int j = 0; j < i; ++j) {
      bool twin = node.gpus[i].numa_node == node.gpus[j].numa_node;
      for (int x = 0; x < n_ && twin; ++x) {
        if (x != i && x != j && !(node.links.at(i, x) == node.links.at(j, x))) twin = false;
      }
      if (twin) lower_twins_[i] |= 1ULL << j;
    }
  }
  std::sort(distinct_.begin(), distinct_.end(), std::greater<int32_t>());
  distinct_.erase(std::unique(distinct_.begin(), distinct_.end()), distinct_.end());
  const size_t levels = distinct_.size();
  reach_.assign(static_cast<size_t>(n_) * levels, 0);
  for (int i = 0; i < n_; ++i) {
    for (size_t l = 0; l < levels; ++l) {
      for (int j = 0; j < n_; ++j) {
        if (j != i && bw_[i * n_ + j] >= distinct_[l]) reach_[i * levels + l] |= 1ULL << j;
      }
    }
  }
}

uint64_t GpuSetSelector::meets(GpuTopology level, int i) const {
  int slot = LevelSlot(level);
  return slot < 0 ? all_ & ~(1ULL << i) : meets_[slot][i];
}

std::optional<uint64_t> GpuSetSelector::Select(uint64_t free_mask, int count, GpuTopology level,
                                               bool required) const {
  free_mask &= all_;
  const int free = Pop(free_mask);
  if (count <= 0 || free < count) return std::nullopt;
  const int slot = required ? LevelSlot(level) : -1;
  if (count == free) {
    // One set only; it either meets the level or nothing does.
    for (uint64_t a = free_mask; a && slot >= 0; a &= a - 1) {
      int i = Ctz(a);
      if ((free_mask & ~(1ULL << i) & ~meets_[slot][i]) != 0) return std::nullopt;
    }
    return free_mask;
  }
  uint64_t adj[kMaxGpusPerNode];
  auto build_adj = [&](int32_t threshold) {
    for (uint64_t a = free_mask; a; a &= a - 1) {
      int i = Ctz(a);
      uint64_t m = 0;
      for (uint64_t b = free_mask & ~(1ULL << i); b; b &= b - 1) {
        int j = Ctz(b);
        if (bw_[i * n_ + j] >= threshold) m |= 1ULL << j;
      }
      adj[i] = slot < 0 ? m : m & meets_[slot][i];
    }
  };
  if (count == 1) {
    // Any single GPU meets every level; the bottleneck is unbounded for all of them.
    build_adj(INT32_MIN);
    return Search(*this, free_mask, 1, adj).Run();
  }
  // Phase 1: the best achievable bottleneck.
  bool found = false;
  for (int32_t t : distinct_) {
    build_adj(t);
    if (HasClique(adj, free_mask, count)) {
      found = true;
      break;
    }
  }
  if (!found) return std::nullopt;  // only when `required` rules out every set
  // Phase 2: among the sets with that bottleneck, the best by objectives 3 to 5.
  return Search(*this, free_mask, count, adj).Run();
}

std::optional<uint64_t> SelectGpuSet(const NodeSpec& node, uint64_t free_mask, int count,
                                     GpuTopology level, bool required) {
  return GpuSetSelector(node).Select(free_mask, count, level, required);
}

}  // namespace tessera::core
