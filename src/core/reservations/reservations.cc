#include "core/reservations/reservations.h"

#include <algorithm>
#include <climits>
#include <numeric>
#include <utility>

#include "common/status.h"

namespace tessera::core {
namespace {

constexpr int64_t kNever = INT64_MAX;

// The owner a pod belongs to: its gang's name, or its own.
const std::string& OwnerOf(const PodRequest& request) {
  return request.gang && !request.gang->name.empty() ? request.gang->name : request.name;
}

// Whole GPUs the waiting pods ask together; 0 when any asks something else.
int32_t WholeGpus(std::span<const PodRequest> pods) {
  int32_t total = 0;
  for (const PodRequest& p : pods) {
    if (p.gpu.kind != GpuAsk::Kind::kWhole || p.gpu.count <= 0) return 0;
    total += p.gpu.count;
  }
  return total;
}

}  // namespace

void Reservations::Started(const std::string& pod, const Placement& placement, int64_t start,
                           std::optional<int64_t> max_runtime_s) {
  auto [it, added] = running_.insert_or_assign(pod, Running{placement, start, max_runtime_s});
  (void)it;
  if (added) on_node_[placement.node.value()].push_back(pod);
  std::erase_if(reservations_, [&](const Reservation& r) { return r.owner == pod; });
}

void Reservations::Ended(const std::string& pod) {
  auto it = running_.find(pod);
  if (it == running_.end()) return;
  std::vector<std::string>& on = on_node_[it->second.placement.node.value()];
  auto at = std::find(on.begin(), on.end(), pod);
  if (at != on.end()) {
    *at = std::move(on.back());
    on.pop_back();
  }
  running_.erase(it);
}

int64_t Reservations::ExpectedEnd(const Running& pod, int64_t now) const {
  if (pod.max_runtime_s) return std::max(now, pod.start + *pod.max_runtime_s);
  const int64_t estimate = pod.start + options_.unknown_runtime_s;
  return estimate > now ? estimate : now + options_.unknown_runtime_s;
}

std::vector<int64_t> Reservations::GpuFreeTimes(const ClusterState& state, NodeId node,
                                                int64_t now) const {
  const int gpus = static_cast<int>(state.gpus(node).size());
  const uint64_t free = state.whole_free_mask(node);
  std::vector<int64_t> at(gpus, -1);
  for (int g = 0; g < gpus; ++g) {
    if (free & (1ULL << g)) at[g] = now;
  }
  auto on = on_node_.find(node.value());
  if (on != on_node_.end()) {
    for (const std::string& pod : on->second) {
      const Running& r = running_.at(pod);
      const int64_t end = ExpectedEnd(r, now);
      for (const GpuGrant& g : r.placement.gpus) {
        if (g.gpu < gpus && at[g.gpu] != now) at[g.gpu] = std::max(at[g.gpu], end);
      }
    }
  }
  for (int64_t& t : at) {
    if (t < 0) t = kNever;  // held by a pod not told: not expected to free
  }
  return at;
}

int64_t Reservations::ResourcesFreeBy(const ClusterState& state, NodeId node, int64_t t,
                                      int64_t now, int64_t cpu_milli, int64_t memory_mib) const {
  int64_t cpu = state.free_cpu_milli(node), memory = state.free_memory_mib(node);
  std::vector<std::pair<int64_t, const Running*>> ends;
  auto on = on_node_.find(node.value());
  if (on != on_node_.end()) {
    for (const std::string& pod : on->second) {
      const Running& r = running_.at(pod);
      ends.emplace_back(ExpectedEnd(r, now), &r);
    }
  }
  std::sort(ends.begin(), ends.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t k = 0;
  for (; k < ends.size() && ends[k].first <= t; ++k) {
    cpu += ends[k].second->placement.cpu_milli;
    memory += ends[k].second->placement.memory_mib;
  }
  while (cpu < cpu_milli || memory < memory_mib) {
    if (k == ends.size()) return kNever;
    t = std::max(t, ends[k].first);
    cpu += ends[k].second->placement.cpu_milli;
    memory += ends[k].second->placement.memory_mib;
    ++k;
  }
  return t;
}

bool Reservations::Eligible(const Waiting& w, int64_t now) const {
  if (w.pods.empty() || now - w.since < options_.after_s) return false;
  const int32_t whole = WholeGpus(w.pods);
  if (whole == 0) return false;
  return w.pods.front().gang.has_value() || whole >= options_.min_gpus;
}

std::optional<Reservation> Reservations::Choose(int64_t now, const Waiting& w,
                                                const Engine& engine) const {
  const ClusterState& state = engine.state();
  const Cluster& cluster = engine.cluster();
  const PodRequest& first = w.pods.front();
  const bool gang = first.gang.has_value();
  const int32_t need = WholeGpus(w.pods);
  const ModelSet models = cluster.ResolveModels(first.gpu_models);
  // Sites: the domains of the gang's level, else every node.
  std::vector<std::vector<Candidate>> sites;
  const int level =
      gang && !first.gang->level.empty() ? engine.domains().LevelIndex(first.gang->level) : -1;
  if (level >= 0) {
    for (const Domain& d : engine.domains().domains(level)) sites.push_back(d.candidates);
  } else {
    for (int n = 0; n < state.node_count(); ++n) sites.push_back({Candidate{NodeId(n)}});
  }
  // GPUs already held by other reservations are not offered again.
  auto held = [&](NodeId node) {
    uint64_t m = 0;
    for (const Reservation& r : reservations_) {
      for (const Candidate& c : r.gpus) {
        if (c.node == node) m |= c.gpu_mask;
      }
    }
    return m;
  };
  std::optional<Reservation> best;
  for (const std::vector<Candidate>& site : sites) {
    // (free time, node, gpu) of every GPU of the site the pod could use.
    std::vector<std::tuple<int64_t, int, int>> gpus;
    for (const Candidate& c : site) {
      if (!state.accepts_pods(c.node)) continue;
      const uint64_t usable = c.gpu_mask & cluster.ModelMask(c.node, models) &
                              ~cluster.mig_mask(c.node) & ~held(c.node);
      if (usable == 0) continue;
      const std::vector<int64_t> at = GpuFreeTimes(state, c.node, now);
      for (uint64_t m = usable; m; m &= m - 1) {
        const int g = __builtin_ctzll(m);
        if (g < static_cast<int>(at.size())) gpus.emplace_back(at[g], c.node.value(), g);
      }
    }
    if (static_cast<int32_t>(gpus.size()) < need) continue;
    std::sort(gpus.begin(), gpus.end());
    int64_t start = std::get<0>(gpus[need - 1]);
    if (start == kNever) continue;
    Reservation r;
    r.owner = std::string(w.owner);
    r.priority = w.priority;
    for (int32_t k = 0; k < need; ++k) {
      const NodeId node(std::get<1>(gpus[k]));
      auto it = std::find_if(r.gpus.begin(), r.gpus.end(),
                             [&](const Candidate& c) { return c.node == node; });
      if (it == r.gpus.end()) it = r.gpus.insert(r.gpus.end(), Candidate{node, 0});
      it->gpu_mask |= 1ULL << std::get<2>(gpus[k]);
    }
    std::sort(r.gpus.begin(), r.gpus.end(),
              [](const Candidate& a, const Candidate& b) { return a.node < b.node; });
    if (!gang) {
      // One pod: one node, and its CPU and memory there.
      if (r.gpus.size() != 1) continue;
      r.cpu_milli = first.cpu_milli;
      r.memory_mib = first.memory_mib;
      start = ResourcesFreeBy(state, r.gpus[0].node, start, now, r.cpu_milli, r.memory_mib);
      if (start == kNever) continue;
    }
    r.since = now;
    r.expected_start = start;
    r.deadline = start + options_.grace_s;
    if (!best || start < best->expected_start) best = std::move(r);
  }
  return best;
}

int64_t Reservations::ExpectedStart(const Reservation& r, const ClusterState& state,
                                    int64_t now) const {
  int64_t start = now;
  for (const Candidate& c : r.gpus) {
    const std::vector<int64_t> at = GpuFreeTimes(state, c.node, now);
    for (uint64_t m = c.gpu_mask; m; m &= m - 1) {
      const int g = __builtin_ctzll(m);
      start = std::max(start, g < static_cast<int>(at.size()) ? at[g] : kNever);
    }
  }
  if (start != kNever && (r.cpu_milli > 0 || r.memory_mib > 0)) {
    start = ResourcesFreeBy(state, r.gpus.front().node, start, now, r.cpu_milli, r.memory_mib);
  }
  return start;
}

int Reservations::Update(int64_t now, std::span<const Waiting> waiting, const Engine& engine) {
  if (!enabled()) return 0;
  absl::flat_hash_map<std::string_view, const Waiting*> by_owner;
  for (const Waiting& w : waiting) by_owner.emplace(w.owner, &w);
  // Kept: the owner still waits and what it holds still frees by the deadline.
  std::vector<Reservation> kept;
  for (Reservation& r : reservations_) {
    if (!by_owner.contains(r.owner)) continue;
    const int64_t start = ExpectedStart(r, engine.state(), now);
    if (start > r.deadline) continue;  // chosen again below
    r.expected_start = start;
    kept.push_back(std::move(r));
  }
  reservations_ = std::move(kept);
  int made = 0;
  for (const Waiting& w : waiting) {
    if (static_cast<int>(reservations_.size()) >= options_.max_reservations) break;
    if (!Eligible(w, now)) continue;
    if (std::any_of(reservations_.begin(), reservations_.end(),
                    [&](const Reservation& r) { return r.owner == w.owner; })) {
      continue;
    }
    std::optional<Reservation> r = Choose(now, w, engine);
    if (!r) continue;
    reservations_.push_back(std::move(*r));
    ++made;
  }
  return made;
}

Admission Reservations::Exception(const PodRequest& request, const Reservation& r, int64_t now,
                                  std::optional<int64_t> max_runtime_s) const {
  if (OwnerOf(request) == r.owner) return Admission::kOwner;
  if (request.priority > r.priority) return Admission::kPriority;
  if (max_runtime_s && now + *max_runtime_s <= r.expected_start) return Admission::kBackfill;
  return Admission::kRefused;
}

uint64_t Reservations::HeldFrom(const PodRequest& request, NodeId node, int64_t now,
                                std::optional<int64_t> max_runtime_s) const {
  uint64_t m = 0;
  for (const Reservation& r : reservations_) {
    for (const Candidate& c : r.gpus) {
      if (c.node == node && Exception(request, r, now, max_runtime_s) == Admission::kRefused) {
        m |= c.gpu_mask;
      }
    }
  }
  return m;
}

Admission Reservations::Admit(const PodRequest& request, const Placement& placement, int64_t now,
                              std::optional<int64_t> max_runtime_s,
                              const ClusterState& state) const {
  Admission result = Admission::kFree;
  const uint64_t mask = placement.gpu_mask();
  for (const Reservation& r : reservations_) {
    bool touches = false;
    for (const Candidate& c : r.gpus) {
      if (c.node != placement.node) continue;
      if (c.gpu_mask & mask) touches = true;
    }
    // A pod's reservation also holds CPU and memory on its node: what this placement takes
    // must leave them free by the expected start.
    if (!touches && (r.cpu_milli > 0 || r.memory_mib > 0) &&
        r.gpus.front().node == placement.node) {
      const int64_t by =
          ResourcesFreeBy(state, placement.node, r.expected_start, now,
                          r.cpu_milli + placement.cpu_milli, r.memory_mib + placement.memory_mib);
      touches = by > r.expected_start;
    }
    if (!touches) continue;
    const Admission a = Exception(request, r, now, max_runtime_s);
    if (a == Admission::kRefused) return a;
    // The strongest reason wins for the report: owner, then priority, then backfill.
    if (result == Admission::kFree || a == Admission::kOwner ||
        (a == Admission::kPriority && result == Admission::kBackfill)) {
      result = a;
    }
  }
  return result;
}

PlacementResult Reservations::Place(Engine& engine, const PodRequest& request, Mode mode,
                                    int64_t now, std::optional<int64_t> max_runtime_s,
                                    Admission* how, const NodeSet* allowed) const {
  if (how) *how = Admission::kFree;
  const Where anywhere{nullptr, allowed};
  if (reservations_.empty()) return engine.DecideOne(Ask::Pod(request).In(anywhere).As(mode));
  // The policy's own choice first: most pods take nothing held.
  PlacementResult first = engine.DecideOne(Ask::Pod(request).In(anywhere).TestOnly().Quiet());
  if (!first.placed()) {
    if (mode != Mode::kCommit) return first;
    return engine.DecideOne(Ask::Pod(request).In(anywhere).As(mode));  // the same, explained
  }
  Admission a = Admit(request, first.placement, now, max_runtime_s, engine.state());
  std::vector<Candidate> left;
  const std::vector<Candidate>* where = nullptr;
  if (a == Admission::kRefused) {
    // Its choice among what it may take: every node, less the GPUs held from it, less the nodes
    // where its CPU or memory would cut into a reservation's.
    const ClusterState& state = engine.state();
    for (int n = 0; n < state.node_count(); ++n) {
      const NodeId node(n);
      if (!state.accepts_pods(node) || (allowed != nullptr && !allowed->Contains(node))) continue;
      bool cut = false;
      for (const Reservation& r : reservations_) {
        if ((r.cpu_milli == 0 && r.memory_mib == 0) || r.gpus.front().node != node ||
            Exception(request, r, now, max_runtime_s) != Admission::kRefused) {
          continue;
        }
        cut = cut ||
              ResourcesFreeBy(state, node, r.expected_start, now, r.cpu_milli + request.cpu_milli,
                              r.memory_mib + request.memory_mib) > r.expected_start;
      }
      if (cut) continue;
      left.push_back(Candidate{node, ~HeldFrom(request, node, now, max_runtime_s)});
    }
    PlacementResult second =
        engine.DecideOne(Ask::Pod(request).In({&left, nullptr}).TestOnly().Quiet());
    if (!second.placed()) {
      second.outcome = Outcome::kNoFitNow;
      second.reason = "the room it fits is held for a waiting pod (a reservation)";
      return second;
    }
    a = Admit(request, second.placement, now, max_runtime_s, engine.state());
    if (a == Admission::kRefused) {  // the choice's CPU took room a reservation holds
      PlacementResult no;
      no.reason = "the room it fits is held for a waiting pod (a reservation)";
      return no;
    }
    first = std::move(second);
    where = &left;
  }
  if (how) *how = a;
  if (mode == Mode::kTestOnly) return first;
  if (mode == Mode::kApply) {
    TESSERA_CHECK(engine.ApplyUnnamed(first.placement).ok());
    return first;
  }
  return engine.DecideOne(Ask::Pod(request).In(where ? Where{where, nullptr} : anywhere).As(mode));
}

std::vector<PlacementResult> Reservations::PlaceGang(
    Engine& engine, Ask ask, int64_t now, std::span<const PodRequest> owners,
    std::span<const std::optional<int64_t>> max_runtime_s) const {
  TESSERA_CHECK(ask.kind != Ask::Kind::kPod);
  if (reservations_.empty()) return engine.Decide(ask);
  const std::span<const PodRequest> seen = owners.empty() ? ask.pods : owners;
  TESSERA_CHECK(seen.size() == ask.pods.size());
  auto runtime = [&](size_t i) {
    return i < max_runtime_s.size() ? max_runtime_s[i] : std::optional<int64_t>();
  };
  // The policy's own choice first.
  Ask trial = ask;
  std::vector<PlacementResult> first = engine.Decide(trial.TestOnly().Quiet());
  bool refused = false;
  for (size_t i = 0; i < first.size() && !refused; ++i) {
    refused = first[i].placed() && Admit(seen[i], first[i].placement, now, runtime(i),
                                         engine.state()) == Admission::kRefused;
  }
  if (!refused) return ask.mode == Mode::kTestOnly ? first : engine.Decide(ask);
  // Its choice among what every member may take: the GPUs held from none of them, on nodes where
  // no member's CPU or memory would cut into a reservation's.
  const ClusterState& state = engine.state();
  std::vector<Candidate> left;
  auto consider = [&](NodeId node, uint64_t mask) {
    if (!state.accepts_pods(node)) return;
    for (size_t i = 0; i < seen.size(); ++i) {
      mask &= ~HeldFrom(seen[i], node, now, runtime(i));
      for (const Reservation& r : reservations_) {
        if ((r.cpu_milli == 0 && r.memory_mib == 0) || r.gpus.front().node != node ||
            Exception(seen[i], r, now, runtime(i)) != Admission::kRefused) {
          continue;
        }
        if (ResourcesFreeBy(state, node, r.expected_start, now, r.cpu_milli + seen[i].cpu_milli,
                            r.memory_mib + seen[i].memory_mib) > r.expected_start) {
          return;
        }
      }
    }
    left.push_back(Candidate{node, mask});
  };
  if (ask.where.candidates != nullptr) {
    for (const Candidate& c : *ask.where.candidates) consider(c.node, c.gpu_mask);
  } else {
    for (int n = 0; n < state.node_count(); ++n) {
      if (ask.where.nodes == nullptr || ask.where.nodes->Contains(NodeId(n))) {
        consider(NodeId(n), ~uint64_t{0});
      }
    }
  }
  Ask within = ask;
  within.In({&left, nullptr});
  std::vector<PlacementResult> second = engine.Decide(Ask(within).TestOnly().Quiet());
  if (std::none_of(second.begin(), second.end(),
                   [](const PlacementResult& r) { return r.placed(); })) {
    for (PlacementResult& r : second) {
      r.outcome = Outcome::kNoFitNow;
      r.reason = "the room it fits is held for a waiting pod or gang (a reservation)";
    }
    return second;
  }
  return ask.mode == Mode::kTestOnly ? second : engine.Decide(within);
}

}  // namespace tessera::core
