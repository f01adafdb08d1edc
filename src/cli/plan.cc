// `tessera plan`: plans computed with the engine's what-if on a cluster file and a workload file
// (the formats `tessera simulate` reads). The workload is placed in file order, as `simulate`
// places it (sim::RunScenario); the pods that do not fit are the ones that wait, and the plans
// are for them.
//   plan defrag:   the fewest pod moves after which a waiting pod or gang fits (core/plan/defrag.h)
//   plan scale-up: which node templates, and how many, would let the waiting pods run
//                  (core/plan/scale_up.h)
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/str_split.h"
#include "cli/command.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/model/cluster.h"
#include "core/model/quantity.h"
#include "core/plan/defrag.h"
#include "core/plan/scale_up.h"
#include "core/policy/policy.h"
#include "nlohmann/json.hpp"
#include "sim/cluster_file.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/workload_file.h"

namespace tessera::cli {
namespace {

struct PlanOptions {
  std::string cluster_file;
  std::string workload_file;
  std::string policy = std::string(core::kDefaultPolicy);
  std::vector<std::string> jobs;  // only these jobs' waiting pods
  bool json = false;
  // defrag
  std::vector<std::string> pinned;
  int max_moves = 4;
  int64_t max_checks = 200'000;
  bool move_higher_priority = false;
  // scale-up
  std::string templates_file;
  int max_nodes = 64;
};

// The cluster as the workload leaves it: what runs, and what waits.
struct Situation {
  sim::ClusterFile file;
  std::unique_ptr<core::Cluster> cluster;
  sim::Workload workload;
  sim::ScenarioResult result;
};

// One pod, or one gang, that waits; `more` counts the other waiting pods of its job that the
// first stands for (pods of one job are alike).
struct Waiting {
  std::string job;
  std::vector<core::PodRequest> pods;
  int more = 0;
};

absl::StatusOr<std::unique_ptr<core::Policy>> MakePolicy(const std::string& name) {
  return core::CreatePolicy(name, {});
}

absl::StatusOr<Situation> Load(const PlanOptions& o) {
  Situation s;
  TESSERA_ASSIGN_OR_RETURN(s.file, sim::LoadClusterFile(o.cluster_file));
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(s.file.nodes);
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(StrCat(o.cluster_file, ": ", cluster.status().message()));
  }
  s.cluster = std::make_unique<core::Cluster>(*std::move(cluster));
  TESSERA_ASSIGN_OR_RETURN(s.workload, sim::LoadWorkloadFile(o.workload_file));
  TESSERA_RETURN_IF_ERROR(
      sim::ValidateWorkload(*s.cluster, s.file.levels, s.workload, o.workload_file));
  std::set<std::string> names;
  for (const sim::Job& j : s.workload.jobs) names.insert(j.name);
  for (const std::vector<std::string>* list : {&o.jobs, &o.pinned}) {
    for (const std::string& j : *list) {
      if (!names.contains(j)) {
        return absl::InvalidArgumentError(StrCat("no job \"", j, "\" in ", o.workload_file,
                                                 " (jobs: ", StrJoin(names, ", "), ")"));
      }
    }
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<core::Policy> policy, MakePolicy(o.policy));
  s.result = sim::RunScenario(*s.cluster, s.file.levels, s.workload, std::move(policy));
  return s;
}

std::vector<plan::RunningPod> Running(const Situation& s, const PlanOptions& o) {
  std::set<std::string> pinned(o.pinned.begin(), o.pinned.end());
  std::vector<plan::RunningPod> running;
  for (const sim::PodOutcome& p : s.result.pods) {
    if (!p.result.placed()) continue;
    running.push_back(plan::RunningPod{p.request, p.result.placement, !pinned.contains(p.job)});
  }
  return running;
}

std::vector<Waiting> WaitingPods(const Situation& s, const PlanOptions& o) {
  std::set<std::string> only(o.jobs.begin(), o.jobs.end());
  std::vector<Waiting> out;
  std::map<std::string, size_t> first_of_job;  // non-gang jobs: their first waiting pod
  for (size_t i = 0; i < s.result.pods.size(); ++i) {
    const sim::PodOutcome& p = s.result.pods[i];
    if (p.result.placed() || (!only.empty() && !only.contains(p.job))) continue;
    if (p.request.gang) {
      if (!out.empty() && out.back().pods[0].gang == p.request.gang && out.back().job == p.job) {
        out.back().pods.push_back(p.request);
      } else {
        out.push_back(Waiting{p.job, {p.request}, 0});
      }
      continue;
    }
    auto it = first_of_job.find(p.job);
    if (it != first_of_job.end()) {
      ++out[it->second].more;
      continue;
    }
    first_of_job[p.job] = out.size();
    out.push_back(Waiting{p.job, {p.request}, 0});
  }
  return out;
}

std::string DescribeWaiting(const Waiting& w) {
  if (w.pods[0].gang) {
    const core::GangAsk& g = *w.pods[0].gang;
    std::string where;
    if (!g.level.empty()) {
      where = StrCat(", ", g.required ? "inside one " : "preferably inside one ", g.level);
    }
    return StrCat("gang ", g.name, " (", w.pods.size(),
                  w.pods.size() == 1 ? " pod of " : " pods of ", core::DescribeAsk(w.pods[0]),
                  where, ")");
  }
  std::string more = w.more > 0 ? StrCat("; ", w.more, " more of job ", w.job, " wait") : "";
  return StrCat("pod ", w.pods[0].name, " (", core::DescribeAsk(w.pods[0]), more, ")");
}

// "dgx-0 GPU 5 (20Gi)", "dgx-0 GPUs 0,1,2,3", "cpu-0 (no GPU)".
std::string Where(const core::Cluster& cluster, const core::Placement& p) {
  std::string out = cluster.node(p.node).name;
  if (p.gpus.empty()) return out + " (no GPU)";
  std::vector<int> idx;
  for (const core::GpuGrant& g : p.gpus) idx.push_back(g.gpu);
  StrAppend(&out, idx.size() == 1 ? " GPU " : " GPUs ", StrJoin(idx, ","));
  if (p.gpus.size() == 1 && !p.gpus[0].exclusive) {
    StrAppend(&out, " (", core::FormatMiB(p.gpus[0].memory_mib));
    if (p.gpus[0].compute_milli > 0) StrAppend(&out, ", ", p.gpus[0].compute_milli / 10, "%");
    out += ")";
  }
  return out;
}

nlohmann::json PlacementJson(const core::Cluster& cluster, const core::Placement& p) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const core::GpuGrant& g : p.gpus) {
    gpus.push_back({{"index", g.gpu},
                    {"memory_mib", g.memory_mib},
                    {"compute_milli", g.compute_milli},
                    {"exclusive", g.exclusive}});
  }
  return {{"node", cluster.node(p.node).name}, {"gpus", std::move(gpus)}};
}

