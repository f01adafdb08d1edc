#include "k8s/scheduler/reservation_answer.h"

#include <algorithm>
#include <cstdlib>

#include "absl/time/time.h"
#include "common/strings.h"
#include "records/gpu_indices.h"
#include "records/names.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

std::string UnixText(int64_t t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(t), absl::UTCTimeZone());
}

std::string Span(int64_t seconds) {
  if (seconds < 120) return StrCat(seconds, "s");
  if (seconds < 7200)
    return StrCat(seconds / 60, "m", seconds % 60 ? StrCat(seconds % 60, "s") : "");
  return StrCat(seconds / 3600, "h", (seconds % 3600) / 60, "m");
}

}  // namespace

core::PodRequest ReservationAnswer::RequestOf(const PodInfo& pod) {
  core::PodRequest r = pod.request;
  if (r.gang) r.gang->name = StrCat(pod.ns, "/", r.gang->name);
  return r;
}

void ReservationAnswer::Started(const std::string& key, const PodInfo& pod,
                                const core::Placement& placement, bool placed_now) {
  if (!enabled()) return;
  const int64_t now = host_.unix_clock().Now();
  int64_t start = now;
  if (!placed_now && pod.started_unix >= 0 && pod.started_unix < now) start = pod.started_unix;
  if (running_.contains(key)) reservations_.Ended(key);  // on another node, say
  running_.insert(key);
  reservations_.Started(key, placement, start, pod.max_runtime_s);
  Publish();
}

void ReservationAnswer::Ended(const std::string& key) {
  if (!enabled()) return;
  reservations_.Ended(key);
  running_.erase(key);
  admitted_.erase(key);
}

std::string ReservationAnswer::Describe(const core::Reservation& r) {
  const core::Cluster& cluster = host_.ledger().engine().cluster();
  std::vector<std::string> where;
  for (const core::Candidate& c : r.gpus) {
    std::vector<std::string> gpus;
    for (uint64_t m = c.gpu_mask; m; m &= m - 1) gpus.push_back(StrCat(__builtin_ctzll(m)));
    where.push_back(StrCat("node ", cluster.node(c.node).name, " GPUs ", StrJoin(gpus, ",")));
  }
  const int64_t in = std::max<int64_t>(0, r.expected_start - host_.unix_clock().Now());
  return StrCat(StrJoin(where, "; "), ", expected free in about ", Span(in), " (at ",
                UnixText(r.expected_start), ")");
}

void ReservationAnswer::Publish() {
  if (SchedulerMetrics* m = host_.metrics()) {
    m->reservations_held = static_cast<int64_t>(reservations_.reservations().size());
  }
}

bool ReservationAnswer::Refresh(std::span<const Waiting> waiting) {
  if (!enabled()) return false;
  const TimePoint now_t = host_.Now();
  refreshed_ = now_t;
  const int64_t now = host_.unix_clock().Of(now_t);
  // The requests as the reservations name owners, kept while Update reads them.
  std::vector<std::vector<core::PodRequest>> requests;
  requests.reserve(waiting.size());
  std::vector<core::Reservations::Waiting> list;
  list.reserve(waiting.size());
  for (const Waiting& w : waiting) {
    std::vector<core::PodRequest>& rs = requests.emplace_back();
    for (const PodInfo* p : w.pods) rs.push_back(RequestOf(*p));
    list.push_back({w.owner, rs, w.pods.empty() ? 0 : w.pods.front()->priority, w.since});
  }
  const size_t before = reservations_.reservations().size();
  const int made = reservations_.Update(now, list, host_.ledger().engine());
  const bool dropped = reservations_.reservations().size() - static_cast<size_t>(made) < before;
  if (SchedulerMetrics* m = host_.metrics()) m->reservations_made += made;
  Publish();
  // Tell the owners whose room is new or moved.
  absl::flat_hash_map<std::string_view, const Waiting*> by_owner;
  for (const Waiting& w : waiting) by_owner.emplace(w.owner, &w);
  absl::flat_hash_map<std::string, std::string> told;
  for (const core::Reservation& r : reservations_.reservations()) {
    std::string where;
    for (const core::Candidate& c : r.gpus) StrAppend(&where, c.node.value(), ":", c.gpu_mask, ";");
    auto last = told_.find(r.owner);
    const bool news = last == told_.end() || last->second != where;
    told[r.owner] = where;
    auto w = by_owner.find(r.owner);
    if (!news || w == by_owner.end()) continue;
    const std::string message = StrCat(
        "room reserved for ",
        w->second->pods.size() > 1 || w->second->pods[0]->request.gang ? StrCat("gang ", r.owner)
                                                                       : StrCat("pod ", r.owner),
        ": ", Describe(r), "; until then other pods may use it only if they end by then (",
        kMaxRuntimeAnnotation, " or activeDeadlineSeconds) or outrank it");
    spdlog::info("reservation: {}", message);
    for (const PodInfo* p : w->second->pods) host_.reporter().ReportNormal(*p, "Reserved", message);
  }
  told_ = std::move(told);
  absl::flat_hash_map<std::string_view, const core::Reservation*> held;
  for (const core::Reservation& r : reservations_.reservations()) held.emplace(r.owner, &r);
  WriteConditions(waiting, held);
  return dropped;
}

