#include "sim/packing_bound.h"

#include <algorithm>
#include <functional>
#include <tuple>
#include <vector>

#include "common/random.h"
#include "gtest/gtest.h"

namespace tessera::sim {
namespace {

TEST(PackingBound, HeaderExamples) {
  absl::StatusOr<PackingBound> halves = SharePackingBound({{500, 3}});
  ASSERT_TRUE(halves.ok()) << halves.status();
  EXPECT_NEAR(halves->lp_gpus, 1.5, 1e-9);
  EXPECT_EQ(halves->min_gpus, 2);
  EXPECT_NEAR(halves->stranded_gpus, 0.5, 1e-9);
  EXPECT_TRUE(halves->optimal);

  absl::StatusOr<PackingBound> big = SharePackingBound({{810, 10}, {160, 4}});
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->min_gpus, 10);
  EXPECT_NEAR(big->stranded_gpus, 10 - 8.1 - 0.64, 1e-9);
}

TEST(PackingBound, ExactPairsLeaveNothing) {
  absl::StatusOr<PackingBound> b = SharePackingBound({{600, 7}, {400, 7}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->min_gpus, 7);
  EXPECT_NEAR(b->stranded_gpus, 0, 1e-9);
  // Three sizes that only fill a GPU together: 0.55 + 0.22 + 0.23.
  b = SharePackingBound({{550, 5}, {220, 5}, {230, 5}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->min_gpus, 5);
}

TEST(PackingBound, EmptyAndBadInput) {
  absl::StatusOr<PackingBound> none = SharePackingBound({});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->min_gpus, 0);
  EXPECT_EQ(none->stranded_gpus, 0);
  EXPECT_FALSE(SharePackingBound({{0, 1}}).ok());
  EXPECT_FALSE(SharePackingBound({{1001, 1}}).ok());
  absl::StatusOr<PackingBound> negative = SharePackingBound({{500, -1}});
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("negative"), std::string::npos);
}

// The fewest GPUs that hold `items`, by trying every assignment (small instances only).
int ExactGpus(std::vector<int32_t> items, int32_t capacity) {
  std::sort(items.rbegin(), items.rend());
  int best = static_cast<int>(items.size());
  std::vector<int32_t> room;
  std::function<void(size_t)> place = [&](size_t i) {
    if (static_cast<int>(room.size()) >= best) return;
    if (i == items.size()) {
      best = static_cast<int>(room.size());
      return;
    }
    for (size_t b = 0; b < room.size(); ++b) {
      if (room[b] >= items[i]) {
        room[b] -= items[i];
        place(i + 1);
        room[b] += items[i];
      }
    }
    room.push_back(capacity - items[i]);
    place(i + 1);
    room.pop_back();
  };
  place(0);
  return best;
}

// The bound never exceeds the true optimum, never falls below the plain capacity bound, and on
// these small instances is usually exact (the LP's gap for bin packing is rarely more than 1).
TEST(PackingBound, NeverAboveTheExactOptimum) {
  Random rng(11);
  int exact_hits = 0;
  constexpr int kCases = 300;
  for (int t = 0; t < kCases; ++t) {
    std::map<int32_t, int64_t> shares;
    std::vector<int32_t> items;
    const int n = 1 + static_cast<int>(rng.Uniform(9));
    const int32_t sizes[] = {110, 160, 230, 320, 470, 550, 650, 810, 1000};
    for (int i = 0; i < n; ++i) {
      const int32_t s = sizes[rng.Uniform(9)];
      ++shares[s];
      items.push_back(s);
    }
    absl::StatusOr<PackingBound> b = SharePackingBound(shares);
    ASSERT_TRUE(b.ok()) << b.status();
    const int exact = ExactGpus(items, 1000);
    int64_t sum = 0;
    for (int32_t s : items) sum += s;
    EXPECT_LE(b->min_gpus, exact) << "case " << t;
    EXPECT_GE(b->min_gpus, (sum + 999) / 1000) << "case " << t;
    EXPECT_TRUE(b->optimal);
    exact_hits += b->min_gpus == exact;
  }
  EXPECT_GE(exact_hits, kCases * 9 / 10);
}

PlacementLp Lp(int64_t gpus, std::vector<std::tuple<int32_t, int64_t, int64_t>> shares,
               int64_t whole_lower = 0, int64_t whole_upper = 0) {
  PlacementLp lp;
  lp.gpus = gpus;
  lp.whole_lower = whole_lower;
  lp.whole_upper = whole_upper;
  for (const auto& [size, lower, upper] : shares) {
    lp.sizes.push_back(size);
    lp.lower.push_back(lower);
    lp.upper.push_back(upper);
  }
  return lp;
}

double MaxPlaced(const PlacementLp& lp) {
  absl::StatusOr<PlacementBound> b = MaxPlacedBound(lp);
  EXPECT_TRUE(b.ok()) << b.status();
  EXPECT_TRUE(b.ok() && b->optimal);
  return b.ok() ? b->max_placed_milli : -1;
}

TEST(PlacementBound, HandComputedValues) {
  // The header's example: two 0.81 shares must go, so the 0.5 shares find no room.
  EXPECT_NEAR(MaxPlaced(Lp(2, {{810, 2, 2}, {500, 0, 2}})), 1620, 1e-6);
  // One 0.6 share per GPU.
  EXPECT_NEAR(MaxPlaced(Lp(3, {{600, 0, 5}})), 1800, 1e-6);
  // A required 0.81 share strands 0.19 of one GPU; the other GPU is taken whole.
  EXPECT_NEAR(MaxPlaced(Lp(2, {{810, 1, 1}}, 0, 5)), 1810, 1e-6);
  // Whole GPUs that must be taken leave no room for shares.
  EXPECT_NEAR(MaxPlaced(Lp(2, {{500, 0, 4}}, 2, 2)), 2000, 1e-6);
  // Nothing may be placed whole: three 0.5 shares on two GPUs.
  EXPECT_NEAR(MaxPlaced(Lp(2, {{500, 0, 3}})), 1500, 1e-6);
  // 0.47 pairs strand 0.06 each unless a 0.06 share joins them.
  EXPECT_NEAR(MaxPlaced(Lp(3, {{470, 4, 6}, {60, 0, 1}})), 3 * 940 + 60, 1e-6);
  // Nothing at all.
  EXPECT_NEAR(MaxPlaced(Lp(0, {{470, 0, 6}}, 0, 4)), 0, 1e-6);
}

TEST(PlacementBound, BadInput) {
  EXPECT_FALSE(MaxPlacedBound(Lp(2, {{0, 0, 1}})).ok());
  EXPECT_FALSE(MaxPlacedBound(Lp(2, {{1001, 0, 1}})).ok());
  EXPECT_FALSE(MaxPlacedBound(Lp(2, {{500, 2, 1}})).ok());
  EXPECT_FALSE(MaxPlacedBound(Lp(2, {{500, 0, 1}, {500, 0, 1}})).ok());
  EXPECT_FALSE(MaxPlacedBound(Lp(2, {{500, 0, 1}}, 3, 1)).ok());
  PlacementLp ragged = Lp(2, {{500, 0, 1}});
  ragged.upper.push_back(3);
  absl::StatusOr<PlacementBound> b = MaxPlacedBound(ragged);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("1 sizes but 1 lower and 2 upper"), std::string::npos)
      << b.status();
}