bool Planned(plan::DefragVerdict v) {
  return v == plan::DefragVerdict::kFitsNow || v == plan::DefragVerdict::kPlan;
}

absl::Status RunDefrag(const PlanOptions& o, int* exit_code) {
  TESSERA_ASSIGN_OR_RETURN(Situation s, Load(o));
  // Checked here for a message that names the flag; the planner itself runs it again.
  TESSERA_RETURN_IF_ERROR(MakePolicy(o.policy).status());
  const core::Cluster& cluster = *s.cluster;
  std::vector<plan::RunningPod> running = Running(s, o);
  std::vector<Waiting> waiting = WaitingPods(s, o);
  plan::DefragOptions options;
  options.max_moves = o.max_moves;
  options.max_checks = o.max_checks;
  options.move_higher_priority = o.move_higher_priority;

  nlohmann::json plans = nlohmann::json::array();
  if (!o.json) {
    std::cout << "cluster: " << sim::DescribeCluster(cluster) << "\n"
              << "workload: " << s.result.placed << " pods placed, " << s.result.pending
              << " wait (policy " << o.policy << ", in file order)\n";
    if (waiting.empty()) {
      std::cout << (o.jobs.empty() ? "nothing waits: nothing to plan\n"
                                   : "nothing of the named jobs waits: nothing to plan\n");
    } else {
      std::cout << "each plan is for that pod or gang alone, on the cluster as it is; at most "
                << o.max_moves << " moves\n";
    }
  }
  bool all_planned = true;
  for (const Waiting& w : waiting) {
    plan::DefragInput in;
    in.cluster = &cluster;
    in.levels = s.file.levels;
    in.make_policy = [&o] { return *MakePolicy(o.policy); };
    in.running = running;
    in.target = w.pods;
    TESSERA_ASSIGN_OR_RETURN(plan::DefragPlan p, plan::PlanDefrag(in, options));
    all_planned = all_planned && Planned(p.verdict);
    if (o.json) {
      nlohmann::json moves = nlohmann::json::array();
      for (const plan::Move& m : p.moves) {
        moves.push_back({{"pod", m.pod},
                         {"from", PlacementJson(cluster, m.from)},
                         {"to", PlacementJson(cluster, m.to)},
                         {"whole_gpus", m.whole_gpus}});
      }
      nlohmann::json target = nlohmann::json::array();
      for (size_t i = 0; i < p.target.size(); ++i) {
        nlohmann::json t = PlacementJson(cluster, p.target[i]);
        t["pod"] = w.pods[i].name;
        target.push_back(std::move(t));
      }
      nlohmann::json pods = nlohmann::json::array();
      for (const core::PodRequest& r : w.pods) pods.push_back(r.name);
      plans.push_back({{"job", w.job},
                       {"gang", w.pods[0].gang ? nlohmann::json(w.pods[0].gang->name)
                                               : nlohmann::json(nullptr)},
                       {"pods", std::move(pods)},
                       {"also_waiting", w.more},
                       {"verdict", std::string(plan::VerdictName(p.verdict))},
                       {"reason", p.reason},
                       {"proven_minimal", p.proven_minimal},
                       {"whole_gpus_moved", p.whole_gpus_moved},
                       {"sets_checked", p.checks},
                       {"moves", std::move(moves)},
                       {"placements", std::move(target)}});
      continue;
    }
    std::cout << "\n" << DescribeWaiting(w) << ":\n  " << p.reason << "\n";
    for (size_t i = 0; i < p.moves.size(); ++i) {
      const plan::Move& m = p.moves[i];
      std::cout << "  " << i + 1 << ". move " << m.pod << "  from " << Where(cluster, m.from)
                << "  to " << Where(cluster, m.to) << "\n";
    }
    if (p.verdict == plan::DefragVerdict::kPlan || p.verdict == plan::DefragVerdict::kFitsNow) {
      std::cout << (p.moves.empty() ? "  it goes to: " : "  then it goes to: ");
      for (size_t i = 0; i < p.target.size(); ++i) {
        std::cout << (i ? "; " : "") << (w.pods.size() > 1 ? w.pods[i].name + " " : "")
                  << Where(cluster, p.target[i]);
      }
      std::cout << "\n";
    }
  }
  if (o.json) {
    nlohmann::json doc = {{"policy", o.policy},
                          {"max_moves", o.max_moves},
                          {"placed", s.result.placed},
                          {"waiting", s.result.pending},
                          {"plans", std::move(plans)}};
    std::cout << doc.dump(2) << "\n";
  }
  *exit_code = all_planned ? kExitOk : kExitNoPlan;
  return absl::OkStatus();
}

