#include "k8s/scheduler/dra_allocator.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"
#include "k8s/dra/extended.h"
#include "records/names.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

bool DraAllocator::OnSlice(Change change, std::shared_ptr<const dra::SliceInfo> slice) {
  if (cache_.OnSlice(change == Change::kDeleted, std::move(slice)).empty()) return false;
  Reconsider();
  return true;
}

bool DraAllocator::OnClass(Change change, std::shared_ptr<const dra::ClassInfo> device_class) {
  return cache_.OnClass(change == Change::kDeleted, std::move(device_class));
}

bool DraAllocator::OnClaim(Change change, std::shared_ptr<const dra::ClaimInfo> claim) {
  const std::string key = claim->key;
  awaiting_.erase(key);
  cache_.OnClaim(change == Change::kDeleted, std::move(claim));
  Account(key);
  return true;  // a claim created, allocated or freed may let a pod go on
}

bool DraAllocator::Account(const std::string& key) {
  const std::string held_key = ClaimKey(key);
  std::shared_ptr<const dra::ClaimInfo> claim = cache_.Claim(key);
  if (auto f = inflight_.find(key); f != inflight_.end()) {
    // Ours: the tentative holding stays while the writes are in flight, and after they
    // succeeded until the watch shows the allocation (or the claim is gone).
    const bool written = written_.contains(key);
    if (!written || (claim && !claim->allocation)) return false;
    if (!claim && awaiting_.contains(key)) return false;  // created by us, not seen yet
    inflight_.erase(f);
    written_.erase(key);
  }
  unresolved_.erase(key);
  mig_claims_.erase(key);
  if (!claim || !claim->allocation) return ledger_.Drop(held_key);
  for (const dra::AllocatedDevice& r : claim->allocation->results) {
    const dra::NodeDevices* devices = cache_.Devices(claim->allocation->node);
    const dra::Device* d = devices == nullptr ? nullptr : devices->Find(r.pool, r.device);
    bool whole = false;
    if (r.driver == cache_.driver() && d != nullptr &&
        dra::GpuIndexOf(*d, cache_.driver(), &whole) >= 0 && !whole) {
      mig_claims_.insert(key);
    }
  }
  absl::StatusOr<records::Assignment> gpus = planner_.HoldingOf(*claim, ledger_.engine().cluster());
  Holding h;
  h.node = claim->allocation->node;
  if (!gpus.ok()) {
    unresolved_.insert(key);
    h.unreadable = StrCat("ResourceClaim ", key, ": ", FromAbsl(gpus.status().message()));
  } else if (gpus->gpus.empty()) {
    return ledger_.Drop(held_key);  // none of tessera's devices
  } else {
    h.gpus = *std::move(gpus);
  }
  const Holding* now = ledger_.Find(held_key);
  if (now != nullptr && *now == h && ledger_.Accounted(held_key)) return false;
  ledger_.Hold(held_key, std::move(h), /*bound=*/true);
  return true;
}

void DraAllocator::Reconsider() {
  std::vector<std::string> keys(unresolved_.begin(), unresolved_.end());
  for (const std::string& k : keys) Account(k);
}

void DraAllocator::OnNodesChanged() {
  Reconsider();
  if (ledger_.node_changes_applied() == seen_node_changes_) return;
  seen_node_changes_ = ledger_.node_changes_applied();
  // Which GPUs are in MIG mode is the nodes' (the inventory), not the slices': eligibilities of
  // MIG requests computed before may be stale.
  planner_.Invalidate();
  std::vector<std::string> keys(mig_claims_.begin(), mig_claims_.end());
  for (const std::string& k : keys) Account(k);
}

bool DraAllocator::ServesExtended(const PodInfo& pod) const {
  if (!pod.extended.error.empty()) return false;
  for (const dra::ExtendedRequest& r : pod.extended.requests) {
    if (cache_.ClassForExtendedResource(r.resource)) return true;
  }
  return false;
}

