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

// A group that waits: one pod, or every member of a gang.
struct Group {
  const std::vector<PodRequest>* pods = nullptr;
  // One pod, no gang, no MIG, under a policy whose choice is per node: where it fitted nowhere,
  // only nodes added since can take it (what the nodes held only grew), and the policy chooses
  // among those as it would among all.
  bool narrow = false;
  int failed_at = 0;   // nodes in the cluster when it last did not fit (0: not tried)
  std::string reason;  // the engine's, then
};

// The ask for a group: a gang whole (a pod is a gang of one), an elastic gang as the scheduler
// starts it.
core::Ask AskFor(const Group& g) {
  const std::optional<core::GangAsk>& gang = g.pods->front().gang;
  return gang && gang->elastic() ? core::Ask::ElasticGang(*g.pods, {}) : core::Ask::Gang(*g.pods);
}

// Places what waits in order; returns how many pods were placed, and removes their groups. An
// elastic gang starts with as many members as fit, at least its min (Engine::Decide,
// Ask::ElasticGang), and is then done: its other members join as room frees up (`partial` names
// it). `explain`: the reasons of what does not fit are the engine's full ones (the last pass);
// else short (Ask::Quiet). `narrow`: a narrow group that did not fit before is offered only the
// nodes added since (Group::narrow); the decision is the same.
int PlaceWaiting(Engine& engine, std::vector<Group>& left, bool explain, bool narrow,
                 int64_t* memory, std::vector<PartialGang>* partial) {
  int placed = 0;
  const int nodes = engine.cluster().node_count();
  std::vector<Group> still;
  std::vector<core::Candidate> added;
  int added_from = -1;
  for (Group& group : left) {
    core::Ask ask = AskFor(group);
    if (!explain) ask.Quiet();
    if (narrow && group.narrow && group.failed_at > 0) {
      if (added_from != group.failed_at) {
        added.clear();
        for (int n = group.failed_at; n < nodes; ++n) {
          added.push_back(
              {core::NodeId(n), engine.cluster().node(core::NodeId(n)).all_gpus_mask()});
        }
        added_from = group.failed_at;
      }
      ask.In({.candidates = &added});
    }
    std::vector<core::PlacementResult> r = engine.Decide(ask);
    if (!r.empty() && r[0].placed()) {
      int n = 0;
      for (const core::PlacementResult& x : r) {
        if (!x.placed()) continue;
        ++n;
        for (const core::GpuGrant& g : x.placement.gpus) *memory += g.memory_mib;
      }
      placed += n;
      if (n < static_cast<int>(group.pods->size())) {
        const core::GangAsk& gang = *group.pods->front().gang;
        PartialGang g{gang.name, n, gang.size, gang.min_members(), {}};
        for (size_t i = 0; i < r.size(); ++i) {
          if (!r[i].placed()) g.waiting.push_back((*group.pods)[i].name);
        }
        partial->push_back(std::move(g));
      }
      continue;
    }
    group.failed_at = nodes;
    group.reason = r.empty() ? "" : r[0].reason;
    still.push_back(std::move(group));
  }
  left = std::move(still);
  return placed;
}

// Whether `g` is narrow (Group::narrow) under `policy`.
bool Narrow(const core::Policy& policy, const std::vector<PodRequest>& g) {
  return policy.choice_is_per_node() && g.size() == 1 && !g[0].gang &&
         g[0].gpu.kind != core::GpuAsk::Kind::kMig;
}

// The cluster as it runs: every running pod restored, the cordoned nodes cordoned.
absl::StatusOr<std::unique_ptr<Engine>> Scratch(const ScaleUpInput& in) {
  auto engine = std::make_unique<Engine>(*in.cluster, in.make_policy(), in.levels);
  // As the scheduler's engine: spares first, then the pods (a pod placed earlier moves them).
  if (in.spares_per_domain > 0) engine->KeepSpares(in.spares_per_domain);
  for (const RunningPod& r : in.running) {
    absl::Status s = engine->Restore(r.request.name, r.placement);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          StrCat("the running pods do not fit the cluster together: ", s.message()));
    }
  }
  TESSERA_RETURN_IF_ERROR(Cordon(*engine, in.cordoned));
  return engine;
}

// Template `t` on `engine` (Scratch's, which it changes).
absl::StatusOr<TemplateOption> Evaluate(Engine& engine, const ScaleUpInput& in,
                                        const core::NodeSpec& t, int max_nodes) {
  TemplateOption out;
  out.name = t.name;
  std::vector<Group> left;
  for (const std::vector<PodRequest>& g : in.waiting) {
    left.push_back(Group{&g, Narrow(engine.policy(), g)});
  }
  int64_t memory = 0;
  // What already fits (pods that waited only because of the order they came in). The reasons
  // kept are the last pass's: explained there only (with no node to add, this is the last).
  bool explained = max_nodes <= 0;
  out.pods_placed = PlaceWaiting(engine, left, explained, /*narrow=*/false, &memory, &out.partial);
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
    // The last node's pass, known to be last, is the engine's as it is, reasons explained.
    explained = n == max_nodes;
    int placed =
        PlaceWaiting(engine, left, explained, /*narrow=*/!explained, &memory, &out.partial);
    if (placed > 0) {
      out.pods_placed += placed;
      out.nodes = n;
      idle = 0;
      continue;
    }
    // A gang may need several new nodes before it fits: give up only after as many idle nodes
    // as the largest waiting group could need.
    int patience = 1;
    for (const Group& g : left) {
      patience = std::max(patience, (GroupGpus(*g.pods) + std::max(1, t.gpu_count()) - 1) /
                                        std::max(1, t.gpu_count()));
    }
    if (++idle >= patience) break;
  }
  if (!explained) {
    // The last pass placed nothing (or nothing waits): each group's reason, explained, on the
    // cluster as that pass left it, which is as each group found it there.
    for (Group& g : left) {
      std::vector<core::PlacementResult> r = engine.Decide(AskFor(g).TestOnly());
      g.reason = r.empty() ? "" : r[0].reason;
    }
  }
  out.gpus = out.nodes * t.gpu_count();
  out.memory_granted_mib = memory;
  for (const Group& g : left) {
    Unplaced u;
    for (const PodRequest& p : *g.pods) u.pods.push_back(p.name);
    u.reason = g.reason;
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
  if ((in.cluster == nullptr && in.base == nullptr) || !in.make_policy) {
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
  // One scratch engine built (none when the caller has one: in.base); each template on a copy
  // of it under a new policy (Engine's copy: as built afresh), the last on the scratch itself.
  std::unique_ptr<Engine> scratch;
  if (in.base == nullptr) {
    TESSERA_ASSIGN_OR_RETURN(scratch, Scratch(in));
  }
  const Engine& start = in.base != nullptr ? *in.base : *scratch;
  for (size_t i = 0; i < in.templates.size(); ++i) {
    std::unique_ptr<Engine> copy;
    if (scratch == nullptr || i + 1 < in.templates.size()) {
      copy = std::make_unique<Engine>(start, in.make_policy());
    }
    Engine& engine = copy ? *copy : *scratch;
    TESSERA_ASSIGN_OR_RETURN(TemplateOption o,
                             Evaluate(engine, in, in.templates[i], options.max_nodes));
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
