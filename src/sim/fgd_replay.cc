#include "sim/fgd_replay.h"

#include <algorithm>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <numeric>

#include "common/random.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/policy/fragmentation.h"
#include "sim/placer.h"

namespace tessera::sim {

double RoundLikePython(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  // nearbyint rounds half to even in the default rounding mode, as Python's round does.
  return std::nearbyint(x * scale) / scale;
}

FgdSequence BuildFgdSequence(const PodTrace& trace, int64_t capacity_milli, double target_ratio,
                             uint64_t seed) {
  const int32_t n = static_cast<int32_t>(trace.pods.size());
  std::vector<int32_t> by_name(n);
  std::iota(by_name.begin(), by_name.end(), 0);
  std::sort(by_name.begin(), by_name.end(),
            [&](int32_t a, int32_t b) { return trace.pods[a].name < trace.pods[b].name; });
  Random rng(seed);
  FgdSequence seq;
  seq.pods = by_name;
  // Go's rand.Shuffle: for i from n-1 down to 1, swap i with a uniform j in [0, i].
  for (int32_t i = n - 1; i > 0; --i) {
    int32_t j = static_cast<int32_t>(rng.Uniform(static_cast<uint64_t>(i) + 1));
    std::swap(seq.pods[i], seq.pods[j]);
  }
  seq.clone_number.assign(seq.pods.size(), -1);
  int64_t total = 0;
  for (const TracePod& p : trace.pods) total += p.total_gpu_milli();
  const double target = target_ratio * static_cast<double>(capacity_milli);
  if (target_ratio > 0 && static_cast<double>(total) > target) {
    while (static_cast<double>(total) > target && !seq.pods.empty()) {
      size_t k = rng.Uniform(seq.pods.size());
      total -= trace.pods[seq.pods[k]].total_gpu_milli();
      seq.pods.erase(seq.pods.begin() + static_cast<std::ptrdiff_t>(k));
      seq.clone_number.erase(seq.clone_number.begin() + static_cast<std::ptrdiff_t>(k));
    }
  } else if (target_ratio > 0 && static_cast<double>(total) < target && n > 0) {
    for (int32_t i = 0;; ++i) {
      const TracePod& p = trace.pods[by_name[rng.Uniform(static_cast<uint64_t>(n))]];
      if (static_cast<double>(total + p.gpu_milli) > target) break;
      total += p.total_gpu_milli();
      seq.pods.push_back(static_cast<int32_t>(&p - trace.pods.data()));
      seq.clone_number.push_back(i);
      // A trace of CPU-only pods never reaches a GPU target: stop at ten times its size.
      if (i > 10 * n + 1000 && total == 0) break;
    }
  }
  seq.demand_milli = total;
  return seq;
}

uint64_t ReplayPolicySeed(uint64_t seed) {
  return seed * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL;
}

std::vector<core::TypicalTask> TraceTypicalTasks(const PodTrace& trace,
                                                 const core::Cluster& cluster) {
  std::vector<core::PodRequest> requests;
  requests.reserve(trace.pods.size());
  for (const TracePod& p : trace.pods) requests.push_back(ToPodRequest(p, std::string()));
  int64_t reference = 0;
  for (const core::NodeSpec& node : cluster.nodes()) {
    for (const core::GpuSpec& g : node.gpus) reference = std::max(reference, g.memory_mib);
  }
  return core::TypicalTasksOf(requests, 0.95, reference);
}

namespace {

// The paper's discretisation of (arrived, allocated) steps into whole percents of arrived demand.
std::vector<std::pair<int, double>> Discretise(const std::vector<int64_t>& arrived,
                                               const std::vector<int64_t>& used,
                                               int64_t capacity_milli, int max_percent) {
  const double gpus = static_cast<double>(capacity_milli) / 1000.0;
  // Sum and count of the rounded allocation ratios per rounded arrived percent.
  const int buckets = max_percent + 2;
  std::vector<double> sum(buckets + 1, 0.0);
  std::vector<int64_t> count(buckets + 1, 0);
  for (size_t i = 0; i < arrived.size(); ++i) {
    const double x = RoundLikePython(static_cast<double>(arrived[i]) / gpus / 10.0, 0);
    if (x < 0 || x > buckets) continue;
    const int b = static_cast<int>(x);
    sum[b] += RoundLikePython(static_cast<double>(used[i]) / gpus / 10.0, 2);
    ++count[b];
  }
  std::vector<std::pair<int, double>> curve;
  for (int x = 0; x <= max_percent; ++x) {
    double s = sum[x];
    int64_t c = count[x];
    if (c == 0) {
      for (int b = std::max(0, x - 1); b <= x + 1; ++b) {
        s += sum[b];
        c += count[b];
      }
    }
    if (c > 0) curve.emplace_back(x, RoundLikePython(s / static_cast<double>(c), 2));
  }
  return curve;
}

}  // namespace

absl::StatusOr<FgdRunResult> RunFgdProtocol(const core::Cluster& cluster, const PodTrace& trace,
                                            const FgdRunOptions& options) {
  auto start = std::chrono::steady_clock::now();
  core::PolicyOptions policy_options;
  policy_options.seed = ReplayPolicySeed(options.seed);
  policy_options.typical_tasks = options.typical_tasks;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<core::Policy> policy,
                           core::CreatePolicy(options.policy, policy_options));
  FgdRunResult r;
  r.policy = options.policy;
  r.seed = options.seed;
  r.capacity_milli = int64_t{cluster.total_gpus()} * 1000;
  if (r.capacity_milli == 0) {
    return absl::InvalidArgumentError(
        "the cluster has no GPUs: the FGD protocol needs GPU capacity");
  }
  const FgdSequence seq =
      BuildFgdSequence(trace, r.capacity_milli, options.target_ratio, options.seed);
  Placer placer(cluster, std::move(policy));
  std::vector<core::PodRequest> requests;
  requests.reserve(trace.pods.size());
  for (const TracePod& p : trace.pods) requests.push_back(ToPodRequest(p, p.name));
  core::Placement placement;
  std::vector<int64_t> arrived{0}, used{0};
  arrived.reserve(seq.pods.size() + 1);
  used.reserve(seq.pods.size() + 1);
  for (size_t i = 0; i < seq.pods.size(); ++i) {
    const TracePod& p = trace.pods[seq.pods[i]];
    // Pod names do not matter to the placement; the trace's request is reused as is.
    const core::PodRequest& request = requests[seq.pods[i]];
    r.arrived_milli += p.total_gpu_milli();
    core::Outcome outcome = placer.Place(request, &placement);
    if (options.on_pod) options.on_pod(p, outcome, placement);
    if (outcome != core::Outcome::kPlaced) {
      ++r.failed_pods;
      r.failed_gpu_milli += p.total_gpu_milli();
      if (outcome == core::Outcome::kNeverFits) ++r.never_fits;
    }
    arrived.push_back(r.arrived_milli);
    used.push_back(placer.state().allocated_compute_milli());
  }
  r.pods = static_cast<int64_t>(seq.pods.size());
  r.allocated_milli = placer.state().allocated_compute_milli();
  if (options.on_end) options.on_end(placer.state());
  const int max_percent = static_cast<int>(std::ceil(options.target_ratio * 100.0));
  r.curve = Discretise(arrived, used, r.capacity_milli, max_percent);
  r.final_allocation = r.curve.empty() ? 0.0 : r.curve.back().second;
  if (!options.typical_tasks.empty()) {
    core::FragmentationMeasure measure(cluster, options.typical_tasks);
    core::FragmentationMeasure::Amounts a = measure.ClusterAmounts(placer.state());
    const double idle = core::FragmentationMeasure::Idle(a);
    const double fragment = core::FragmentationMeasure::Fragment(a);
    r.fragment_gpus = fragment / 1000.0;
    r.fragmentation_rate = idle > 0 ? 100.0 * fragment / idle : 0.0;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

FgdRunResult MeanOfRuns(const std::vector<FgdRunResult>& runs) {
  FgdRunResult m;
  if (runs.empty()) return m;
  m.policy = runs[0].policy;
  const double k = static_cast<double>(runs.size());
  std::vector<std::pair<int, double>> curve;
  // Curve points present in every run (they all span the same arrived range).
  for (const auto& [x, y] : runs[0].curve) {
    double sum = 0;
    bool everywhere = true;
    for (const FgdRunResult& r : runs) {
      auto it = std::find_if(r.curve.begin(), r.curve.end(),
                             [x = x](const auto& p) { return p.first == x; });
      if (it == r.curve.end()) {
        everywhere = false;
        break;
      }
      sum += it->second;
    }
    if (everywhere) m.curve.emplace_back(x, sum / k);
  }
  for (const FgdRunResult& r : runs) {
    m.final_allocation += r.final_allocation / k;
    m.fragmentation_rate += r.fragmentation_rate / k;
    m.fragment_gpus += r.fragment_gpus / k;
    m.pods += r.pods;
    m.failed_pods += r.failed_pods;
    m.never_fits += r.never_fits;
    m.failed_gpu_milli += r.failed_gpu_milli;
    m.arrived_milli += r.arrived_milli;
    m.allocated_milli += r.allocated_milli;
    m.seconds += r.seconds / k;
  }
  const int64_t n = static_cast<int64_t>(runs.size());
  m.pods /= n;
  m.failed_pods /= n;
  m.never_fits /= n;
  m.failed_gpu_milli /= n;
  m.arrived_milli /= n;
  m.allocated_milli /= n;
  m.capacity_milli = runs[0].capacity_milli;
  return m;
}

}  // namespace tessera::sim
