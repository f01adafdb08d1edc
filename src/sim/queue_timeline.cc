#include "sim/queue_timeline.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <queue>
#include <set>
#include <tuple>

#include "common/status.h"
#include "common/strings.h"
#include "core/engine.h"
#include "core/preemption/planner.h"
#include "core/queues/queue_set.h"
#include "core/queues/resources.h"

namespace tessera::sim {
namespace {

int32_t PriorityOf(const std::string& qos) {
  if (qos == "Guaranteed") return 200;
  if (qos == "LS") return 100;
  if (qos == "Burstable") return 50;
  return 0;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

struct Event {
  int64_t time;
  int kind;  // 0 departure (first at equal times), 1 arrival
  int32_t pod;
  uint32_t gen;  // a departure of an earlier run (the pod was evicted since) is stale
  bool operator>(const Event& o) const {
    return std::tie(time, kind, pod, gen) > std::tie(o.time, o.kind, o.pod, o.gen);
  }
};

}  // namespace

absl::StatusOr<QueueTimelineResult> RunQueueTimeline(const core::Cluster& cluster,
                                                     const PodTrace& trace,
                                                     const QueueTimelineOptions& options) {
  const auto wall = std::chrono::steady_clock::now();
  if (!trace.has_times) {
    return absl::InvalidArgumentError(
        StrCat(trace.source,
               ": queues replay the timeline protocol, which needs creation_time "
               "and deletion_time columns"));
  }
  if (!(options.speedup > 0)) {
    return absl::InvalidArgumentError(StrCat("speedup must be positive, not ", options.speedup));
  }
  if (options.periods < 1) {
    return absl::InvalidArgumentError(
        StrCat("the arrival window needs at least 1 period, not ", options.periods));
  }
  if (options.latency_deserved_percent < 0 || options.latency_deserved_percent > 100) {
    return absl::InvalidArgumentError(
        StrCat("the latency queue's deserved share must be 0..100%, not ",
               options.latency_deserved_percent));
  }
  std::vector<QueueTimelineQueue> defs = options.queues;
  if (defs.empty()) {
    defs = {{"latency", options.latency_deserved_percent, {"LS", "Guaranteed", "Burstable"}},
            {"batch", 100 - options.latency_deserved_percent, {"BE"}}};
  }
  const int nq = static_cast<int>(defs.size());
  std::vector<std::string> names;
  {
    int total = 0;
    for (const QueueTimelineQueue& q : defs) {
      if (q.deserved_percent < 0) {
        return absl::InvalidArgumentError(StrCat("queue ", q.name, ": a negative deserved share"));
      }
      total += q.deserved_percent;
      names.push_back(q.name);
    }
    if (total > 100) {
      return absl::InvalidArgumentError(
          StrCat("the queues deserve ", total, "% of the GPUs together: at most 100%"));
    }
  }
  auto queue_of_qos = [&](const std::string& qos) {
    for (int q = 0; q < nq; ++q) {
      if (std::find(defs[q].qos.begin(), defs[q].qos.end(), qos) != defs[q].qos.end()) return q;
    }
    return -1;
  };
  core::PolicyOptions po;
  po.seed = options.seed;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<core::Policy> policy,
                           core::CreatePolicy(options.policy, po));
  core::Engine engine(cluster, std::move(policy));
  const core::QueueResources capacity = core::CapacityOf(cluster);
  if (capacity[core::kQueueGpu] == 0) {
    return absl::InvalidArgumentError("the cluster has no GPUs: queues share GPUs");
  }
  QueueTimelineResult r;
  r.policy = options.policy;
  r.preempt = options.preempt;
  r.speedup = options.speedup;
  r.capacity_gpus = static_cast<double>(capacity[core::kQueueGpu]) / 1000.0;

