#include "sim/packing_bound.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/strings.h"

namespace tessera::sim {
namespace {

struct Pattern {
  std::vector<int64_t> count;  // per size
  double value = 0;            // sum of count x y
};

// The most valuable pattern under duals `y` (sizes with y <= 0 are left out): a bounded knapsack,
// each size split into pieces of 1, 2, 4, ... copies.
Pattern BestPattern(const std::vector<int32_t>& sizes, const std::vector<int64_t>& counts,
                    const std::vector<double>& y, int32_t capacity) {
  struct Piece {
    size_t item;
    int64_t copies;
    int32_t size;
    double value;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (y[i] <= 0) continue;
    int64_t limit = std::min<int64_t>(counts[i], capacity / sizes[i]);
    for (int64_t m = 1; limit > 0; m *= 2) {
      const int64_t take = std::min(m, limit);
      pieces.push_back(
          {i, take, static_cast<int32_t>(take * sizes[i]), static_cast<double>(take) * y[i]});
      limit -= take;
    }
  }
  const size_t width = static_cast<size_t>(capacity) + 1;
  std::vector<double> best(width, 0.0);
  std::vector<uint8_t> took(pieces.size() * width, 0);
  for (size_t p = 0; p < pieces.size(); ++p) {
    for (int32_t c = capacity; c >= pieces[p].size; --c) {
      const double with = best[c - pieces[p].size] + pieces[p].value;
      if (with > best[c]) {
        best[c] = with;
        took[p * width + c] = 1;
      }
    }
  }
  Pattern out;
  out.count.assign(sizes.size(), 0);
  int32_t c = capacity;
  for (size_t p = pieces.size(); p-- > 0;) {
    if (took[p * width + c]) {
      out.count[pieces[p].item] += pieces[p].copies;
      c -= pieces[p].size;
    }
  }
  for (size_t i = 0; i < sizes.size(); ++i) out.value += static_cast<double>(out.count[i]) * y[i];
  return out;
}

}  // namespace

absl::StatusOr<PackingBound> SharePackingBound(const std::map<int32_t, int64_t>& shares,
                                               int32_t capacity) {
  if (capacity <= 0) return absl::InvalidArgumentError("packing bound: capacity must be positive");
  std::vector<int32_t> sizes;
  std::vector<int64_t> counts;
  double total = 0;
  for (const auto& [size, count] : shares) {
    if (size <= 0 || size > capacity) {
      return absl::InvalidArgumentError(
          StrCat("packing bound: a share of ", size, " does not fit a GPU of ", capacity));
    }
    if (count < 0) {
      return absl::InvalidArgumentError(
          StrCat("packing bound: ", count, " shares of ", size, " (a count cannot be negative)"));
    }
    if (count == 0) continue;
    sizes.push_back(size);
    counts.push_back(count);
    total += static_cast<double>(size) * static_cast<double>(count);
  }
  PackingBound out;
  const size_t m = sizes.size();
  if (m == 0) {
    out.optimal = true;
    return out;
  }
  // Basis: one pattern per size, as many copies of it as fit (and exist).
  std::vector<std::vector<double>> inverse(m, std::vector<double>(m, 0.0));
  std::vector<double> x(m);
  for (size_t i = 0; i < m; ++i) {
    const double q = static_cast<double>(std::min<int64_t>(counts[i], capacity / sizes[i]));
    inverse[i][i] = 1 / q;
    x[i] = static_cast<double>(counts[i]) / q;
  }
  double bound = 0;
  constexpr double kEps = 1e-9;
  const int max_iterations = 200 * static_cast<int>(m) + 1000;
  std::vector<double> y(m), d(m);
  for (out.iterations = 0; out.iterations < max_iterations; ++out.iterations) {
    // Duals: y = 1^T B^-1; only their positive part is used (a size with y <= 0 is dropped from
    // patterns, which keeps them feasible).
    double ny = 0;
    for (size_t j = 0; j < m; ++j) {
      y[j] = 0;
      for (size_t i = 0; i < m; ++i) y[j] += inverse[i][j];
      ny += static_cast<double>(counts[j]) * std::max(0.0, y[j]);
    }
    const Pattern a = BestPattern(sizes, counts, y, capacity);
    bound = std::max(bound, ny / std::max(1.0, a.value));
    if (a.value <= 1 + kEps) {
      out.optimal = true;
      break;
    }
    // Ratio test on d = B^-1 a.
    size_t leave = m;
    double ratio = 0;
    for (size_t i = 0; i < m; ++i) {
      d[i] = 0;
      for (size_t j = 0; j < m; ++j) d[i] += inverse[i][j] * static_cast<double>(a.count[j]);
      if (d[i] > kEps && (leave == m || x[i] / d[i] < ratio - kEps)) {
        leave = i;
        ratio = x[i] / d[i];
      }
    }
    if (leave == m) break;  // cannot happen for a covering LP; keep the bound proven so far
    const double pivot = d[leave];
    for (size_t j = 0; j < m; ++j) inverse[leave][j] /= pivot;
    x[leave] /= pivot;
    for (size_t i = 0; i < m; ++i) {
      if (i == leave || d[i] == 0) continue;
      for (size_t j = 0; j < m; ++j) inverse[i][j] -= d[i] * inverse[leave][j];
      x[i] = std::max(0.0, x[i] - d[i] * x[leave]);
    }
  }
  out.lp_gpus = bound;
  out.min_gpus = static_cast<int64_t>(std::ceil(bound - 1e-6));
  out.stranded_gpus = static_cast<double>(out.min_gpus) - total / capacity;
  return out;
}

}  // namespace tessera::sim
