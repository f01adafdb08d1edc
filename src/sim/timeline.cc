#include "sim/timeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/policy/shape_index.h"
#include "sim/fgd_replay.h"
#include "sim/placer.h"

namespace tessera::sim {
namespace {

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

struct Event {
  int64_t time;
  int kind;  // 0 = departure (handled first at equal times), 1 = arrival
  int32_t pod;
  bool operator>(const Event& o) const {
    return std::tie(time, kind, pod) > std::tie(o.time, o.kind, o.pod);
  }
};

}  // namespace

absl::StatusOr<TimelineResult> RunTimeline(const core::Cluster& cluster, const PodTrace& trace,
                                           const TimelineOptions& options) {
  auto wall = std::chrono::steady_clock::now();
  if (!trace.has_times) {
    return absl::InvalidArgumentError(
        StrCat(trace.source,
               ": the timeline protocol needs creation_time and deletion_time "
               "columns (this file has only the first five; use --protocol fgd)"));
  }
  core::PolicyOptions policy_options;
  policy_options.seed = ReplayPolicySeed(options.seed);
  policy_options.typical_tasks = options.typical_tasks;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<core::Policy> policy,
                           core::CreatePolicy(options.policy, policy_options));
  TimelineResult r;
  r.policy = options.policy;
  r.seed = options.seed;
  r.capacity_milli = int64_t{cluster.total_gpus()} * 1000;
  if (r.capacity_milli == 0) {
    return absl::InvalidArgumentError("the cluster has no GPUs: allocation ratios need GPUs");
  }
  const size_t n = trace.pods.size();
  std::vector<core::PodRequest> requests;
  requests.reserve(n);
  for (const TracePod& p : trace.pods) requests.push_back(ToPodRequest(p, p.name));

  auto run_time = [&](const TracePod& p) -> std::optional<int64_t> {
    if (!p.deletion_time) return std::nullopt;
    const int64_t from = p.scheduled_time.value_or(*p.creation_time);
    return std::max<int64_t>(0, *p.deletion_time - std::min(from, *p.deletion_time));
  };
  int64_t first = INT64_MAX, last_arrival = INT64_MIN;
  for (size_t i = 0; i < n; ++i) {
    const TracePod& p = trace.pods[i];
    if (!p.creation_time) {
      return absl::InvalidArgumentError(StrCat(trace.source, ":", p.line,
                                               ": column creation_time: empty (the timeline "
                                               "protocol needs every pod's creation time)"));
    }
    first = std::min(first, *p.creation_time);
    last_arrival = std::max(last_arrival, *p.creation_time);
  }
  // Offered load at a speedup: demand running (if all fit) averaged over the arrival window.
  auto offered = [&](double speedup) {
    const double window = std::max(1.0, static_cast<double>(last_arrival - first) / speedup);
    double demand = 0;
    for (const TracePod& p : trace.pods) {
      const double at = static_cast<double>(*p.creation_time - first) / speedup;
      const double run = static_cast<double>(run_time(p).value_or(INT64_MAX / 4));
      demand +=
          static_cast<double>(p.total_gpu_milli()) * std::max(0.0, std::min(at + run, window) - at);
    }
    return 100.0 * demand / (window * static_cast<double>(r.capacity_milli));
  };
  r.speedup = options.speedup;
  if (!(r.speedup > 0)) {
    return absl::InvalidArgumentError(StrCat("speedup must be positive, not ", r.speedup));
  }
  r.offered_load = offered(r.speedup);
  auto arrival = [&](const TracePod& p) {
    return first + static_cast<int64_t>(
                       std::llround(static_cast<double>(*p.creation_time - first) / r.speedup));
  };
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  int64_t last = first;
  for (size_t i = 0; i < n; ++i) {
    const TracePod& p = trace.pods[i];
    const int64_t at = arrival(p);
    events.push(Event{at, 1, static_cast<int32_t>(i)});
    last = std::max(last, at + run_time(p).value_or(0));
  }
  r.pods = static_cast<int64_t>(n);
  const int64_t window_end = std::max(
      first + 1, first + static_cast<int64_t>(
                             std::llround(static_cast<double>(last_arrival - first) / r.speedup)));
  r.span_hours = static_cast<double>(window_end - first) / 3600.0;

  Placer placer(cluster, std::move(policy));
  std::vector<core::Placement> placed(n);
  std::vector<int64_t> start(n, -1);
  std::vector<double> pending;
  // Waiting pods by request shape, each in arrival order; shapes in the order they first waited.
  struct Waiting {
    std::deque<int32_t> pods;
    bool blocked = false;  // tried since the last departure and did not fit
  };
  absl::flat_hash_map<core::RequestShape, size_t> shape_ids;
  std::vector<Waiting> waiting;
  int64_t waiting_count = 0;