  core::QueueSet queues;
  {
    std::vector<core::QueueSpec> specs(nq);
    for (int q = 0; q < nq; ++q) {
      specs[q].name = names[q];
      specs[q].deserved[core::kQueueGpu] =
          capacity[core::kQueueGpu] * defs[q].deserved_percent / 100;
    }
    queues.SetSpecs(specs);
    queues.set_implicit(false);
    queues.SetCapacity(capacity);
    queues.SetHalfLife(std::max<int64_t>(0, options.usage_half_life_s) * 1000);
  }
  r.queues.resize(nq);
  for (int q = 0; q < nq; ++q) {
    r.queues[q].queue = names[q];
    r.queues[q].deserved_gpus = r.capacity_gpus * defs[q].deserved_percent / 100.0;
  }

  const size_t n = trace.pods.size();
  std::vector<core::PodRequest> requests(n);
  std::vector<int> queue_of(n);
  std::vector<core::QueueResources> demand(n), usage(n);
  int64_t first = INT64_MAX, last_arrival = INT64_MIN;
  for (size_t i = 0; i < n; ++i) {
    const TracePod& p = trace.pods[i];
    if (!p.creation_time) {
      return absl::InvalidArgumentError(
          StrCat(trace.source, ":", p.line, ": column creation_time: empty"));
    }
    requests[i] = ToPodRequest(p, StrCat("p", i));
    requests[i].priority = PriorityOf(p.qos);
    queue_of[i] = queue_of_qos(p.qos);
    if (queue_of[i] < 0) {
      return absl::InvalidArgumentError(
          StrCat(trace.source, ":", p.line, ": qos \"", p.qos, "\" goes to no queue"));
    }
    demand[i] = core::DemandOf(requests[i], 32 * 1024);
    first = std::min(first, *p.creation_time);
    last_arrival = std::max(last_arrival, *p.creation_time);
  }
  auto run_time = [&](const TracePod& p) -> std::optional<int64_t> {
    if (!p.deletion_time) return std::nullopt;
    const int64_t from = p.scheduled_time.value_or(*p.creation_time);
    return std::max<int64_t>(0, *p.deletion_time - std::min(from, *p.deletion_time));
  };
  auto arrival = [&](const TracePod& p) {
    return first + static_cast<int64_t>(std::llround(static_cast<double>(*p.creation_time - first) /
                                                     options.speedup));
  };
  const int64_t window_end = std::max(
      first + 1, first + static_cast<int64_t>(std::llround(
                             static_cast<double>(last_arrival - first) / options.speedup)));
  r.span_hours = static_cast<double>(window_end - first) / 3600.0;

  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  for (size_t i = 0; i < n; ++i) {
    events.push(Event{arrival(trace.pods[i]), 1, static_cast<int32_t>(i), 0});
  }
  // Waiting pods per queue: highest priority first, then when they began to wait.
  std::vector<std::set<std::tuple<int32_t, int64_t, int32_t>>> waiting(nq);
  std::vector<int64_t> wait_from(n, 0);
  std::vector<uint32_t> gen(n, 0);
  std::vector<int32_t> running;  // pods holding GPUs (or CPU), any order
  std::vector<int32_t> running_pos(n, -1);
  std::vector<bool> blocked(nq, false);
  std::vector<std::vector<double>> pending(nq);
  std::vector<core::QueueResources> allocated(nq);
  std::vector<core::QueueResources> pending_demand(nq);

