// `tessera plan`: plans computed with the engine's what-if on a cluster file and a workload file
// (the formats `tessera simulate` reads), or on the live cluster (--from-cluster). From files, the
// workload is placed in file order, as `simulate` places it (sim::RunScenario); the pods that do
// not fit are the ones that wait. From the cluster, a snapshot (k8s/snapshot: one list of nodes,
// one of pods) gives the ledger a scheduler starting now would have; what runs and what waits for
// --scheduler-name are read from it (k8s/scheduler/plan_inputs.h, the scheduler's own reading).
// Either way the plans are for the pods that wait, and are printed alike.
//   plan defrag:   the fewest pod moves after which a waiting pod or gang fits (core/plan/defrag.h)
//   plan scale-up: which node templates, and how many, would let the waiting pods run
//                  (core/plan/scale_up.h)
#include <iostream>
#include <map>
#include <set>

#include "absl/strings/str_split.h"
#include "cli/cluster_access.h"
#include "cli/command.h"
#include "cli/output.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/model/cluster.h"
#include "core/model/quantity.h"
#include "core/plan/defrag.h"
#include "core/plan/scale_up.h"
#include "core/policy/policy.h"
#include "k8s/scheduler/plan_inputs.h"
#include "k8s/snapshot/snapshot.h"
#include "nlohmann/json.hpp"
#include "records/inventory.h"
#include "sim/cluster_file.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/workload_file.h"
#include "spdlog/spdlog.h"

namespace tessera::cli {
namespace {

struct PlanOptions {
  std::string cluster_file;
  std::string workload_file;
  bool from_cluster = false;
  ClusterAccessFlags access;
  std::string scheduler_name = "tessera";
  std::string node_selector;
  std::string policy = std::string(core::kDefaultPolicy);
  std::vector<std::string> jobs;  // only these jobs' waiting pods
  OutputFlags output;
  // defrag
  std::vector<std::string> pinned;
  int max_moves = 4;
  int64_t max_checks = 200'000;
  bool move_higher_priority = false;
  // scale-up
  std::string templates_file;
  int max_nodes = 64;
};

// One pod, or one gang, that waits; `more` counts the other waiting pods of its job that the
// first stands for (pods of one job are alike).
struct Waiting {
  std::string job;
  std::vector<core::PodRequest> pods;
  int more = 0;
};

// What the plans are made on: the cluster, what runs on it (and may move), what waits.
struct Situation {
  const core::Cluster* cluster = nullptr;
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  std::vector<plan::RunningPod> running;
  std::vector<core::NodeId> cordoned;
  // The scheduler's hot spares per NVLink domain (--from-cluster: as its nodes show them).
  int spares_per_domain = 0;
  // Per job, the first waiting pod or gang (defrag plans one per job); and every waiting pod
  // or gang (scale-up: each needs room), in the order they would be placed.
  std::vector<Waiting> waiting;
  std::vector<std::vector<core::PodRequest>> all_waiting;
  int placed = 0;      // pods placed (files) or running (cluster)
  int pending = 0;     // pods that wait
  std::string header;  // "cluster: ...\nworkload: ...\n"