records::ReservationRecord ReservationAnswer::RecordOf(const core::Reservation& r,
                                                       bool gang) const {
  const core::Cluster& cluster = host_.ledger().engine().cluster();
  records::ReservationRecord record{.gang = gang, .owner = r.owner};
  for (const core::Candidate& c : r.gpus) {
    records::ReservationRecord::Site& site = record.sites.emplace_back();
    site.node = cluster.node(c.node).name;
    site.gpus = records::GpuIndicesOfMask(c.gpu_mask);
  }
  record.expected_start_unix = r.expected_start;
  return record;
}

void ReservationAnswer::WriteConditions(
    std::span<const Waiting> waiting,
    const absl::flat_hash_map<std::string_view, const core::Reservation*>& held) {
  // What a pod's condition says now: what this scheduler wrote, else what the pod shows.
  auto current = [&](const PodInfo& p) -> std::optional<records::ReservationRecord> {
    if (auto it = conditions_.find(p.key); it != conditions_.end()) return it->second;
    if (p.reservation_message.empty()) return std::nullopt;
    absl::StatusOr<records::ReservationRecord> r =
        records::ParseReservationMessage(p.reservation_message);
    // Unreadable (written by someone else): rewritten or released as if it said something else.
    if (!r.ok()) return records::ReservationRecord{.owner = "?"};
    return *r;
  };
  absl::flat_hash_map<std::string, std::optional<records::ReservationRecord>> written;
  for (const Waiting& w : waiting) {
    auto h = held.find(w.owner);
    for (const PodInfo* p : w.pods) {
      std::optional<records::ReservationRecord> now = current(*p);
      if (h == held.end()) {
        // Not held: a True condition (ours, or a predecessor's) is released once.
        if (now) {
          host_.reporter().ReportReservation(
              *p, false,
              "the room reserved for it is no longer held (it started elsewhere, its estimate "
              "proved wrong and it is chosen again, or pods that waited longer come first)",
              host_.unix_clock().Now());
        }
        // Remembered until the pod shows it, so that it is not said again meanwhile.
        if (now || (conditions_.contains(p->key) && !p->reservation_message.empty())) {
          written[p->key] = std::nullopt;
        }
        continue;
      }
      const core::Reservation& r = *h->second;
      records::ReservationRecord want = RecordOf(r, p->request.gang.has_value());
      if (now && now->gang == want.gang && now->owner == want.owner && now->sites == want.sites &&
          std::abs(now->expected_start_unix - want.expected_start_unix) < kRewriteAfterS) {
        written[p->key] = std::move(now);
        continue;
      }
      host_.reporter().ReportReservation(*p, true, records::ReservationMessage(want), r.since);
      written[p->key] = std::move(want);
    }
  }
  conditions_ = std::move(written);
}

core::PlacementResult ReservationAnswer::Decide(const PodInfo& pod) {
  if (!enabled()) return host_.ledger().Decide(pod);
  core::Admission how = core::Admission::kFree;
  return host_.ledger().DecideReserved(pod, RequestOf(pod), reservations_, host_.unix_clock().Now(),
                                       &how);
}

std::vector<core::PlacementResult> ReservationAnswer::DecideGang(
    const std::vector<const PodInfo*>& members, const std::vector<std::string>& running,
    const std::string& gang_key) {
  if (!enabled()) return host_.ledger().DecideGangMembers(members, running, gang_key);
  std::vector<core::PodRequest> owners;
  std::vector<std::optional<int64_t>> runtimes;
  for (const PodInfo* m : members) {
    owners.push_back(RequestOf(*m));
    runtimes.push_back(m->max_runtime_s);
  }
  const ClusterLedger::Reserved reserved{reservations_, owners, runtimes, host_.unix_clock().Now()};
  return host_.ledger().DecideGangMembers(members, running, gang_key, &reserved);
}

