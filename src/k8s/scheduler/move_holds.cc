#include "k8s/scheduler/move_holds.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::k8s {

void MoveHolds::Add(const PodInfo& moved, const std::string& node, uint64_t gpu_mask,
                    std::string where, std::string for_what, TimePoint until) {
  End(moved.key);
  Hold h;
  h.moved = moved.key;
  h.ns = moved.ns;
  h.controller = moved.controller;
  h.request = moved.request;
  h.request.name.clear();
  h.node = node;
  h.gpu_mask = gpu_mask;
  h.where = std::move(where);
  h.for_what = std::move(for_what);
  h.until = until;
  holds_.push_back(std::move(h));
}

bool MoveHolds::Matches(const Hold& h, const PodInfo& pod) {
  if (pod.bound() || h.controller.empty() || pod.ns != h.ns || pod.controller != h.controller) {
    return false;
  }
  core::PodRequest r = pod.request;
  r.name.clear();
  return r == h.request;
}

std::vector<const MoveHolds::Hold*> MoveHolds::Matching(const PodInfo& pod, TimePoint now) const {
  std::vector<const Hold*> out;
  for (const Hold& h : holds_) {
    if (h.until > now && Matches(h, pod)) out.push_back(&h);
  }
  return out;
}

void MoveHolds::End(const std::string& moved) {
  std::erase_if(holds_, [&](const Hold& h) { return h.moved == moved; });
}

bool MoveHolds::Expire(TimePoint now) {
  return std::erase_if(holds_, [&](const Hold& h) { return h.until <= now; }) > 0;
}

std::optional<MoveHolds::TimePoint> MoveHolds::NextExpiry() const {
  std::optional<TimePoint> next;
  for (const Hold& h : holds_) {
    if (!next || h.until < *next) next = h.until;
  }
  return next;
}

bool MoveHolds::KeepsOut(const Hold& h, const PodInfo& pod, TimePoint now) const {
  return h.until > now && pod.priority <= h.request.priority && !Matches(h, pod);
}

std::string MoveHolds::Intrudes(ClusterLedger& ledger, const PodInfo& pod,
                                const core::Placement& placement, TimePoint now) const {
  const core::Cluster& cluster = ledger.engine().cluster();
  for (const Hold& h : holds_) {
    if (!KeepsOut(h, pod, now)) continue;
    const core::NodeId id = cluster.FindNode(h.node);
    if (id != placement.node) continue;
    const std::vector<core::Candidate> at = {core::Candidate{id, h.gpu_mask ? h.gpu_mask : ~0ULL}};
    core::PodRequest r = h.request;
    r.name = StrCat(h.moved, "~replacement");
    const std::vector<std::string> without = {pod.key};
    if (!ledger.WhatIf(r, without, &at).placed()) continue;  // no room there before it
    if (ledger.WhatIf(r, {}, &at).placed()) continue;        // room there still
    return StrCat("the room at ", h.where, " is kept ",
                  std::chrono::duration_cast<std::chrono::seconds>(h.until - now).count(),
                  "s more for the replacement of pod ", h.moved,
                  ", moved there by defragmentation for ", h.for_what);
  }
  return "";
}

core::NodeSet MoveHolds::NodesOutside(const core::Cluster& cluster, const PodInfo& pod,
                                      TimePoint now) const {
  std::vector<bool> allowed(cluster.node_count(), true);
  for (const Hold& h : holds_) {
    if (!KeepsOut(h, pod, now)) continue;
    const core::NodeId id = cluster.FindNode(h.node);
    if (id.valid()) allowed[id.value()] = false;
  }
  return core::NodeSet(std::move(allowed));
}

}  // namespace tessera::k8s
