// `tessera simulate`: runs workloads on clusters under several policies, side by side.
#include <iostream>

#include "absl/strings/str_split.h"
#include "cli/command.h"
#include "cli/manifest_workload.h"
#include "cli/output.h"
#include "cli/simulate_cluster.h"
#include "cli/simulate_trace.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/cluster.h"
#include "core/policy/policy.h"
#include "k8s/client/config.h"
#include "k8s/manifests/manifests.h"
#include "sim/cluster_file.h"
#include "sim/reality_check.h"
#include "sim/report.h"
#include "sim/scenario.h"
#include "sim/workload_file.h"

namespace tessera::cli {
namespace {

struct SimulateOptions {
  std::string cluster_file;
  std::string workload_file;
  std::vector<std::string> manifests;  // -f: the user's own Pods, Deployments, Jobs...
  std::string ns;                      // their namespace when they name none
  std::string policies = "whole-gpu,tessera";
  OutputFlags output;
  bool show_default = false;
  uint64_t seed = 1;
  ClusterSourceFlags source;  // --from-cluster, --add-nodes, --save
};

absl::StatusOr<std::vector<std::string>> ParsePolicies(const std::string& list) {
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(list, ',', absl::SkipWhitespace())) {
    std::string name(part.data(), part.size());
    absl::StatusOr<std::unique_ptr<core::Policy>> p = core::CreatePolicy(name, {});
    if (!p.ok()) return p.status();
    names.push_back(name);
  }
  if (names.empty()) return absl::InvalidArgumentError("--policy: give at least one policy");
  return names;
}

absl::StatusOr<std::vector<sim::ScenarioResult>> RunPolicies(
    const core::Cluster& cluster, const std::vector<core::TopologyLevel>& levels,
    const sim::Workload& workload, const std::vector<std::string>& policies, uint64_t seed,
    const sim::StartState& start = {}) {
  std::vector<sim::ScenarioResult> results;
  for (const std::string& name : policies) {
    core::PolicyOptions options;
    options.seed = seed;
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<core::Policy> policy,
                             core::CreatePolicy(name, options));
    TESSERA_ASSIGN_OR_RETURN(
        sim::ScenarioResult r,
        sim::RunScenarioFrom(cluster, levels, start, workload, std::move(policy)));
    results.push_back(std::move(r));
  }
  return results;
}

// The embedded default: the reality check's three parts.
absl::Status RunDefault(const SimulateOptions& o, const std::vector<std::string>& policies) {
  TESSERA_ASSIGN_OR_RETURN(
      sim::ClusterFile file,
      sim::ParseClusterYaml(sim::RealityCheckClusterYaml(), "<embedded reality-check cluster>"));
  TESSERA_ASSIGN_OR_RETURN(core::Cluster cluster, core::Cluster::Create(file.nodes));
  nlohmann::json json_results = nlohmann::json::array();
  if (!o.output.json()) {
    std::cout << "tessera simulate: the reality check (embedded default; --show-default prints "
                 "it, --cluster/--workload run your own)\n"
              << "cluster: " << sim::DescribeCluster(cluster) << "\n";
  }
  int part_no = 0;
  for (const sim::ScenarioPart& part : sim::RealityCheckParts()) {
    ++part_no;
    TESSERA_ASSIGN_OR_RETURN(
        sim::Workload workload,
        sim::ParseWorkloadYaml(part.workload_yaml, StrCat("<embedded part ", part_no, ">")));
    TESSERA_ASSIGN_OR_RETURN(std::vector<sim::ScenarioResult> results,
                             RunPolicies(cluster, file.levels, workload, policies, o.seed));
    if (o.output.json()) {
      for (const sim::ScenarioResult& r : results) {
        nlohmann::json j = sim::ResultToJson(cluster, r);
        j["part"] = part_no;
        j["title"] = std::string(part.title);
        json_results.push_back(std::move(j));
      }
    } else {
      std::cout << "\n" << part.title << "\n" << sim::FormatComparison(results);
    }
  }
  if (o.output.json()) {
    nlohmann::json doc = {{"scenario", "reality-check"}, {"results", std::move(json_results)}};
    std::cout << doc.dump(2) << "\n";
  }
  return absl::OkStatus();
}

