#include "sim/protocol_bound.h"

#include <algorithm>
#include <map>
#include <queue>
#include <tuple>

#include "common/strings.h"
#include "sim/packing_bound.h"

namespace tessera::sim {
namespace {

constexpr int32_t kGpuMilli = 1000;

// Where one pod of the sequence stands against the reference.
struct PodClass {
  int size = -1;       // index into the share sizes; -1 for whole-GPU and CPU-only pods
  int64_t whole = 0;   // GPUs asked whole
  bool asks_at_most;   // fits wherever the reference fits: placed if it arrives before t
  bool asks_at_least;  // needs at least what the reference needs: never placed from t on
};

PodClass Classify(const TracePod& p, const ReferenceAsk& r, const std::map<int32_t, int>& sizes) {
  PodClass c{};
  const bool share = p.num_gpu == 1 && p.gpu_milli < kGpuMilli;
  if (share) c.size = sizes.at(p.gpu_milli);
  if (p.num_gpu >= 1 && p.gpu_milli >= kGpuMilli) c.whole = p.num_gpu;
  c.asks_at_most = p.num_gpu == 1 && p.gpu_milli <= r.gpu_milli && p.cpu_milli <= r.cpu_milli &&
                   p.memory_mib <= r.memory_mib && p.gpu_models.empty();
  c.asks_at_least = p.num_gpu >= 1 && p.gpu_milli >= r.gpu_milli && p.cpu_milli >= r.cpu_milli &&
                    p.memory_mib >= r.memory_mib;
  return c;
}

}  // namespace

std::string ReferenceAsk::Describe() const {
  return StrCat(
      gpu_milli >= kGpuMilli ? std::string("1 whole GPU") : StrCat(gpu_milli, "/1000 GPU"), ", ",
      cpu_milli, "m CPU, ", memory_mib, " MiB");
}

absl::StatusOr<ProtocolCeiling> FgdCeilingFor(const core::Cluster& cluster, const PodTrace& trace,
                                              const FgdSequence& sequence,
                                              const ReferenceAsk& reference, bool every_arrival) {
  const int64_t gpus = cluster.total_gpus();
  if (gpus == 0) return absl::InvalidArgumentError("protocol ceiling: the cluster has no GPUs");
  if (reference.gpu_milli <= 0 || reference.gpu_milli > kGpuMilli) {
    return absl::InvalidArgumentError(StrCat("protocol ceiling: a reference ask of ",
                                             reference.gpu_milli, " milli-GPU (must be 1..1000)"));
  }
  std::map<int32_t, int> size_index;
  for (int32_t i : sequence.pods) {
    const TracePod& p = trace.pods[i];
    if (p.num_gpu == 1 && p.gpu_milli < kGpuMilli) size_index.emplace(p.gpu_milli, 0);
  }
  PlacementLp shape;
  for (auto& [size, index] : size_index) {
    index = static_cast<int>(shape.sizes.size());
    shape.sizes.push_back(size);
  }
  const size_t k = shape.sizes.size();
  const size_t n = sequence.pods.size();
  // Prefix counts over the first t pods: shares (per size) and whole GPUs that ask at most the
  // reference; all of them; those that do not ask at least the reference.
  std::vector<int64_t> at_most((n + 1) * k, 0), all((n + 1) * k, 0), not_at_least((n + 1) * k, 0);
  std::vector<int64_t> whole_at_most(n + 1, 0), whole_all(n + 1, 0), whole_not_at_least(n + 1, 0);
  for (size_t t = 0; t < n; ++t) {
    const PodClass c = Classify(trace.pods[sequence.pods[t]], reference, size_index);
    for (size_t i = 0; i < k; ++i) {
      at_most[(t + 1) * k + i] = at_most[t * k + i];
      all[(t + 1) * k + i] = all[t * k + i];
      not_at_least[(t + 1) * k + i] = not_at_least[t * k + i];
    }
    whole_at_most[t + 1] = whole_at_most[t] + (c.asks_at_most ? c.whole : 0);
    whole_all[t + 1] = whole_all[t] + c.whole;
    whole_not_at_least[t + 1] = whole_not_at_least[t] + (c.asks_at_least ? 0 : c.whole);
    if (c.size >= 0) {
      at_most[(t + 1) * k + c.size] += c.asks_at_most;
      ++all[(t + 1) * k + c.size];
      not_at_least[(t + 1) * k + c.size] += !c.asks_at_least;
    }
  }
  ProtocolCeiling out;
  out.reference = reference;
  out.pods = static_cast<int64_t>(n);
  const double capacity = static_cast<double>(gpus) * kGpuMilli;
  // The least unallocated capacity (milli-GPU) for any t in [a, b].
  auto least_unallocated = [&](size_t a, size_t b) -> absl::StatusOr<double> {
    PlacementLp lp = shape;
    lp.gpus = gpus;
    lp.lower.resize(k);
    lp.upper.resize(k);
    for (size_t i = 0; i < k; ++i) {
      lp.lower[i] = at_most[a * k + i];
      lp.upper[i] = all[b * k + i] + not_at_least[n * k + i] - not_at_least[b * k + i];
    }
    lp.whole_lower = whole_at_most[a];
    lp.whole_upper = whole_all[b] + whole_not_at_least[n] - whole_not_at_least[b];
    ++out.lps;
    absl::StatusOr<PlacementBound> placed = MaxPlacedBound(lp);
    if (!placed.ok()) return placed.status();
    out.lps_not_optimal += !placed->optimal;
    // Below what must have been placed: no run has r stop fitting in [a, b].
    double must = kGpuMilli * static_cast<double>(lp.whole_lower);
    for (size_t i = 0; i < k; ++i) must += static_cast<double>(lp.sizes[i] * lp.lower[i]);
    if (placed->max_placed_milli < must - 1e-6) return capacity;
    return std::max(0.0, capacity - placed->max_placed_milli);
  };
  // Branch and bound: ranges by their bound, lowest first; `best` is the lowest bound of a single
  // t seen so far. A range whose bound is not below it cannot hold the worst case.
  using Range = std::tuple<double, size_t, size_t>;
  std::priority_queue<Range, std::vector<Range>, std::greater<Range>> open;
  double best = capacity;
  size_t best_t = n;
  auto point = [&](size_t t) -> absl::Status {
    absl::StatusOr<double> v = least_unallocated(t, t);
    if (!v.ok()) return v.status();
    if (*v < best) {
      best = *v;
      best_t = t;
    }
    return absl::OkStatus();
  };
  if (every_arrival) {
    for (size_t t = 0; t <= n; ++t) {
      if (absl::Status st = point(t); !st.ok()) return st;
    }
  }
  constexpr size_t kSeeds = 16;
  for (size_t s = 0; s <= kSeeds; ++s) {
    if (absl::Status st = point(n * s / kSeeds); !st.ok()) return st;
  }
  if (!every_arrival) {
    absl::StatusOr<double> whole = least_unallocated(0, n);
    if (!whole.ok()) return whole.status();
    open.emplace(*whole, 0, n);
  }
  constexpr int kMaxLps = 4000;
  double floor = best;  // the answer: min(best, bounds of ranges left open)
  while (!open.empty()) {
    const auto [bound, a, b] = open.top();
    if (bound >= best - 1e-6) break;
    if (out.lps >= kMaxLps) {
      floor = std::min(best, bound);  // still proven, if less tight
      break;
    }
    open.pop();
    if (b - a <= 1) {
      if (absl::Status st = point(a); !st.ok()) return st;
      if (absl::Status st = point(b); !st.ok()) return st;
      continue;
    }
    const size_t mid = a + (b - a) / 2;
    if (absl::Status st = point(mid); !st.ok()) return st;
    for (auto [from, to] : {std::pair{a, mid}, std::pair{mid, b}}) {
      absl::StatusOr<double> v = least_unallocated(from, to);
      if (!v.ok()) return v.status();
      open.emplace(*v, from, to);
    }
  }
  if (open.empty() || std::get<0>(open.top()) >= best - 1e-6) floor = best;
  out.min_unallocated_gpus = floor / kGpuMilli;
  out.max_allocation_pct = 100.0 * (1.0 - floor / capacity);
  out.worst_exhaustion = static_cast<int64_t>(best_t);
  return out;
}

std::vector<ReferenceAsk> CeilingReferences(const PodTrace& trace) {
  std::map<std::tuple<int32_t, int64_t, int64_t>, int64_t> count;
  for (const TracePod& p : trace.pods) {
    if (p.num_gpu != 1 || !p.gpu_models.empty()) continue;
    ++count[{p.gpu_milli, p.cpu_milli, p.memory_mib}];
  }
  std::vector<std::pair<int64_t, ReferenceAsk>> shares, whole;
  for (const auto& [ask, c] : count) {
    const auto& [milli, cpu, memory] = ask;
    ReferenceAsk r{milli, cpu, memory};
    if (milli >= kGpuMilli) {
      whole.emplace_back(c, r);
    } else if (milli >= kGpuMilli / 2) {
      shares.emplace_back(c, r);
    }
  }
  auto by_count = [](const auto& x, const auto& y) {
    return std::tie(x.first, x.second.gpu_milli, x.second.cpu_milli, x.second.memory_mib) >
           std::tie(y.first, y.second.gpu_milli, y.second.cpu_milli, y.second.memory_mib);
  };
  std::sort(shares.begin(), shares.end(), by_count);
  std::sort(whole.begin(), whole.end(), by_count);
  std::vector<ReferenceAsk> out;
  for (size_t i = 0; i < shares.size() && i < 3; ++i) out.push_back(shares[i].second);
  if (!whole.empty()) out.push_back(whole[0].second);
  return out;
}

absl::StatusOr<ProtocolCeiling> FgdCeiling(const core::Cluster& cluster, const PodTrace& trace,
                                           const FgdSequence& sequence) {
  std::vector<ReferenceAsk> references = CeilingReferences(trace);
  // With no one-GPU ask to refer to, the plain bound: the GPUs cannot hold more than arrives.
  if (references.empty()) references.push_back(ReferenceAsk{kGpuMilli, 0, 0});
  std::optional<ProtocolCeiling> best;
  int lps = 0, not_optimal = 0;
  for (const ReferenceAsk& r : references) {
    absl::StatusOr<ProtocolCeiling> c = FgdCeilingFor(cluster, trace, sequence, r);
    if (!c.ok()) return c.status();
    lps += c->lps;
    not_optimal += c->lps_not_optimal;
    if (!best || c->min_unallocated_gpus > best->min_unallocated_gpus) best = *c;
  }
  best->lps = lps;
  best->lps_not_optimal = not_optimal;
  return *best;
}

}  // namespace tessera::sim
