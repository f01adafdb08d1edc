#include "k8s/dra/planner.h"

#include <algorithm>
#include <mutex>
#include <random>
#include <set>
#include <tuple>

#include "common/status.h"
#include "common/strings.h"
#include "records/dra_allocation.h"
#include "records/dra_names.h"

namespace tessera::k8s::dra {
namespace {

constexpr int kMaxOptions = 16;  // firstAvailable combinations tried per pod
constexpr size_t kMaxConsumers = 256;

std::string RequestLabel(const ClaimInfo& claim, const ExactRequest& r) {
  return StrCat("claim ", claim.key, " request ", r.name);
}

// Whether a device's taint lets the request have it: only NoSchedule and NoExecute taints count
// (None is informational), matched as every taint is (k8s/taints/taints.h).
bool TaintAllows(const std::vector<DeviceToleration>& tolerations, const DeviceTaint& taint) {
  if (taint.effect != "NoSchedule" && taint.effect != "NoExecute") return true;
  return Tolerated(tolerations, taint);
}

using records::dra::MemoryMib;

// Engine units of a consumed compute (percent -> milli-GPU).
int32_t ComputeMilli(int64_t milli) { return static_cast<int32_t>((milli + 99) / 100); }

// Every request's requested capacity, keyed by its local name.
std::map<std::string, int64_t> LocalRequests(const ExactRequest& r, const std::string& driver) {
  std::map<std::string, int64_t> out;
  for (const auto& [name, v] : r.capacity) out[LocalCapacityName(name, driver)] = v;
  return out;
}

}  // namespace

std::optional<int64_t> ConsumedCapacity(std::optional<int64_t> requested,
                                        const DeviceCapacity& capacity) {
  int64_t consumed = 0;
  if (!requested) {
    consumed = capacity.policy && capacity.policy->default_milli ? *capacity.policy->default_milli
                                                                 : capacity.value;
  } else if (!capacity.policy) {
    consumed = *requested;
  } else if (capacity.policy->has_range && capacity.policy->min) {
    const RequestPolicy& p = *capacity.policy;
    consumed = std::max(*requested, *p.min);
    if (p.step && *p.step > 0) {
      const int64_t over = consumed - *p.min;
      consumed = *p.min + (over + *p.step - 1) / *p.step * *p.step;
    }
    if (p.max && consumed > *p.max) return std::nullopt;
  } else if (!capacity.policy->valid_values.empty()) {
    auto it = std::lower_bound(capacity.policy->valid_values.begin(),
                               capacity.policy->valid_values.end(), *requested);
    if (it == capacity.policy->valid_values.end()) return std::nullopt;
    consumed = *it;
  } else {
    consumed = *requested;
  }
  if (consumed > capacity.value || consumed < 0) return std::nullopt;
  return consumed;
}

std::string NewShareId() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi, lo;
  {
    std::lock_guard<std::mutex> lock(mu);
    hi = rng();
    lo = rng();
  }
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff,
                     hi & 0xffff, lo >> 48, lo & 0xffffffffffffULL);
}

nlohmann::json NodeSelectorFor(const std::string& node) {
  return {
      {"nodeSelectorTerms",
       {{{"matchFields", {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {node}}}}}}}}};
}

std::shared_ptr<const CelProgram> ClaimPlanner::Compiled(const std::string& expression,
                                                         std::string* error) {
  auto it = programs_.find(expression);
  if (it == programs_.end()) {
    absl::StatusOr<std::shared_ptr<const CelProgram>> p = CelProgram::Compile(expression);
    std::pair<std::shared_ptr<const CelProgram>, std::string> entry;
    if (p.ok()) {
      entry.first = *p;
    } else {
      entry.second = std::string(FromAbsl(p.status().message()));
    }
    it = programs_.emplace(expression, std::move(entry)).first;
  }
  if (!it->second.second.empty()) *error = it->second.second;
  return it->second.first;
}

std::shared_ptr<const Eligibility> ClaimPlanner::EligibilityOf(const ExactRequest& r,
                                                               const core::Cluster& cluster) {
  if (generation_ != cache_.generation() || node_count_ != cluster.node_count() ||
      live_count_ != cluster.live_count()) {
    eligibility_.clear();
    generation_ = cache_.generation();
    node_count_ = cluster.node_count();
    live_count_ = cluster.live_count();
  }
  // Everything the answer depends on besides devices, classes and nodes.
  std::string key = r.device_class;
  for (const std::string& s : r.selectors) StrAppend(&key, "\x1f", s);
  StrAppend(&key, "\x1e");
  for (const auto& [n, v] : r.capacity) StrAppend(&key, n, "=", v, ",");
  StrAppend(&key, "\x1e");
  for (const DeviceToleration& t : r.tolerations) {
    StrAppend(&key, t.key, "/", t.op, "/", t.value, "/", t.effect, ",");
  }
  auto it = eligibility_.find(key);
  if (it != eligibility_.end()) return it->second;
  std::shared_ptr<const Eligibility> e = Compute(r, cluster);
  eligibility_[key] = e;
  return e;
}

