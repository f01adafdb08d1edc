#include "k8s/scheduler/defrag_answer.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/plan/defrag.h"
#include "records/gpu_indices.h"
#include "records/move.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

NoFitAnswer::Verdict DefragAnswer::Answer(const NoFit& unfit) {
  const TimePoint now = host_.Now();
  if (preemption_.writer() == nullptr || !executor_.enabled() || unfit.members.empty()) {
    return Verdict::Pass();
  }
  // The gang has waited since its last member came; a pod since it came.
  auto since = TimePoint::min();
  for (const std::string& k : unfit.keys) {
    since = std::max(since, host_.pods().Find(k)->first_seen);
  }
  if (!executor_.Eligible(unfit.what, unfit.members, since, now)) return Verdict::Pass();
  Preemption& preemption = preemption_.preemption();
  for (const std::string& k : unfit.keys) {
    if (preemption.RoomBeingMade(host_.ledger(), k, now)) return Verdict::Pass();  // under way
  }
  const DecisionTimer timer(host_.metrics());
  DefragExecutor::Decision d = executor_.Plan(
      host_.ledger(), Promises(unfit, now),
      [this](const std::string& k) -> const PodInfo* {
        const PodTracker::Pod* p = host_.pods().Find(k);
        return p == nullptr ? nullptr : p->info.get();
      },
      [&preemption, now](const PodInfo& p) { return !preemption.Evicting(p.key, now); }, unfit.what,
      unfit.members, [this] { return host_.NewPolicy(); }, host_.levels(), now,
      reservations_ != nullptr ? reservations_->HeldForPlans(unfit.members)
                               : std::vector<plan::DefragInput::Held>{});
  timer.Observe();
  if (d.found) {
    // The plan was made with the earlier nominations' room taken; this checks it still holds as
    // preemption's own plans are checked (a plan that would take kept room waits instead).
    std::vector<core::NodeId> where;
    for (const std::string& n : d.nodes)
      where.push_back(host_.ledger().engine().cluster().FindNode(n));
    std::vector<std::string> movers;
    for (const plan::Move& m : d.moves) movers.push_back(m.pod);
    std::string kept = preemption.TakesKeptRoom(
        host_.ledger(), std::span<const PodInfo* const>(unfit.members).first(where.size()), where,
        std::move(movers), now);
    if (!kept.empty()) {
      d.found = false;
      d.reason = std::move(kept);
    }
  }
  if (!d.found) {
    spdlog::info("defragmentation: no plan for {} {}: {}", unfit.gang() ? "gang" : "pod",
                 unfit.what, d.reason);
    return Verdict::Pass();
  }
  return CarryOut(unfit, d, since, now) ? Verdict::Answered() : Verdict::Pass();
}

Promised DefragAnswer::Promises(const NoFit& unfit, TimePoint now) {
  Promised promised = preemption_.preemption().Promises(host_.ledger(), unfit.members, now);
  // The moved pods' replacements stand at their held destinations (their holds have not been
  // taken: the replacements are not placed yet).
  const core::Cluster& cluster = host_.ledger().engine().cluster();
  for (const MoveHolds::Hold& h : holds_.holds()) {
    const core::NodeId id = cluster.FindNode(h.node);
    if (h.until <= now || h.gpu_mask == 0 || !id.valid()) continue;
    core::PodRequest request = h.request;
    request.name = StrCat(h.moved, " (replacement)");
    const std::vector<core::Candidate> at = {core::Candidate{id, h.gpu_mask}};
    core::PlacementResult r = host_.ledger().WhatIf(request, promised.gone, &at);
    if (!r.placed()) continue;  // its destination is still being vacated: Admit keeps it
    promised.arriving.push_back(
        plan::RunningPod{std::move(request), std::move(r.placement), false});
  }
  return promised;
}

