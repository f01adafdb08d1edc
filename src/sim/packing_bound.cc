#include "sim/packing_bound.h"

#include <algorithm>
#include <cmath>
#include <string_view>
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

// The simplex pivot on row `leave`, d = B^-1 a for the entering column a: updates B^-1 and the
// basic values x (kept non-negative against rounding).
void Pivot(std::vector<std::vector<double>>& inverse, std::vector<double>& x,
           const std::vector<double>& d, size_t leave) {
  const size_t m = x.size();
  const double pivot = d[leave];
  for (size_t j = 0; j < m; ++j) inverse[leave][j] /= pivot;
  x[leave] /= pivot;
  for (size_t i = 0; i < m; ++i) {
    if (i == leave || d[i] == 0) continue;
    for (size_t j = 0; j < m; ++j) inverse[i][j] -= d[i] * inverse[leave][j];
    x[i] = std::max(0.0, x[i] - d[i] * x[leave]);
  }
}

// A share size must be 1..capacity; `what` names the caller in the message.
absl::Status CheckShareSize(std::string_view what, int32_t size, int32_t capacity) {
  if (size > 0 && size <= capacity) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat(what, ": a share of ", size, " does not fit a GPU of ", capacity));
}

}  // namespace

absl::StatusOr<PackingBound> SharePackingBound(const std::map<int32_t, int64_t>& shares,
                                               int32_t capacity) {
  if (capacity <= 0) return absl::InvalidArgumentError("packing bound: capacity must be positive");
  std::vector<int32_t> sizes;
  std::vector<int64_t> counts;
  double total = 0;
  for (const auto& [size, count] : shares) {
    if (absl::Status st = CheckShareSize("packing bound", size, capacity); !st.ok()) return st;
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
    Pivot(inverse, x, d, leave);
  }
  out.lp_gpus = bound;
  out.min_gpus = static_cast<int64_t>(std::ceil(bound - 1e-6));
  out.stranded_gpus = static_cast<double>(out.min_gpus) - total / capacity;
  return out;
}

namespace {

// The certificate of MaxPlacedBound's header: the most any packing can place, given share values
// `pi` (any reals).
double DualPlacedBound(const PlacementLp& lp, const std::vector<double>& pi) {
  const double k = BestPattern(lp.sizes, lp.upper, pi, lp.capacity).value;
  const double cap = lp.capacity;
  auto gpu_part = [&](double lambda) {
    return lambda * static_cast<double>(lp.gpus) +
           std::max(0.0, cap - lambda) * static_cast<double>(lp.whole_upper) -
           std::max(0.0, lambda - cap) * static_cast<double>(lp.whole_lower);
  };
  double bound = std::min(gpu_part(k), gpu_part(std::max(k, cap)));
  for (size_t i = 0; i < lp.sizes.size(); ++i) {
    const double s = lp.sizes[i];
    bound += std::max(0.0, s - pi[i]) * static_cast<double>(lp.upper[i]) -
             std::max(0.0, pi[i] - s) * static_cast<double>(lp.lower[i]);
  }
  return bound;
}

}  // namespace