std::shared_ptr<const Eligibility> ClaimPlanner::Compute(const ExactRequest& r,
                                                         const core::Cluster& cluster) {
  auto e = std::make_shared<Eligibility>();
  const std::string& driver = cache_.driver();
  std::shared_ptr<const ClassInfo> device_class = cache_.Class(r.device_class);
  std::vector<std::shared_ptr<const CelProgram>> programs;
  std::vector<std::string> expressions;
  if (device_class) expressions = device_class->selectors;
  expressions.insert(expressions.end(), r.selectors.begin(), r.selectors.end());
  for (const std::string& x : expressions) {
    std::string error;
    std::shared_ptr<const CelProgram> p = Compiled(x, &error);
    if (!p) {
      e->error = StrCat("selector `", x, "` cannot be used: ", error);
      return e;
    }
    programs.push_back(std::move(p));
  }
  const std::map<std::string, int64_t> requested = LocalRequests(r, driver);
  const bool share = !requested.empty();
  for (const auto& [name, v] : requested) {
    if (name != records::dra::kCapMemory && name != records::dra::kCapCompute) {
      e->error = StrCat("capacity request '", name,
                        "' is not supported (tessera allocates shares by memory and compute)");
      return e;
    }
  }
  e->masks.assign(cluster.node_count(), 0);
  std::vector<bool> in_set(cluster.node_count(), false);
  bool full = true;
  int rejected_selector = 0, rejected_taint = 0, rejected_capacity = 0, rejected_shared = 0;
  for (const auto& [node, devices] : cache_.nodes()) {
    const core::NodeId id = cluster.FindNode(node);
    if (!id.valid() || !cluster.live(id)) continue;
    const int gpus = std::min<int>(cluster.node(id).gpu_count(), devices.gpus.size());
    uint64_t mask = 0;
    for (int g = 0; g < gpus; ++g) {
      const Device* d = devices.gpus[g].device;
      if (d == nullptr) continue;
      bool ok = true;
      for (const auto& p : programs) {
        absl::StatusOr<bool> m = p->Matches(CelDevice{driver, d});
        if (!m.ok()) {
          e->error =
              StrCat("selector `", p->expression(), "` failed on device ", devices.gpus[g].pool,
                     "/", d->name, ": ", FromAbsl(m.status().message()));
          e->masks.clear();
          return e;
        }
        if (!*m) {
          ok = false;
          break;
        }
      }
      if (!ok) {
        ++rejected_selector;
        continue;
      }
      if (!std::all_of(d->taints.begin(), d->taints.end(),
                       [&](const DeviceTaint& t) { return TaintAllows(r.tolerations, t); })) {
        ++rejected_taint;
        continue;
      }
      if (share) {
        if (!d->allow_multiple_allocations) {
          ++rejected_shared;
          continue;
        }
        std::map<std::string, int64_t> consumed;
        for (const auto& [name, cap] : d->capacity_by_name) {
          const std::string local = LocalCapacityName(name, driver);
          auto req = requested.find(local);
          std::optional<int64_t> c = ConsumedCapacity(
              req == requested.end() ? std::nullopt : std::optional<int64_t>(req->second), cap);
          if (!c) {
            ok = false;
            break;
          }
          consumed[local] = *c;
          if (local == records::dra::kCapMemory && *c >= cap.value) e->share_whole = true;
        }
        for (const auto& [name, v] : requested) ok = ok && consumed.contains(name);
        if (!ok) {
          ++rejected_capacity;
          continue;
        }
        e->share_memory_mib = std::max(e->share_memory_mib,
                                       MemoryMib(consumed[std::string(records::dra::kCapMemory)]));
        e->share_compute_milli = std::max(
            e->share_compute_milli, ComputeMilli(consumed[std::string(records::dra::kCapCompute)]));
      }
      mask |= 1ULL << g;
      ++e->devices;
    }
    if (mask == 0) continue;
    e->masks[id.value()] = mask;
    in_set[id.value()] = true;
    if (mask != cluster.node(id).all_gpus_mask()) full = false;
  }
  if (full && e->devices > 0) e->nodes = std::make_shared<core::NodeSet>(std::move(in_set));
  if (e->devices == 0 && !share) {
    ComputeMig(r, cluster, programs, e.get());
    if (!e->error.empty()) {
      e->masks.clear();
      return e;
    }
  }
  if (e->devices == 0) {
    // The detail only: eligibilities are shared by claims with equal requests (Combine names it).
    std::vector<std::string> why;
    if (rejected_selector > 0) why.push_back(StrCat(rejected_selector, " rejected by selectors"));
    if (rejected_taint > 0) why.push_back(StrCat(rejected_taint, " with untolerated taints"));
    if (rejected_shared > 0) {
      why.push_back(StrCat(rejected_shared, " not shareable (allowMultipleAllocations)"));
    }
    if (rejected_capacity > 0) {
      why.push_back(StrCat(rejected_capacity, " without the capacity asked"));
    }
    if (!why.empty()) e->why_none = StrCat(" (", StrJoin(why, ", "), ")", e->why_none);
    if (cache_.nodes().empty()) StrAppend(&e->why_none, "; no ResourceSlices published yet");
  }
  return e;
}