DraAllocator::ExtendedClaim DraAllocator::ExtendedOf(const PodInfo& pod) {
  ExtendedClaim x;
  // Extended resources a DeviceClass serves (extended.h): one more claim, made for the pod.
  x.plan = dra::PlanExtendedClaim(pod.extended, cache_);
  if (!x.plan.error.empty()) {
    x.invalid = x.plan.error;
    return x;
  }
  bool gpus_served = false;
  for (const nlohmann::json& m : x.plan.mappings) {
    gpus_served |= m.value("resourceName", "") == records::kGpuResource;
  }
  if (pod.request.gpu.kind != core::GpuAsk::Kind::kNone &&
      !(gpus_served && pod.request.gpu.kind == core::GpuAsk::Kind::kWhole)) {
    x.invalid = x.plan.served()
                    ? "it asks for GPU shares or MIG (tessera.dev/gpu-memory, "
                      "tessera.dev/gpu-compute, tessera.dev/mig), which no DeviceClass serves as "
                      "an extended resource in DRA mode; ask them through a ResourceClaim"
                    : "it asks for GPUs both in resources.limits (tessera.dev/gpu...) and "
                      "through spec.resourceClaims; use one or the other";
    return x;
  }
  if (!x.plan.served()) return x;
  if (!pod.extended.claim.empty()) {
    x.claim = cache_.Claim(StrCat(pod.ns, "/", pod.extended.claim));
    if (!x.claim) {
      x.wait = StrCat("waiting for ResourceClaim ", pod.ns, "/", pod.extended.claim,
                      " (the pod's extended-resource claim) to show in the watch");
    }
    return x;
  }
  x.claim = cache_.ExtendedClaimOf(pod.uid);  // made by an earlier attempt
  if (!x.claim) {
    x.claim = dra::ExtendedClaimInMemory(pod.ns, dra::NewExtendedClaimName(pod.name), pod.name,
                                         pod.uid, x.plan);
    x.create = dra::ExtendedClaimObject(*x.claim);
  }
  return x;
}

void DraAllocator::AddWrite(const PodInfo& pod, const ExtendedClaim& ext,
                            const dra::PlannedClaim& c, const nlohmann::json& allocation,
                            Decision* d) {
  ClaimWrite w{c.claim, allocation, c.allocate || !c.reserved};
  if (ext.claim && c.claim == ext.claim) {
    w.create = ext.create;
    if (pod.extended.claim != c.claim->name) w.request_mappings = ext.plan.mappings;
  }
  if (!w.allocation.is_null() || w.reserve || !w.create.is_null() ||
      !w.request_mappings.is_null()) {
    d->writes.push_back(std::move(w));
  }
}

