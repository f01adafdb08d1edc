#include "sim/timeline.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <functional>
#include <queue>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/random.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/plan/defrag.h"
#include "core/policy/shape_index.h"
#include "sim/fgd_replay.h"
#include "sim/placer.h"
#include "sim/replay_queue.h"
#include "sim/timeline_load.h"

namespace tessera::sim {
namespace {

// Elastic gangs keep to one node: the topology level, and the label naming each node.
constexpr std::string_view kNodeLevel = "node";
constexpr std::string_view kNodeLevelLabel = "kubernetes.io/hostname";

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
}

// Fills the percentiles of `stats` from the pending times of its pods that started.
void Summarise(std::vector<double> pending, PendingStats* stats) {
  std::sort(pending.begin(), pending.end());
  stats->started = static_cast<int64_t>(pending.size());
  stats->p50 = Percentile(pending, 0.50);
  stats->p90 = Percentile(pending, 0.90);
  stats->p99 = Percentile(pending, 0.99);
  stats->max = pending.empty() ? 0 : pending.back();
  double sum = 0;
  for (double w : pending) sum += w;
  stats->mean = pending.empty() ? 0 : sum / static_cast<double>(pending.size());
}

struct Event {
  int64_t time;
  int kind;  // 0 = departure (handled first at equal times), 1 = arrival
  int32_t pod;
  bool operator>(const Event& o) const {
    return std::tie(time, kind, pod) > std::tie(o.time, o.kind, o.pod);
  }
};

// Whether shares of these sizes (milli-GPU, largest first) fit in `bins` GPUs of 1000 each: first
// fit decreasing, then a search over the distinct bin loads, given up after `budget` steps (an
// answer of false then means "not shown").
bool Packs(const std::vector<int32_t>& items, int bins, int budget) {
  if (bins <= 0) return items.empty();
  int64_t total = 0;
  for (int32_t s : items) total += s;
  if (total > int64_t{1000} * bins) return false;
  std::vector<int32_t> load(bins, 0);
  bool ffd = true;
  for (int32_t s : items) {
    int b = 0;
    while (b < bins && load[b] + s > 1000) ++b;
    if (b == bins) {
      ffd = false;
      break;
    }
    load[b] += s;
  }
  if (ffd) return true;
  std::fill(load.begin(), load.end(), 0);
  int steps = 0;
  auto search = [&](auto&& self, size_t i, int64_t left) -> bool {
    if (i == items.size()) return true;
    if (++steps > budget) return false;
    int64_t room = 0;
    for (int32_t l : load) room += 1000 - l;
    if (room < left) return false;
    for (int b = 0; b < bins; ++b) {
      if (load[b] + items[i] > 1000) continue;
      bool same = false;  // a bin with the same load was tried already
      for (int c = 0; c < b && !same; ++c) same = load[c] == load[b];
      if (same) continue;
      load[b] += items[i];
      const bool ok = self(self, i + 1, left - items[i]);
      load[b] -= items[i];
      if (ok) return true;
      if (steps > budget) return false;
    }
    return false;
  };
  return search(search, 0, total);
}

enum WaitClass { kRepack = 0, kCrossNode = 1, kCapacity = 2 };

// Milli-GPU a share takes on a GPU of `capacity_mib` (the larger of its compute and its memory).
int32_t ShareMilli(int32_t compute_milli, int64_t memory_mib, int64_t capacity_mib) {
  const int64_t by_memory =
      capacity_mib > 0 ? (memory_mib * 1000 + capacity_mib - 1) / capacity_mib : 0;
  return static_cast<int32_t>(
      std::clamp<int64_t>(std::max<int64_t>(compute_milli, by_memory), 0, 1000));
}

// What the cluster could offer a pod that did not fit (classify_waits, timeline.h). Keeps the
// shares running on each node (GPU, size, CPU and memory) as the replay places and releases them.
class WaitClassifier {
 public:
  explicit WaitClassifier(const core::Cluster& cluster)
      : cluster_(cluster), shares_(cluster.node_count()) {}

  void Started(int32_t pod, const core::Placement& p) {
    if (p.gpus.size() != 1 || p.gpus.front().exclusive || p.gpus.front().is_mig()) return;
    const core::GpuGrant& g = p.gpus.front();
    const int64_t capacity = cluster_.node(p.node).gpus[g.gpu].memory_mib;
    shares_[p.node.value()].push_back(Share{pod, g.gpu,
                                            ShareMilli(g.compute_milli, g.memory_mib, capacity),
                                            p.cpu_milli, p.memory_mib});
  }
  void Left(int32_t pod, const core::Placement& p) {
    auto& on = shares_[p.node.value()];
    for (size_t k = 0; k < on.size(); ++k) {
      if (on[k].pod == pod) {
        on[k] = on.back();
        on.pop_back();
        return;
      }
    }
  }