bool DefragAnswer::CarryOut(const NoFit& unfit, const DefragExecutor::Decision& d, TimePoint since,
                            TimePoint now) {
  const std::vector<std::string>& keys = unfit.keys;
  const std::vector<const PodInfo*>& members = unfit.members;
  const bool gang = unfit.gang();
  Preemption& preemption = preemption_.preemption();
  PreemptionWriter& writer = *preemption_.writer();
  std::vector<std::string> movers;
  for (const plan::Move& m : d.moves) movers.push_back(m.pod);
  // The first member is nominated with the movers (all bound, or nothing is recorded), then the
  // others to their nodes.
  std::vector<std::shared_ptr<const PodInfo>> moving =
      preemption.NominateForMoves(host_.pods().Find(keys[0])->info, d.nodes[0], movers, now);
  if (moving.size() != movers.size()) return false;
  for (size_t i = 1; i < keys.size() && i < d.nodes.size(); ++i) {
    preemption.NominateForMoves(host_.pods().Find(keys[i])->info, d.nodes[i], {}, now);
  }
  const PodInfo& first = *members[0];
  const int64_t waited = std::chrono::duration_cast<std::chrono::seconds>(now - since).count();
  const core::Cluster& cluster = host_.ledger().engine().cluster();
  for (size_t i = 0; i < members.size() && i < d.nodes.size(); ++i) {
    writer.Nominate(*members[i], d.nodes[i]);
  }
  std::vector<std::string> distinct = d.nodes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const std::string nodes = StrJoin(distinct, ", ");
  const std::string for_what = StrCat(gang ? "gang " : "pod ", unfit.what);
  const std::string asks =
      gang ? StrCat(members.size(), " pods, priority ", first.priority, ", ",
                    core::DescribeAsk(first.request), " each")
           : StrCat("priority ", first.priority, ", ", core::DescribeAsk(first.request));
  const int64_t hold_s =
      std::chrono::duration_cast<std::chrono::seconds>(executor_.options().hold_for).count();
  std::vector<std::string> said;
  if (SchedulerMetrics* m = host_.metrics())
    m->defrag_moves += static_cast<int64_t>(d.moves.size());
  for (size_t i = 0; i < d.moves.size(); ++i) {
    const plan::Move& m = d.moves[i];
    const std::string from = plan::DescribePlacement(cluster, m.from);
    const std::string to = plan::DescribePlacement(cluster, m.to);
    said.push_back(StrCat(m.pod, " from ", from, " to ", to));
    spdlog::info("defragmentation: evicting pod {} ({} -> {}) for {} on node(s) {}", m.pod, from,
                 to, for_what, nodes);
    // First the record a restarted scheduler reads the hold back from (records/move.h).
    records::MoveRecord record{for_what, cluster.node(m.to.node).name,
                               records::GpuIndicesOfMask(m.to.gpu_mask()), 0};
    record.until_unix = host_.unix_clock().Of(now + executor_.options().hold_for);
    host_.reporter().ReportMoving(*moving[i], records::MovingMessage(record));
    writer.Evict(*moving[i]);
    holds_.Add(*moving[i], cluster.node(m.to.node).name, m.to.gpu_mask(), to, for_what,
               now + executor_.options().hold_for);
    host_.reporter().ReportWarning(
        *moving[i], "DefragmentationMove",
        StrCat("evicted by ", host_.scheduler_name(), " to defragment: ", for_what, " (", asks,
               ") has waited ", waited, "s and fits on node", distinct.size() > 1 ? "s " : " ",
               nodes, " once this pod moves from ", from, " to ", to,
               " (its controller recreates it; the new pod is placed at ", to,
               " if it comes within ", hold_s, "s)"));
  }
  const std::string moved =
      StrCat("moving ", d.moves.size(), " pod(s) to make room on node",
             distinct.size() > 1 ? "s " : " ", nodes, ": ", StrJoin(said, "; "));
  for (const PodInfo* m : members) {
    host_.reporter().ReportNormal(
        *m, "Defragmentation",
        gang ? StrCat("gang ", unfit.what, " waited ", waited, "s: ", moved)
             : StrCat("waited ", waited, "s: ", moved));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string node = i < d.nodes.size() ? d.nodes[i] : d.nodes[0];
    host_.MarkUnschedulable(
        keys[i], gang ? StrCat("gang ", unfit.what, " nominated to node(s) ", nodes,
                               " (this pod to ", node, "): waiting for ", d.moves.size(),
                               " pod(s) moved away for defragmentation (", unfit.reason, ")")
                      : StrCat("nominated to node ", node, ": waiting for ", d.moves.size(),
                               " pod(s) moved away for defragmentation (", unfit.reason, ")"));
  }
  return true;
}