DraAllocator::Decision DraAllocator::Decide(const PodInfo& pod) {
  Decision d;
  core::PlacementResult& r = d.result;
  const core::Cluster& cluster = ledger_.engine().cluster();
  const ExtendedClaim ext = ExtendedOf(pod);
  if (!ext.invalid.empty()) {
    r.outcome = core::Outcome::kNeverFits;
    r.reason = StrCat("invalid pod: ", ext.invalid);
    return d;
  }
  if (!ext.wait.empty()) {
    r.reason = ext.wait;
    return d;
  }
  // The writes for one planned claim (none when it is allocated and reserved for the pod and,
  // for the extended-resource claim, the pod names it already).
  auto add_write = [&](const dra::PlannedClaim& c, const nlohmann::json& allocation) {
    AddWrite(pod, ext, c, allocation, &d);
  };
  dra::PodPlan plan = planner_.Plan(pod.claims, pod.ns, pod.uid, cluster, ext.claim);
  if (plan.kind != dra::PodPlan::Kind::kReady) {
    r.outcome = plan.kind == dra::PodPlan::Kind::kInvalid ? core::Outcome::kNeverFits
                                                          : core::Outcome::kNoFitNow;
    r.reason = plan.kind == dra::PodPlan::Kind::kInvalid ? StrCat("invalid claim: ", plan.reason)
                                                         : plan.reason;
    return d;
  }
  core::PodRequest request = pod.request;
  request.gpu = core::GpuAsk{};  // the GPUs come from the claims (extended: no longer asked)
  if (!plan.fixed_node.empty()) {
    const core::NodeId id = cluster.FindNode(plan.fixed_node);
    if (!id.valid() || !cluster.live(id)) {
      r.reason = StrCat("the pod's claims are allocated on node ", plan.fixed_node,
                        ", which this scheduler does not manage (yet)");
      return d;
    }
    std::vector<core::Candidate> here = {core::Candidate{id, 0}};
    r = ledger_.DecideWith(pod, request, &here, nullptr);
    if (!r.placed()) {
      r.reason = StrCat("the pod's claims are allocated on node ", plan.fixed_node, ": ", r.reason);
      return d;
    }
    for (const dra::PlannedClaim& c : plan.options[0].claims) add_write(c, nullptr);
    return d;
  }
  std::vector<std::string> reasons;
  for (const dra::PodPlan::Option& o : plan.options) {
    if (!o.why_none.empty()) {
      reasons.push_back(o.why_none);
      continue;
    }
    request.gpu = o.gpu;
    r = ledger_.DecideWith(pod, request, o.use_candidates ? &o.candidates : nullptr,
                           o.use_candidates ? nullptr : o.nodes.get());
    if (!r.placed()) {
      reasons.push_back(r.reason);
      continue;
    }
    absl::StatusOr<std::vector<dra::ClaimAllocation>> allocs =
        planner_.Allocate(o, r.placement, cluster);
    if (!allocs.ok()) {
      ledger_.Unplace(pod.key);
      reasons.push_back(std::string(FromAbsl(allocs.status().message())));
      r = core::PlacementResult{};
      continue;
    }
    size_t next = 0;
    for (const dra::PlannedClaim& c : o.claims) {
      if (c.allocate) {
        const dra::ClaimAllocation& a = (*allocs)[next++];
        add_write(c, a.allocation);
        d.holdings.emplace_back(c.claim->key, a.holding);
      } else {
        add_write(c, nullptr);
      }
    }
    return d;
  }
  r.outcome = core::Outcome::kNoFitNow;
  r.reason = StrJoin(reasons, "; ");
  return d;
}