void ClaimPlanner::ComputeMig(const ExactRequest& r, const core::Cluster& cluster,
                              const std::vector<std::shared_ptr<const CelProgram>>& programs,
                              Eligibility* e) {
  const std::string& driver = cache_.driver();
  // Profiles found, with what orders them (smallest first) and their GPUs by node.
  struct Found {
    std::tuple<int, int, int64_t, bool> order;
    std::vector<uint64_t> masks;
  };
  std::map<std::string, Found> found;
  int not_mig_mode = 0, unknown_profile = 0, tainted = 0;
  std::string not_mig_mode_at;
  for (const auto& [node, devices] : cache_.nodes()) {
    const core::NodeId id = cluster.FindNode(node);
    if (!id.valid() || !cluster.live(id)) continue;
    const int gpus = std::min<int>(cluster.node(id).gpu_count(), devices.gpus.size());
    for (int g = 0; g < gpus; ++g) {
      const std::vector<NodeDevices::Mig>& parts = devices.gpus[g].mig;
      if (parts.empty()) continue;
      // Per profile: partitions published, and those the request may take.
      std::map<std::string, std::pair<int, int>> count;
      for (const NodeDevices::Mig& m : parts) {
        bool ok = true;
        for (const auto& p : programs) {
          absl::StatusOr<bool> match = p->Matches(CelDevice{driver, m.device});
          if (!match.ok()) {
            e->error = StrCat("selector `", p->expression(), "` failed on device ", m.pool, "/",
                              m.device->name, ": ", FromAbsl(match.status().message()));
            return;
          }
          if (!*match) {
            ok = false;
            break;
          }
        }
        if (ok &&
            !std::all_of(m.device->taints.begin(), m.device->taints.end(),
                         [&](const DeviceTaint& t) { return TaintAllows(r.tolerations, t); })) {
          ok = false;
          ++tainted;
        }
        std::pair<int, int>& c = count[m.profile];
        ++c.first;
        if (ok) ++c.second;
      }
      const core::MigModel* model = cluster.mig_model(id, g);  // nullptr: not in MIG mode
      for (const auto& [profile, c] : count) {
        if (c.second == 0) continue;
        if (model == nullptr) {
          not_mig_mode += c.second;
          if (not_mig_mode_at.empty()) not_mig_mode_at = StrCat("GPU ", g, " of node ", node);
          continue;
        }
        const int index = model->Find(profile);
        if (index < 0) {
          unknown_profile += c.second;
          continue;
        }
        if (c.second < c.first) {
          e->error =
              StrCat("the selectors take ", c.second, " of the ", c.first,
                     " placements of MIG profile ", profile, " on GPU ", g, " of node ", node,
                     "; tessera's allocator chooses the placement (start slice) itself: "
                     "select MIG partitions by profile and GPU attributes, not by migStart "
                     "or device name");
          return;
        }
        const core::MigProfile& mp = model->profiles[index];
        Found& f = found[profile];
        if (f.masks.empty()) {
          f.order = {mp.compute_slices, mp.size, mp.memory_mib, mp.media_extensions};
          f.masks.assign(cluster.node_count(), 0);
        }
        f.masks[id.value()] |= 1ULL << g;
        e->devices += c.second;
      }
    }
  }
  std::vector<std::pair<std::tuple<int, int, int64_t, bool>, std::string>> order;
  for (const auto& [profile, f] : found) order.emplace_back(f.order, profile);
  std::sort(order.begin(), order.end());
  for (const auto& [key, profile] : order) {
    e->mig.push_back(Eligibility::MigProfile{profile, std::move(found[profile].masks)});
  }
  std::vector<std::string> why;
  if (not_mig_mode > 0) {
    why.push_back(StrCat(not_mig_mode, " MIG partitions on GPUs not in MIG mode, such as ",
                         not_mig_mode_at,
                         ": tessera's allocator places MIG instances on GPUs in MIG mode only "
                         "(turn it on with nvidia-smi -i <index> -mig 1)"));
  }
  if (unknown_profile > 0) {
    why.push_back(StrCat(unknown_profile, " MIG partitions of profiles tessera does not know"));
  }
  if (tainted > 0) why.push_back(StrCat(tainted, " MIG partitions with untolerated taints"));
  if (!why.empty()) e->why_none = StrCat("; ", StrJoin(why, "; "));
}

