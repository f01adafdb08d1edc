#include "sim/packing_bound.h"

#include <algorithm>
#include <functional>
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

}  // namespace
}  // namespace tessera::sim