absl::Status RunScaleUp(const PlanOptions& o, int* exit_code) {
  TESSERA_ASSIGN_OR_RETURN(Situation s, Load(o));
  TESSERA_ASSIGN_OR_RETURN(sim::ClusterFile templates, sim::LoadClusterFile(o.templates_file));
  if (templates.nodes.empty()) {
    return absl::InvalidArgumentError(StrCat(o.templates_file, ": no node templates"));
  }
  const core::Cluster& cluster = *s.cluster;
  plan::ScaleUpInput in;
  in.cluster = &cluster;
  in.levels = s.file.levels;
  in.make_policy = [&o] { return *MakePolicy(o.policy); };
  for (const plan::RunningPod& r : Running(s, o)) in.running.push_back(r);
  // Every waiting pod counts here (not one per job): each needs room.
  std::set<std::string> only(o.jobs.begin(), o.jobs.end());
  for (const sim::PodOutcome& p : s.result.pods) {
    if (p.result.placed() || (!only.empty() && !only.contains(p.job))) continue;
    if (p.request.gang && !in.waiting.empty() && in.waiting.back()[0].gang == p.request.gang) {
      in.waiting.back().push_back(p.request);
    } else {
      in.waiting.push_back({p.request});
    }
  }
  in.templates = templates.nodes;
  plan::ScaleUpOptions options;
  options.max_nodes = o.max_nodes;
  TESSERA_ASSIGN_OR_RETURN(plan::ScaleUpPlan p, plan::PlanScaleUp(in, options));

  if (o.json) {
    nlohmann::json options_json = nlohmann::json::array();
    for (const plan::TemplateOption& t : p.options) {
      nlohmann::json unplaced = nlohmann::json::array();
      for (const plan::Unplaced& u : t.unplaced) {
        unplaced.push_back({{"pods", u.pods}, {"reason", u.reason}});
      }
      options_json.push_back({{"template", t.name},
                              {"nodes", t.nodes},
                              {"gpus", t.gpus},
                              {"pods_placed", t.pods_placed},
                              {"gpu_memory_granted_mib", t.memory_granted_mib},
                              {"unplaced", std::move(unplaced)}});
    }
    nlohmann::json doc = {
        {"policy", o.policy},
        {"placed", s.result.placed},
        {"waiting", s.result.pending},
        {"recommended", p.recommended >= 0 ? nlohmann::json(p.options[p.recommended].name)
                                           : nlohmann::json(nullptr)},
        {"reason", p.reason},
        {"options", std::move(options_json)}};
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << "cluster: " << sim::DescribeCluster(cluster) << "\n"
              << "workload: " << s.result.placed << " pods placed, " << s.result.pending
              << " wait (policy " << o.policy << ", in file order)\n";
    if (in.waiting.empty()) {
      std::cout << "nothing waits: no nodes needed\n";
    } else {
      std::cout << "\nnodes of one template that would let the waiting pods run (at most "
                << o.max_nodes << " per template):\n";
      for (size_t i = 0; i < p.options.size(); ++i) {
        const plan::TemplateOption& t = p.options[i];
        std::cout << "  " << (static_cast<int>(i) == p.recommended ? "* " : "  ") << t.name << ": "
                  << t.nodes << (t.nodes == 1 ? " node" : " nodes") << " (" << t.gpus
                  << " GPUs) run " << t.pods_placed << " of " << p.waiting_pods
                  << " waiting pods\n";
        for (const plan::Unplaced& u : t.unplaced) {
          std::cout << "      still waiting: " << StrJoin(u.pods, ", ") << ": " << u.reason << "\n";
        }
      }
      std::cout << "\n" << p.reason << "\n";
    }
  }
  *exit_code = p.all_placed ? kExitOk : kExitNoPlan;
  return absl::OkStatus();
}