bool ClaimPlanner::Combine(std::vector<PlannedClaim> claims, const core::Cluster& cluster,
                           std::vector<PodPlan::Option>* out, std::string* invalid) {
  PodPlan::Option o;
  struct Req {
    const ClaimInfo* claim;
    const ExactRequest* r;
  };
  std::vector<Req> reqs;
  for (const PlannedClaim& c : claims) {
    for (const ExactRequest* r : c.requests) reqs.push_back({c.claim.get(), r});
  }
  o.claims = std::move(claims);
  if (reqs.empty()) {
    out->push_back(std::move(o));
    return true;
  }
  bool share = false;
  int64_t count = 0;
  for (const Req& q : reqs) {
    if (!q.r->capacity.empty()) share = true;
    count += q.r->count;
  }
  if (share && (reqs.size() > 1 || reqs[0].r->count != 1)) {
    *invalid = StrCat(RequestLabel(*reqs[0].claim, *reqs[0].r),
                      ": a request with capacity requests (a share of one GPU) must ask one "
                      "device and be the pod's only device request");
    return false;
  }
  std::vector<std::shared_ptr<const Eligibility>> es;
  for (const Req& q : reqs) {
    std::shared_ptr<const Eligibility> e = EligibilityOf(*q.r, cluster);
    if (!e->error.empty()) {
      *invalid = StrCat(RequestLabel(*q.claim, *q.r), ": ", e->error);
      return false;
    }
    if (e->devices == 0) {
      o.why_none = StrCat("no device of driver ", cache_.driver(), " can serve ",
                          RequestLabel(*q.claim, *q.r), e->why_none);
      out->push_back(std::move(o));
      return true;
    }
    if (!e->mig.empty() && (reqs.size() > 1 || q.r->count != 1)) {
      *invalid = StrCat(RequestLabel(*q.claim, *q.r),
                        ": a request for MIG partitions must ask one device and be the pod's only "
                        "device request (tessera places one MIG instance per pod)");
      return false;
    }
    es.push_back(std::move(e));
  }
  if (!es[0]->mig.empty()) {
    // One option per profile, the smallest first: the engine's MIG policy chooses the GPU and
    // the start slice among the GPUs whose partitions of that profile the request may take.
    o.use_candidates = true;
    for (const Eligibility::MigProfile& m : es[0]->mig) {
      PodPlan::Option p = o;
      p.gpu = core::GpuAsk::Mig(m.profile);
      for (int n = 0; n < cluster.node_count(); ++n) {
        if (m.masks[n] != 0) p.candidates.push_back(core::Candidate{core::NodeId(n), m.masks[n]});
      }
      out->push_back(std::move(p));
    }
    return true;
  }
  if (share) {
    const Eligibility& e = *es[0];
    o.gpu = e.share_whole ? core::GpuAsk::Whole(1)
                          : core::GpuAsk::Share(e.share_memory_mib, e.share_compute_milli);
  } else {
    if (count > 64) {
      *invalid = StrCat(RequestLabel(*reqs[0].claim, *reqs[0].r), ": ", count,
                        " devices asked in all; one pod's claims take at most one node's GPUs");
      return false;
    }
    o.gpu = core::GpuAsk::Whole(static_cast<int32_t>(count));
  }
  // matchAttribute constraints of the claims being allocated.
  std::vector<std::string> match;
  for (const PlannedClaim& c : o.claims) {
    if (!c.allocate) continue;
    for (const ClaimConstraint& k : c.claim->constraints) {
      if (!k.match_attribute.empty()) match.push_back(k.match_attribute);
    }
  }
  if (es.size() == 1 && match.empty() && es[0]->nodes) {
    o.nodes = es[0]->nodes;
    out->push_back(std::move(o));
    return true;
  }
  o.use_candidates = true;
  const std::string& driver = cache_.driver();
  for (int n = 0; n < cluster.node_count(); ++n) {
    uint64_t mask = ~0ULL;
    for (const auto& e : es) mask &= e->masks[n];
    if (mask == 0) continue;
    if (match.empty()) {
      o.candidates.push_back(core::Candidate{core::NodeId(n), mask});
      continue;
    }
    // Group the node's GPUs by the values of every matchAttribute: one candidate per group.
    const NodeDevices* devices = cache_.Devices(cluster.node(core::NodeId(n)).name);
    std::map<std::vector<std::string>, uint64_t> groups;
    for (int g = 0; g < 64; ++g) {
      if (!(mask >> g & 1)) continue;
      std::vector<std::string> values;
      bool all = true;
      for (const std::string& a : match) {
        const AttributeValue* v = devices->gpus[g].device->Attribute(a, driver);
        if (v == nullptr) {
          all = false;
          break;
        }
        values.push_back(v->DebugString());
      }
      if (all) groups[values] |= 1ULL << g;
    }
    for (const auto& [values, m] : groups) {
      o.candidates.push_back(core::Candidate{core::NodeId(n), m});
    }
  }
  if (o.candidates.empty()) {
    o.why_none = StrCat("no node has devices that satisfy every request together",
                        match.empty() ? "" : StrCat(" with equal ", StrJoin(match, ", ")));
  }
  out->push_back(std::move(o));
  return true;
}