  // Time-weighted figures over the arrival window.
  int64_t now = first;
  std::vector<double> alloc_integral(nq, 0), fair_integral(nq, 0);
  std::vector<double> fair(nq, 0);
  std::vector<bool> wants(nq, false);
  double jain = 1, jain_integral = 0, contended = 0, total_integral = 0;
  bool is_contended = false;
  // [from, to) (seconds since the first arrival) split over equal buckets of `length`, the
  // last open-ended: fn(bucket, part).
  auto split = [](double from, double to, double length, int buckets, auto fn) {
    while (from < to) {
      const int k = std::min(buckets - 1, static_cast<int>(from / length));
      const double edge = k == buckets - 1 ? to : std::min(to, (k + 1) * length);
      if (edge <= from) break;
      fn(k, edge - from);
      from = edge;
    }
  };
  // Per period: the same integrals over its part of the window.
  const int periods = options.periods;
  const double period_length = static_cast<double>(window_end - first) / periods;
  std::vector<std::vector<double>> period_alloc(periods, std::vector<double>(nq, 0));
  std::vector<std::vector<double>> period_fair(periods, std::vector<double>(nq, 0));
  std::vector<std::vector<std::vector<double>>> period_pending(
      periods, std::vector<std::vector<double>>(nq));
  // Sliding windows of Jain's index: quarter-window buckets of the same integrals, and whether
  // each queue wanted GPUs at some time in the bucket.
  const double bucket_length = static_cast<double>(options.jain_window_s) / 4;
  const int buckets =
      options.jain_window_s > 0
          ? std::max(1, static_cast<int>(
                            std::ceil(static_cast<double>(window_end - first) / bucket_length)))
          : 0;
  std::vector<std::vector<double>> bucket_alloc(buckets, std::vector<double>(nq, 0));
  std::vector<std::vector<double>> bucket_fair(buckets, std::vector<double>(nq, 0));
  std::vector<std::vector<char>> bucket_wants(buckets, std::vector<char>(nq, 0));
  auto advance = [&](int64_t t) {
    if (t <= now) return;
    const int64_t to = std::min(t, window_end);
    if (to > now) {
      const double dt = static_cast<double>(to - now);
      for (int q = 0; q < nq; ++q) {
        alloc_integral[q] += static_cast<double>(allocated[q][core::kQueueGpu]) * dt;
        fair_integral[q] += fair[q] * dt;
        total_integral += static_cast<double>(allocated[q][core::kQueueGpu]) * dt;
      }
      const double from_s = static_cast<double>(now - first),
                   to_s = static_cast<double>(to - first);
      split(from_s, to_s, period_length, periods, [&](int k, double part) {
        for (int q = 0; q < nq; ++q) {
          period_alloc[k][q] += static_cast<double>(allocated[q][core::kQueueGpu]) * part;
          period_fair[k][q] += fair[q] * part;
        }
      });
      if (buckets > 0) {
        split(from_s, to_s, bucket_length, buckets, [&](int k, double part) {
          for (int q = 0; q < nq; ++q) {
            bucket_alloc[k][q] += static_cast<double>(allocated[q][core::kQueueGpu]) * part;
            bucket_fair[k][q] += fair[q] * part;
            bucket_wants[k][q] |= wants[q] ? 1 : 0;
          }
        });
      }
      if (is_contended) {
        jain_integral += jain * dt;
        contended += dt;
      }
    }
    now = t;
    queues.AdvanceTo(now * 1000);  // what each queue held until now counts in its usage
  };
  auto record = [&]() {
    double sum = 0, squares = 0;
    int wanting = 0;
    for (int q = 0; q < nq; ++q) {
      fair[q] = static_cast<double>(queues.FairShare(names[q])[core::kQueueGpu]);
      wants[q] = allocated[q][core::kQueueGpu] + pending_demand[q][core::kQueueGpu] > 0;
      if (!wants[q] || fair[q] <= 0) continue;
      const double x = static_cast<double>(allocated[q][core::kQueueGpu]) / fair[q];
      sum += x;
      squares += x * x;
      ++wanting;
    }
    is_contended = wanting >= 2;
    jain = squares > 0 ? sum * sum / (wanting * squares) : 1.0;
  };

