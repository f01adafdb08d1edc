#include "sim/scenario.h"

#include <chrono>
#include <map>

#include "common/status.h"
#include "common/strings.h"
#include "core/model/quantity.h"
#include "core/topology/gpu_select.h"
#include "core/topology/mig_select.h"

namespace tessera::sim {

absl::Status ValidateWorkload(const core::Cluster& cluster,
                              const std::vector<core::TopologyLevel>& levels,
                              const Workload& workload, std::string_view source) {
  int64_t largest_gpu = 0;
  for (const core::NodeSpec& n : cluster.nodes()) {
    for (const core::GpuSpec& g : n.gpus) largest_gpu = std::max(largest_gpu, g.memory_mib);
  }
  for (const Job& job : workload.jobs) {
    const core::GpuAsk& ask = job.pod.gpu;
    if (ask.kind == core::GpuAsk::Kind::kShare && ask.memory_mib > largest_gpu) {
      return absl::InvalidArgumentError(
          StrCat(source, ":", job.line, ": job ", job.name, ": gpu.memory ",
                 core::FormatMiB(ask.memory_mib),
                 " is larger than any GPU of the cluster (the largest has ",
                 core::FormatMiB(largest_gpu), ")"));
    }
    if (job.gang && !job.gang->level.empty()) {
      bool known = false;
      std::vector<std::string> names;
      for (const core::TopologyLevel& l : levels) {
        known = known || l.name == job.gang->level;
        names.push_back(l.name);
      }
      if (!known) {
        return absl::InvalidArgumentError(StrCat(
            source, ":", job.line, ": job ", job.name, ": gang.topology \"", job.gang->level,
            "\" is not a topology level of the cluster (levels: ", StrJoin(names, ", "), ")"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

int64_t RequestedMemory(const core::Cluster& cluster, const core::PodRequest& asked,
                        const core::Placement& p) {
  const core::NodeSpec& node = cluster.node(p.node);
  switch (asked.gpu.kind) {
    case core::GpuAsk::Kind::kNone:
      return 0;
    case core::GpuAsk::Kind::kShare:
      return asked.gpu.memory_mib;
    case core::GpuAsk::Kind::kMig:
      return p.gpus.empty() ? 0 : p.gpus[0].memory_mib;
    case core::GpuAsk::Kind::kFraction:
    case core::GpuAsk::Kind::kWhole: {
      int64_t sum = 0;
      for (const core::GpuGrant& g : p.gpus) {
        sum += core::ShareMemoryOn(asked.gpu, node.gpus[g.gpu].memory_mib);
      }
      return sum;
    }
  }
  return 0;
}

GangOutcome Summarise(const core::Engine& engine, const std::string& job,
                      const std::vector<PodOutcome>& members) {
  GangOutcome g;
  g.job = job;
  g.gang = members.front().request.gang->name;
  g.members = static_cast<int>(members.size());
  g.min = members.front().request.gang->min_members();
  for (const PodOutcome& m : members) g.running += m.result.placed() ? 1 : 0;
  g.placed = g.running >= g.min;  // all members; an elastic gang runs from its min
  std::map<std::string, int> per_node;
  std::optional<std::string> domain;
  bool one = true;
  bool any_gpu = false;
  for (const PodOutcome& m : members) {
    if (!m.result.placed()) continue;
    const core::Placement& p = m.result.placement;
    ++per_node[engine.cluster().node(p.node).name];
    for (const core::GpuGrant& grant : p.gpus) {
      any_gpu = true;
      std::optional<std::string> d = engine.domains().NvlinkDomainOf(p.node, grant.gpu);
      if (!d) {
        one = false;
      } else if (!domain) {
        domain = d;
      } else if (*domain != *d) {
        one = false;
      }
    }
  }
  g.one_nvlink_domain = g.placed && any_gpu && one;
  // The same question at the gang's own level.
  const core::GangAsk& ask = *members.front().request.gang;
  g.level = ask.level.empty() ? std::string(core::kNvlinkDomainLevel) : ask.level;
  const int level = engine.domains().LevelIndex(g.level);
  std::optional<std::string> same;
  bool inside = g.placed && level >= 0;
  for (const PodOutcome& m : members) {
    if (!inside) break;
    if (!m.result.placed()) continue;  // an elastic gang's members still waiting
    const core::Placement& p = m.result.placement;
    std::vector<int> gpus;
    for (const core::GpuGrant& grant : p.gpus) gpus.push_back(grant.gpu);
    if (gpus.empty()) gpus.push_back(-1);  // a CPU-only member: its node's label decides
    for (int gpu : gpus) {
      std::optional<std::string> d =
          gpu >= 0 || g.level != core::kNvlinkDomainLevel
              ? engine.domains().DomainOf(level, p.node, std::max(gpu, 0))
              : std::nullopt;
      if (!d || (same && *same != *d)) {
        inside = false;
        break;
      }
      same = d;
    }
  }
  g.one_domain = inside;
  std::vector<std::string> parts;
  for (const auto& [node, n] : per_node) parts.push_back(StrCat(node, " x", n));
  g.where = StrJoin(parts, ", ");
  return g;
}

}  // namespace

namespace {

ScenarioResult Run(const core::Cluster& cluster, const Workload& workload, core::Engine& engine);

}  // namespace

ScenarioResult RunScenario(const core::Cluster& cluster,
                           const std::vector<core::TopologyLevel>& levels, const Workload& workload,
                           std::unique_ptr<core::Policy> policy) {
  core::Engine engine(cluster, std::move(policy), levels);
  return Run(cluster, workload, engine);
}

absl::StatusOr<ScenarioResult> RunScenarioFrom(const core::Cluster& cluster,
                                               const std::vector<core::TopologyLevel>& levels,
                                               const StartState& start, const Workload& workload,
                                               std::unique_ptr<core::Policy> policy) {
  core::Engine engine(cluster, std::move(policy), levels);
  if (!start.cordoned.empty()) {
    core::NodeChanges changes;
    for (core::NodeId id : start.cordoned) changes.cordon.emplace_back(id, true);
    TESSERA_RETURN_IF_ERROR(engine.ChangeNodes(std::move(changes)));
  }
  for (const auto& [name, placement] : start.running) {
    absl::Status st = engine.Restore(name, placement);
    if (!st.ok()) {
      return absl::InvalidArgumentError(StrCat("running pod ", name, " on ",
                                               cluster.node(placement.node).name, ": ",
                                               FromAbsl(st.message())));
    }
  }
  return Run(cluster, workload, engine);
}

namespace {

ScenarioResult Run(const core::Cluster& cluster, const Workload& workload, core::Engine& engine) {
  ScenarioResult out;
  out.policy = std::string(engine.policy().name());
  auto start = std::chrono::steady_clock::now();
  for (const Job& job : workload.jobs) {
    std::vector<core::PodRequest> pods = ExpandJob(job);
    if (!job.gang) {
      for (core::PodRequest& p : pods) {
        core::PlacementResult r = engine.DecideOne(core::Ask::Pod(p));
        if (r.placed()) {
          std::string plan = core::DescribeMigPlan(engine.state(), r.placement);
          if (!plan.empty()) out.mig_plans.push_back(StrCat(p.name, ": ", plan));
        }
        out.pods.push_back(PodOutcome{job.name, std::move(p), std::move(r)});
      }
      continue;
    }
    const size_t size = static_cast<size_t>(job.gang->size);
    for (size_t begin = 0; begin < pods.size(); begin += size) {
      std::span<const core::PodRequest> members(pods.data() + begin, size);
      // Elastic gangs start with as many members as fit (at least their min); the engine owns
      // the rule, as for the scheduler.
      std::vector<core::PlacementResult> results = engine.Decide(
          job.gang->elastic() ? core::Ask::ElasticGang(members, {}) : core::Ask::Gang(members));
      for (size_t i = 0; i < size; ++i) {
        if (!results[i].placed()) continue;
        std::string plan = core::DescribeMigPlan(engine.state(), results[i].placement);
        if (!plan.empty()) out.mig_plans.push_back(StrCat(members[i].name, ": ", plan));
      }
      std::vector<PodOutcome> outcomes;
      for (size_t i = 0; i < size; ++i) {
        outcomes.push_back(PodOutcome{job.name, members[i], std::move(results[i])});
      }
      out.gangs.push_back(Summarise(engine, job.name, outcomes));
      for (PodOutcome& o : outcomes) out.pods.push_back(std::move(o));
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const core::ClusterState& state = engine.state();
  out.gpus_in_use = state.gpus_in_use();
  out.total_gpus = cluster.total_gpus();
  out.gpu_memory_allocated_mib = state.allocated_gpu_memory_mib();
  for (const core::NodeSpec& n : cluster.nodes()) {
    for (const core::GpuSpec& g : n.gpus) out.gpu_memory_total_mib += g.memory_mib;
  }
  for (const PodOutcome& o : out.pods) {
    if (!o.result.placed()) {
      ++out.pending;
      continue;
    }
    ++out.placed;
    const core::Placement& p = o.result.placement;
    out.gpu_memory_requested_mib += RequestedMemory(cluster, o.request, p);
    if (!p.gpus.empty() && p.gpus[0].is_mig()) ++out.mig_pods;
    if (p.gpus.size() >= 2) {
      ++out.multi_gpu_pods;
      if (core::MeetsTopology(cluster.node(p.node), p.gpu_mask(), core::GpuTopology::kNvLink)) {
        ++out.multi_gpu_nvlink_pods;
      }
    }
  }
  for (const GangOutcome& g : out.gangs) {
    out.gangs_placed += g.placed;
    out.gangs_one_domain += g.placed && g.one_domain;
  }
  return out;
}

}  // namespace

}  // namespace tessera::sim