PodPlan ClaimPlanner::Plan(const PodClaims& claims, const std::string& ns,
                           const std::string& pod_uid, const core::Cluster& cluster,
                           std::shared_ptr<const ClaimInfo> extra) {
  PodPlan plan;
  auto fail = [&](PodPlan::Kind kind, std::string reason) {
    plan.kind = kind;
    plan.reason = std::move(reason);
    plan.options.clear();
    return plan;
  };
  if (!claims.error.empty()) return fail(PodPlan::Kind::kInvalid, claims.error);
  std::vector<PlannedClaim> planned;
  // The alternatives of every firstAvailable request to allocate, as (claim, request) slots.
  std::vector<std::pair<size_t, const ClaimRequest*>> slots;
  // The claims in order: the pod's, then `extra`.
  std::vector<std::pair<std::shared_ptr<const ClaimInfo>, bool>> found;  // claim, from a template
  for (const PodClaimRef& ref : claims.refs) {
    if (ref.not_needed) continue;
    if (ref.claim.empty()) {
      return fail(PodPlan::Kind::kWait,
                  StrCat("waiting for the ResourceClaim of pod claim '", ref.name, "' (template ",
                         ref.template_name, ") to be created by the resourceclaim controller"));
    }
    const std::string key = StrCat(ns, "/", ref.claim);
    std::shared_ptr<const ClaimInfo> c = cache_.Claim(key);
    if (!c) {
      return fail(PodPlan::Kind::kWait, StrCat("ResourceClaim ", key, " does not exist (yet)"));
    }
    found.emplace_back(std::move(c), ref.from_template());
  }
  if (extra) found.emplace_back(std::move(extra), false);
  for (auto& [c, from_template] : found) {
    const std::string& key = c->key;
    if (!c->error.empty()) {
      return fail(PodPlan::Kind::kInvalid, StrCat("ResourceClaim ", key, ": ", c->error));
    }
    if (c->deleting) {
      return fail(PodPlan::Kind::kWait, StrCat("ResourceClaim ", key, " is being deleted"));
    }
    if ((from_template || c->extended_resource) && !c->owner_pod_uid.empty() &&
        c->owner_pod_uid != pod_uid) {
      return fail(PodPlan::Kind::kWait,
                  StrCat("ResourceClaim ", key, " was not created for this pod"));
    }
    PlannedClaim p;
    p.claim = c;
    p.reserved = c->ReservedFor(pod_uid);
    if (c->allocation) {
      if (c->allocation->node.empty()) {
        return fail(PodPlan::Kind::kInvalid,
                    StrCat("ResourceClaim ", key,
                           " is allocated without a node (status.allocation.nodeSelector); "
                           "tessera schedules pods with node-local devices only"));
      }
      if (!plan.fixed_node.empty() && plan.fixed_node != c->allocation->node) {
        return fail(PodPlan::Kind::kWait,
                    StrCat("the pod's claims are allocated on different nodes (", plan.fixed_node,
                           " and ", c->allocation->node, ")"));
      }
      plan.fixed_node = c->allocation->node;
      if (!p.reserved && c->reserved_for.size() >= kMaxConsumers) {
        return fail(PodPlan::Kind::kWait,
                    StrCat("ResourceClaim ", key, " already has ", kMaxConsumers, " consumers"));
      }
    } else {
      p.allocate = true;
      for (const ClaimRequest& r : c->requests) {
        for (const ExactRequest& x : r.alternatives) {
          if (x.allocation_mode != "ExactCount") {
            return fail(PodPlan::Kind::kInvalid,
                        StrCat(RequestLabel(*c, x), ": allocationMode ", x.allocation_mode,
                               " is not supported by tessera (ask an exact count)"));
          }
          if (x.admin_access) {
            return fail(PodPlan::Kind::kInvalid,
                        StrCat(RequestLabel(*c, x),
                               ": adminAccess is not supported by tessera's allocator"));
          }
          if (x.count < 1) {
            return fail(PodPlan::Kind::kInvalid,
                        StrCat(RequestLabel(*c, x), ": count ", x.count, " must be at least 1"));
          }
          if (!cache_.Class(x.device_class)) {
            return fail(PodPlan::Kind::kWait, StrCat(RequestLabel(*c, x), ": DeviceClass ",
                                                     x.device_class, " does not exist"));
          }
        }
        if (r.alternatives.empty()) {
          return fail(PodPlan::Kind::kInvalid,
                      StrCat("claim ", key, " request ", r.name, ": no device request"));
        }
        slots.emplace_back(planned.size(), &r);
      }
    }
    planned.push_back(std::move(p));
  }
  // Every combination of alternatives, the first alternatives first, at most kMaxOptions.
  std::vector<size_t> pick(slots.size(), 0);
  std::string invalid;
  while (static_cast<int>(plan.options.size()) < kMaxOptions) {
    std::vector<PlannedClaim> combo = planned;
    for (size_t s = 0; s < slots.size(); ++s) {
      combo[slots[s].first].requests.push_back(&slots[s].second->alternatives[pick[s]]);
    }
    if (!Combine(std::move(combo), cluster, &plan.options, &invalid)) {
      return fail(PodPlan::Kind::kInvalid, invalid);
    }
    if (static_cast<int>(plan.options.size()) > kMaxOptions) plan.options.resize(kMaxOptions);
    size_t s = 0;
    for (; s < slots.size(); ++s) {
      if (++pick[s] < slots[s].second->alternatives.size()) break;
      pick[s] = 0;
    }
    if (s == slots.size()) break;
  }
  return plan;
}