// The -f files as one workload, in order, read together (a PodGroup and the pods naming it may
// be in different files). What cannot be simulated is told on stderr. `levels`: the cluster's.
absl::StatusOr<sim::Workload> LoadManifests(const SimulateOptions& o,
                                            const std::vector<core::TopologyLevel>& levels) {
  std::string ns = o.ns;
  if (ns.empty() && o.source.from_cluster) {
    // kubectl's default: the namespace of the kubeconfig's context.
    absl::StatusOr<k8s::ClientConfig> access = ResolveClusterAccess(o.source.access);
    if (access.ok()) ns = access->default_namespace;
  }
  if (ns.empty()) ns = "default";
  k8s::Manifests all;
  for (const std::string& path : o.manifests) {
    absl::StatusOr<std::string> text = k8s::ReadWholeFile(path == "-" ? "/dev/stdin" : path);
    if (!text.ok()) return absl::InvalidArgumentError(StrCat("-f: ", text.status().message()));
    TESSERA_ASSIGN_OR_RETURN(k8s::Manifests m, k8s::ParseManifests(*text, path, ns));
    for (const k8s::ManifestSkipped& s : m.skipped) {
      std::cerr << "tessera simulate: " << path << ":" << s.line << ": skipped " << s.kind << " "
                << s.name << ": " << s.why << "\n";
    }
    for (k8s::ManifestWorkload& w : m.workloads) all.workloads.push_back(std::move(w));
    for (k8s::ManifestPodGroup& g : m.pod_groups) all.pod_groups.push_back(std::move(g));
  }
  TESSERA_RETURN_IF_ERROR(k8s::ResolvePodGroups(levels, &all));
  for (const k8s::ManifestWorkload& w : all.workloads) {
    for (const std::string& n : w.not_simulated) {
      std::cerr << "tessera simulate: " << w.source << ":" << w.line << ": " << w.kind << " "
                << w.ns << "/" << w.name << ": not simulated: " << n << "\n";
    }
  }
  return WorkloadFromManifests(all, StrJoin(o.manifests, ", "));
}

absl::Status RunFiles(const SimulateOptions& o, const std::vector<std::string>& policies) {
  std::string source;
  TESSERA_ASSIGN_OR_RETURN(sim::ClusterFile file,
                           PrepareCluster(o.source, o.cluster_file, &source));
  if (o.workload_file.empty() &&
      o.manifests.empty()) {  // --save alone: the snapshot is written, nothing to run
    std::cout << "tessera simulate: wrote " << source << " (" << file.nodes.size() << " nodes, "
              << file.running.size() << " running pods) to " << o.source.save << "\n";
    return absl::OkStatus();
  }
  absl::StatusOr<core::Cluster> cluster = core::Cluster::Create(file.nodes);
  if (!cluster.ok()) {
    return absl::InvalidArgumentError(StrCat(source, ": ", cluster.status().message()));
  }
  absl::StatusOr<sim::StartState> start = sim::ResolveStart(*cluster, file);
  if (!start.ok())
    return absl::InvalidArgumentError(StrCat(source, ": ", start.status().message()));
  sim::Workload workload;
  const std::string workload_source =
      o.manifests.empty() ? o.workload_file : StrJoin(o.manifests, ", ");
  if (o.manifests.empty()) {
    TESSERA_ASSIGN_OR_RETURN(workload, sim::LoadWorkloadFile(o.workload_file));
  } else {
    TESSERA_ASSIGN_OR_RETURN(workload, LoadManifests(o, file.levels));
  }
  TESSERA_RETURN_IF_ERROR(sim::ValidateWorkload(*cluster, file.levels, workload, workload_source));
  absl::StatusOr<std::vector<sim::ScenarioResult>> ran =
      RunPolicies(*cluster, file.levels, workload, policies, o.seed, *start);
  if (!ran.ok()) return absl::InvalidArgumentError(StrCat(source, ": ", ran.status().message()));
  const std::vector<sim::ScenarioResult>& results = *ran;
  if (o.output.json()) {
    nlohmann::json list = nlohmann::json::array();
    for (const sim::ScenarioResult& r : results) list.push_back(sim::ResultToJson(*cluster, r));
    std::cout << nlohmann::json{{"results", std::move(list)}}.dump(2) << "\n";
  } else {
    size_t pods = 0;
    for (const sim::Job& j : workload.jobs) pods += j.replicas;
    std::cout << "cluster: " << sim::DescribeCluster(*cluster) << "\n";
    if (!file.running.empty() || !file.cordoned.empty()) {
      std::cout << "already there: " << file.running.size() << " running pods, "
                << file.cordoned.size() << " cordoned nodes (from " << source << ")\n";
    }
    std::cout << "workload: " << workload.jobs.size() << " jobs, " << pods << " pods\n\n"
              << sim::FormatComparison(results);
  }
  return absl::OkStatus();
}

}  // namespace

