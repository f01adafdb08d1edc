#include "core/plan/scale_up.h"

#include <algorithm>
#include <optional>
#include <set>
#include <tuple>

#include "common/status.h"
#include "common/strings.h"
#include "core/engine.h"

namespace tessera::plan {
namespace {

using core::Engine;
using core::PodRequest;

int GroupGpus(const std::vector<PodRequest>& group) {
  int gpus = 0;
  for (const PodRequest& p : group) gpus += std::max(1, p.gpu.gpu_count());
  return gpus;
}

// Places what waits in order; returns how many pods were placed, and removes their groups. An
// elastic gang starts with as many members as fit, at least its min (Engine::Decide,
// Ask::ElasticGang), and is then done: its other members join as room frees up (`partial` names
// it).
int PlaceWaiting(Engine& engine, std::vector<const std::vector<PodRequest>*>& left,
                 std::vector<std::string>* reasons, int64_t* memory,
                 std::vector<PartialGang>* partial) {
  int placed = 0;
  std::vector<const std::vector<PodRequest>*> still;
  reasons->clear();
  for (const std::vector<PodRequest>* group : left) {
    const std::optional<core::GangAsk>& gang = group->front().gang;
    const bool elastic = gang && gang->elastic();
    std::vector<core::PlacementResult> r =
        engine.Decide(elastic ? core::Ask::ElasticGang(*group, {}) : core::Ask::Gang(*group));
    if (!r.empty() && r[0].placed()) {
      int n = 0;
      for (const core::PlacementResult& x : r) {
        if (!x.placed()) continue;
        ++n;
        for (const core::GpuGrant& g : x.placement.gpus) *memory += g.memory_mib;
      }
      placed += n;
      if (n < static_cast<int>(group->size())) {
        PartialGang g{gang->name, n, gang->size, gang->min_members(), {}};
        for (size_t i = 0; i < r.size(); ++i) {
          if (!r[i].placed()) g.waiting.push_back((*group)[i].name);
        }
        partial->push_back(std::move(g));
      }
      continue;
    }
    still.push_back(group);
    reasons->push_back(r.empty() ? "" : r[0].reason);
  }
  left = std::move(still);
  return placed;
}

absl::StatusOr<TemplateOption> Evaluate(const ScaleUpInput& in, const core::NodeSpec& t,
                                        int max_nodes) {
  Engine engine(*in.cluster, in.make_policy(), in.levels);
  for (const RunningPod& r : in.running) {
    absl::Status s = engine.Restore(r.request.name, r.placement);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          StrCat("the running pods do not fit the cluster together: ", s.message()));
    }
  }
  TESSERA_RETURN_IF_ERROR(Cordon(engine, in.cordoned));
  TemplateOption out;
  out.name = t.name;
  std::vector<const std::vector<PodRequest>*> left;
  for (const std::vector<PodRequest>& g : in.waiting) left.push_back(&g);
  std::vector<std::string> reasons;
  int64_t memory = 0;
  // What already fits (pods that waited only because of the order they came in).
  out.pods_placed = PlaceWaiting(engine, left, &reasons, &memory, &out.partial);
  int idle = 0;  // nodes added in a row that ran nothing
  for (int n = 1; n <= max_nodes && !left.empty(); ++n) {
    core::NodeSpec spec = t;
    spec.name = StrCat(t.name, "-new-", n - 1);
    core::NodeChanges changes;
    changes.add.push_back(std::move(spec));
    absl::Status s = engine.ChangeNodes(std::move(changes));
    if (!s.ok()) {
      return absl::InvalidArgumentError(StrCat("node template ", t.name, ": ", s.message()));
    }
    int placed = PlaceWaiting(engine, left, &reasons, &memory, &out.partial);
    if (placed > 0) {
      out.pods_placed += placed;
      out.nodes = n;
      idle = 0;
      continue;
    }
    // A gang may need several new nodes before it fits: give up only after as many idle nodes
    // as the largest waiting group could need.
    int patience = 1;
    for (const std::vector<PodRequest>* g : left) {
      patience = std::max(
          patience, (GroupGpus(*g) + std::max(1, t.gpu_count()) - 1) / std::max(1, t.gpu_count()));
    }
    if (++idle >= patience) break;
  }
  out.gpus = out.nodes * t.gpu_count();
  out.memory_granted_mib = memory;
  for (size_t i = 0; i < left.size(); ++i) {
    Unplaced u;
    for (const PodRequest& p : *left[i]) u.pods.push_back(p.name);
    u.reason = reasons[i];
    out.unplaced.push_back(std::move(u));
  }
  return out;
}

}  // namespace

