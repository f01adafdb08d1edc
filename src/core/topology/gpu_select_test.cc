#include "core/topology/gpu_select.h"

#include <algorithm>
#include <climits>
#include <tuple>

#include "common/random.h"
#include "core/model/profiles.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

// The objective of gpu_select.h written the plain way, independently of the selector: score every
// combination, keep the first strictly better one in lexicographic order.
struct Reference {
  explicit Reference(const NodeSpec& node) : node(node), n(node.gpu_count()) {
    NvLinkGeneration gen = NvLinkGenerationForModel(node.gpus[0].model);
    bw.assign(n * n, 0);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) {
        if (i != j) bw[i * n + j] = LinkBandwidthGBps(node.links.at(i, j), gen);
      }
    }
  }

  bool Meets(const std::vector<int>& set, GpuTopology level) const {
    for (size_t a = 0; a < set.size(); ++a) {
      for (size_t b = a + 1; b < set.size(); ++b) {
        Link l = node.links.at(set[a], set[b]);
        int na = node.gpus[set[a]].numa_node, nb = node.gpus[set[b]].numa_node;
        bool ok = true;
        switch (level) {
          case GpuTopology::kAny:
          case GpuTopology::kNode:
            ok = true;
            break;
          case GpuTopology::kNvLink:
            ok = l.kind == LinkKind::kNvLink;
            break;
          case GpuTopology::kPcieSwitch:
            ok = l.kind == LinkKind::kNvLink || l.kind == LinkKind::kPix;
            break;
          case GpuTopology::kNuma:
            ok = (na >= 0 && nb >= 0) ? na == nb : l.kind != LinkKind::kSys;
            break;
        }
        if (!ok) return false;
      }
    }
    return true;
  }

  std::tuple<int64_t, int64_t, int> Score(const std::vector<int>& set,
                                          const std::vector<int>& rest) const {
    int64_t bottleneck = INT64_MAX;
    for (size_t a = 0; a < set.size(); ++a) {
      for (size_t b = a + 1; b < set.size(); ++b) {
        bottleneck = std::min<int64_t>(bottleneck, bw[set[a] * n + set[b]]);
      }
    }
    int64_t remaining = 0;
    for (int r : rest) {
      int32_t best = 0;
      for (int q : rest) {
        if (q != r) best = std::max(best, bw[r * n + q]);
      }
      remaining += best;
    }
    std::vector<int> numa;
    for (int g : set) numa.push_back(node.gpus[g].numa_node < 0 ? -1 : node.gpus[g].numa_node);
    std::sort(numa.begin(), numa.end());
    int spread = static_cast<int>(std::unique(numa.begin(), numa.end()) - numa.begin());
    return {bottleneck, remaining, -spread};
  }

  std::optional<uint64_t> Best(uint64_t free, int count, GpuTopology level, bool required) const {
    std::vector<int> idx;
    for (int g = 0; g < n; ++g) {
      if (free & (1ULL << g)) idx.push_back(g);
    }
    const int f = static_cast<int>(idx.size());
    if (count <= 0 || count > f) return std::nullopt;
    std::optional<uint64_t> best;
    std::tuple<int64_t, int64_t, int> best_score;
    // Every `count`-subset, in lexicographic order of sorted index lists.
    std::vector<int> pos(count);
    for (int i = 0; i < count; ++i) pos[i] = i;
    while (true) {
      std::vector<int> set, rest;
      uint64_t mask = 0;
      for (int i = 0, p = 0; i < f; ++i) {
        if (p < count && pos[p] == i) {
          set.push_back(idx[i]);
          mask |= 1ULL << idx[i];
          ++p;
        } else {
          rest.push_back(idx[i]);
        }
      }
      if (!required || Meets(set, level)) {
        auto s = Score(set, rest);
        if (!best || s > best_score) {
          best = mask;
          best_score = s;
        }
      }
      int i = count - 1;
      while (i >= 0 && pos[i] == f - count + i) --i;
      if (i < 0) break;
      ++pos[i];
      for (int j = i + 1; j < count; ++j) pos[j] = pos[j - 1] + 1;
    }
    return best;
  }

  const NodeSpec& node;
  int n;
  std::vector<int32_t> bw;
};

