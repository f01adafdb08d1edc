// `tessera status` (also `kubectl tessera status`): every GPU of the live cluster, what is granted
// on it and to whom, the pods waiting for GPUs and why, and the totals.
#include "k8s/status/status.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <iostream>
#include <mutex>
#include <thread>
#include <vector>

#include "cli/cluster_access.h"
#include "cli/command.h"
#include "cli/output.h"
#include "common/strings.h"
#include "k8s/client/http.h"
#include "k8s/client/informer.h"
#include "k8s/snapshot/snapshot.h"
#include "k8s/status/agent_usage.h"
#include "spdlog/spdlog.h"

namespace tessera::cli {
namespace {

std::atomic<bool> g_stop{false};
std::mutex g_mu;
std::condition_variable g_cv;

extern "C" void OnStatusSignal(int) { g_stop.store(true); }

struct StatusFlags {
  ClusterAccessFlags access;
  OutputFlags output;
  std::string node;
  std::string ns;
  std::string scheduler_name = "tessera";
  bool watch = false;
  double interval = 2.0;
  int page_size = 500;
  std::string usage = "auto";     // auto (with -o wide), always, never
  std::string wire = "protobuf";  // the lists' encoding: protobuf, json
  std::string agent_selector =
      "app.kubernetes.io/part-of=tessera,app.kubernetes.io/component=agent";
};

bool WantsUsage(const StatusFlags& f) {
  return f.usage == "always" || (f.usage == "auto" && f.output.format == "wide");
}

// What the node agents measured per pod and GPU (k8s/status/agent_usage.h): each agent's /metrics
// through the API server's pod proxy (GET pods/proxy), up to 16 at once, for at most 15 s in all.
// Agents that do not answer are said on stderr (once per call); their pods show no usage.
k8s::AgentUsage ReadAgentUsage(k8s::ApiClient& client, const StatusFlags& f) {
  k8s::AgentUsage usage;
  std::string path = StrCat("/api/v1/pods?labelSelector=", k8s::QueryEscape(f.agent_selector));
  if (!f.node.empty()) {
    StrAppend(&path, "&fieldSelector=", k8s::QueryEscape(StrCat("spec.nodeName=", f.node)));
  }
  absl::StatusOr<nlohmann::json> list = client.Get(path);
  if (!list.ok()) {
    std::cerr << "tessera status: no usage: the node agents' pods cannot be listed ("
              << list.status().message() << ")\n";
    return usage;
  }
  struct Target {
    std::string node, path;
  };
  std::vector<Target> targets;
  for (const nlohmann::json& pod : list->value("items", nlohmann::json::array())) {
    const nlohmann::json& meta = pod.value("metadata", nlohmann::json::object());
    const nlohmann::json& spec = pod.value("spec", nlohmann::json::object());
    if (pod.value("status", nlohmann::json::object()).value("phase", "") != "Running") continue;
    int port = 9402;
    for (const nlohmann::json& c : spec.value("containers", nlohmann::json::array())) {
      for (const nlohmann::json& p : c.value("ports", nlohmann::json::array())) {
        if (p.value("name", "") == "metrics") port = p.value("containerPort", port);
      }
    }
    targets.push_back({spec.value("nodeName", "?"),
                       StrCat("/api/v1/namespaces/", meta.value("namespace", ""), "/pods/",
                              meta.value("name", ""), ":", port, "/proxy/metrics")});
  }
  std::mutex mu;
  std::vector<std::string> failed;
  std::atomic<size_t> next{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  auto work = [&] {
    for (size_t i; (i = next++) < targets.size();) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::lock_guard<std::mutex> lock(mu);
        failed.push_back(StrCat(targets[i].node, ": not asked (15 s spent)"));
        continue;
      }
      k8s::HttpRequest request;
      request.path = targets[i].path;
      request.timeout = std::chrono::milliseconds(5000);
      const k8s::HttpResponse r = client.Call(request);
      k8s::AgentUsage one;
      absl::Status read =
          r.ok() ? k8s::AddAgentMetrics(r.body, &one)
                 : absl::UnavailableError(r.error.empty() ? StrCat("HTTP ", r.status) : r.error);
      std::lock_guard<std::mutex> lock(mu);
      if (!read.ok()) failed.push_back(StrCat(targets[i].node, ": ", read.message()));
      usage.merge(one);
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 0; t < std::min<size_t>(16, targets.size()); ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  if (targets.empty()) {
    std::cerr << "tessera status: no usage: no running node agent pod matches " << f.agent_selector
              << (f.node.empty() ? "" : StrCat(" on node ", f.node)) << "\n";
  } else if (!failed.empty()) {
    std::sort(failed.begin(), failed.end());
    std::cerr << "tessera status: no usage from the agents of " << failed.size() << " of "
              << targets.size() << " nodes (reading /metrics through the API server's pod "
              << "proxy needs get on pods/proxy): " << failed.front()
              << (failed.size() > 1 ? ", ..." : "") << "\n";
  }
  return usage;
}

absl::Status Print(k8s::ApiClient& client, const k8s::ClusterSnapshot& snapshot,
                   const StatusFlags& f, bool watching) {
  k8s::StatusOptions o;
  o.scheduler_name = f.scheduler_name;
  o.node = f.node;
  o.ns = f.ns;
  k8s::ReadQueues(client, &o.queues, &o.queue_errors, &o.queue_usage);
  k8s::AgentUsage usage;
  if (WantsUsage(f)) {
    usage = ReadAgentUsage(client, f);
    o.agent_usage = &usage;
  }
  absl::StatusOr<k8s::ClusterStatus> status = k8s::ComputeStatus(snapshot, o);
  if (!status.ok()) return status.status();
  if (f.output.json()) {
    // One document; one per line while watching (JSON lines).
    k8s::WriteStatusJson(*status, std::cout, watching ? -1 : 2);  // streamed, no tree
    std::cout << "\n" << std::flush;
    return absl::OkStatus();
  }
  k8s::RenderOptions r;
  r.wide = f.output.format == "wide";
  std::string text = k8s::RenderStatusText(*status, r);
  if (watching && isatty(STDOUT_FILENO)) {
    std::cout << "\033[H\033[2J";  // home, clear: redraw in place
  } else if (watching) {
    std::cout << "\n";
  }
  std::cout << text << std::flush;
  return absl::OkStatus();
}

// --watch: list and watch nodes and pods (one informer each) and redraw when something changed,
// at most every --interval seconds, until SIGINT or SIGTERM.
absl::Status Watch(k8s::ApiClient& client, const StatusFlags& f) {
  std::atomic<bool> dirty{true};
  auto poke = [&dirty] {
    dirty = true;
    g_cv.notify_all();
  };
  // With --namespace, a user who may not list nodes still watches its pods.
  std::string nodes_error;
  if (!f.ns.empty()) {
    absl::StatusOr<nlohmann::json> probe = client.Get("/api/v1/nodes?limit=1");
    if (!probe.ok() && probe.status().code() == absl::StatusCode::kPermissionDenied) {
      nodes_error = std::string(probe.status().message());
    }
  }
  k8s::ListWatchOptions no;
  no.resource = "nodes";
  no.path = "/api/v1/nodes";
  no.page_size = f.page_size;
  no.protobuf = f.wire == "protobuf";
  k8s::Informer<k8s::SnapshotNode> nodes(
      client, no,
      [](const nlohmann::json& j) {
        return std::make_shared<const k8s::SnapshotNode>(k8s::DecodeSnapshotNode(j));
      },
      [](const k8s::ProtobufValue& p) {
        return std::make_shared<const k8s::SnapshotNode>(k8s::DecodeSnapshotNode(p));
      },
      [&](auto&&) { poke(); });
  k8s::ListWatchOptions po;
  po.resource = "pods";
  po.path = f.ns.empty() ? std::string("/api/v1/pods")
                         : StrCat("/api/v1/namespaces/", k8s::QueryEscape(f.ns), "/pods");
  po.field_selector = "status.phase!=Succeeded,status.phase!=Failed";
  po.page_size = f.page_size;
  po.protobuf = f.wire == "protobuf";
  k8s::Informer<k8s::PodInfo> pods(
      client, po, [](const nlohmann::json& j) { return k8s::DecodePod(j); },
      [](const k8s::ProtobufValue& p) { return k8s::DecodePod(p); }, [&](auto&&) { poke(); });
  const bool watch_nodes = nodes_error.empty();
  if (watch_nodes) nodes.Start();
  pods.Start();
  const auto interval = std::chrono::milliseconds(static_cast<int64_t>(f.interval * 1000));
  auto last = std::chrono::steady_clock::now() - interval;
  int64_t failures_told = 0;
  while (!g_stop) {
    {
      std::unique_lock<std::mutex> lock(g_mu);
      g_cv.wait_for(lock, std::chrono::milliseconds(250));
    }
    if (g_stop) break;
    if (const int64_t failed = nodes.failures() + pods.failures();
        failed > failures_told && ((watch_nodes && !nodes.synced()) || !pods.synced())) {
      std::cerr << "tessera status: still trying to list nodes and pods from "
                << client.config().server << " (" << failed << " failed attempts; retrying)\n";
      failures_told = failed;
    }
    if (!dirty || (watch_nodes && !nodes.synced()) || !pods.synced()) continue;
    if (std::chrono::steady_clock::now() - last < interval) continue;
    dirty = false;
    last = std::chrono::steady_clock::now();
    std::vector<k8s::SnapshotNode> n;
    for (const auto& p : nodes.List()) n.push_back(*p);
    k8s::ClusterSnapshot snapshot(std::move(n), pods.List());
    snapshot.pod_namespace = f.ns;
    snapshot.nodes_error = nodes_error;
    snapshot.server = client.config().server;
    snapshot.taken_at = std::chrono::system_clock::now();
    absl::Status st = Print(client, snapshot, f, /*watching=*/true);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

void AddStatusCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<StatusFlags>();
  CLI::App* cmd = app.add_subcommand(
      "status",
      "Show every GPU of the live cluster: per node and GPU the model, health, memory and\n"
      "compute granted against capacity (bars), the pods on it and its MIG instances; then the\n"
      "pods waiting for GPUs with the scheduler's reason, per queue what it deserves, its fair\n"
      "share, what it holds and borrows and what its waiting pods ask (the Queue objects and\n"
      "pods, counted as the scheduler counts them), and cluster totals\n"
      "(GPUs in use; GPU memory granted, asked and free; the free memory no pending pod can use,\n"
      "and how much of it is in pieces too small for every pending ask). Reads one list of nodes,\n"
      "one of pods and one of Queues. Installed as the kubectl plugin kubectl-tessera too:\n"
      "`kubectl tessera status`.\n"
      "Exit status: 0 shown, 1 the cluster could not be read, 2 bad flags or an unknown --node.");
  AddClusterAccessFlags(cmd, &f->access);
  // table: the first pods of each GPU; wide: every pod; json: one document per line with --watch.
  AddOutputFlags(cmd, &f->output, {"table", "wide", "json"}, "docs/operations.md");
  cmd->add_option("--node", f->node, "Show only this node (the totals stay cluster-wide)");
  cmd->add_option("-n,--namespace", f->ns,
                  "Show only this namespace's pods, on GPUs and pending, listing only its pods "
                  "(so a user whose RBAC covers one namespace can run it; GPUs' figures, queues "
                  "and totals then count its pods alone). Without permission to list nodes, its "
                  "running pods and their GPUs are listed from their assignments");
  cmd->add_option("--scheduler-name", f->scheduler_name,
                  "Pending pods are those with this spec.schedulerName")
      ->capture_default_str();
  cmd->add_flag("-w,--watch", f->watch,
                "Keep watching (a list and a watch of nodes and pods) and redraw on changes");
  cmd->add_option("--interval", f->interval,
                  "With --watch: at most one redraw per this many seconds")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--usage", f->usage,
                  "Read what the node agents measured for each pod (GPU memory used, GPU busy "
                  "time, idle) from their /metrics through the API server's pod proxy (needs get "
                  "on pods/proxy) and show it beside each grant: auto (with -o wide), always "
                  "(also in JSON), never")
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  cmd->add_option("--wire", f->wire,
                  "The encoding of the lists of nodes and pods: protobuf (Kubernetes' own, which "
                  "the API server encodes faster, read into the same records; a server that "
                  "answers JSON is read as well), or json; with --watch, the watches too")
      ->check(CLI::IsMember({"json", "protobuf"}))
      ->capture_default_str();
  cmd->add_option("--agent-selector", f->agent_selector,
                  "The label selector of the node agents' pods (for --usage)")
      ->capture_default_str();
  cmd->add_option("--page-size", f->page_size, "Objects per list request")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->callback([f, exit_code]() {
    // The ledger's restore messages are for the scheduler's log; problems are in the output.
    spdlog::set_level(spdlog::level::off);
    absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = ConnectToCluster(f->access);
    if (!client.ok()) {
      std::cerr << "tessera status: " << client.status().message() << "\n";
      *exit_code = kExitBadInput;
      return;
    }
    absl::Status st;
    if (f->watch) {
      std::signal(SIGINT, OnStatusSignal);
      std::signal(SIGTERM, OnStatusSignal);
      st = Watch(**client, *f);
    } else {
      k8s::SnapshotOptions so;
      so.page_size = f->page_size;
      so.pod_namespace = f->ns;
      so.nodes_optional = !f->ns.empty();
      so.protobuf = f->wire == "protobuf";
      absl::StatusOr<k8s::ClusterSnapshot> snapshot = k8s::ReadSnapshot(**client, so);
      if (!snapshot.ok()) {
        std::cerr << "tessera status: cannot read the cluster at " << (*client)->config().server
                  << " (" << (*client)->config().source << "): " << snapshot.status().message()
                  << "\n";
        *exit_code = kExitFailure;
        return;
      }
      st = Print(**client, *snapshot, *f, /*watching=*/false);
    }
    if (!st.ok()) {
      std::cerr << "tessera status: " << st.message() << "\n";
      *exit_code = st.code() == absl::StatusCode::kNotFound ? kExitBadInput : kExitFailure;
      return;
    }
    *exit_code = kExitOk;
  });
}

}  // namespace tessera::cli