std::vector<DraAllocator::Decision> DraAllocator::DecideGang(
    const std::vector<const PodInfo*>& members, const std::string& gang_key) {
  const core::Cluster& cluster = ledger_.engine().cluster();
  std::vector<Decision> out(members.size());
  auto fail_all = [&](const std::string& reason) {
    for (Decision& d : out) {
      d = Decision{};
      d.result.reason = reason;
    }
    return out;
  };
  std::vector<dra::PodPlan> plans;
  std::vector<ExtendedClaim> extended;
  std::vector<core::PodRequest> requests;
  // Per node, the GPUs every member may use.
  std::vector<uint64_t> masks(cluster.node_count(), ~0ULL);
  for (const PodInfo* m : members) {
    // Classic members (tessera.dev/gpu: N) served through a DeviceClass's extendedResourceName
    // get their extended-resource claims, allocated with the rest of the gang.
    ExtendedClaim ext = ExtendedOf(*m);
    if (!ext.invalid.empty() || !ext.wait.empty()) {
      return fail_all(
          StrCat("gang ", gang_key, ": member ", m->key, ": ",
                 ext.invalid.empty() ? ext.wait : StrCat("invalid pod: ", ext.invalid)));
    }
    dra::PodPlan plan = planner_.Plan(m->claims, m->ns, m->uid, cluster, ext.claim);
    if (plan.kind != dra::PodPlan::Kind::kReady) {
      return fail_all(StrCat("gang ", gang_key, ": member ", m->key, ": ", plan.reason));
    }
    if (!plan.fixed_node.empty()) {
      return fail_all(StrCat("gang ", gang_key, ": member ", m->key,
                             " has claims allocated already (node ", plan.fixed_node,
                             "); a gang is allocated all together"));
    }
    const dra::PodPlan::Option& o = plan.options[0];
    if (!o.why_none.empty()) {
      return fail_all(StrCat("gang ", gang_key, ": member ", m->key, ": ", o.why_none));
    }
    std::vector<uint64_t> mine(cluster.node_count(), 0);
    if (o.use_candidates) {
      for (const core::Candidate& c : o.candidates) mine[c.node.value()] |= c.gpu_mask;
    } else if (o.nodes) {
      for (int n = 0; n < cluster.node_count(); ++n) {
        if (o.nodes->Contains(core::NodeId(n))) mine[n] = ~0ULL;
      }
    } else {
      std::fill(mine.begin(), mine.end(), ~0ULL);
    }
    for (int n = 0; n < cluster.node_count(); ++n) masks[n] &= mine[n];
    core::PodRequest req = m->request;
    req.gpu = o.gpu;
    requests.push_back(std::move(req));
    plans.push_back(std::move(plan));
    extended.push_back(std::move(ext));
  }
  std::vector<core::Candidate> candidates;
  for (int n = 0; n < cluster.node_count(); ++n) {
    if (masks[n] != 0) candidates.push_back(core::Candidate{core::NodeId(n), masks[n]});
  }
  std::vector<core::PlacementResult> results =
      ledger_.DecideGangWith(members, std::move(requests), gang_key, &candidates);
  if (results.empty() || !results[0].placed()) {
    std::vector<Decision> failed(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      if (i < results.size()) failed[i].result = results[i];
    }
    return failed;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    const dra::PodPlan::Option& o = plans[i].options[0];
    absl::StatusOr<std::vector<dra::ClaimAllocation>> allocs =
        planner_.Allocate(o, results[i].placement, cluster);
    if (!allocs.ok()) {
      for (const PodInfo* m : members) ledger_.Unplace(m->key);
      return fail_all(StrCat("gang ", gang_key, ": member ", members[i]->key, ": ",
                             FromAbsl(allocs.status().message())));
    }
    out[i].result = results[i];
    size_t next = 0;
    for (const dra::PlannedClaim& c : o.claims) {
      if (c.allocate) {
        const dra::ClaimAllocation& a = (*allocs)[next++];
        AddWrite(*members[i], extended[i], c, a.allocation, &out[i]);
        out[i].holdings.emplace_back(c.claim->key, a.holding);
      } else {
        AddWrite(*members[i], extended[i], c, nullptr, &out[i]);
      }
    }
  }
  return out;
}

void DraAllocator::Hold(const PodInfo& pod, const Decision& d) {
  const core::Cluster& cluster = ledger_.engine().cluster();
  const std::string node = cluster.node(d.result.placement.node).name;
  ledger_.Unplace(pod.key);
  Holding own;
  own.node = node;
  own.cpu_milli = d.result.placement.cpu_milli;
  own.memory_mib = d.result.placement.memory_mib;
  ledger_.Hold(pod.key, std::move(own), /*bound=*/false);
  for (const auto& [claim, gpus] : d.holdings) {
    Holding h;
    h.node = node;
    h.gpus = gpus;
    ledger_.Hold(ClaimKey(claim), std::move(h), /*bound=*/false);
    inflight_[claim] = pod.key;
    inflight_of_[pod.key].insert(claim);
  }
  for (const ClaimWrite& w : d.writes) {
    if (!w.create.is_null()) awaiting_.insert(w.claim->key);
  }
}

void DraAllocator::BindDone(const std::string& pod_key, bool ok) {
  auto it = inflight_of_.find(pod_key);
  if (it == inflight_of_.end()) return;
  std::set<std::string> claims = std::move(it->second);
  inflight_of_.erase(it);
  for (const std::string& c : claims) {
    auto f = inflight_.find(c);
    if (f == inflight_.end() || f->second != pod_key) continue;
    if (ok) {
      written_.insert(c);
    } else {
      // Failed: the claim is what the watch shows. (A write that succeeded before a later step
      // failed is accounted again when its event comes.)
      inflight_.erase(f);
      written_.erase(c);
      awaiting_.erase(c);
    }
    Account(c);
  }
}

}  // namespace tessera::k8s