NodeSpec FromProfile(const Profile& p) {
  NodeSpec n;
  n.name = p.name;
  n.gpus = p.gpus;
  n.links = p.links;
  return n;
}

constexpr GpuTopology kLevels[] = {GpuTopology::kAny, GpuTopology::kNvLink,
                                   GpuTopology::kPcieSwitch, GpuTopology::kNuma,
                                   GpuTopology::kNode};

std::string Describe(uint64_t free, int count, GpuTopology level, bool required) {
  return "free=0x" + std::to_string(free) + " count=" + std::to_string(count) +
         " level=" + std::string(GpuTopologyName(level)) + (required ? " required" : " preferred");
}

TEST(GpuSelect, OptimalOnEveryFreePatternOfEveryBuiltInProfile) {
  int compared = 0, nonempty = 0;
  for (const std::string& name : ProfileNames()) {
    NodeSpec node = FromProfile(*FindProfile(name));
    Reference ref(node);
    GpuSetSelector selector(node);
    const uint64_t patterns = 1ULL << node.gpu_count();
    for (uint64_t free = 0; free < patterns; ++free) {
      for (int count = 1; count <= node.gpu_count(); ++count) {
        for (GpuTopology level : kLevels) {
          for (bool required : {false, true}) {
            if (!required && level != GpuTopology::kAny) continue;  // preferred = kAny's answer
            std::optional<uint64_t> want = ref.Best(free, count, level, required);
            std::optional<uint64_t> got = selector.Select(free, count, level, required);
            ASSERT_EQ(got, want) << name << " " << Describe(free, count, level, required);
            ++compared;
            nonempty += want.has_value();
          }
        }
      }
    }
  }
  // 3 x 8-GPU and 2 x 4-GPU profiles: (3 * 256 * 8 + 2 * 16 * 4) patterns x 6 level settings.
  EXPECT_EQ(compared, (3 * 256 * 8 + 2 * 16 * 4) * 6);
  EXPECT_GT(nonempty, compared / 4);  // free patterns with fewer GPUs than asked have no answer
}

// A random 16-GPU node: NVLink islands with varying lane counts (as on DGX-1's hybrid cube mesh),
// PCIe relations at random elsewhere, NUMA nodes 0..3 or unknown.
NodeSpec RandomNode(Random& rng, int n) {
  NodeSpec node;
  node.name = "random";
  for (int i = 0; i < n; ++i) {
    GpuSpec g;
    g.index = i;
    g.model = rng.Uniform(2) ? "A100-80GB" : "H100-80GB";
    g.memory_mib = 81920;
    g.numa_node = rng.Uniform(6) == 0 ? -1 : static_cast<int>(rng.Uniform(4));
    node.gpus.push_back(g);
  }
  node.gpus.assign(n, node.gpus[0]);  // one model per node: the NVLink generation is per node
  for (int i = 0; i < n; ++i) {
    node.gpus[i].index = i;
    node.gpus[i].numa_node = rng.Uniform(6) == 0 ? -1 : static_cast<int>(rng.Uniform(4));
  }
  node.links = LinkMatrix(n);
  const int island = 1 + static_cast<int>(rng.Uniform(n));
  static const LinkKind kPcie[] = {LinkKind::kPix, LinkKind::kPxb, LinkKind::kPhb, LinkKind::kNode,
                                   LinkKind::kSys};
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      bool nv = (i / island == j / island) ? rng.Uniform(4) != 0 : rng.Uniform(8) == 0;
      if (nv) {
        node.links.Set(i, j, Link{LinkKind::kNvLink, static_cast<uint8_t>(1 + rng.Uniform(18))});
      } else {
        node.links.Set(i, j, Link{kPcie[rng.Uniform(5)], 0});
      }
    }
  }
  return node;
}