  WaitClass Classify(const core::ClusterState& state, const core::PodRequest& request) const {
    const core::GpuAsk& ask = request.gpu;
    const bool whole = ask.kind == core::GpuAsk::Kind::kWhole;
    const bool share =
        ask.kind == core::GpuAsk::Kind::kShare || ask.kind == core::GpuAsk::Kind::kFraction;
    const bool gpu = whole || share;
    const core::ModelSet models = cluster_.ResolveModels(request.gpu_models);
    bool without_shares = false;
    std::vector<int32_t> items;
    for (int n = 0; n < cluster_.node_count(); ++n) {
      const core::NodeId id(n);
      const uint64_t allowed = gpu ? cluster_.ModelMask(id, models) & ~cluster_.mig_mask(id) : 0;
      if (gpu && allowed == 0) continue;
      int64_t share_cpu = 0, share_memory = 0;
      for (const Share& s : shares_[n]) {
        share_cpu += s.cpu_milli;
        share_memory += s.memory_mib;
      }
      int open = 0;  // GPUs of an allowed model not held whole
      for (uint64_t a = allowed; a; a &= a - 1)
        open += !state.gpu(id, __builtin_ctzll(a)).exclusive;
      const bool room_without_shares = whole ? open >= ask.count : (share ? open >= 1 : true);
      if (!room_without_shares || state.free_cpu_milli(id) + share_cpu < request.cpu_milli ||
          state.free_memory_mib(id) + share_memory < request.memory_mib) {
        continue;
      }
      without_shares = true;
      if (state.free_cpu_milli(id) < request.cpu_milli ||
          state.free_memory_mib(id) < request.memory_mib) {
        continue;
      }
      // Rearranged on this node: the shares on its open GPUs of allowed models, and the pod. (GPUs
      // of one node are taken to be alike, as in the trace's clusters.)
      items.clear();
      for (const Share& s : shares_[n]) {
        if (allowed & (1ULL << s.gpu)) items.push_back(s.milli);
      }
      int bins = open;
      if (whole) {
        bins -= ask.count;
      } else if (share) {
        const int g = __builtin_ctzll(allowed);
        const int64_t capacity = cluster_.node(id).gpus[g].memory_mib;
        items.push_back(
            ShareMilli(core::ShareComputeOn(ask), core::ShareMemoryOn(ask, capacity), capacity));
      }
      std::sort(items.rbegin(), items.rend());
      if (Packs(items, bins, 20000)) return kRepack;
    }
    return without_shares ? kCrossNode : kCapacity;
  }

 private:
  struct Share {
    int32_t pod;
    int gpu;
    int32_t milli;
    int64_t cpu_milli;
    int64_t memory_mib;
  };
  const core::Cluster& cluster_;
  std::vector<std::vector<Share>> shares_;  // per node
};

}  // namespace