void AddSimulateCommand(CLI::App& app, int* exit_code) {
  auto opts = std::make_shared<SimulateOptions>();
  auto trace = std::make_shared<TraceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "simulate",
      "Place a workload on a cluster under several policies and compare them side by side.\n"
      "--from-cluster starts from the live cluster as it stands (what runs keeps its GPUs):\n"
      "\"would these pods fit with policy X, or with 4 more HGX nodes (--add-nodes hgx-h100:4)?\"\n"
      "-f takes your own manifests as the workload (Pods, Deployments, ReplicaSets,\n"
      "StatefulSets, Jobs, CronJobs, Lists; replicas and parallelism expanded; other kinds\n"
      "skipped with a note): tessera simulate --from-cluster -f app.yaml.\n"
      "With no arguments: the reality check (10 GPUs of 80Gi on two nodes; 20 inference pods of\n"
      "4Gi; an 8-GPU training gang that needs one NVLink domain; both together).");
  cmd->add_option("--cluster", opts->cluster_file,
                  "Cluster file (YAML: nodes with cpu, memory, labels, gpus or profile, optional "
                  "nvidia-smi topology, MIG mode and layout). Needs --workload.")
      ->check(CLI::ExistingFile);
  cmd->add_option(
         "--workload", opts->workload_file,
         "Workload file (YAML: jobs with replicas, cpu, memory, gpu ask (count with topology "
         "and mode, memory/compute, fraction, mig), model, gang, "
         "priority), run in file order. Needs --cluster.")
      ->check(CLI::ExistingFile);
  cmd->add_option("--policy", opts->policies,
                  StrCat("Comma-separated policies to compare (known: ",
                         StrJoin(core::PolicyNames(), ", "), ")"))
      ->capture_default_str();
  cmd->add_option("-f,--filename", opts->manifests,
                  "Kubernetes manifests to simulate instead of --workload (multi-document YAML "
                  "or JSON, as kubectl apply -f takes; repeatable; - for stdin). Each object's "
                  "pods ask what their template asks the scheduler")
      ->take_all();
  cmd->add_option("-n,--namespace", opts->ns,
                  "With -f: the namespace of objects that name none (default: the kubeconfig "
                  "context's with --from-cluster, else default)");
  AddOutputFlags(cmd, &opts->output, {"text", "json"}, "docs/simulate.md");
  cmd->add_flag("--show-default", opts->show_default,
                "Print the embedded default's cluster and workload files, then exit");
  cmd->add_option("--seed", opts->seed, "Seed for randomised policies")->capture_default_str();
  AddClusterSourceFlags(cmd, &opts->source);
  AddTraceFlags(cmd, trace.get());
  CLI::Option* policy_flag = cmd->get_option("--policy");
  cmd->callback([opts, trace, policy_flag, exit_code]() {
    const SimulateOptions& o = *opts;
    if (o.show_default) {
      std::cout << "# cluster file\n" << sim::RealityCheckClusterYaml();
      int n = 0;
      for (const sim::ScenarioPart& p : sim::RealityCheckParts()) {
        std::cout << "\n# workload file, " << p.title << " (part " << ++n << ")\n"
                  << p.workload_yaml;
      }
      *exit_code = kExitOk;
      return;
    }
    absl::Status status;
    const bool trace_mode = TraceRequested(*trace);
    absl::StatusOr<std::vector<std::string>> policies = ParsePolicies(
        trace_mode && policy_flag->count() == 0 ? DefaultTracePolicies() : o.policies);
    if (!policies.ok()) {
      status = policies.status();
    } else if (trace_mode) {
      if (!o.cluster_file.empty() || !o.workload_file.empty() || !o.manifests.empty() ||
          o.source.from_cluster || !o.source.save.empty() || !o.source.add_nodes.empty()) {
        status = absl::InvalidArgumentError(
            "--nodes/--trace (trace mode) and --cluster/--workload/--from-cluster (scenario mode) "
            "do not mix");
      } else {
        status = RunTrace(*trace, *policies, o.output.json());
      }
    } else if (o.source.from_cluster && !o.cluster_file.empty()) {
      status = absl::InvalidArgumentError("--from-cluster and --cluster do not mix (give one)");
    } else if (!o.workload_file.empty() && !o.manifests.empty()) {
      status = absl::InvalidArgumentError(
          "--workload and -f do not mix (a workload file, or your manifests)");
    } else if (o.source.from_cluster) {
      status = o.workload_file.empty() && o.manifests.empty() && o.source.save.empty()
                   ? absl::InvalidArgumentError(
                         "--from-cluster needs --workload or -f manifests.yaml (or --save FILE "
                         "to only write the snapshot)")
                   : RunFiles(o, *policies);
    } else if (!o.manifests.empty() && o.cluster_file.empty()) {
      status = absl::InvalidArgumentError(
          "-f needs a cluster: --from-cluster (the live one) or --cluster FILE");
    } else if (!o.manifests.empty()) {
      status = RunFiles(o, *policies);
    } else if (o.cluster_file.empty() != o.workload_file.empty()) {
      status = absl::InvalidArgumentError(
          "--cluster and --workload go together (give both, or neither for the embedded "
          "default)");
    } else if (o.cluster_file.empty() && (!o.source.save.empty() || !o.source.add_nodes.empty())) {
      status =
          absl::InvalidArgumentError("--add-nodes and --save need --cluster or --from-cluster");
    } else if (o.cluster_file.empty()) {
      status = RunDefault(o, *policies);
    } else {
      status = RunFiles(o, *policies);
    }
    if (!status.ok()) {
      std::cerr << "tessera simulate: " << status.message() << "\n";
      *exit_code = status.code() == absl::StatusCode::kInternal ||
                           status.code() == absl::StatusCode::kUnavailable
                       ? kExitFailure
                       : kExitBadInput;
      return;
    }
    *exit_code = kExitOk;
  });
}

}  // namespace tessera::cli