TEST(GpuSelect, OptimalOnRandom16GpuTopologies) {
  Random rng(20240611);
  int compared = 0;
  for (int topo = 0; topo < 12; ++topo) {
    NodeSpec node = RandomNode(rng, 16);
    Reference ref(node);
    GpuSetSelector selector(node);
    for (int pattern = 0; pattern < 24; ++pattern) {
      uint64_t free = pattern == 0 ? 0xFFFF : rng.Uniform(1 << 16);
      for (int count = 1; count <= 16; ++count) {
        GpuTopology level = kLevels[rng.Uniform(4)];
        bool required = rng.Uniform(2) == 1;
        std::optional<uint64_t> want = ref.Best(free, count, level, required);
        std::optional<uint64_t> got = selector.Select(free, count, level, required);
        ASSERT_EQ(got, want) << "topology " << topo << " "
                             << Describe(free, count, level, required);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 12 * 24 * 16);
}

TEST(GpuSelect, WorkedExamplesFromTheHeader) {
  NodeSpec pcie = FromProfile(*FindProfile("pcie-8gpu"));
  EXPECT_EQ(SelectGpuSet(pcie, 0b1110, 2, GpuTopology::kAny, false), 0b1100u);
  EXPECT_EQ(SelectGpuSet(pcie, 0b1101, 1, GpuTopology::kAny, false), 0b0001u);
  // Four GPUs on a PCIe server: two whole switch pairs of one socket.
  EXPECT_EQ(SelectGpuSet(pcie, 0xFF, 4, GpuTopology::kAny, false), 0x0Fu);
  // A PIX pair is required but every pair is split: none.
  EXPECT_EQ(SelectGpuSet(pcie, 0b01010101, 2, GpuTopology::kPcieSwitch, true), std::nullopt);
  // Preferred takes the best available instead: two GPUs of one socket (NODE).
  EXPECT_EQ(SelectGpuSet(pcie, 0b01010101, 2, GpuTopology::kPcieSwitch, false), 0b00000101u);
  // NVLink required on a PCIe-only server: never.
  EXPECT_EQ(SelectGpuSet(pcie, 0xFF, 2, GpuTopology::kNvLink, true), std::nullopt);
  // DGX A100: all NV12, so NUMA decides: the lowest pair on one NUMA node.
  NodeSpec dgx = FromProfile(*FindProfile("dgx-a100"));
  EXPECT_EQ(SelectGpuSet(dgx, 0b11111110, 2, GpuTopology::kAny, false), 0b00001100u);
  // HGX H100, 4 GPUs: one socket's four.
  NodeSpec hgx = FromProfile(*FindProfile("hgx-h100"));
  EXPECT_EQ(SelectGpuSet(hgx, 0b11110111, 4, GpuTopology::kAny, false), 0b11110000u);
  EXPECT_EQ(SelectGpuSet(hgx, 0b11110111, 4, GpuTopology::kNuma, true), 0b11110000u);
  EXPECT_EQ(SelectGpuSet(hgx, 0b11100111, 4, GpuTopology::kNuma, true), std::nullopt);
  // "node" is met by any set on the node.
  EXPECT_EQ(SelectGpuSet(hgx, 0b11100111, 4, GpuTopology::kNode, true), 0b00100111u);
}

TEST(GpuSelect, NotEnoughFreeOrNonsense) {
  NodeSpec dgx = FromProfile(*FindProfile("dgx-a100"));
  EXPECT_EQ(SelectGpuSet(dgx, 0b11, 3, GpuTopology::kAny, false), std::nullopt);
  EXPECT_EQ(SelectGpuSet(dgx, 0xFF, 0, GpuTopology::kAny, false), std::nullopt);
  EXPECT_EQ(SelectGpuSet(dgx, 0xFF00, 1, GpuTopology::kAny, false), std::nullopt);  // not its GPUs
}

}  // namespace
}  // namespace tessera::core