void AddCommonFlags(CLI::App* cmd, PlanOptions* o) {
  cmd->add_option("--cluster", o->cluster_file,
                  "Cluster file (YAML, as `tessera simulate --cluster` reads it)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--workload", o->workload_file,
                  "Workload file (YAML, as `tessera simulate --workload` reads it): its jobs are "
                  "placed in file order; the pods that do not fit are the ones that wait")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--policy", o->policy,
                  StrCat("Placement policy, as the scheduler runs it (known: ",
                         StrJoin(core::PolicyNames(), ", "), ")"))
      ->capture_default_str();
  cmd->add_option("--job", o->jobs,
                  "Plan only for the waiting pods of this job (repeatable; default: every job)")
      ->delimiter(',');
  cmd->add_flag("--json", o->json,
                "Print one JSON document instead of text (format in the README)");
}

void Finish(const char* name, absl::Status status, int* exit_code) {
  if (status.ok()) return;
  std::cerr << "tessera plan " << name << ": " << status.message() << "\n";
  *exit_code = status.code() == absl::StatusCode::kInternal ? kExitFailure : kExitBadInput;
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* exit_code) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Plans for pods that wait, computed with the engine's what-if on a cluster file and a\n"
      "workload file: `plan defrag` (which pods to move so that one fits) and `plan scale-up`\n"
      "(which nodes to add). Nothing is changed anywhere: a plan is for a person or a tool to\n"
      "carry out.");
  plan->require_subcommand(1);

  auto d = std::make_shared<PlanOptions>();
  CLI::App* defrag = plan->add_subcommand(
      "defrag",
      "For each pod or gang that waits, the fewest pod moves (which pod, from where, to where)\n"
      "after which it fits, honouring its topology and gang rules: moves of GPU shares are\n"
      "preferred to moves of whole GPUs, at most --max-moves per plan. Gang members, pods\n"
      "holding a MIG instance, pods of --pin jobs and pods of a higher priority than the one\n"
      "waiting are never moved. A waiting job of many alike pods is planned for its first pod.\n"
      "Each plan stands alone (plans for two pods may move the same pod).\n"
      "Answers per pod or gang: fits-now, plan, over-budget (more moves needed than\n"
      "--max-moves), search-limit, needs-capacity (impossible without more capacity: even with\n"
      "every movable pod moved away; see `tessera plan scale-up`).\n"
      "Exit status: 0 every pod or gang planned for fits now or has a plan, 3 some has none,\n"
      "2 bad input, 1 a failure.");
  AddCommonFlags(defrag, d.get());
  defrag->add_option("--max-moves", d->max_moves, "Most pod moves in one plan")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  defrag
      ->add_option("--max-checks", d->max_checks,
                   "Most sets of pods the search checks per plan before it gives up (answer "
                   "search-limit)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  defrag->add_option("--pin", d->pinned, "Never move the pods of this job (repeatable)")
      ->delimiter(',');
  defrag->add_flag("--move-higher-priority", d->move_higher_priority,
                   "Also move pods of a higher priority than the one waiting");
  defrag->callback([d, exit_code] {
    *exit_code = kExitOk;
    Finish("defrag", RunDefrag(*d, exit_code), exit_code);
  });

  auto u = std::make_shared<PlanOptions>();
  CLI::App* scale = plan->add_subcommand(
      "scale-up",
      "For the pods that wait, which nodes would let them run: for each node template, how\n"
      "many nodes of it (added to the cluster as it is, the waiting pods placed by the engine\n"
      "in file order, gangs whole) run the most waiting pods, and which template does it with\n"
      "the fewest nodes (then the fewest GPUs). Pods that no number of a template can run are\n"
      "named with the engine's reason.\n"
      "Exit status: 0 some template runs every waiting pod (or nothing waits), 3 none does,\n"
      "2 bad input, 1 a failure.");
  AddCommonFlags(scale, u.get());
  scale
      ->add_option("--templates", u->templates_file,
                   "Node templates (YAML in the cluster file's format: each node listed is one "
                   "template, by name; its labels go on every node added)")
      ->required()
      ->check(CLI::ExistingFile);
  scale->add_option("--max-nodes", u->max_nodes, "Most nodes of one template to add")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000));
  scale->callback([u, exit_code] {
    *exit_code = kExitOk;
    Finish("scale-up", RunScaleUp(*u, exit_code), exit_code);
  });
}

}  // namespace tessera::cli
