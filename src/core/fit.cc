#include "core/fit.h"

#include <algorithm>
#include <array>
#include <atomic>

#include "common/status.h"
#include "common/strings.h"
#include "core/model/quantity.h"
#include "core/topology/gpu_select.h"
#include "core/topology/mig_select.h"

namespace tessera::core {

int64_t ShareMemoryFor(const ClusterState& state, const GpuAsk& ask, NodeId node, int g) {
  return ShareMemoryOn(ask, state.cluster().node(node).gpus[g].memory_mib);
}

NodeSet::NodeSet(std::vector<bool> allowed) : allowed_(std::move(allowed)) {
  static std::atomic<uint64_t> next_id{1};
  id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  size_ = static_cast<int>(std::count(allowed_.begin(), allowed_.end(), true));
}

void NodeSet::Set(NodeId node, bool allowed) {
  const size_t i = static_cast<size_t>(node.value());
  if (i >= allowed_.size()) {
    if (!allowed) return;
    allowed_.resize(i + 1, false);
  }
  if (allowed_[i] == allowed) return;
  allowed_[i] = allowed;
  size_ += allowed ? 1 : -1;
}

NodeFit CheckNode(const ClusterState& state, const Query& query, NodeId node, uint64_t allowed) {
  const PodRequest& r = *query.request;
  NodeFit fit;
  if (!state.accepts_pods(node)) {
    fit.reject = Reject::kCordoned;
    return fit;
  }
  if (query.nodes != nullptr && !query.nodes->Contains(node)) {
    fit.reject = Reject::kExcluded;
    return fit;
  }
  if (r.cpu_milli > state.free_cpu_milli(node)) {
    fit.reject = Reject::kCpu;
    return fit;
  }
  if (r.memory_mib > state.free_memory_mib(node)) {
    fit.reject = Reject::kMemory;
    return fit;
  }
  const GpuAsk& ask = r.gpu;
  if (ask.kind == GpuAsk::Kind::kNone) return fit;
  uint64_t usable = allowed & state.cluster().ModelMask(node, query.models);
  if (usable == 0) {
    fit.reject = Reject::kNoGpuOfModel;
    return fit;
  }
  const uint64_t mig = state.cluster().mig_mask(node);
  if (ask.kind == GpuAsk::Kind::kMig) {
    bool offered = false;
    for (uint64_t a = usable & mig; a; a &= a - 1) {
      int g = __builtin_ctzll(a);
      offered = offered || state.cluster().mig_model(node, g)->Find(ask.mig_profile) >= 0;
      if (MigFits(state, node, g, ask.mig_profile)) fit.gpus |= 1ULL << g;
    }
    if (fit.gpus == 0) fit.reject = offered ? Reject::kNoMigRoom : Reject::kNoMigGpu;
    return fit;
  }
  usable &= ~mig;
  if (usable == 0) {
    fit.reject = Reject::kMigMode;
    return fit;
  }
  if (ask.kind == GpuAsk::Kind::kWhole) {
    fit.gpus = usable & state.whole_free_mask(node);
    if (__builtin_popcountll(fit.gpus) < ask.count) fit.reject = Reject::kTooFewGpus;
    return fit;
  }
  // A share of one GPU, on a GPU whose shares use its mode.
  const int32_t compute = ShareComputeOn(ask);
  bool other_mode = false;  // room only on GPUs whose shares use the other mode
  std::span<const GpuState> gpus = state.gpus(node);
  const NodeSpec& spec = state.cluster().node(node);
  for (uint64_t a = usable; a; a &= a - 1) {
    int g = __builtin_ctzll(a);
    const GpuState& s = gpus[g];
    if (s.exclusive || s.free_compute_milli < compute) continue;
    if (s.free_memory_mib < ShareMemoryOn(ask, spec.gpus[g].memory_mib)) continue;
    if (!s.TakesShareMode(ask.mode)) {
      other_mode = true;
      continue;
    }
    fit.gpus |= 1ULL << g;
  }
  if (fit.gpus == 0) fit.reject = other_mode ? Reject::kShareMode : Reject::kNoGpuRoom;
  return fit;
}

Placement MakeMigPlacement(const ClusterState& state, const PodRequest& request, NodeId node,
                           int gpu, MigPlacement placement, const MigPlan& plan) {
  const MigModel* model = state.cluster().mig_model(node, gpu);
  TESSERA_CHECK(model != nullptr && placement.profile >= 0);
  const MigProfile& prof = model->profiles[placement.profile];
  Placement p;
  p.node = node;
  p.cpu_milli = request.cpu_milli;
  p.memory_mib = request.memory_mib;
  GpuGrant g{gpu, prof.memory_mib, prof.compute_milli(), false, placement};
  p.gpus.push_back(g);
  p.mig_plan = plan;
  return p;
}

Placement MakePlacement(const ClusterState& state, const PodRequest& request, NodeId node,
                        uint64_t mask) {
  TESSERA_CHECK_MSG(request.gpu.kind != GpuAsk::Kind::kMig, "MIG asks use MakeMigPlacement");
  Placement p;
  p.node = node;
  p.cpu_milli = request.cpu_milli;
  p.memory_mib = request.memory_mib;
  const NodeSpec& spec = state.cluster().node(node);
  const GpuAsk& ask = request.gpu;
  for (uint64_t a = mask; a; a &= a - 1) {
    int g = __builtin_ctzll(a);
    if (ask.kind == GpuAsk::Kind::kWhole) {
      p.gpus.push_back(GpuGrant{g, spec.gpus[g].memory_mib, 1000, true});
    } else {
      GpuGrant grant{g, ShareMemoryOn(ask, spec.gpus[g].memory_mib), ShareComputeOn(ask), false};
      grant.mode = ask.mode;
      p.gpus.push_back(grant);
    }
  }
  return p;
}

std::string DescribeAsk(const PodRequest& r) {
  std::string what;
  switch (r.gpu.kind) {
    case GpuAsk::Kind::kNone:
      what = "no GPU";
      break;
    case GpuAsk::Kind::kWhole:
      what = r.gpu.count == 1 ? "1 whole GPU" : StrCat(r.gpu.count, " whole GPUs");
      break;
    case GpuAsk::Kind::kShare:
      what = StrCat(
          "a share of one GPU (", FormatMiB(r.gpu.memory_mib), " memory",
          r.gpu.compute_milli ? StrCat(", ", r.gpu.compute_milli / 10, "% compute") : std::string(),
          ")");
      break;
    case GpuAsk::Kind::kFraction:
      what = StrCat(r.gpu.fraction_milli, "/1000 of one GPU");
      break;
    case GpuAsk::Kind::kMig:
      what = StrCat("a MIG ", r.gpu.mig_profile, " instance");
      break;
  }
  if (!r.gpu_models.empty()) StrAppend(&what, " of model ", StrJoin(r.gpu_models, "|"));
  return what;
}

namespace {

std::string Cores(int64_t milli) {
  if (milli % 1000 == 0) return StrCat(milli / 1000);
  return StrCat(milli, "m");
}

std::string_view TopologyName(GpuTopology t) { return GpuTopologyName(t); }

}  // namespace

std::optional<std::string> NeverFitsReason(const ClusterState& state, const Query& query) {
  const Cluster& cluster = state.cluster();
  const PodRequest& r = *query.request;
  const GpuAsk& ask = r.gpu;
  int64_t max_cpu = 0, max_mem = 0, max_gpu_mem = 0;
  int max_count = 0, max_count_topology = 0;
  bool any_model = false, any_mig = false, any_offering = false, any_plain = false;
  std::vector<std::string> mig_offers;  // "A100-80GB: 7g.80gb, ..." per MIG model in the cluster
  for (int i = 0; i < cluster.node_count(); ++i) {
    NodeId id(i);
    if (!cluster.live(id)) continue;
    const NodeSpec& n = cluster.node(id);
    max_cpu = std::max(max_cpu, n.cpu_milli);
    max_mem = std::max(max_mem, n.memory_mib);
    uint64_t models = ask.kind == GpuAsk::Kind::kNone ? 0 : cluster.ModelMask(id, query.models);
    if (models) any_model = true;
    const uint64_t mig = cluster.mig_mask(id);
    if (ask.kind == GpuAsk::Kind::kMig) {
      uint64_t offering = 0;
      for (uint64_t a = models & mig; a; a &= a - 1) {
        const int g = __builtin_ctzll(a);
        const MigModel* m = cluster.mig_model(id, g);
        const int p = m->Find(ask.mig_profile);
        if (p >= 0 && m->profiles[p].memory_mib <= n.gpus[g].memory_mib) offering |= 1ULL << g;
        std::string offer = StrCat(m->model, ": ", StrJoin(m->ProfileNames(), ", "));
        if (std::find(mig_offers.begin(), mig_offers.end(), offer) == mig_offers.end()) {
          mig_offers.push_back(std::move(offer));
        }
      }
      any_mig = any_mig || (models & mig) != 0;
      any_offering = any_offering || offering != 0;
      models = offering;
    } else if (ask.kind != GpuAsk::Kind::kNone) {
      models &= ~mig;
      any_plain = any_plain || models != 0;
    }
    int count = __builtin_popcountll(models);
    max_count = std::max(max_count, count);
    int64_t node_gpu_mem = 0;
    for (uint64_t a = models; a; a &= a - 1) {
      node_gpu_mem = std::max(node_gpu_mem, n.gpus[__builtin_ctzll(a)].memory_mib);
    }
    max_gpu_mem = std::max(max_gpu_mem, node_gpu_mem);
    bool topo_ok = true;
    if (ask.kind == GpuAsk::Kind::kWhole && ask.count > 1 && ask.topology_required &&
        count >= ask.count) {
      topo_ok = cluster.gpu_selector(id).Select(models, ask.count, ask.topology, true).has_value();
      if (topo_ok) max_count_topology = std::max(max_count_topology, ask.count);
    }
    if (r.cpu_milli > n.cpu_milli || r.memory_mib > n.memory_mib) continue;
    switch (ask.kind) {
      case GpuAsk::Kind::kNone:
        return std::nullopt;
      case GpuAsk::Kind::kWhole:
        if (count >= ask.count && topo_ok) return std::nullopt;
        break;
      case GpuAsk::Kind::kShare:
        if (models && node_gpu_mem >= ask.memory_mib) return std::nullopt;
        break;
      case GpuAsk::Kind::kFraction:
      case GpuAsk::Kind::kMig:
        if (models) return std::nullopt;
        break;
    }
  }
  // Nothing fits: name the most specific reason.
  if (cluster.node_count() == 0) return "the cluster has no nodes";
  if (r.cpu_milli > max_cpu) {
    return StrCat("needs ", Cores(r.cpu_milli), " CPU on one node; the largest node has ",
                  Cores(max_cpu));
  }
  if (r.memory_mib > max_mem) {
    return StrCat("needs ", FormatMiB(r.memory_mib), " memory on one node; the largest node has ",
                  FormatMiB(max_mem));
  }
  if (ask.kind != GpuAsk::Kind::kNone && !any_model) {
    return StrCat("no GPU of model ", StrJoin(r.gpu_models, "|"),
                  " in this cluster (it has: ", StrJoin(cluster.models(), ", "), ")");
  }
  if (ask.kind == GpuAsk::Kind::kMig && !any_mig) {
    return StrCat("needs a MIG ", ask.mig_profile, " instance; no GPU",
                  r.gpu_models.empty() ? "" : StrCat(" of model ", StrJoin(r.gpu_models, "|")),
                  " in this cluster is in MIG mode");
  }
  if (ask.kind == GpuAsk::Kind::kMig && !any_offering) {
    return StrCat("no MIG-enabled GPU offers profile ", ask.mig_profile, " (",
                  StrJoin(mig_offers, "; "), ")");
  }
  if (ask.kind != GpuAsk::Kind::kNone && ask.kind != GpuAsk::Kind::kMig && !any_plain) {
    return StrCat("every GPU",
                  r.gpu_models.empty() ? "" : StrCat(" of model ", StrJoin(r.gpu_models, "|")),
                  " in this cluster is in MIG mode: ask for a MIG profile (tessera.dev/mig) "
                  "instead of ",
                  DescribeAsk(r));
  }
  if (ask.kind == GpuAsk::Kind::kWhole && ask.count > max_count) {
    return StrCat("needs ", ask.count, " GPUs on one node; the most any node has is ", max_count);
  }
  if (ask.kind == GpuAsk::Kind::kWhole && ask.topology_required && max_count_topology == 0) {
    return StrCat("needs ", ask.count, " GPUs joined by ", TopologyName(ask.topology),
                  " on one node; no node has such a set");
  }
  if (ask.kind == GpuAsk::Kind::kShare && ask.memory_mib > max_gpu_mem) {
    return StrCat("needs ", FormatMiB(ask.memory_mib), " on one GPU; the largest GPU has ",
                  FormatMiB(max_gpu_mem));
  }
  return StrCat("no node has all it needs at once (", Cores(r.cpu_milli), " CPU, ",
                FormatMiB(r.memory_mib), " memory, ", DescribeAsk(r), ")");
}

std::string ExplainNoFit(const ClusterState& state, const Query& query,
                         const std::vector<NodeId>& policy_declined) {
  std::array<int, static_cast<int>(Reject::kCount)> counts{};
  int total = 0;
  int most_free = 0;
  int64_t most_gpu_mem_free = 0;
  auto visit = [&](NodeId id, uint64_t allowed) {
    ++total;
    NodeFit fit = CheckNode(state, query, id, allowed);
    if (fit.ok()) return;
    ++counts[static_cast<int>(fit.reject)];
    uint64_t usable = allowed & state.cluster().ModelMask(id, query.models);
    if (fit.reject == Reject::kTooFewGpus) {
      most_free = std::max(most_free, __builtin_popcountll(usable & state.whole_free_mask(id)));
    }
    if (fit.reject != Reject::kNoGpuRoom) return;
    for (uint64_t a = usable; a; a &= a - 1) {
      const GpuState& g = state.gpu(id, __builtin_ctzll(a));
      if (!g.exclusive) most_gpu_mem_free = std::max(most_gpu_mem_free, g.free_memory_mib);
    }
  };
  if (query.candidates) {
    for (const Candidate& c : *query.candidates) visit(c.node, c.gpu_mask);
  } else {
    for (int i = 0; i < state.node_count(); ++i) {
      if (state.cluster().live(NodeId(i))) visit(NodeId(i), ~0ULL);
    }
  }
  counts[static_cast<int>(Reject::kTopology)] += static_cast<int>(policy_declined.size());
  const PodRequest& r = *query.request;
  std::vector<std::string> parts;
  auto add = [&](Reject why, const std::string& text) {
    int c = counts[static_cast<int>(why)];
    if (c > 0) parts.push_back(StrCat(c, " ", text));
  };
  add(Reject::kCordoned, "cordoned (spec.unschedulable)");
  add(Reject::kExcluded, "excluded by the pod's tolerations, nodeSelector or node affinity");
  add(Reject::kCpu, StrCat("too little CPU free (needs ", Cores(r.cpu_milli), ")"));
  add(Reject::kMemory, StrCat("too little memory free (needs ", FormatMiB(r.memory_mib), ")"));
  add(Reject::kNoGpuOfModel, r.gpu_models.empty()
                                 ? std::string("no GPUs")
                                 : StrCat("no GPU of model ", StrJoin(r.gpu_models, "|")));
  add(Reject::kTooFewGpus, StrCat("too few free GPUs (needs ", r.gpu.count, ", at most ", most_free,
                                  " free on one node)"));
  add(Reject::kNoGpuRoom,
      StrCat("no GPU with room for ", DescribeAsk(r),
             r.gpu.kind == GpuAsk::Kind::kShare
                 ? StrCat(" (most free on one GPU: ", FormatMiB(most_gpu_mem_free), ")")
                 : std::string()));
  add(Reject::kShareMode,
      StrCat("room only on GPUs whose shares are enforced by ",
             r.gpu.mode == ShareMode::kMps ? "the shim" : "MPS",
             " (a GPU serves MPS shares or shim shares, not both; tessera.dev/gpu-sharing)"));
  add(Reject::kMigMode, "only GPUs in MIG mode (they take MIG instances only)");
  add(Reject::kNoMigGpu, StrCat("no MIG-enabled GPU offering ", r.gpu.mig_profile));
  add(Reject::kNoMigRoom, StrCat("no MIG GPU with the memory slices free for ", r.gpu.mig_profile,
                                 " (assigned instances in the way)"));
  add(Reject::kTopology,
      StrCat("no free GPU set meeting the ", TopologyName(r.gpu.topology), " topology"));
  return StrCat("0/", total, " nodes can take it now: ", StrJoin(parts, ", "));
}

}  // namespace tessera::core