void DefragAnswer::OnPod(const std::shared_ptr<const PodInfo>& pod) {
  if (pod->moving_message.empty() || !pod->bound()) return;
  for (const MoveHolds::Hold& h : holds_.holds()) {
    if (h.moved == pod->key) return;  // ours, or read back already
  }
  // A pod this scheduler moved before a restart of its own: its destination is held again.
  absl::StatusOr<records::MoveRecord> r = records::ParseMovingMessage(pod->moving_message);
  if (!r.ok()) {
    spdlog::warn("pod {}: {}", pod->key, FromAbsl(r.status().message()));
    return;
  }
  const TimePoint until = host_.unix_clock().TimeOf(r->until_unix);
  const int64_t left =
      std::chrono::duration_cast<std::chrono::seconds>(until - host_.Now()).count();
  if (left <= 0) return;
  const uint64_t mask = records::GpuMaskOf(r->gpus);
  const std::string where =
      r->gpus.empty()
          ? r->node
          : StrCat(r->node, " GPU", r->gpus.size() > 1 ? "s " : " ", StrJoin(r->gpus, ","));
  spdlog::info(
      "pod {}: moved for {} before this scheduler started; holding {} for its "
      "replacement {}s more",
      pod->key, r->for_what, where, left);
  holds_.Add(*pod, r->node, mask, where, r->for_what, until);
}

NoFitAnswer::Admission DefragAnswer::Admit(const Placed& placed) {
  if (placed.gang || holds_.empty()) return {};
  const PodInfo& pod = *placed.pods[0];
  const TimePoint now = host_.Now();
  // A destination held for a moved pod's replacement stays free for it: elsewhere, or wait.
  std::string kept = holds_.Intrudes(host_.ledger(), pod, placed.placements[0], now);
  if (kept.empty()) return {};
  return Admission{std::move(kept),
                   holds_.NodesOutside(host_.ledger().engine().cluster(), pod, now)};
}

bool DefragAnswer::PlaceKept(const std::string& key, const PodInfo& pod) {
  if (holds_.empty()) return false;
  std::vector<const MoveHolds::Hold*> held = holds_.Matching(pod, host_.Now());
  if (held.empty()) return false;
  PlaceReplacement(key, pod, held);
  return true;
}

bool DefragAnswer::StartCycle(TimePoint now) {
  for (const PreemptionWriter::Refusal& r : preemption_.refusals()) {
    holds_.End(r.key);  // the pod stays: no move
  }
  return holds_.Expire(now);  // replacements waiting for them go anywhere
}

void DefragAnswer::PlaceReplacement(const std::string& key, const PodInfo& pod,
                                    const std::vector<const MoveHolds::Hold*>& held) {
  ClusterLedger& ledger = host_.ledger();
  const core::Cluster& cluster = ledger.engine().cluster();
  const DecisionTimer timer(host_.metrics());
  std::string why;
  for (const MoveHolds::Hold* h : held) {
    const core::NodeId id = cluster.FindNode(h->node);
    if (!id.valid()) continue;
    const std::vector<core::Candidate> at = {
        core::Candidate{id, h->gpu_mask ? h->gpu_mask : ~0ULL}};
    core::PlacementResult r = ledger.DecideWith(pod, pod.request, &at, nullptr);
    if (!r.placed()) {
      if (why.empty()) why = r.reason;
      continue;
    }
    timer.Observe();
    const std::string moved = h->moved, where = h->where, for_what = h->for_what;
    holds_.End(moved);
    spdlog::info("defragmentation: pod {} replaces moved pod {}: placed at {}", key, moved, where);
    host_.reporter().ReportNormal(
        pod, "DefragmentationDestination",
        StrCat("placed at ", where, ", where defragmentation for ", for_what, " moved pod ", moved,
               " (this pod replaces it)"));
    host_.Bind(key, r.placement);
    return;
  }
  timer.Observe();
  const MoveHolds::Hold& h = *held[0];
  host_.MarkUnschedulable(
      key, StrCat("replacement of pod ", h.moved, ", moved by defragmentation for ", h.for_what,
                  ": waiting for its destination ", h.where, " (kept for it ",
                  std::chrono::duration_cast<std::chrono::seconds>(h.until - host_.Now()).count(),
                  "s more, then placed anywhere)", why.empty() ? "" : StrCat(": ", why)));
}

}  // namespace tessera::k8s