absl::StatusOr<std::vector<ClaimAllocation>> ClaimPlanner::Allocate(
    const PodPlan::Option& option, const core::Placement& placement, const core::Cluster& cluster) {
  const std::string& driver = cache_.driver();
  const std::string& node = cluster.node(placement.node).name;
  const NodeDevices* devices = cache_.Devices(node);
  std::vector<ClaimAllocation> out;
  size_t next = 0;  // the next grant to hand out
  for (const PlannedClaim& c : option.claims) {
    if (!c.allocate) continue;
    ClaimAllocation a;
    a.claim = c.claim;
    nlohmann::json results = nlohmann::json::array();
    core::Placement mine;
    mine.node = placement.node;
    std::vector<std::pair<const ExactRequest*, const Device*>> chosen;
    for (const ExactRequest* r : c.requests) {
      const std::map<std::string, int64_t> requested = LocalRequests(*r, driver);
      for (int64_t i = 0; i < r->count; ++i) {
        if (next >= placement.gpus.size() || devices == nullptr) {
          return absl::InternalError(StrCat("the placement on ", node, " has ",
                                            placement.gpus.size(),
                                            " GPUs, fewer than the claims ask"));
        }
        const core::GpuGrant& g = placement.gpus[next++];
        if (g.is_mig()) {
          // The partition at the engine's placement.
          const core::MigModel* model = cluster.mig_model(placement.node, g.gpu);
          const NodeDevices::Mig* part = nullptr;
          if (model != nullptr && g.gpu < static_cast<int>(devices->gpus.size())) {
            const std::string_view profile = model->profiles[g.mig.profile].name;
            for (const NodeDevices::Mig& m : devices->gpus[g.gpu].mig) {
              if (m.profile == profile && m.start == g.mig.start) part = &m;
            }
          }
          if (part == nullptr) {
            return absl::FailedPreconditionError(
                StrCat("GPU ", g.gpu, " of ", node, " has no MIG partition of driver ", driver,
                       " at ", model ? core::MigPlacementName(*model, g.mig) : "the placement",
                       " (the engine's choice for ", RequestLabel(*c.claim, *r), ")"));
          }
          nlohmann::json result = {{"request", r->name},
                                   {"driver", driver},
                                   {"pool", part->pool},
                                   {"device", part->device->name}};
          results.push_back(std::move(result));
          mine.gpus.push_back(g);
          chosen.emplace_back(r, part->device);
          continue;
        }
        if (g.gpu >= static_cast<int>(devices->gpus.size()) ||
            devices->gpus[g.gpu].device == nullptr) {
          return absl::InternalError(
              StrCat("GPU ", g.gpu, " of ", node, " has no device of driver ", driver));
        }
        const NodeDevices::Gpu& gpu = devices->gpus[g.gpu];
        nlohmann::json result = {{"request", r->name},
                                 {"driver", driver},
                                 {"pool", gpu.pool},
                                 {"device", gpu.device->name}};
        if (gpu.device->allow_multiple_allocations) {
          result["shareID"] = NewShareId();
          nlohmann::json consumed = nlohmann::json::object();
          for (const auto& [name, cap] : gpu.device->capacity_by_name) {
            auto req = requested.find(LocalCapacityName(name, driver));
            std::optional<int64_t> v = ConsumedCapacity(
                req == requested.end() ? std::nullopt : std::optional<int64_t>(req->second), cap);
            if (!v) {
              return absl::InternalError(StrCat("device ", gpu.device->name, " of ", node,
                                                " cannot serve ", RequestLabel(*c.claim, *r)));
            }
            consumed[name] = FormatMilli(*v);
          }
          result["consumedCapacity"] = std::move(consumed);
        }
        results.push_back(std::move(result));
        mine.gpus.push_back(g);
        chosen.emplace_back(r, gpu.device);
      }
    }
    // The claim's constraints on what was chosen.
    for (const ClaimConstraint& k : c.claim->constraints) {
      const std::string& attribute =
          k.match_attribute.empty() ? k.distinct_attribute : k.match_attribute;
      if (attribute.empty()) continue;
      std::set<std::string> values;
      size_t n = 0;
      for (const auto& [r, d] : chosen) {
        const std::string base = r->name.substr(0, r->name.find('/'));
        if (!k.requests.empty() &&
            std::find(k.requests.begin(), k.requests.end(), base) == k.requests.end() &&
            std::find(k.requests.begin(), k.requests.end(), r->name) == k.requests.end()) {
          continue;
        }
        const AttributeValue* v = d->Attribute(attribute, driver);
        if (v == nullptr) {
          return absl::FailedPreconditionError(StrCat("device ", d->name, " of ", node,
                                                      " has no attribute ", attribute, " (claim ",
                                                      c.claim->key, "'s constraint)"));
        }
        values.insert(v->DebugString());
        ++n;
      }
      if (!k.match_attribute.empty() && values.size() > 1) {
        return absl::FailedPreconditionError(
            StrCat("claim ", c.claim->key, ": the devices on ", node, " differ in ", attribute));
      }
      if (!k.distinct_attribute.empty() && values.size() < n) {
        return absl::FailedPreconditionError(StrCat("claim ", c.claim->key, ": the devices on ",
                                                    node, " repeat a value of ", attribute,
                                                    " (distinctAttribute)"));
      }
    }
    nlohmann::json config = nlohmann::json::array();
    std::set<std::string> classes;
    for (const ExactRequest* r : c.requests) {
      std::shared_ptr<const ClassInfo> cls = cache_.Class(r->device_class);
      if (!cls) continue;
      for (const nlohmann::json& opaque : cls->config) {
        config.push_back({{"source", "FromClass"}, {"requests", {r->name}}, {"opaque", opaque}});
      }
    }
    for (const nlohmann::json& entry : c.claim->config) {
      nlohmann::json e = entry;
      e["source"] = "FromClaim";
      config.push_back(std::move(e));
    }
    a.allocation = {{"devices", {{"results", std::move(results)}}},
                    {"nodeSelector", NodeSelectorFor(node)}};
    if (!config.empty()) a.allocation["devices"]["config"] = std::move(config);
    a.holding = records::MakeAssignment(cluster, mine);
    out.push_back(std::move(a));
  }
  return out;
}