std::string Describe(const PartialGang& g) {
  return StrCat("gang ", g.gang, " starts with ", g.started, " of its ", g.size, " members (min ",
                g.min, "); the others join as room frees up");
}

absl::StatusOr<ScaleUpPlan> PlanScaleUp(const ScaleUpInput& in, const ScaleUpOptions& options) {
  if (in.cluster == nullptr || !in.make_policy) {
    return absl::InvalidArgumentError("PlanScaleUp needs a cluster and a policy");
  }
  if (in.templates.empty()) return absl::InvalidArgumentError("no node templates");
  std::set<std::string> names;
  for (const core::NodeSpec& t : in.templates) {
    if (!names.insert(t.name).second) {
      return absl::InvalidArgumentError(StrCat("two node templates are named ", t.name));
    }
    absl::Status valid = core::Cluster::Create({t}).status();
    if (!valid.ok()) {
      return absl::InvalidArgumentError(StrCat("node template ", t.name, ": ", valid.message()));
    }
  }
  ScaleUpPlan plan;
  for (const std::vector<PodRequest>& g : in.waiting) plan.waiting_pods += g.size();
  for (const core::NodeSpec& t : in.templates) {
    TESSERA_ASSIGN_OR_RETURN(TemplateOption o, Evaluate(in, t, options.max_nodes));
    plan.options.push_back(std::move(o));
  }
  if (plan.waiting_pods == 0) {
    plan.all_placed = true;
    plan.reason = "nothing waits: no nodes needed";
    return plan;
  }
  // The most pods run, then the fewest nodes, then the fewest GPUs; ties to the first template.
  for (size_t i = 0; i < plan.options.size(); ++i) {
    const TemplateOption& o = plan.options[i];
    if (o.pods_placed == 0) continue;
    if (plan.recommended < 0) {
      plan.recommended = static_cast<int>(i);
      continue;
    }
    const TemplateOption& b = plan.options[plan.recommended];
    if (std::make_tuple(-o.pods_placed, o.nodes, o.gpus) <
        std::make_tuple(-b.pods_placed, b.nodes, b.gpus)) {
      plan.recommended = static_cast<int>(i);
    }
  }
  if (plan.recommended < 0) {
    plan.reason = StrCat("no template lets any of the ", plan.waiting_pods,
                         " waiting pods run (up to ", options.max_nodes, " nodes of each)");
    return plan;
  }
  const TemplateOption& best = plan.options[plan.recommended];
  plan.all_placed = best.unplaced.empty();
  const std::string add = best.nodes == 0
                              ? std::string("no new node")
                              : StrCat(best.nodes, " x ", best.name, " (", best.gpus, " GPUs)");
  plan.reason = !plan.all_placed
                    ? StrCat("add ", add, ": ", best.pods_placed, " of the ", plan.waiting_pods,
                             " waiting pods run; no template runs them all")
                : best.partial.empty()
                    ? StrCat("add ", add, ": every waiting pod (", plan.waiting_pods, ") runs")
                    : StrCat("add ", add, ": every waiting pod or gang starts (", best.pods_placed,
                             " of the ", plan.waiting_pods, " waiting pods run)");
  for (const PartialGang& g : best.partial) StrAppend(&plan.reason, "; ", Describe(g));
  return plan;
}

}  // namespace tessera::plan