  // Owners of what `cluster` points into.
  std::unique_ptr<core::Cluster> own_cluster;
  k8s::ClusterSnapshot snapshot;
  std::unique_ptr<k8s::ClusterLedger> ledger;
};

absl::StatusOr<std::unique_ptr<core::Policy>> MakePolicy(const std::string& name) {
  return core::CreatePolicy(name, {});
}

absl::Status CheckNames(const PlanOptions& o, const std::set<std::string>& names,
                        std::string_view where) {
  for (const std::vector<std::string>* list : {&o.jobs, &o.pinned}) {
    for (const std::string& j : *list) {
      if (!names.contains(j)) {
        return absl::InvalidArgumentError(
            StrCat("no job \"", j, "\" in ", where, " (jobs: ", StrJoin(names, ", "), ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Situation> LoadFiles(const PlanOptions& o) {
  for (const auto& [value, flag] :
       {std::pair{&o.cluster_file, "--cluster"}, std::pair{&o.workload_file, "--workload"}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(
          StrCat(flag, " is required (or plan on the live cluster with --from-cluster)"));
    }
  }
  Situation s;
  TESSERA_ASSIGN_OR_RETURN(sim::ClusterFile file, sim::LoadClusterFile(o.cluster_file));
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(file.nodes);
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(StrCat(o.cluster_file, ": ", cluster.status().message()));
  }
  s.own_cluster = std::make_unique<core::Cluster>(*std::move(cluster));
  s.cluster = s.own_cluster.get();
  s.levels = file.levels;
  TESSERA_ASSIGN_OR_RETURN(sim::Workload workload, sim::LoadWorkloadFile(o.workload_file));
  TESSERA_RETURN_IF_ERROR(sim::ValidateWorkload(*s.cluster, s.levels, workload, o.workload_file));
  std::set<std::string> names;
  for (const sim::Job& j : workload.jobs) names.insert(j.name);
  TESSERA_RETURN_IF_ERROR(CheckNames(o, names, o.workload_file));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<core::Policy> policy, MakePolicy(o.policy));
  // The file's running pods hold what they hold and its cordoned nodes take nothing new, as
  // `simulate` starts from them. They stay where they are: the file records what each pod
  // holds, not what it asked for, so a planner could not re-place it.
  absl::StatusOr<sim::StartState> start = sim::ResolveStart(*s.cluster, file);
  if (!start.ok()) {
    return absl::InvalidArgumentError(StrCat(o.cluster_file, ": ", start.status().message()));
  }
  absl::StatusOr<sim::ScenarioResult> ran =
      sim::RunScenarioFrom(*s.cluster, s.levels, *start, workload, std::move(policy));
  if (!ran.ok()) {
    return absl::InvalidArgumentError(StrCat(o.cluster_file, ": ", ran.status().message()));
  }
  const sim::ScenarioResult& result = *ran;
  s.placed = result.placed;
  s.pending = result.pending;
  s.cordoned = start->cordoned;
  s.header = StrCat("cluster: ", sim::DescribeCluster(*s.cluster), "\n");
  if (!start->running.empty() || !start->cordoned.empty()) {
    StrAppend(&s.header, "already there: ", start->running.size(), " running pods (not moved), ",
              start->cordoned.size(), " cordoned nodes (from ", o.cluster_file, ")\n");
  }
  StrAppend(&s.header, "workload: ", result.placed, " pods placed, ", result.pending,
            " wait (policy ", o.policy, ", in file order)\n");

  for (auto& [name, placement] : start->running) {
    plan::RunningPod r;
    r.request.name = name;
    r.request.cpu_milli = placement.cpu_milli;
    r.request.memory_mib = placement.memory_mib;
    r.placement = std::move(placement);
    r.movable = false;
    s.running.push_back(std::move(r));
  }
  std::set<std::string> pinned(o.pinned.begin(), o.pinned.end());
  for (const sim::PodOutcome& p : result.pods) {
    if (!p.result.placed()) continue;
    s.running.push_back(plan::RunningPod{p.request, p.result.placement, !pinned.contains(p.job)});
  }
  std::set<std::string> only(o.jobs.begin(), o.jobs.end());
  // Elastic gangs that started with some members: the others join as room frees up, no plan.
  std::set<std::string> started;
  for (const sim::PodOutcome& p : result.pods) {
    if (p.result.placed() && p.request.gang) started.insert(p.request.gang->name);
  }
  for (const std::string& gang : started) {
    for (const sim::PodOutcome& p : result.pods) {
      if (p.result.placed() || !p.request.gang || p.request.gang->name != gang) continue;
      std::cerr << "tessera plan: gang " << gang << " starts with some of its members"
                << "; the others join as room frees up (an elastic gang grows with no moves and "
                   "no new nodes): not planned for\n";
      break;
    }
  }
  std::map<std::string, size_t> first_of_job;  // non-gang jobs: their first waiting pod
  for (const sim::PodOutcome& p : result.pods) {
    if (p.result.placed() || (!only.empty() && !only.contains(p.job))) continue;
    if (p.request.gang && started.contains(p.request.gang->name)) continue;
    // Every waiting pod counts for scale-up (each needs room).
    if (p.request.gang && !s.all_waiting.empty() &&
        s.all_waiting.back()[0].gang == p.request.gang) {
      s.all_waiting.back().push_back(p.request);
    } else {
      s.all_waiting.push_back({p.request});
    }
    if (p.request.gang) {
      if (!s.waiting.empty() && s.waiting.back().pods[0].gang == p.request.gang &&
          s.waiting.back().job == p.job) {
        s.waiting.back().pods.push_back(p.request);
      } else {
        s.waiting.push_back(Waiting{p.job, {p.request}, 0});
      }
      continue;
    }
    auto it = first_of_job.find(p.job);
    if (it != first_of_job.end()) {
      ++s.waiting[it->second].more;
      continue;
    }
    first_of_job[p.job] = s.waiting.size();
    s.waiting.push_back(Waiting{p.job, {p.request}, 0});
  }
  return s;
}

// --pin with --from-cluster: a namespace, or a pod "ns/name".
bool Pinned(const PlanOptions& o, const k8s::PodInfo& pod) {
  for (const std::string& p : o.pinned) {
    if (p == pod.ns || p == pod.key) return false;
  }
  return true;
}

absl::StatusOr<Situation> LoadCluster(const PlanOptions& o) {
  if (!o.cluster_file.empty() || !o.workload_file.empty()) {
    return absl::InvalidArgumentError(
        "--from-cluster plans on the live cluster's running and waiting pods: leave out "
        "--cluster and --workload");
  }
  TESSERA_RETURN_IF_ERROR(MakePolicy(o.policy).status());
  absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = ConnectToCluster(o.access);
  if (!client.ok()) return absl::InvalidArgumentError(client.status().message());
  // The ledger's restore messages are for the scheduler's log; problems are told below.
  spdlog::set_level(spdlog::level::off);
  k8s::SnapshotOptions so;
  so.node_selector = o.node_selector;
  absl::StatusOr<k8s::ClusterSnapshot> snapshot = k8s::ReadSnapshot(**client, so);
  if (!snapshot.ok()) {
    return absl::UnavailableError(StrCat("cannot read the cluster at ", (*client)->config().server,
                                         " (", (*client)->config().source,
                                         "): ", FromAbsl(snapshot.status().message())));
  }
  Situation s;
  s.snapshot = *std::move(snapshot);
  std::vector<k8s::SnapshotProblem> problems;
  k8s::LedgerOptions lo;
  lo.policy = o.policy;
  s.ledger = s.snapshot.Ledger(lo, &problems);
  for (const k8s::SnapshotProblem& p : problems) {
    std::cerr << "tessera plan: " << p.object << ": " << p.message << "\n";
  }
  std::map<std::string, const k8s::PodInfo*> by_key;
  for (const auto& p : s.snapshot.pods()) by_key[p->key] = p.get();
  k8s::PlanView view = k8s::ViewForPlans(
      *s.ledger,
      [&by_key](const std::string& key) -> const k8s::PodInfo* {
        auto it = by_key.find(key);
        return it == by_key.end() ? nullptr : it->second;
      },
      [&o](const k8s::PodInfo& pod) { return Pinned(o, pod); });
  s.cluster = view.cluster;
  s.running = std::move(view.running);
  s.cordoned = std::move(view.cordoned);
  s.levels = lo.levels;
  s.spares_per_domain = k8s::SparesPerDomainShown(s.snapshot, *s.ledger);
  for (const plan::RunningPod& r : s.running) {
    if (by_key.contains(r.request.name)) ++s.placed;
  }

  std::vector<std::string> incomplete;
  std::vector<k8s::WaitingGroup> groups =
      k8s::GroupWaiting(s.snapshot.PendingPods(o.scheduler_name), &incomplete);
  std::vector<std::string> running_gangs;
  k8s::DropRunningGangs(k8s::RunningGangs(s.running), &groups, &running_gangs);
  std::set<std::string> names;
  for (const k8s::WaitingGroup& g : groups) names.insert(g.name);
  for (const std::string& j : o.jobs) {
    if (!names.contains(j)) {
      return absl::InvalidArgumentError(StrCat(
          "--job ", j, ": no pod or gang of that name waits for scheduler ", o.scheduler_name,
          names.empty() ? std::string(" (none waits)")
                        : StrCat(" (waiting: ", StrJoin(names, ", "), ")")));
    }
  }
  std::set<std::string> only(o.jobs.begin(), o.jobs.end());
  std::map<std::string, size_t> first_of_controller;  // alike pods of one controller
  for (const k8s::WaitingGroup& g : groups) {
    s.pending += static_cast<int>(g.pods.size());
    if (!only.empty() && !only.contains(g.name)) continue;
    s.all_waiting.push_back(g.requests());
    const k8s::PodInfo& first = *g.pods.front();
    if (!g.gang() && !first.controller.empty()) {
      const std::string owner = StrCat(first.ns, "/", first.controller);
      auto it = first_of_controller.find(owner);
      if (it != first_of_controller.end()) {  // pods of one controller are alike
        ++s.waiting[it->second].more;
        continue;
      }
      first_of_controller[owner] = s.waiting.size();
      s.waiting.push_back(Waiting{owner, g.requests(), 0});
      continue;
    }
    s.waiting.push_back(Waiting{g.name, g.requests(), 0});
  }
  for (const std::string& gang : incomplete) {
    std::cerr << "tessera plan: gang " << gang
              << ": fewer of its members wait than it starts with; not planned for\n";
  }
  for (const std::string& gang : running_gangs) {
    std::cerr << "tessera plan: gang " << gang
              << ": some of its members run, and the others join where they run as room frees up "
                 "(an elastic gang grows with no moves and no new nodes); not planned for\n";
  }
  s.header = StrCat("cluster: ", s.snapshot.server, " (", s.snapshot.nodes().size(), " nodes",
                    o.node_selector.empty() ? "" : StrCat(" matching ", o.node_selector),
                    "): ", sim::DescribeCluster(*s.cluster), "\npods: ", s.placed, " running, ",
                    s.pending, " wait for scheduler ", o.scheduler_name, "\n");
  return s;
}

absl::StatusOr<Situation> Load(const PlanOptions& o) {
  return o.from_cluster ? LoadCluster(o) : LoadFiles(o);
}

// The header's line on the scheduler's hot spares ("" when it keeps none), saying what the plan
// does with them.
std::string SparesLine(const Situation& s, std::string_view kept) {
  if (s.spares_per_domain <= 0) return "";
  return StrCat("hot spares: ", s.spares_per_domain, " per NVLink domain, as the nodes' ",
                records::kSpareGpusAnnotation, " show them (", kept, ")\n");
}

std::string DescribeWaiting(const Waiting& w) {
  if (w.pods[0].gang) {
    const core::GangAsk& g = *w.pods[0].gang;
    std::string where;
    if (!g.level.empty()) {
      where = StrCat(", ", g.required ? "inside one " : "preferably inside one ", g.level);
    }
    return StrCat(
        "gang ", g.name, " (", w.pods.size(), w.pods.size() == 1 ? " pod of " : " pods of ",
        core::DescribeAsk(w.pods[0]), where,
        g.elastic() ? StrCat(", starts with ", g.min_members(), " of ", g.size) : "", ")");
  }
  std::string more = w.more > 0 ? StrCat("; ", w.more, " more of job ", w.job, " wait") : "";
  return StrCat("pod ", w.pods[0].name, " (", core::DescribeAsk(w.pods[0]), more, ")");
}

std::string Where(const core::Cluster& cluster, const core::Placement& p) {
  return plan::DescribePlacement(cluster, p);
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
  const std::vector<Waiting>& waiting = s.waiting;
  plan::DefragOptions options;
  options.max_moves = o.max_moves;
  options.max_checks = o.max_checks;
  options.move_higher_priority = o.move_higher_priority;

  nlohmann::json plans = nlohmann::json::array();
  if (!o.output.json()) {
    std::cout << s.header << SparesLine(s, "no pod is moved onto them; no waiting pod takes them");
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
    in.levels = s.levels;
    in.make_policy = [&o] { return *MakePolicy(o.policy); };
    in.running = s.running;
    in.cordoned = s.cordoned;
    in.target = w.pods;
    in.spares_per_domain = s.spares_per_domain;
    TESSERA_ASSIGN_OR_RETURN(plan::DefragPlan p, plan::PlanDefrag(in, options));
    all_planned = all_planned && Planned(p.verdict);
    if (o.output.json()) {
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
                       {"placements", std::move(target)},
                       {"starts_with", p.starts_with > 0 ? nlohmann::json(p.starts_with)
                                                         : nlohmann::json(nullptr)}});
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
      if (p.starts_with > 0) {
        std::cout << "  gang " << w.pods[0].gang->name << " starts with these " << p.starts_with
                  << " of its " << w.pods[0].gang->size << " members (its min); the other "
                  << w.pods[0].gang->size - p.starts_with
                  << " join as room frees up, with no moves\n";
      }
    }
  }
  if (o.output.json()) {
    nlohmann::json doc = {{"policy", o.policy},
                          {"max_moves", o.max_moves},
                          {"placed", s.placed},
                          {"waiting", s.pending},
                          {"spares_per_domain", s.spares_per_domain},
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
  in.levels = s.levels;
  in.make_policy = [&o] { return *MakePolicy(o.policy); };
  in.running = s.running;
  in.cordoned = s.cordoned;
  in.waiting = s.all_waiting;
  in.templates = templates.nodes;
  in.spares_per_domain = s.spares_per_domain;
  plan::ScaleUpOptions options;
  options.max_nodes = o.max_nodes;
  TESSERA_ASSIGN_OR_RETURN(plan::ScaleUpPlan p, plan::PlanScaleUp(in, options));

  if (o.output.json()) {
    nlohmann::json options_json = nlohmann::json::array();
    for (const plan::TemplateOption& t : p.options) {
      nlohmann::json unplaced = nlohmann::json::array();
      for (const plan::Unplaced& u : t.unplaced) {
        unplaced.push_back({{"pods", u.pods}, {"reason", u.reason}});
      }
      nlohmann::json partial = nlohmann::json::array();  // elastic gangs starting with some
      for (const plan::PartialGang& g : t.partial) {
        partial.push_back({{"gang", g.gang},
                           {"started", g.started},
                           {"size", g.size},
                           {"min", g.min},
                           {"waiting", g.waiting}});
      }
      options_json.push_back({{"template", t.name},
                              {"nodes", t.nodes},
                              {"gpus", t.gpus},
                              {"pods_placed", t.pods_placed},
                              {"gpu_memory_granted_mib", t.memory_granted_mib},
                              {"unplaced", std::move(unplaced)},
                              {"partial", std::move(partial)}});
    }
    nlohmann::json doc = {
        {"policy", o.policy},
        {"placed", s.placed},
        {"waiting", s.pending},
        {"spares_per_domain", s.spares_per_domain},
        {"recommended", p.recommended >= 0 ? nlohmann::json(p.options[p.recommended].name)
                                           : nlohmann::json(nullptr)},
        {"reason", p.reason},
        {"options", std::move(options_json)}};
    std::cout << doc.dump(2) << "\n";
  } else {
    std::cout << s.header << SparesLine(s, "no waiting pod takes them; new nodes keep theirs");
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
        for (const plan::PartialGang& g : t.partial) {
          std::cout << "      " << plan::Describe(g) << "\n";
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
                  "Cluster file (YAML, as `tessera simulate --cluster` reads it, or a snapshot "
                  "saved by `tessera simulate --from-cluster --save`): its running pods keep "
                  "their GPUs and are not moved (the file records what they hold, not what they "
                  "asked for), its cordoned nodes take no new pods")
      ->check(CLI::ExistingFile);
  cmd->add_option("--workload", o->workload_file,
                  "Workload file (YAML, as `tessera simulate --workload` reads it): its jobs are "
                  "placed in file order; the pods that do not fit are the ones that wait")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--from-cluster", o->from_cluster,
                "Plan on the live cluster instead of --cluster/--workload: its nodes with their "
                "GPU inventories and every bound pod where it runs (one list of nodes and one of "
                "pods, read as a tessera scheduler starting now would read them); the pods that "
                "wait are those of --scheduler-name that are not bound. Only pods with a "
                "controller (ReplicaSet, Job, StatefulSet, ...) are moved: a bare pod evicted "
                "would not come back");
  AddClusterAccessFlags(cmd, &o->access);
  cmd->add_option("--scheduler-name", o->scheduler_name,
                  "With --from-cluster: the waiting pods are those with this spec.schedulerName")
      ->capture_default_str();
  cmd->add_option("--node-selector", o->node_selector,
                  "With --from-cluster: only the nodes with these labels (a label selector, as the "
                  "scheduler's nodeSelector: \"gpu=true,pool=a\"); default every node");
  cmd->add_option("--policy", o->policy,
                  StrCat("Placement policy, as the scheduler runs it (known: ",
                         StrJoin(core::PolicyNames(), ", "), ")"))
      ->capture_default_str();
  cmd->add_option("--job", o->jobs,
                  "Plan only for the waiting pods of this job (repeatable; default: every job). "
                  "With --from-cluster: a waiting pod \"ns/name\", or a gang \"ns/gang\"")
      ->delimiter(',');
  AddOutputFlags(cmd, &o->output, {"text", "json"}, "docs/planning.md");
}

void Finish(const char* name, absl::Status status, int* exit_code) {
  if (status.ok()) return;
  std::cerr << "tessera plan " << name << ": " << status.message() << "\n";
  *exit_code = status.code() == absl::StatusCode::kInternal ||
                       status.code() == absl::StatusCode::kUnavailable
                   ? kExitFailure
                   : kExitBadInput;
}

}  // namespace

void AddPlanCommand(CLI::App& app, int* exit_code) {
  CLI::App* plan = app.add_subcommand(
      "plan",
      "Plans for pods that wait, computed with the engine's what-if on a cluster file and a\n"
      "workload file, or on the live cluster (--from-cluster): `plan defrag` (which pods to move\n"
      "so that one fits) and `plan scale-up` (which nodes to add). Nothing is changed anywhere:\n"
      "a plan is for a person or a tool to carry out.");
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
      "2 bad input, 1 a failure (the cluster could not be read).");
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
  defrag
      ->add_option("--pin", d->pinned,
                   "Never move the pods of this job (repeatable). With --from-cluster: the pods of "
                   "a namespace, or one pod \"ns/name\"")
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
      "2 bad input, 1 a failure (the cluster could not be read).");
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