absl::StatusOr<records::Assignment> ClaimPlanner::HoldingOf(const ClaimInfo& claim,
                                                            const core::Cluster& cluster) const {
  records::Assignment none;
  if (!claim.allocation) return none;
  const std::string& driver = cache_.driver();
  const Allocation& a = *claim.allocation;
  core::Placement p;
  std::set<int> seen;
  for (const AllocatedDevice& r : a.results) {
    if (r.driver != driver) continue;
    if (a.node.empty()) {
      return absl::FailedPreconditionError(
          StrCat("claim ", claim.key, " holds devices of ", driver, " without a node selector"));
    }
    const NodeDevices* devices = cache_.Devices(a.node);
    const Device* d = devices == nullptr ? nullptr : devices->Find(r.pool, r.device);
    if (d == nullptr) {
      return absl::NotFoundError(StrCat("claim ", claim.key, " holds device ", r.pool, "/",
                                        r.device, " which node ", a.node,
                                        "'s ResourceSlices do not publish"));
    }
    const core::NodeId id = cluster.FindNode(a.node);
    if (!id.valid()) {
      return absl::NotFoundError(StrCat("claim ", claim.key, " is allocated on node ", a.node,
                                        " which the scheduler does not know"));
    }
    bool whole = false;
    const int g = GpuIndexOf(*d, driver, &whole);
    if (g < 0 || g >= cluster.node(id).gpu_count()) {
      return absl::NotFoundError(StrCat("claim ", claim.key, " holds device ", r.device,
                                        " which is no GPU of node ", a.node, "'s inventory"));
    }
    // A MIG partition on a GPU in MIG mode: the instance it stands for (kube-scheduler's
    // allocation, or this scheduler's). On a GPU not in MIG mode (the driver turns MIG mode on
    // when it prepares the claim) the GPU is held whole until the node shows MIG mode.
    std::string profile;
    int start = -1;
    if (const core::MigModel* model = cluster.mig_model(id, g);
        !whole && model != nullptr && MigPlacementOf(*d, driver, &profile, &start)) {
      const int index = model->Find(profile);
      if (index < 0 || !model->profiles[index].may_start_at(start)) {
        return absl::NotFoundError(StrCat("claim ", claim.key, " holds MIG partition ", r.device,
                                          " (", profile, "@", start, "), which is no ",
                                          model->model, " placement"));
      }
      const auto ours = std::count_if(a.results.begin(), a.results.end(),
                                      [&](const AllocatedDevice& x) { return x.driver == driver; });
      if (ours > 1) {
        return absl::UnimplementedError(
            StrCat("claim ", claim.key, " holds ", ours, " devices, MIG partition ", r.device,
                   " among them; tessera accounts a MIG partition only as a claim's one device"));
      }
      const core::MigProfile& mp = model->profiles[index];
      p.gpus.push_back(core::GpuGrant{
          g, mp.memory_mib, mp.compute_milli(), false,
          core::MigPlacement{static_cast<int8_t>(index), static_cast<int8_t>(start)}});
      seen.insert(g);
      continue;
    }
    if (!seen.insert(g).second) continue;  // two results on one GPU: held once, whole below
    const int64_t gpu_memory = cluster.node(id).gpus[g].memory_mib;
    core::GpuGrant grant{g, gpu_memory, 1000, true};
    const std::optional<int64_t> memory = r.Consumed(records::dra::kCapMemory, driver);
    auto cap = d->capacity_by_name.end();
    for (auto it = d->capacity_by_name.begin(); it != d->capacity_by_name.end(); ++it) {
      if (LocalCapacityName(it->first, driver) == records::dra::kCapMemory) cap = it;
    }
    if (whole && memory && cap != d->capacity_by_name.end() && *memory < cap->second.value) {
      grant.exclusive = false;
      grant.memory_mib = MemoryMib(*memory);
      grant.compute_milli = ComputeMilli(r.Consumed(records::dra::kCapCompute, driver).value_or(0));
    }
    p.gpus.push_back(grant);
  }
  if (p.gpus.empty()) return none;
  // Two results of this claim on one GPU: the GPU is held whole (never less than it takes).
  if (seen.size() < a.results.size()) {
    std::map<int, int> per_gpu;
    for (const AllocatedDevice& r : a.results) {
      if (r.driver != driver) continue;
      const NodeDevices* devices = cache_.Devices(a.node);
      const int g = GpuIndexOf(*devices->Find(r.pool, r.device), driver);
      ++per_gpu[g];
    }
    const core::NodeId id = cluster.FindNode(a.node);
    for (core::GpuGrant& grant : p.gpus) {
      if (per_gpu[grant.gpu] > 1) {
        grant = core::GpuGrant{grant.gpu, cluster.node(id).gpus[grant.gpu].memory_mib, 1000, true};
      }
    }
  }
  p.node = cluster.FindNode(a.node);
  return records::MakeAssignment(cluster, p);
}

}  // namespace tessera::k8s::dra