  // Allocation over time: integral for the mean, samples for the curve.
  int64_t now = first;
  double integral = 0;
  int64_t allocated = 0;
  std::vector<std::pair<double, double>> samples;
  auto advance = [&](int64_t t) {
    if (t > now) {
      const int64_t to = std::min(t, window_end);
      if (to > now) integral += static_cast<double>(allocated) * static_cast<double>(to - now);
      now = t;
    }
  };
  auto record = [&]() {
    allocated = placer.state().allocated_compute_milli();
    const double pct =
        100.0 * static_cast<double>(allocated) / static_cast<double>(r.capacity_milli);
    r.peak_allocation = std::max(r.peak_allocation, pct);
    samples.emplace_back(static_cast<double>(now - first) / 3600.0, pct);
  };
  auto try_start = [&](int32_t i) {
    if (placer.Place(requests[i], &placed[i]) != core::Outcome::kPlaced) return false;
    start[i] = now;
    ++r.started;
    const double wait = static_cast<double>(now - arrival(trace.pods[i]));
    if (wait > 0) ++r.waited;
    pending.push_back(wait);
    if (std::optional<int64_t> d = run_time(trace.pods[i])) {
      events.push(Event{now + *d, 0, i});
    }
    return true;
  };
  auto retry_waiting = [&]() {
    for (Waiting& w : waiting) {
      w.blocked = false;
      while (!w.pods.empty()) {
        if (!try_start(w.pods.front())) {
          w.blocked = true;
          break;
        }
        w.pods.pop_front();
        --waiting_count;
      }
    }
  };

  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    advance(e.time);
    if (e.kind == 0) {
      placer.Release(placed[e.pod]);
      // Everything that departs at this moment leaves before anyone is retried.
      while (!events.empty() && events.top().time == e.time && events.top().kind == 0) {
        const Event d = events.top();
        events.pop();
        placer.Release(placed[d.pod]);
      }
      if (waiting_count > 0) retry_waiting();
      record();
      continue;
    }
    core::Query query(placer.state(), placer.policy().Effective(requests[e.pod]));
    const core::RequestShape shape = core::RequestShape::Of(query);
    auto it = shape_ids.find(shape);
    // Pods of a shape already waiting (and blocked) queue behind it without a try.
    if (it != shape_ids.end() && waiting[it->second].blocked) {
      waiting[it->second].pods.push_back(e.pod);
      ++waiting_count;
      continue;
    }
    if (try_start(e.pod)) {
      record();
      continue;
    }
    if (!placer.NeverFitsReason(requests[e.pod]).empty()) {
      ++r.never_fits;
      continue;
    }
    if (it == shape_ids.end()) {
      it = shape_ids.emplace(shape, waiting.size()).first;
      waiting.emplace_back();
    }
    waiting[it->second].pods.push_back(e.pod);
    waiting[it->second].blocked = true;
    ++waiting_count;
  }
  advance(std::max(last, window_end));
  r.still_waiting = waiting_count;
  const double span = static_cast<double>(window_end - first);
  r.mean_allocation = 100.0 * integral / span / static_cast<double>(r.capacity_milli);
  std::sort(pending.begin(), pending.end());
  r.pending_p50 = Percentile(pending, 0.50);
  r.pending_p90 = Percentile(pending, 0.90);
  r.pending_p99 = Percentile(pending, 0.99);
  r.pending_max = pending.empty() ? 0 : pending.back();
  double sum = 0;
  for (double w : pending) sum += w;
  r.pending_mean = pending.empty() ? 0 : sum / static_cast<double>(pending.size());
  // The curve: the allocation at evenly spaced times (the last sample at or before each).
  const int points = std::max(2, options.curve_points);
  size_t k = 0;
  double current = 0;
  for (int i = 0; i < points; ++i) {
    const double t = r.span_hours * i / (points - 1);
    while (k < samples.size() && samples[k].first <= t) current = samples[k++].second;
    r.curve.emplace_back(t, current);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  return r;
}

TimelineResult MeanOfTimelines(const std::vector<TimelineResult>& runs) {
  TimelineResult m;
  if (runs.empty()) return m;
  m = runs[0];
  const double k = static_cast<double>(runs.size());
  auto mean = [&](auto field) {
    double s = 0;
    for (const TimelineResult& r : runs) s += static_cast<double>(r.*field);
    return s / k;
  };
  m.started = static_cast<int64_t>(std::llround(mean(&TimelineResult::started)));
  m.never_fits = static_cast<int64_t>(std::llround(mean(&TimelineResult::never_fits)));
  m.still_waiting = static_cast<int64_t>(std::llround(mean(&TimelineResult::still_waiting)));
  m.waited = static_cast<int64_t>(std::llround(mean(&TimelineResult::waited)));
  m.pending_p50 = mean(&TimelineResult::pending_p50);
  m.pending_p90 = mean(&TimelineResult::pending_p90);
  m.pending_p99 = mean(&TimelineResult::pending_p99);
  m.pending_max = mean(&TimelineResult::pending_max);
  m.pending_mean = mean(&TimelineResult::pending_mean);
  m.mean_allocation = mean(&TimelineResult::mean_allocation);
  m.peak_allocation = mean(&TimelineResult::peak_allocation);
  m.seconds = mean(&TimelineResult::seconds);
  for (size_t i = 0; i < m.curve.size(); ++i) {
    double s = 0;
    for (const TimelineResult& r : runs) s += i < r.curve.size() ? r.curve[i].second : 0;
    m.curve[i].second = s / k;
  }
  return m;
}

}  // namespace tessera::sim