  auto enqueue = [&](int32_t i) {
    const int q = queue_of[i];
    wait_from[i] = now;
    waiting[q].insert({-requests[i].priority, now, i});
    queues.AddPending(names[q], demand[i], 1);
    pending_demand[q] += demand[i];
    blocked[q] = false;
  };
  auto begin = [&](int32_t i, const core::Placement& p) {
    const int q = queue_of[i];
    waiting[q].erase({-requests[i].priority, wait_from[i], i});
    queues.SubPending(names[q], demand[i], 1);
    pending_demand[q] -= demand[i];
    usage[i] = core::UsageOf(cluster, p);
    queues.AddAllocated(names[q], usage[i]);
    allocated[q] += usage[i];
    running_pos[i] = static_cast<int32_t>(running.size());
    running.push_back(i);
    ++r.queues[q].started;
    pending[q].push_back(static_cast<double>(now - wait_from[i]));
    const int k =
        std::clamp(static_cast<int>(static_cast<double>(wait_from[i] - first) / period_length), 0,
                   periods - 1);
    period_pending[k][q].push_back(static_cast<double>(now - wait_from[i]));
    if (std::optional<int64_t> d = run_time(trace.pods[i])) {
      events.push(Event{now + *d, 0, i, gen[i]});
    }
  };
  auto end = [&](int32_t i) {
    const int q = queue_of[i];
    TESSERA_CHECK(engine.Release(requests[i].name).ok());
    queues.SubAllocated(names[q], usage[i]);
    allocated[q] -= usage[i];
    const int32_t pos = running_pos[i];
    running[pos] = running.back();
    running_pos[running[pos]] = pos;
    running.pop_back();
    running_pos[i] = -1;
  };

  queues.AdvanceTo(first * 1000);  // the usage's clock starts with the replay's
  core::PreemptionPlanner planner(engine, queues);
  std::vector<core::RunningPod> candidates;
  auto serve = [&]() {
    while (true) {
      int32_t top = INT32_MIN;
      for (int q = 0; q < nq; ++q) {
        if (!blocked[q] && !waiting[q].empty())
          top = std::max(top, -std::get<0>(*waiting[q].begin()));
      }
      if (top == INT32_MIN) return;
      std::vector<core::QueueSet::Candidate> cands;
      std::vector<int> cand_queue;
      for (int q = 0; q < nq; ++q) {
        if (blocked[q] || waiting[q].empty()) continue;
        const auto& [neg, at, pod] = *waiting[q].begin();
        if (-neg != top) continue;
        cands.push_back({names[q], core::Arrival{at, pod}});
        cand_queue.push_back(q);
      }
      const int q = cand_queue[cands.size() == 1 ? 0 : queues.Pick(cands)];
      const int32_t i = std::get<2>(*waiting[q].begin());
      core::PlacementResult placed = engine.DecideOne(core::Ask::Pod(requests[i]));
      if (placed.placed()) {
        begin(i, placed.placement);
        continue;
      }
      if (placed.outcome == core::Outcome::kNeverFits) {
        waiting[q].erase(waiting[q].begin());
        queues.SubPending(names[q], demand[i], 1);
        pending_demand[q] -= demand[i];
        continue;
      }
      if (options.preempt) {
        candidates.clear();
        for (int32_t j : running) {
          candidates.push_back(core::RunningPod{requests[j].name, names[queue_of[j]],
                                                requests[j].priority, "", "", false});
        }
        core::PreemptionRequest pr;
        pr.members = std::span<const core::PodRequest>(&requests[i], 1);
        pr.queue = names[q];
        pr.priority = requests[i].priority;
        pr.demand = demand[i];
        const auto t0 = std::chrono::steady_clock::now();
        core::PreemptionPlan plan = planner.Plan(pr, candidates);
        r.plan_ms_total +=
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        ++r.plans;
        if (plan.found) {
          for (const std::string& v : plan.victims) {
            const int32_t j = static_cast<int32_t>(std::stoll(v.substr(1)));
            end(j);
            ++gen[j];
            ++r.evictions;
            ++r.queues[queue_of[j]].evicted;
            enqueue(j);
          }
          core::PlacementResult again = engine.DecideOne(core::Ask::Pod(requests[i]));
          if (again.placed()) {
            begin(i, again.placement);
            continue;
          }
        }
      }
      blocked[q] = true;
    }
  };

  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    advance(e.time);
    if (e.kind == 0) {
      if (e.gen != gen[e.pod] || running_pos[e.pod] < 0) continue;  // evicted since
      end(e.pod);
      while (!events.empty() && events.top().time == e.time && events.top().kind == 0) {
        const Event d = events.top();
        events.pop();
        if (d.gen == gen[d.pod] && running_pos[d.pod] >= 0) end(d.pod);
      }
      std::fill(blocked.begin(), blocked.end(), false);
    } else {
      ++r.queues[queue_of[e.pod]].pods;
      enqueue(e.pod);
    }
    serve();
    record();
  }
  advance(std::max(now, window_end));