// The most an integer packing places: every choice of counts within the bounds, each checked by
// ExactGpus (small instances only).
double ExactMaxPlaced(const PlacementLp& lp) {
  double best = -1;
  std::vector<int64_t> count(lp.sizes.size());
  std::function<void(size_t)> choose = [&](size_t i) {
    if (i == lp.sizes.size()) {
      std::vector<int32_t> items;
      double shares = 0;
      for (size_t k = 0; k < count.size(); ++k) {
        for (int64_t c = 0; c < count[k]; ++c) items.push_back(lp.sizes[k]);
        shares += static_cast<double>(count[k]) * lp.sizes[k];
      }
      const int64_t bins = ExactGpus(items, lp.capacity);
      for (int64_t w = lp.whole_lower; w <= lp.whole_upper && w + bins <= lp.gpus; ++w) {
        best = std::max(best, shares + static_cast<double>(w) * lp.capacity);
      }
      return;
    }
    for (count[i] = lp.lower[i]; count[i] <= lp.upper[i]; ++count[i]) choose(i + 1);
  };
  choose(0);
  return best;
}

// The bound is never below what a packing achieves, and on these small instances usually equals
// it (the relaxation's gap is at most a fraction of a GPU or so).
TEST(PlacementBound, NeverBelowTheBestPacking) {
  Random rng(5);
  const int32_t sizes[] = {60, 160, 230, 320, 470, 550, 650, 810};
  int feasible = 0, exact_hits = 0;
  for (int t = 0; t < 400; ++t) {
    PlacementLp lp;
    lp.gpus = static_cast<int64_t>(rng.Uniform(5));
    std::vector<int32_t> pool(std::begin(sizes), std::end(sizes));
    const int kinds = 1 + static_cast<int>(rng.Uniform(3));
    for (int k = 0; k < kinds; ++k) {
      const size_t pick = rng.Uniform(pool.size());
      lp.sizes.push_back(pool[pick]);
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(pick));
      const int64_t upper = static_cast<int64_t>(rng.Uniform(5));
      lp.upper.push_back(upper);
      lp.lower.push_back(static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(upper) + 1)) / 2);
    }
    lp.whole_upper = static_cast<int64_t>(rng.Uniform(4));
    lp.whole_lower =
        static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(lp.whole_upper) + 1)) / 2;
    const double exact = ExactMaxPlaced(lp);
    absl::StatusOr<PlacementBound> b = MaxPlacedBound(lp);
    ASSERT_TRUE(b.ok()) << b.status();
    if (exact < 0) continue;  // no packing meets the lower bounds: any figure is vacuously true
    ++feasible;
    EXPECT_TRUE(b->optimal) << "case " << t;
    EXPECT_GE(b->max_placed_milli, exact - 1e-6) << "case " << t;
    EXPECT_LE(b->max_placed_milli, 1000.0 * static_cast<double>(lp.gpus) + 1e-6) << "case " << t;
    exact_hits += std::abs(b->max_placed_milli - exact) < 1e-6;
  }
  EXPECT_GE(feasible, 200);
  EXPECT_GE(exact_hits, feasible / 2);
}

}  // namespace
}  // namespace tessera::sim