absl::StatusOr<TimelineResult> RunTimeline(const core::Cluster& cluster, const PodTrace& trace,
                                           const TimelineOptions& options) {
  auto wall = std::chrono::steady_clock::now();
  TESSERA_ASSIGN_OR_RETURN(const TimelineClock clock,
                           TimelineClock::Create(trace, options.speedup));
  core::PolicyOptions policy_options;
  policy_options.seed = ReplayPolicySeed(options.seed);
  policy_options.typical_tasks = options.typical_tasks;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<core::Policy> policy,
                           core::CreatePolicy(options.policy, policy_options));
  if (options.gang_min_gpus > 0 && options.defrag_max_moves > 0) {
    return absl::InvalidArgumentError(
        "elastic gangs and defragmentation plans together are not modelled (a plan would not "
        "see the gangs' members)");
  }
  const bool reserving = options.reservations.max_reservations > 0;
  if (reserving && (options.gang_min_gpus > 0 || options.defrag_max_moves > 0)) {
    return absl::InvalidArgumentError(
        "reservations with elastic gangs or defragmentation plans are not modelled");
  }
  if (options.declare_percent < 0 || options.declare_percent > 100 ||
      options.declare_bucket_s < 1) {
    return absl::InvalidArgumentError(StrCat("declare_percent ", options.declare_percent,
                                             " (expected 0..100), declare_bucket_s ",
                                             options.declare_bucket_s, " (expected >= 1)"));
  }
  if (options.gang_min_percent < 1 || options.gang_min_percent > 100) {
    return absl::InvalidArgumentError(
        StrCat("gang_min_percent ", options.gang_min_percent, ": expected 1..100"));
  }
  // Gangs keep to one node, as the pods they stand for did: a topology level whose domains are
  // the nodes (a label naming each node).
  std::optional<core::Cluster> labelled;
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  if (options.gang_min_gpus > 0) {
    std::vector<core::NodeSpec> specs = cluster.nodes().ToVector();
    for (core::NodeSpec& spec : specs) spec.labels[std::string(kNodeLevelLabel)] = spec.name;
    TESSERA_ASSIGN_OR_RETURN(labelled, core::Cluster::Create(std::move(specs)));
    levels.push_back({std::string(kNodeLevel), std::string(kNodeLevelLabel)});
  }
  TimelineResult r;
  r.policy = options.policy;
  r.seed = options.seed;
  r.speedup = options.speedup;
  r.load = options.load;
  r.capacity_milli = int64_t{cluster.total_gpus()} * 1000;
  if (r.capacity_milli == 0) {
    return absl::InvalidArgumentError("the cluster has no GPUs: allocation ratios need GPUs");
  }
  Placer placer(labelled ? *labelled : cluster, std::move(policy), std::move(levels));
  // Pods that can never fit are rejected, not queued: they are no demand.
  std::vector<bool> can_fit(trace.pods.size());
  for (size_t i = 0; i < trace.pods.size(); ++i) {
    can_fit[i] = placer.NeverFitsReason(ToPodRequest(trace.pods[i], std::string())).empty();
  }
  TimelineLoad load;
  if (options.load > 0) {
    TESSERA_ASSIGN_OR_RETURN(load, TuneTimelineLoad(trace, clock, r.capacity_milli, options.load,
                                                    options.seed, &can_fit));
  } else {
    load = WholeTrace(trace, clock, &can_fit);
  }
  r.clones = load.clones;
  r.removed = load.removed;
  r.peak_demand = 100.0 * static_cast<double>(load.peak_milli) / r.capacity_milli;
  const std::vector<int32_t>& pods = load.pods;
  const size_t n = pods.size();
  auto pod_of = [&](int32_t i) -> const TracePod& { return trace.pods[pods[i]]; };
  std::vector<core::PodRequest> requests;
  requests.reserve(n);
  const size_t originals = n - static_cast<size_t>(load.clones);
  for (size_t i = 0; i < n; ++i) {
    const TracePod& p = pod_of(static_cast<int32_t>(i));
    requests.push_back(
        ToPodRequest(p, i < originals ? p.name : StrCat(p.name, "-tuned-", i - originals)));
  }
  std::vector<int64_t> arrival(n);
  for (size_t i = 0; i < n; ++i) arrival[i] = clock.Arrival(pod_of(static_cast<int32_t>(i)));
  // Declared maximum run times (timeline.h: the model), drawn per pod from the seed.
  std::vector<std::optional<int64_t>> declared(n);
  if (options.declare_percent > 0) {
    Random draw(options.seed ^ 0x7e5e7a710115ULL);
    for (size_t i = 0; i < n; ++i) {
      const bool declares = static_cast<int>(draw.Uniform(100)) < options.declare_percent;
      const std::optional<int64_t> run = TimelineClock::RunTime(pod_of(static_cast<int32_t>(i)));
      if (!declares || !run) continue;
      const int64_t b = options.declare_bucket_s;
      declared[i] = std::max<int64_t>(b, (*run + b - 1) / b * b);
      ++r.declared;
    }
  }
  core::Reservations reservations(options.reservations);
  // Elastic gangs: the pods that run as gangs (gang_of: index into gangs, -1 for a pod).
  struct Gang {
    std::vector<core::PodRequest> members;  // in the order they join
    std::vector<std::string> running;       // the first running.size() members, placed
    int64_t start = -1;                     // when it reached its min
    int64_t full = -1;                      // when it first ran all its members
    int64_t traced = -1;                    // its traced run time (-1: runs to the end)
    int64_t work = 0;                       // member-seconds left
    int64_t since = 0;                      // when `work` was brought up to date
    int64_t end = -1;                       // when it ends at its present pace (-1: not running)
  };
  std::vector<int32_t> gang_of(n, -1);
  std::vector<Gang> gangs;
  if (options.gang_min_gpus > 0) {
    for (size_t i = 0; i < n; ++i) {
      const TracePod& p = pod_of(static_cast<int32_t>(i));
      if (p.num_gpu < options.gang_min_gpus || p.gpu_milli < 1000) continue;
      const int32_t k = p.num_gpu;
      Gang g;
      g.traced = TimelineClock::RunTime(p).value_or(-1);
      core::GangAsk ask;
      ask.name = requests[i].name;
      ask.size = k;
      ask.level = std::string(kNodeLevel);
      ask.required = true;
      ask.min = std::max<int32_t>(1, (k * options.gang_min_percent + 99) / 100);
      for (int32_t j = 0; j < k; ++j) {
        core::PodRequest m = requests[i];
        m.name = StrCat(requests[i].name, "-m", j);
        m.gpu = core::GpuAsk::Whole(1);
        m.cpu_milli = (requests[i].cpu_milli + k - 1) / k;
        m.memory_mib = (requests[i].memory_mib + k - 1) / k;
        m.gang = ask;
        g.members.push_back(std::move(m));
      }
      gang_of[i] = static_cast<int32_t>(gangs.size());
      gangs.push_back(std::move(g));
    }
  }
  r.gangs.gangs = static_cast<int64_t>(gangs.size());
  double member_wait_seconds = 0;  // GPUs x seconds
  const int64_t first = clock.first();
  const int64_t window_end = clock.window_end();
  // Offered load: demand running (if all fit) averaged over the arrival window.
  {
    double demand = 0;
    for (size_t i = 0; i < n; ++i) {
      const TracePod& p = pod_of(static_cast<int32_t>(i));
      const double at = static_cast<double>(arrival[i] - first);
      const double run = static_cast<double>(TimelineClock::RunTime(p).value_or(INT64_MAX / 4));
      const double window = static_cast<double>(window_end - first);
      demand +=
          static_cast<double>(p.total_gpu_milli()) * std::max(0.0, std::min(at + run, window) - at);
    }
    r.offered_load = 100.0 * demand / (static_cast<double>(window_end - first) * r.capacity_milli);
  }
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events;
  int64_t last = first;
  for (size_t i = 0; i < n; ++i) {
    events.push(Event{arrival[i], 1, static_cast<int32_t>(i)});
    last = std::max(last, arrival[i] + TimelineClock::RunTime(pod_of(i)).value_or(0));
  }
  r.pods = static_cast<int64_t>(n);
  r.span_hours = static_cast<double>(window_end - first) / 3600.0;

  std::vector<core::Placement> placed(n);
  std::optional<WaitClassifier> classifier;
  if (options.classify_waits) classifier.emplace(cluster);
  std::vector<double> pending, pending_whole, pending_multi, pending_single;
  auto gpus_asked = [&](int32_t i) {
    return static_cast<double>(pod_of(i).total_gpu_milli()) / 1000.0;
  };
  auto is_whole = [&](int32_t i) { return pod_of(i).num_gpu >= 1 && pod_of(i).gpu_milli >= 1000; };
  auto is_multi = [&](int32_t i) { return pod_of(i).num_gpu >= 2; };
  auto is_single = [&](int32_t i) { return pod_of(i).num_gpu == 1; };
  // Waiting pods wait in the scheduler's queue (replay_queue.h: core::SchedulingQueue's rules),
  // all of one priority and one queue: tried again, in arrival order, whenever pods leave.
  // `waiting` is the same pods in the same order (the queue's membership, for the end of the
  // replay and for defragmentation's choice).
  ReplayQueue queue(n, first);
  std::set<std::pair<core::Arrival, int32_t>> waiting;
  std::vector<char> in_queue(n, 0);  // in `waiting`
  auto arrival_of = [&](int32_t i) { return core::Arrival{arrival[i], i}; };
  // Per request shape: whether it was tried since the last change and did not fit (the room only
  // shrank since, so its pods are put back without a try: the answer a try would give). With
  // classify_waits, also the class found at its last try and the time spent in each class so
  // far; a pod's time in a class is the shape's growth while it waited.
  struct ShapeWaits {
    uint64_t refused_at = 0;  // the change count when it last did not fit (0: never)
    int cls = -1;
    int64_t since = 0;
    std::array<double, 3> time{};
    std::array<double, 3> At(int64_t t) const {
      std::array<double, 3> out = time;
      if (cls >= 0) out[cls] += static_cast<double>(t - since);
      return out;
    }
  };
  absl::flat_hash_map<core::RequestShape, size_t> shape_ids;
  std::vector<ShapeWaits> shapes;
  std::vector<int32_t> shape_of(n, -1);           // pods (not gangs): their entry in `shapes`
  std::vector<std::array<double, 3>> entered(n);  // the shape's class times when the pod queued
  uint64_t changes = 1;                           // pods left (departures, moves) so far, plus 1
  int64_t starts = 0;                             // pods and gangs that started or grew

  // Allocation over time: integral for the mean, samples for the curve, steps for the peak.
  int64_t now = first;
  double integral = 0;
  int64_t allocated = 0;
  std::vector<std::pair<double, double>> samples;
  std::vector<std::pair<int64_t, int64_t>> allocation_steps;  // (time, allocated milli from then)
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
    if (!allocation_steps.empty() && allocation_steps.back().first == now) {
      allocation_steps.back().second = allocated;
    } else {
      allocation_steps.emplace_back(now, allocated);
    }
  };
  auto add_split = [&](int32_t i, const std::array<double, 3>& from,
                       const std::array<double, 3>& to) {
    const double g = gpus_asked(i) / 3600.0;
    r.wait_split.repack += g * (to[kRepack] - from[kRepack]);
    r.wait_split.cross_node += g * (to[kCrossNode] - from[kCrossNode]);
    r.wait_split.capacity += g * (to[kCapacity] - from[kCapacity]);
  };
  std::vector<char> running(n, 0);
  std::function<void(int32_t)> started;
  std::function<bool(int32_t)> try_gang;
  auto try_start = [&](int32_t i) {
    if (gang_of[i] >= 0) return try_gang(i);
    core::Admission how = core::Admission::kFree;
    const core::Outcome outcome = reserving ? placer.PlaceReserved(reservations, requests[i], now,
                                                                   declared[i], &placed[i], &how)
                                            : placer.Place(requests[i], &placed[i]);
    if (outcome != core::Outcome::kPlaced) {
      if (options.on_refused) options.on_refused(pods[i], now, placer.state());
      return false;
    }
    if (how == core::Admission::kBackfill) ++r.backfilled;
    started(i);
    return true;
  };
  // A pod, or a gang reaching its min, starts: its pending time.
  auto count_start = [&](int32_t i) {
    ++r.started;
    const double wait = static_cast<double>(now - arrival[i]);
    if (wait > 0) {
      ++r.waited;
      r.wait_gpu_hours += gpus_asked(i) * wait / 3600.0;
      if (is_whole(i)) ++r.whole_gpu.waited;
      if (is_multi(i)) ++r.multi_gpu.waited;
      if (is_single(i)) ++r.single_gpu.waited;
    }
    pending.push_back(wait);
    if (is_whole(i)) pending_whole.push_back(wait);
    if (is_multi(i)) pending_multi.push_back(wait);
    if (is_single(i)) pending_single.push_back(wait);
  };
  started = [&](int32_t i) {
    running[i] = 1;
    ++starts;
    if (options.on_start) options.on_start(pods[i], arrival[i], now, placed[i], placer.state());
    if (classifier) classifier->Started(i, placed[i]);
    if (reserving) reservations.Started(requests[i].name, placed[i], now, declared[i]);
    count_start(i);
    if (std::optional<int64_t> d = TimelineClock::RunTime(pod_of(i))) {
      events.push(Event{now + *d, 0, i});
    }
  };
  // A running gang's work and its members' waiting, brought up to now at its pace since.
  auto gang_progress = [&](Gang& g) {
    if (g.start < 0 || g.running.empty() || now <= g.since) return;
    const int64_t dt = now - g.since;
    const int64_t running_members = static_cast<int64_t>(g.running.size());
    if (g.traced >= 0) g.work = std::max<int64_t>(0, g.work - running_members * dt);
    member_wait_seconds +=
        static_cast<double>(static_cast<int64_t>(g.members.size()) - running_members) *
        static_cast<double>(dt);
    g.since = now;
  };
  try_gang = [&](int32_t i) {
    Gang& g = gangs[gang_of[i]];
    const size_t r0 = g.running.size();
    const std::span<const core::PodRequest> waiting_members(g.members.data() + r0,
                                                            g.members.size() - r0);
    const std::vector<core::PlacementResult> results =
        placer.PlaceGangMembers(waiting_members, g.running);
    size_t joined = 0;
    while (joined < results.size() && results[joined].placed()) ++joined;
    if (joined == 0) return false;
    ++starts;
    gang_progress(g);
    for (size_t k = 0; k < joined; ++k) g.running.push_back(waiting_members[k].name);
    if (g.start < 0) {
      g.start = g.since = now;
      g.work = g.traced >= 0 ? g.traced * static_cast<int64_t>(g.members.size()) : 0;
      ++r.gangs.started;
      count_start(i);
    }
    if (g.running.size() == g.members.size() && g.full < 0) {
      g.full = now;
      ++r.gangs.full;
    }
    if (g.traced >= 0) {  // its end at the present pace
      const int64_t members = static_cast<int64_t>(g.running.size());
      g.end = now + (g.work + members - 1) / members;
      events.push(Event{g.end, 0, i});
    }
    return g.running.size() == g.members.size();
  };
  // The shape did not fit at a try: it is not tried again before a change; remember what the
  // cluster offered it.
  auto refused = [&](ShapeWaits& w, int32_t i) {
    w.refused_at = changes;
    if (!classifier) return;
    const int cls = classifier->Classify(
        placer.state(), core::EffectiveRequest(placer.policy(), requests[i]).get());
    w.time = w.At(now);
    w.since = now;
    w.cls = cls;
  };
  // A pod of the queue left it by starting.
  auto leave_queue = [&](int32_t i) {
    waiting.erase({arrival_of(i), i});
    in_queue[i] = 0;
    if (classifier && gang_of[i] < 0) add_split(i, entered[i], shapes[shape_of[i]].At(now));
  };
  // The scheduler's cycle: every pod the queue holds active (after a change, every waiting pod)
  // is tried in the queue's order; one that does not fit goes back to wait for the next change,
  // one that can never fit is rejected.
  auto serve = [&]() {
    queue.Flush(now);
    while (std::optional<int32_t> popped = queue.Pop()) {
      const int32_t i = *popped;
      const bool queued = in_queue[i] != 0;
      if (gang_of[i] >= 0) {
        // A gang waits, started or not, until all its members run.
        if (try_gang(i)) {
          if (queued) leave_queue(i);
          continue;
        }
        if (!queued && !can_fit[pods[i]]) {
          ++r.never_fits;
          continue;
        }
      } else {
        ShapeWaits& w = shapes[shape_of[i]];
        // A pod that may backfill is tried even when its shape was refused: held room may take
        // it and not the others of its shape (a refusal of it still says the same of them).
        const bool may_backfill = reserving && declared[i] && !reservations.reservations().empty();
        if (w.refused_at != changes || may_backfill) {
          if (try_start(i)) {
            if (queued) leave_queue(i);
            continue;
          }
          if (!can_fit[pods[i]]) {
            ++r.never_fits;
            continue;
          }
          refused(w, i);
        }
        if (!queued) entered[i] = w.At(now);
      }
      if (!queued) {
        waiting.emplace(arrival_of(i), i);
        in_queue[i] = 1;
      }
      queue.Unschedulable(i);
    }
  };
  std::vector<double> stretches;  // gangs that ended: run time / traced run time
  // A departure event: a pod leaves, or a gang whose end it still is (a gang that grew since
  // has a later one); a gang's members still waiting leave with it.
  // Returns whether it freed room (an event of a gang that grew since frees none).
  auto depart = [&](const Event& e) {
    const int32_t i = e.pod;
    if (gang_of[i] < 0) {
      running[i] = 0;
      placer.Release(placed[i]);
      // The pod ran out and left: tell the policy, as Engine::Release does.
      placer.policy().OnReleased(placer.state(), placed[i]);
      if (classifier) classifier->Left(i, placed[i]);
      if (reserving) reservations.Ended(requests[i].name);
      return true;
    }
    Gang& g = gangs[gang_of[i]];
    if (g.end != e.time || g.running.empty()) return false;
    gang_progress(g);
    for (const std::string& member : g.running) placer.ReleaseMember(member);
    g.running.clear();
    g.end = -1;
    if (g.traced > 0) {
      stretches.push_back(static_cast<double>(now - g.start) / static_cast<double>(g.traced));
    }
    if (queue.Remove(i)) {
      waiting.erase({arrival_of(i), i});
      in_queue[i] = 0;
    }
    return true;
  };
  // Pods left (or moved): the scheduler's NoteChange on a release, and its next cycle.
  auto changed = [&]() {
    ++changes;
    queue.NoteChange();
    if (!queue.empty()) serve();
  };

  // Reservations brought up to date with the queue (the waiting pods in its order); true when
  // one was let go (its room may fit a waiting pod: a change for the scheduler).
  std::vector<core::Reservations::Waiting> waiting_list;
  auto reserve = [&]() {
    if (!reserving) return false;
    waiting_list.clear();
    for (const auto& [at, i] : waiting) {
      waiting_list.push_back(
          {requests[i].name, {&requests[i], 1}, requests[i].priority, arrival[i]});
    }
    const size_t before = reservations.reservations().size();
    const int made = reservations.Update(now, waiting_list, placer.engine());
    r.reservations_made += made;
    return reservations.reservations().size() - static_cast<size_t>(made) < before;
  };

  plan::DefragOptions defrag_options;
  defrag_options.max_moves = options.defrag_max_moves;
  defrag_options.max_checks = options.defrag_max_checks;
  defrag_options.max_tries = 200;
  // A plan for the first long-waiting pod that asks enough whole GPUs, carried out if found.
  std::vector<int64_t> next_search(options.defrag_max_moves > 0 ? n : 0, 0);
  // The pods considered are the first waiting pod of each request shape, in the queue's order.
  auto defragment = [&]() {
    absl::flat_hash_set<int32_t> seen;  // shapes
    for (const auto& entry : waiting) {
      const int32_t front = entry.second;
      if (gang_of[front] >= 0 || !seen.insert(shape_of[front]).second) continue;
      const core::PodRequest& request = requests[front];
      if (request.gpu.kind != core::GpuAsk::Kind::kWhole ||
          request.gpu.count < options.defrag_min_gpus ||
          now - arrival[front] < options.defrag_after_s || now < next_search[front]) {
        continue;
      }
      // A pod whose search found nothing is searched for again after as long once more.
      next_search[front] = now + std::max<int64_t>(1, options.defrag_after_s);
      plan::DefragInput in;
      in.cluster = &cluster;
      in.make_policy = [&] { return *core::CreatePolicy(options.policy, policy_options); };
      std::vector<int32_t> index;  // in.running's pods, by replay index
      for (size_t j = 0; j < n; ++j) {
        if (!running[j]) continue;
        in.running.push_back(plan::RunningPod{requests[j], placed[j], true});
        index.push_back(static_cast<int32_t>(j));
      }
      in.target = {request};
      ++r.defrag_searches;
      absl::StatusOr<plan::DefragPlan> p = plan::PlanDefrag(in, defrag_options);
      if (!p.ok() || p->verdict != plan::DefragVerdict::kPlan) return;
      std::vector<int32_t> movers;
      for (const plan::Move& m : p->moves) {
        for (size_t k = 0; k < in.running.size(); ++k) {
          if (in.running[k].request.name == m.pod) movers.push_back(index[k]);
        }
      }
      TESSERA_CHECK(movers.size() == p->moves.size());
      for (int32_t j : movers) {
        placer.Release(placed[j]);
        if (classifier) classifier->Left(j, placed[j]);
      }
      TESSERA_CHECK(placer.Apply(p->target[0]).ok());
      for (size_t k = 0; k < movers.size(); ++k) {
        placed[movers[k]] = p->moves[k].to;
        TESSERA_CHECK(placer.Apply(placed[movers[k]]).ok());
        if (classifier) classifier->Started(movers[k], placed[movers[k]]);
        r.defrag_whole_gpus_moved += p->moves[k].whole_gpus;
      }
      placed[front] = p->target[0];
      queue.Remove(front);
      started(front);
      leave_queue(front);  // `entry` is gone: return below
      ++r.defrag_plans;
      r.defrag_moves += static_cast<int64_t>(movers.size());
      changed();  // the moved pods left their nodes
      return;
    }
  };

  while (!events.empty()) {
    const Event e = events.top();
    events.pop();
    advance(e.time);
    if (e.kind == 0) {
      bool freed = depart(e);
      // Everything that departs at this moment leaves before anyone is retried.
      while (!events.empty() && events.top().time == e.time && events.top().kind == 0) {
        const Event d = events.top();
        events.pop();
        freed = depart(d) || freed;
      }
      if (reserve()) freed = true;
      if (freed) changed();
      if (!waiting.empty() && options.defrag_max_moves > 0) defragment();
      record();
      continue;
    }
    const int32_t i = e.pod;
    if (gang_of[i] < 0) {
      const core::EffectiveRequest effective(placer.policy(), requests[i]);
      core::Query query(placer.state(), effective.get());
      const auto [it, added] = shape_ids.try_emplace(core::RequestShape::Of(query), shapes.size());
      if (added) shapes.emplace_back();
      shape_of[i] = static_cast<int32_t>(it->second);
    }
    const int64_t before = starts;
    if (reserve()) changed();
    queue.Push(i, 0, "", arrival_of(i));
    serve();
    if (starts != before) record();
  }
  advance(std::max(last, window_end));
  const int64_t end = now;
  for (Gang& g : gangs) gang_progress(g);  // gangs that run to the end
  r.still_waiting = static_cast<int64_t>(waiting.size());
  for (const auto& [at, i] : waiting) {
    if (gang_of[i] >= 0 && gangs[gang_of[i]].start >= 0) {
      --r.still_waiting;  // running, short of members: counted in member_wait_gpu_hours
      continue;
    }
    if (gang_of[i] >= 0) ++r.gangs.still_waiting;
    r.wait_gpu_hours += gpus_asked(i) * static_cast<double>(end - arrival[i]) / 3600.0;
    if (is_whole(i)) ++r.whole_gpu.still_waiting;
    if (is_multi(i)) ++r.multi_gpu.still_waiting;
    if (is_single(i)) ++r.single_gpu.still_waiting;
    if (classifier && gang_of[i] < 0) add_split(i, entered[i], shapes[shape_of[i]].At(end));
  }
  const double span = static_cast<double>(window_end - first);
  r.mean_allocation = 100.0 * integral / span / static_cast<double>(r.capacity_milli);
  {
    PendingStats all;
    Summarise(pending, &all);
    r.pending_p50 = all.p50;
    r.pending_p90 = all.p90;
    r.pending_p99 = all.p99;
    r.pending_max = all.max;
    r.pending_mean = all.mean;
  }
  Summarise(std::move(pending_whole), &r.whole_gpu);
  Summarise(std::move(pending_multi), &r.multi_gpu);
  Summarise(std::move(pending_single), &r.single_gpu);
  if (!gangs.empty()) {
    std::vector<double> to_start, to_full;
    for (size_t k = 0; k < n; ++k) {
      if (gang_of[k] < 0) continue;
      const Gang& g = gangs[gang_of[k]];
      if (g.start >= 0) to_start.push_back(static_cast<double>(g.start - arrival[k]));
      if (g.full >= 0) to_full.push_back(static_cast<double>(g.full - arrival[k]));
    }
    PendingStats start, full;
    Summarise(std::move(to_start), &start);
    Summarise(std::move(to_full), &full);
    r.gangs.start_p50 = start.p50;
    r.gangs.start_p99 = start.p99;
    r.gangs.start_mean = start.mean;
    r.gangs.full_p50 = full.p50;
    r.gangs.full_p99 = full.p99;
    r.gangs.full_max = full.max;
    r.gangs.member_wait_gpu_hours = member_wait_seconds / 3600.0;
    double sum = 0;
    for (double x : stretches) sum += x;
    r.gangs.stretch = stretches.empty() ? 0 : sum / static_cast<double>(stretches.size());
  }

  // The offered demand of the pods that can fit: the waiting bound, and the peak window.
  const DemandSteps demand = OfferedDemand(trace, clock, pods, &can_fit);
  r.wait_gpu_hours_bound =
      WaitingFloor(trace, clock, pods, &can_fit, cluster, end) / 1000.0 / 3600.0;
  {
    // The allocation's integral up to t, from its steps.
    std::vector<double> before(allocation_steps.size() + 1, 0);
    for (size_t k = 0; k < allocation_steps.size(); ++k) {
      const int64_t to = k + 1 < allocation_steps.size() ? allocation_steps[k + 1].first
                                                         : allocation_steps[k].first;
      before[k + 1] = before[k] + static_cast<double>(allocation_steps[k].second) *
                                      static_cast<double>(to - allocation_steps[k].first);
    }
    auto integral_to = [&](int64_t t) {
      auto it = std::upper_bound(allocation_steps.begin(), allocation_steps.end(),
                                 std::make_pair(t, INT64_MAX));
      if (it == allocation_steps.begin()) return 0.0;
      const size_t k = static_cast<size_t>(it - allocation_steps.begin()) - 1;
      return before[k] + static_cast<double>(allocation_steps[k].second) *
                             static_cast<double>(t - allocation_steps[k].first);
    };
    const double threshold = 0.9 * static_cast<double>(load.peak_milli);
    double covered = 0, sum = 0;
    for (size_t k = 0; k < demand.size(); ++k) {
      if (static_cast<double>(demand[k].second) < threshold || demand[k].second == 0) continue;
      const int64_t from = demand[k].first;
      const int64_t to = k + 1 < demand.size() ? demand[k + 1].first : std::max(from + 1, end);
      covered += static_cast<double>(to - from);
      sum += integral_to(to) - integral_to(from);
    }
    r.peak_window_allocation =
        covered > 0 ? 100.0 * sum / covered / static_cast<double>(r.capacity_milli) : 0;
  }
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
  auto count = [&](auto field) { return static_cast<int64_t>(std::llround(mean(field))); };
  m.pods = count(&TimelineResult::pods);
  m.started = count(&TimelineResult::started);
  m.never_fits = count(&TimelineResult::never_fits);
  m.still_waiting = count(&TimelineResult::still_waiting);
  m.defrag_searches = count(&TimelineResult::defrag_searches);
  m.defrag_plans = count(&TimelineResult::defrag_plans);
  m.defrag_moves = count(&TimelineResult::defrag_moves);
  m.defrag_whole_gpus_moved = count(&TimelineResult::defrag_whole_gpus_moved);
  m.reservations_made = count(&TimelineResult::reservations_made);
  m.backfilled = count(&TimelineResult::backfilled);
  m.declared = count(&TimelineResult::declared);
  m.waited = count(&TimelineResult::waited);
  m.clones = count(&TimelineResult::clones);
  m.removed = count(&TimelineResult::removed);
  m.pending_p50 = mean(&TimelineResult::pending_p50);
  m.pending_p90 = mean(&TimelineResult::pending_p90);
  m.pending_p99 = mean(&TimelineResult::pending_p99);
  m.pending_max = mean(&TimelineResult::pending_max);
  m.pending_mean = mean(&TimelineResult::pending_mean);
  for (PendingStats TimelineResult::*group :
       {&TimelineResult::whole_gpu, &TimelineResult::multi_gpu, &TimelineResult::single_gpu}) {
    auto of = [&](auto field) {
      double s = 0;
      for (const TimelineResult& r : runs) s += static_cast<double>(r.*group.*field);
      return s / k;
    };
    PendingStats& g = m.*group;
    g.started = static_cast<int64_t>(std::llround(of(&PendingStats::started)));
    g.waited = static_cast<int64_t>(std::llround(of(&PendingStats::waited)));
    g.still_waiting = static_cast<int64_t>(std::llround(of(&PendingStats::still_waiting)));
    g.p50 = of(&PendingStats::p50);
    g.p90 = of(&PendingStats::p90);
    g.p99 = of(&PendingStats::p99);
    g.max = of(&PendingStats::max);
    g.mean = of(&PendingStats::mean);
  }
  {
    auto of = [&](auto field) {
      double s = 0;
      for (const TimelineResult& r : runs) s += static_cast<double>(r.gangs.*field);
      return s / k;
    };
    auto count_of = [&](auto field) { return static_cast<int64_t>(std::llround(of(field))); };
    GangStats& g = m.gangs;
    g.gangs = count_of(&GangStats::gangs);
    g.started = count_of(&GangStats::started);
    g.full = count_of(&GangStats::full);
    g.still_waiting = count_of(&GangStats::still_waiting);
    g.start_p50 = of(&GangStats::start_p50);
    g.start_p99 = of(&GangStats::start_p99);
    g.start_mean = of(&GangStats::start_mean);
    g.full_p50 = of(&GangStats::full_p50);
    g.full_p99 = of(&GangStats::full_p99);
    g.full_max = of(&GangStats::full_max);
    g.member_wait_gpu_hours = of(&GangStats::member_wait_gpu_hours);
    g.stretch = of(&GangStats::stretch);
  }
  m.wait_gpu_hours = mean(&TimelineResult::wait_gpu_hours);
  m.wait_gpu_hours_bound = mean(&TimelineResult::wait_gpu_hours_bound);
  for (double WaitSplit::*part :
       {&WaitSplit::repack, &WaitSplit::cross_node, &WaitSplit::capacity}) {
    double s = 0;
    for (const TimelineResult& r : runs) s += r.wait_split.*part;
    m.wait_split.*part = s / k;
  }
  m.mean_allocation = mean(&TimelineResult::mean_allocation);
  m.peak_allocation = mean(&TimelineResult::peak_allocation);
  m.peak_window_allocation = mean(&TimelineResult::peak_window_allocation);
  m.offered_load = mean(&TimelineResult::offered_load);
  m.peak_demand = mean(&TimelineResult::peak_demand);
  m.seconds = mean(&TimelineResult::seconds);
  for (size_t i = 0; i < m.curve.size(); ++i) {
    double s = 0;
    for (const TimelineResult& r : runs) s += i < r.curve.size() ? r.curve[i].second : 0;
    m.curve[i].second = s / k;
  }
  return m;
}

}  // namespace tessera::sim