absl::StatusOr<PlacementBound> MaxPlacedBound(const PlacementLp& lp) {
  const size_t n = lp.sizes.size();
  if (lp.capacity <= 0)
    return absl::InvalidArgumentError("placement bound: capacity must be positive");
  if (lp.lower.size() != n || lp.upper.size() != n) {
    return absl::InvalidArgumentError(StrCat("placement bound: ", n, " sizes but ", lp.lower.size(),
                                             " lower and ", lp.upper.size(), " upper counts"));
  }
  if (lp.gpus < 0 || lp.whole_lower < 0 || lp.whole_lower > lp.whole_upper) {
    return absl::InvalidArgumentError(
        StrCat("placement bound: ", lp.gpus, " GPUs, whole GPUs from ", lp.whole_lower, " to ",
               lp.whole_upper, " (counts cannot be negative or reversed)"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (absl::Status st = CheckShareSize("placement bound", lp.sizes[i], lp.capacity); !st.ok()) {
      return st;
    }
    if (std::count(lp.sizes.begin(), lp.sizes.end(), lp.sizes[i]) > 1) {
      return absl::InvalidArgumentError(
          StrCat("placement bound: the share size ", lp.sizes[i], " is listed twice"));
    }
    if (lp.lower[i] < 0 || lp.lower[i] > lp.upper[i]) {
      return absl::InvalidArgumentError(StrCat("placement bound: shares of ", lp.sizes[i], " from ",
                                               lp.lower[i], " to ", lp.upper[i],
                                               " (counts cannot be negative or reversed)"));
    }
  }
  const double cap = lp.capacity;
  // Rows: 0 the GPUs; 1..n each size's upper count; then one per size with a lower count; the
  // whole GPUs' upper count; their lower count if any.
  std::vector<int> lower_row(n, -1);
  int m = 1 + static_cast<int>(n);
  for (size_t i = 0; i < n; ++i) {
    if (lp.lower[i] > 0) lower_row[i] = m++;
  }
  const int whole_row = m++;
  const int whole_lower_row = lp.whole_lower > 0 ? m++ : -1;

  struct Column {
    std::vector<double> a;
    double cost = 0;
    bool artificial = false;
  };
  std::vector<Column> columns;
  auto unit = [&](int row, double value, double cost, bool artificial) {
    Column c;
    c.a.assign(m, 0.0);
    c.a[row] = value;
    c.cost = cost;
    c.artificial = artificial;
    columns.push_back(std::move(c));
    return static_cast<int>(columns.size()) - 1;
  };
  const double big_m = 1000.0 * cap;
  std::vector<int> basis(m, -1);
  std::vector<double> x(m, 0.0);
  basis[0] = unit(0, 1, 0, false);
  x[0] = static_cast<double>(lp.gpus);
  for (size_t i = 0; i < n; ++i) {
    basis[1 + i] = unit(1 + static_cast<int>(i), 1, 0, false);
    x[1 + i] = static_cast<double>(lp.upper[i]);
    if (lower_row[i] >= 0) {
      basis[lower_row[i]] = unit(lower_row[i], 1, -big_m, true);
      x[lower_row[i]] = static_cast<double>(lp.lower[i]);
      unit(lower_row[i], -1, 0, false);  // surplus
    }
  }
  basis[whole_row] = unit(whole_row, 1, 0, false);
  x[whole_row] = static_cast<double>(lp.whole_upper);
  if (whole_lower_row >= 0) {
    basis[whole_lower_row] = unit(whole_lower_row, 1, -big_m, true);
    x[whole_lower_row] = static_cast<double>(lp.whole_lower);
    unit(whole_lower_row, -1, 0, false);
  }
  {
    Column w;  // whole GPUs
    w.a.assign(m, 0.0);
    w.a[0] = 1;
    w.a[whole_row] = 1;
    if (whole_lower_row >= 0) w.a[whole_lower_row] = 1;
    w.cost = cap;
    columns.push_back(std::move(w));
  }
  // The initial basis is the identity.
  std::vector<std::vector<double>> inverse(m, std::vector<double>(m, 0.0));
  for (int i = 0; i < m; ++i) inverse[i][i] = 1;
  std::vector<char> in_basis(columns.size(), 0);
  for (int b : basis) in_basis[b] = 1;

  PlacementBound out;
  constexpr double kEps = 1e-7;
  const int max_iterations = 100 * m + 2000;
  std::vector<double> y(m), d(m), pi(n);
  int degenerate = 0;
  auto duals = [&]() {  // y = c_B B^-1
    for (int j = 0; j < m; ++j) {
      y[j] = 0;
      for (int i = 0; i < m; ++i) y[j] += columns[basis[i]].cost * inverse[i][j];
    }
  };
  auto share_values = [&]() {
    for (size_t i = 0; i < n; ++i) {
      pi[i] = lp.sizes[i] - y[1 + i] - (lower_row[i] >= 0 ? y[lower_row[i]] : 0.0);
    }
  };
  for (out.iterations = 0; out.iterations < max_iterations; ++out.iterations) {
    duals();
    auto reduced = [&](const Column& c) {
      double r = c.cost;
      for (int j = 0; j < m; ++j) r -= y[j] * c.a[j];
      return r;
    };
    // Entering column: the best reduced cost (Bland's rule, the first improving one, after a run
    // of degenerate pivots).
    const bool bland = degenerate > 50;
    int enter = -1;
    double enter_rc = kEps;
    for (size_t c = 0; c < columns.size(); ++c) {
      if (in_basis[c] || columns[c].artificial) continue;
      const double rc = reduced(columns[c]);
      if (rc > enter_rc) {
        enter = static_cast<int>(c);
        enter_rc = rc;
        if (bland) break;
      }
    }
    if (enter < 0 || !bland) {
      share_values();
      const Pattern p = BestPattern(lp.sizes, lp.upper, pi, lp.capacity);
      const double rc = p.value - y[0];
      if (rc > enter_rc) {
        Column c;
        c.a.assign(m, 0.0);
        c.a[0] = 1;
        for (size_t i = 0; i < n; ++i) {
          const double k = static_cast<double>(p.count[i]);
          c.a[1 + i] = k;
          if (lower_row[i] >= 0) c.a[lower_row[i]] = k;
          c.cost += k * lp.sizes[i];
        }
        columns.push_back(std::move(c));
        in_basis.push_back(0);
        enter = static_cast<int>(columns.size()) - 1;
      }
    }
    if (enter < 0) {
      out.optimal = true;
      break;
    }
    int leave = -1;
    double ratio = 0;
    for (int i = 0; i < m; ++i) {
      d[i] = 0;
      for (int j = 0; j < m; ++j) d[i] += inverse[i][j] * columns[enter].a[j];
      if (d[i] > kEps) {
        const double r = x[i] / d[i];
        if (leave < 0 || r < ratio - 1e-12 ||
            (r < ratio + 1e-12 && columns[basis[i]].artificial &&
             !columns[basis[leave]].artificial)) {
          leave = i;
          ratio = r;
        }
      }
    }
    if (leave < 0) break;  // unbounded: cannot happen (the GPU row bounds every column)
    degenerate = ratio < 1e-12 ? degenerate + 1 : 0;
    Pivot(inverse, x, d, static_cast<size_t>(leave));
    in_basis[basis[leave]] = 0;
    basis[leave] = enter;
    in_basis[enter] = 1;
  }
  duals();
  share_values();
  double trivial = cap * static_cast<double>(std::min(lp.gpus, lp.whole_upper));
  for (size_t i = 0; i < n; ++i) trivial += lp.sizes[i] * static_cast<double>(lp.upper[i]);
  out.max_placed_milli =
      std::min({DualPlacedBound(lp, pi), trivial, cap * static_cast<double>(lp.gpus)});
  return out;
}

}  // namespace tessera::sim