void ReservationAnswer::NotePlaced(const std::string& key, const PodInfo& pod,
                                   const core::Placement& placement) {
  auto it = admitted_.find(key);
  if (it == admitted_.end()) return;
  const core::Admission how = it->second;
  admitted_.erase(it);
  if (how != core::Admission::kBackfill) return;
  if (SchedulerMetrics* m = host_.metrics()) m->backfilled_pods++;
  const std::string message =
      StrCat("placed on node ", host_.ledger().engine().cluster().node(placement.node).name,
             " on room reserved for a waiting pod: its declared run time (",
             Span(pod.max_runtime_s.value_or(0)),
             ") ends before that pod is expected to start; it is evicted if it runs longer");
  spdlog::info("pod {}: backfilled: {}", key, message);
  host_.reporter().ReportNormal(pod, "Backfilled", message);
}

std::optional<core::NodeSet> ReservationAnswer::Unheld(std::span<const PodInfo* const> pods) {
  if (!enabled() || reservations_.reservations().empty()) return std::nullopt;
  const int64_t now = host_.unix_clock().Now();
  const core::Engine& engine = host_.ledger().engine();
  const int nodes = engine.cluster().node_count();
  std::vector<bool> allowed(nodes, true);
  bool any = false;
  for (const PodInfo* p : pods) {
    const core::PodRequest r = RequestOf(*p);
    for (const core::Reservation& res : reservations_.reservations()) {
      for (const core::Candidate& c : res.gpus) {
        if (!allowed[c.node.value()]) continue;
        // A pod's reservation holds its node's CPU and memory too: the node is kept whole.
        if (reservations_.HeldFrom(r, c.node, now, p->max_runtime_s) != 0) {
          allowed[c.node.value()] = false;
          any = true;
        }
      }
    }
  }
  if (!any) return std::nullopt;
  return core::NodeSet(std::move(allowed));
}

std::vector<plan::DefragInput::Held> ReservationAnswer::HeldForPlans(
    std::span<const PodInfo* const> members) {
  std::vector<plan::DefragInput::Held> out;
  if (!enabled() || reservations_.reservations().empty()) return out;
  const int64_t now = host_.unix_clock().Now();
  for (const core::Reservation& r : reservations_.reservations()) {
    for (const core::Candidate& c : r.gpus) {
      // The part of this reservation's GPUs held from some member (reservations hold disjoint
      // GPUs, so HeldFrom's mask on this node names this reservation's only within c).
      uint64_t refused = 0;
      for (const PodInfo* m : members) {
        refused |= reservations_.HeldFrom(RequestOf(*m), c.node, now, m->max_runtime_s);
      }
      refused &= c.gpu_mask;
      if (refused != 0) out.push_back({core::Candidate{c.node, refused}, false});
      if ((c.gpu_mask & ~refused) != 0) {
        out.push_back({core::Candidate{c.node, c.gpu_mask & ~refused}, true});
      }
    }
  }
  return out;
}

NoFitAnswer::Verdict ReservationAnswer::Answer(const NoFit& unfit) {
  if (!enabled() || unfit.members.empty()) return Verdict::Pass();
  const std::string owner = unfit.gang() ? unfit.what : unfit.keys[0];
  for (const core::Reservation& r : reservations_.reservations()) {
    if (r.owner == owner) return Verdict::Pass(StrCat("; room is reserved for it: ", Describe(r)));
  }
  return Verdict::Pass();
}

NoFitAnswer::Admission ReservationAnswer::Admit(const Placed& placed) {
  if (!enabled() || reservations_.reservations().empty()) {
    if (!placed.gang && !placed.pods.empty()) admitted_.erase(placed.pods[0]->key);
    return {};
  }
  const int64_t now = host_.unix_clock().Now();
  const core::ClusterState& state = host_.ledger().engine().state();
  for (size_t i = 0; i < placed.pods.size(); ++i) {
    const PodInfo& pod = *placed.pods[i];
    // The placement is committed already: its CPU and memory are not free in `state`, so they
    // are not counted again.
    core::Placement p = placed.placements[i];
    p.cpu_milli = 0;
    p.memory_mib = 0;
    const core::Admission a = reservations_.Admit(RequestOf(pod), p, now, pod.max_runtime_s, state);
    if (!placed.gang) admitted_[pod.key] = a;
    if (a != core::Admission::kRefused) continue;
    Admission refusal;
    refusal.refused = StrCat(
        "the room it fits is reserved for a pod or gang that has waited longer; it may use it "
        "only if it declares a run time (",
        kMaxRuntimeAnnotation, ") that ends before that one is expected to start");
    if (!placed.gang) {
      const PodInfo* one[] = {&pod};
      std::optional<core::NodeSet> elsewhere = Unheld(one);
      if (elsewhere) refusal.elsewhere = std::move(elsewhere);
    }
    return refusal;
  }
  return {};
}

}  // namespace tessera::k8s