  const double window = static_cast<double>(window_end - first);
  auto mean_of = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / static_cast<double>(v.size());
  };
  for (int q = 0; q < nq; ++q) {
    QueueTimelineStats& s = r.queues[q];
    s.still_waiting = static_cast<int64_t>(waiting[q].size());
    s.pending_mean = mean_of(pending[q]);
    s.pending_p50 = Percentile(pending[q], 0.5);
    s.pending_p90 = Percentile(pending[q], 0.9);
    s.pending_p99 = Percentile(pending[q], 0.99);
    s.mean_allocated_gpus = alloc_integral[q] / window / 1000.0;
    s.mean_fair_share_gpus = fair_integral[q] / window / 1000.0;
  }
  for (int k = 0; k < periods; ++k) {
    QueueTimelinePeriod p;
    p.from_hours = k * period_length / 3600.0;
    p.to_hours = (k + 1) * period_length / 3600.0;
    for (int q = 0; q < nq; ++q) {
      p.allocated_gpus.push_back(period_alloc[k][q] / period_length / 1000.0);
      p.fair_share_gpus.push_back(period_fair[k][q] / period_length / 1000.0);
      p.started.push_back(static_cast<int64_t>(period_pending[k][q].size()));
      p.pending_mean_s.push_back(mean_of(period_pending[k][q]));
      p.pending_p90_s.push_back(Percentile(period_pending[k][q], 0.9));
    }
    r.periods.push_back(std::move(p));
  }
  // Sliding windows of four buckets, stepped by one.
  double window_sum = 0;
  r.jain_window_min = 1;
  for (int b = 0; b + 4 <= std::max(buckets, 4) && b < buckets; ++b) {
    double sum = 0, squares = 0;
    int wanting = 0;
    for (int q = 0; q < nq; ++q) {
      double a = 0, f = 0;
      bool wanted = false;
      for (int k = b; k < std::min(buckets, b + 4); ++k) {
        a += bucket_alloc[k][q];
        f += bucket_fair[k][q];
        wanted |= bucket_wants[k][q] != 0;
      }
      if (!wanted || f <= 0) continue;
      sum += a / f;
      squares += (a / f) * (a / f);
      ++wanting;
    }
    if (wanting < 2 || squares <= 0) continue;
    const double j = sum * sum / (wanting * squares);
    ++r.jain_windows;
    window_sum += j;
    r.jain_window_min = std::min(r.jain_window_min, j);
  }
  r.jain_window_mean = r.jain_windows > 0 ? window_sum / static_cast<double>(r.jain_windows) : 0;
  if (r.jain_windows == 0) r.jain_window_min = 0;
  r.jain = contended > 0 ? jain_integral / contended : 1.0;
  r.contended_hours = contended / 3600.0;
  r.mean_allocation =
      100.0 * total_integral / window / static_cast<double>(capacity[core::kQueueGpu]);
  r.evictions_per_hour = r.span_hours > 0 ? static_cast<double>(r.evictions) / r.span_hours : 0;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  return r;
}

}  // namespace tessera::sim
