#include "sim/timeline_load.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/random.h"
#include "common/strings.h"

namespace tessera::sim {

absl::StatusOr<TimelineClock> TimelineClock::Create(const PodTrace& trace, double speedup) {
  if (!trace.has_times) {
    return absl::InvalidArgumentError(
        StrCat(trace.source,
               ": the timeline protocol needs creation_time and deletion_time "
               "columns (this file has only the first five; use --protocol fgd)"));
  }
  if (!(speedup > 0) || !std::isfinite(speedup)) {
    return absl::InvalidArgumentError(StrCat("speedup must be positive, not ", speedup));
  }
  TimelineClock clock;
  clock.speedup_ = speedup;
  int64_t first = std::numeric_limits<int64_t>::max();
  int64_t last = std::numeric_limits<int64_t>::min();
  for (const TracePod& p : trace.pods) {
    if (!p.creation_time) {
      return absl::InvalidArgumentError(StrCat(trace.source, ":", p.line,
                                               ": column creation_time: empty (the timeline "
                                               "protocol needs every pod's creation time)"));
    }
    first = std::min(first, *p.creation_time);
    last = std::max(last, *p.creation_time);
  }
  if (trace.pods.empty()) first = last = 0;
  clock.first_ = first;
  clock.window_end_ = std::max(
      first + 1,
      first + static_cast<int64_t>(std::llround(static_cast<double>(last - first) / speedup)));
  return clock;
}

int64_t TimelineClock::Arrival(const TracePod& pod) const {
  return first_ + static_cast<int64_t>(std::llround(
                      static_cast<double>(pod.creation_time.value_or(first_) - first_) / speedup_));
}

std::optional<int64_t> TimelineClock::RunTime(const TracePod& pod) {
  if (!pod.deletion_time) return std::nullopt;
  const int64_t from = pod.scheduled_time.value_or(pod.creation_time.value_or(*pod.deletion_time));
  return std::max<int64_t>(0, *pod.deletion_time - std::min(from, *pod.deletion_time));
}

namespace {

struct Interval {
  int64_t from;
  int64_t to;  // INT64_MAX: runs to the end
  int64_t milli;
};

std::vector<Interval> Intervals(const PodTrace& trace, const TimelineClock& clock,
                                const std::vector<bool>* counts) {
  std::vector<Interval> out(trace.pods.size());
  for (size_t i = 0; i < trace.pods.size(); ++i) {
    const TracePod& p = trace.pods[i];
    const int64_t at = clock.Arrival(p);
    const std::optional<int64_t> run = TimelineClock::RunTime(p);
    const bool counted = counts == nullptr || (*counts)[i];
    out[i] = Interval{at, run ? at + *run : std::numeric_limits<int64_t>::max(),
                      counted ? p.total_gpu_milli() : 0};
  }
  return out;
}

DemandSteps Steps(const std::vector<Interval>& intervals, const std::vector<int32_t>& pods) {
  std::vector<std::pair<int64_t, int64_t>> events;
  events.reserve(2 * pods.size());
  for (int32_t i : pods) {
    const Interval& v = intervals[i];
    if (v.milli == 0 || v.to <= v.from) continue;
    events.emplace_back(v.from, v.milli);
    if (v.to != std::numeric_limits<int64_t>::max()) events.emplace_back(v.to, -v.milli);
  }
  std::sort(events.begin(), events.end());
  DemandSteps steps;
  int64_t level = 0;
  for (size_t k = 0; k < events.size();) {
    const int64_t t = events[k].first;
    for (; k < events.size() && events[k].first == t; ++k) level += events[k].second;
    steps.emplace_back(t, level);
  }
  return steps;
}

}  // namespace

DemandSteps OfferedDemand(const PodTrace& trace, const TimelineClock& clock,
                          const std::vector<int32_t>& pods, const std::vector<bool>* counts) {
  return Steps(Intervals(trace, clock, counts), pods);
}

int64_t PeakOf(const DemandSteps& demand) {
  int64_t peak = 0;
  for (const auto& [t, d] : demand) peak = std::max(peak, d);
  return peak;
}

double ExcessOver(const DemandSteps& demand, int64_t capacity_milli, int64_t until) {
  double sum = 0;
  for (size_t k = 0; k < demand.size(); ++k) {
    const int64_t from = demand[k].first;
    const int64_t to = k + 1 < demand.size() ? std::min(demand[k + 1].first, until) : until;
    if (to <= from || demand[k].second <= capacity_milli) continue;
    sum += static_cast<double>(demand[k].second - capacity_milli) * static_cast<double>(to - from);
  }
  return sum;
}

double WaitingFloor(const PodTrace& trace, const TimelineClock& clock,
                    const std::vector<int32_t>& pods, const std::vector<bool>* counts,
                    const core::Cluster& cluster, int64_t until) {
  const std::vector<Interval> intervals = Intervals(trace, clock, counts);
  const size_t models = cluster.models().size();
  // GPUs per model (MIG-enabled GPUs take MIG asks only: not counted).
  std::vector<int64_t> gpus(models, 0);
  for (int n = 0; n < cluster.node_count(); ++n) {
    const core::NodeId id(n);
    const std::vector<uint8_t>& ids = cluster.gpu_models(id);
    for (size_t g = 0; g < ids.size(); ++g) {
      if (!(cluster.mig_mask(id) & (uint64_t{1} << g))) ++gpus[ids[g]];
    }
  }
  // The pods' model lists, as sets of the cluster's models.
  std::vector<core::ModelSet> groups;
  std::vector<int32_t> group_of(trace.pods.size(), -1);
  core::ModelSet everything;
  for (size_t m = 0; m < models; ++m) everything.set(m);
  for (int32_t i : pods) {
    if (group_of[i] >= 0) continue;
    const core::ModelSet set = cluster.ResolveModels(trace.pods[i].gpu_models) & everything;
    auto it = std::find(groups.begin(), groups.end(), set);
    group_of[i] = static_cast<int32_t>(it - groups.begin());
    if (it == groups.end()) groups.push_back(set);
  }
  std::vector<core::ModelSet> sets;
  if (models <= 12) {
    for (uint32_t bits = 1; bits < (uint32_t{1} << models); ++bits) {
      core::ModelSet s;
      for (size_t m = 0; m < models; ++m) {
        if (bits & (uint32_t{1} << m)) s.set(m);
      }
      sets.push_back(s);
    }
  } else {
    sets = groups;
    sets.push_back(everything);
  }
  // Per set: its capacity and the groups inside it.
  std::vector<int64_t> capacity(sets.size(), 0);
  std::vector<std::vector<int32_t>> inside(sets.size());
  for (size_t k = 0; k < sets.size(); ++k) {
    for (size_t m = 0; m < models; ++m) {
      if (sets[k].test(m)) capacity[k] += gpus[m] * 1000;
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      if ((groups[g] & ~sets[k]).none()) inside[k].push_back(static_cast<int32_t>(g));
    }
  }
  struct Change {
    int64_t time;
    int64_t milli;
    int32_t group;
  };
  std::vector<Change> changes;
  for (int32_t i : pods) {
    const Interval& v = intervals[i];
    if (v.milli == 0 || v.to <= v.from) continue;
    changes.push_back({v.from, v.milli, group_of[i]});
    if (v.to != std::numeric_limits<int64_t>::max())
      changes.push_back({v.to, -v.milli, group_of[i]});
  }
  std::sort(changes.begin(), changes.end(),
            [](const Change& a, const Change& b) { return a.time < b.time; });
  std::vector<int64_t> demand(groups.size(), 0);
  double sum = 0;
  for (size_t k = 0; k < changes.size();) {
    const int64_t t = changes[k].time;
    if (t >= until) break;
    for (; k < changes.size() && changes[k].time == t; ++k)
      demand[changes[k].group] += changes[k].milli;
    const int64_t next = k < changes.size() ? std::min(changes[k].time, until) : until;
    int64_t floor = 0;
    for (size_t s = 0; s < sets.size(); ++s) {
      int64_t d = -capacity[s];
      for (int32_t g : inside[s]) d += demand[g];
      floor = std::max(floor, d);
    }
    sum += static_cast<double>(floor) * static_cast<double>(next - t);
  }
  return sum;
}

TimelineLoad WholeTrace(const PodTrace& trace, const TimelineClock& clock,
                        const std::vector<bool>* counts) {
  TimelineLoad load;
  load.pods.resize(trace.pods.size());
  std::iota(load.pods.begin(), load.pods.end(), 0);
  load.peak_milli = PeakOf(OfferedDemand(trace, clock, load.pods, counts));
  return load;
}

absl::StatusOr<TimelineLoad> TuneTimelineLoad(const PodTrace& trace, const TimelineClock& clock,
                                              int64_t capacity_milli, double level_percent,
                                              uint64_t seed, const std::vector<bool>* counts) {
  if (!(level_percent > 0) || !std::isfinite(level_percent)) {
    return absl::InvalidArgumentError(
        StrCat("the load level must be a positive percentage of the GPUs, not ", level_percent));
  }
  const std::vector<Interval> intervals = Intervals(trace, clock, counts);
  const int32_t n = static_cast<int32_t>(trace.pods.size());
  const double target = level_percent / 100.0 * static_cast<double>(capacity_milli);
  std::vector<int32_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  const int64_t peak = PeakOf(Steps(intervals, all));
  Random rng(seed);
  TimelineLoad load;
  if (static_cast<double>(peak) > target) {
    // Removals in a seeded order; the peak only falls as more go: the fewest that bring it down.
    std::vector<int32_t> order = all;
    for (int32_t i = n - 1; i > 0; --i) {
      std::swap(order[i], order[static_cast<int32_t>(rng.Uniform(static_cast<uint64_t>(i) + 1))]);
    }
    auto without = [&](int32_t k) {
      std::vector<bool> gone(n, false);
      for (int32_t j = 0; j < k; ++j) gone[order[j]] = true;
      std::vector<int32_t> kept;
      for (int32_t i = 0; i < n; ++i) {
        if (!gone[i]) kept.push_back(i);
      }
      return kept;
    };
    int32_t lo = 0, hi = n;  // peak(lo) > target >= peak(hi)
    while (hi - lo > 1) {
      const int32_t mid = lo + (hi - lo) / 2;
      (static_cast<double>(PeakOf(Steps(intervals, without(mid)))) > target ? lo : hi) = mid;
    }
    load.pods = without(hi);
    load.removed = hi;
  } else {
    // Clones drawn with replacement; the peak only grows as more come: the fewest that reach it.
    const int64_t limit = 100 * int64_t{n} + 1000;
    std::vector<int32_t> draws;
    auto with = [&](int64_t k) {
      while (static_cast<int64_t>(draws.size()) < k) {
        draws.push_back(static_cast<int32_t>(rng.Uniform(static_cast<uint64_t>(n))));
      }
      std::vector<int32_t> pods = all;
      pods.insert(pods.end(), draws.begin(), draws.begin() + k);
      return pods;
    };
    auto reaches = [&](int64_t k) {
      return static_cast<double>(PeakOf(Steps(intervals, with(k)))) >= target;
    };
    int64_t hi = 0;
    if (!reaches(0)) {
      hi = 1;
      int64_t tried = 0;  // the most clones tried
      while (n > 0 && hi <= limit && !reaches(hi)) {
        tried = hi;
        hi *= 2;
      }
      if (n == 0 || hi > limit) {
        const double reached = 100.0 * static_cast<double>(PeakOf(Steps(intervals, with(tried)))) /
                               static_cast<double>(capacity_milli);
        return absl::InvalidArgumentError(StrCat(
            trace.source, ": the offered GPU demand cannot be brought to peak at ", level_percent,
            "% of the GPUs at speedup ", clock.speedup(), ": the trace peaks at ",
            fmt::format("{:.1f}", 100.0 * static_cast<double>(peak) / capacity_milli), "% and ",
            tried, " copies of its pods bring it to ", fmt::format("{:.1f}", reached),
            "%; compress the arrivals more (--speedup, e.g. 50000) or ask for a lower level"));
      }
      int64_t lo = hi / 2;  // !reaches(lo), reaches(hi)
      while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        (reaches(mid) ? hi : lo) = mid;
      }
    }
    load.pods = with(hi);
    load.clones = hi;
  }
  load.peak_milli = PeakOf(Steps(intervals, load.pods));
  return load;
}

}  // namespace tessera::sim
