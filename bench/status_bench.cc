// `tessera status` at scale, on N nodes of 8 GPUs with bound shares and whole GPUs and some
// pending pods (bench/run_status.sh drives it).
//
//   status_bench [--nodes 10000] [--runs 5]
//       Less the API server: the time from the two lists' objects (as the API server returns
//       them) to the printed table and JSON document. Prints one JSON line: the counts, and per
//       stage the median seconds over the runs: decode (the objects into a ClusterSnapshot, as
//       ReadSnapshot does per list item), status (ComputeStatus: the ledger rebuilt, per-GPU
//       grants, pending pods, stranded memory), text (RenderStatusText) and json
//       (WriteStatusJson, indented, written as it is made, as `-o json` prints it).
//   status_bench --apiserver [--nodes 10000] [--runs 5] [--concurrency 64]
//       End to end against the real API server: starts a control plane (test/controlplane),
//       creates the same nodes (with status and inventory) and pods (bound ones with their
//       assignments and spec.nodeName, pending ones with the scheduler's condition), then runs
//       `tessera status` and `tessera status -o json` as a user does (a new process each, output
//       to a file) `runs` times each, beside `kubectl get pods -A -o json` (the everyday
//       reference), and, in this process, ReadSnapshot (the paginated lists and the decoding)
//       and the rest, to show where the time goes. Prints one JSON line with the medians.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "CLI/CLI.hpp"
#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/snapshot/snapshot.h"
#include "k8s/status/status.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::GpuAssignment;
using testing::NodeObject;
using testing::PodObject;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Runs argv with stdout to `out_file`; its wall time in seconds, or -1 if it failed.
double TimeCommand(const std::vector<std::string>& argv, const std::string& out_file) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::FILE* out = std::freopen(out_file.c_str(), "w", stdout);
    if (out == nullptr) ::_exit(127);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double s = Since(t0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? s : -1;
}

// The objects written to a real API server, many requests in flight; false if any failed.
bool CreateAll(ApiClient& client, int concurrency, const std::vector<json>& node_objects,
               const std::vector<json>& pod_objects) {
  AsyncClient async(client.transport(), AsyncClientOptions{concurrency, 8, {}, true});
  std::atomic<int> failures{0};
  auto check = [&failures](const HttpRequest& r) {
    return [&failures, r](const HttpResponse& resp) {
      if (!resp.ok() && failures++ < 5) {
        std::cerr << FromAbsl(StatusFromResponse(r, resp).message()) << "\n";
      }
    };
  };
  const std::string merge(ContentTypeOf(PatchType::kMerge));
  // Nodes: the object, then its status (what a kubelet and the agent would have written).
  for (const json& n : node_objects) {
    json node = n;
    json status = {{"status", node["status"]}};
    node.erase("status");
    const std::string name = node["metadata"]["name"];
    HttpRequest create{"POST", "/api/v1/nodes", node.dump(), "application/json"};
    HttpRequest patch{"PATCH", StrCat("/api/v1/nodes/", name, "/status"), status.dump(), merge};
    async.Submit(create, [&, create, patch](const HttpResponse& resp) {
      check(create)(resp);
      if (resp.ok()) async.Submit(patch, check(patch));
    });
  }
  std::set<std::string> namespaces;
  for (const json& p : pod_objects) namespaces.insert(p["metadata"]["namespace"]);
  for (const std::string& ns : namespaces) {
    (void)client.Create(
        "/api/v1/namespaces",
        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  }
  if (!async.Drain(std::chrono::hours(1))) return false;
  // Pods: bound ones with spec.nodeName and the assignment; pending ones then get the
  // scheduler's PodScheduled=False condition.
  for (const json& p : pod_objects) {
    json pod = p;
    json status = {{"status", pod.value("status", json::object())}};
    pod.erase("status");
    const std::string ns = pod["metadata"]["namespace"], name = pod["metadata"]["name"];
    HttpRequest create{"POST", StrCat("/api/v1/namespaces/", ns, "/pods"), pod.dump(),
                       "application/json"};
    const bool conditions = status["status"].contains("conditions");
    HttpRequest patch{"PATCH", StrCat("/api/v1/namespaces/", ns, "/pods/", name, "/status"),
                      status.dump(), merge};
    async.Submit(create, [&, create, patch, conditions](const HttpResponse& resp) {
      check(create)(resp);
      if (resp.ok() && conditions) async.Submit(patch, check(patch));
    });
  }
  if (!async.Drain(std::chrono::hours(1))) return false;
  return failures == 0;
}

int AgainstApiServer(const std::vector<json>& node_objects, const std::vector<json>& pod_objects,
                     int pending, int runs, int concurrency) {
  const double load_at_start = [] {
    double l = -1;
    std::ifstream("/proc/loadavg") >> l;
    return l;
  }();
  const auto t_start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<e2e::ControlPlane>> cp =
      e2e::ControlPlane::Start(e2e::ControlPlaneOptions{});
  if (!cp.ok()) {
    std::cerr << cp.status() << "\n";
    return 1;
  }
  const double start_s = Since(t_start);
  absl::StatusOr<ClientConfig> config = LoadKubeconfig((*cp)->kubeconfig());
  if (!config.ok()) {
    std::cerr << config.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::unique_ptr<ApiClient>> client = ApiClient::Create(*config);
  if (!client.ok()) {
    std::cerr << client.status() << "\n";
    return 1;
  }
  const auto t_create = std::chrono::steady_clock::now();
  if (!CreateAll(**client, concurrency, node_objects, pod_objects)) {
    std::cerr << "creating the objects failed\n";
    return 1;
  }
  const double create_s = Since(t_create);
  std::cerr << "created " << node_objects.size() << " nodes and " << pod_objects.size()
            << " pods in " << create_s << " s\n";

  const std::string out_dir = (*cp)->dir();
  std::vector<double> text_s, json_s, read_s, compute_s;
  std::vector<double> text_pb_s, json_pb_s, read_pb_s;  // the same over the protobuf wire
  std::vector<double> kubectl_s;  // `kubectl get pods -A -o json`: the everyday reference
  size_t text_bytes = 0, json_bytes = 0, listed_pods = 0, pages = 0;
  for (int r = 0; r < runs; ++r) {
    const double t = TimeCommand(
        {TESSERA_BINARY, "status", "--kubeconfig", (*cp)->kubeconfig(), "--wire", "json"},
        out_dir + "/status.txt");
    const double j = TimeCommand({TESSERA_BINARY, "status", "--kubeconfig", (*cp)->kubeconfig(),
                                  "-o", "json", "--wire", "json"},
                                 out_dir + "/status.json");
    if (t < 0 || j < 0) {
      std::cerr << "tessera status failed\n";
      return 1;
    }
    // Side by side: the same commands with the lists in protobuf.
    const double tp = TimeCommand(
        {TESSERA_BINARY, "status", "--kubeconfig", (*cp)->kubeconfig(), "--wire", "protobuf"},
        out_dir + "/status-protobuf.txt");
    const double jp = TimeCommand({TESSERA_BINARY, "status", "--kubeconfig", (*cp)->kubeconfig(),
                                   "-o", "json", "--wire", "protobuf"},
                                  out_dir + "/status-protobuf.json");
    if (tp < 0 || jp < 0) {
      std::cerr << "tessera status --wire protobuf failed\n";
      return 1;
    }
    // The everyday reference on the same cluster: every pod as JSON, as kubectl prints it.
    const double k = TimeCommand({(*cp)->kubectl_path(), "--kubeconfig", (*cp)->kubeconfig(), "get",
                                  "pods", "-A", "-o", "json"},
                                 out_dir + "/kubectl-pods.json");
    if (k < 0) {
      std::cerr << "kubectl get pods -A -o json failed\n";
      return 1;
    }
    kubectl_s.push_back(k);
    text_s.push_back(t);
    json_s.push_back(j);
    text_pb_s.push_back(tp);
    json_pb_s.push_back(jp);
    text_bytes = std::filesystem::file_size(out_dir + "/status.txt");
    json_bytes = std::filesystem::file_size(out_dir + "/status.json");
    // The same in this process, by stage.
    const auto t0 = std::chrono::steady_clock::now();
    absl::StatusOr<ClusterSnapshot> snap = ReadSnapshot(**client, SnapshotOptions{});
    if (!snap.ok()) {
      std::cerr << snap.status() << "\n";
      return 1;
    }
    const auto t1 = std::chrono::steady_clock::now();
    absl::StatusOr<ClusterStatus> s = ComputeStatus(*snap, StatusOptions{});
    if (!s.ok()) {
      std::cerr << s.status() << "\n";
      return 1;
    }
    (void)RenderStatusText(*s);
    read_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    compute_s.push_back(Since(t1));
    SnapshotOptions over_protobuf;
    over_protobuf.protobuf = true;
    const auto t2 = std::chrono::steady_clock::now();
    absl::StatusOr<ClusterSnapshot> snap_pb = ReadSnapshot(**client, over_protobuf);
    if (!snap_pb.ok()) {
      std::cerr << snap_pb.status() << "\n";
      return 1;
    }
    read_pb_s.push_back(Since(t2));
    if (snap_pb->protobuf_pages != snap_pb->pages) {
      std::cerr << "asked protobuf, but " << snap_pb->pages - snap_pb->protobuf_pages << " of "
                << snap_pb->pages << " pages came in JSON\n";
      return 1;
    }
    if (snap_pb->pods().size() != snap->pods().size() ||
        snap_pb->nodes().size() != snap->nodes().size()) {
      std::cerr << "the protobuf lists differ: " << snap_pb->pods().size() << " pods, "
                << snap_pb->nodes().size() << " nodes\n";
      return 1;
    }
    listed_pods = snap->pods().size();
    pages = snap->pages;
  }
  const json head = json::parse(std::ifstream(out_dir + "/status.json"), nullptr, false);
  json out = {
      {"nodes", node_objects.size()},
      {"gpus", node_objects.size() * 8},
      {"pods", pod_objects.size()},
      {"pending", pending},
      {"runs", runs},
      {"load_at_start", load_at_start},
      {"control_plane_start_s", start_s},
      {"create_s", create_s},
      {"status_text_s", Median(text_s)},
      {"status_json_s", Median(json_s)},
      {"read_snapshot_s", Median(read_s)},
      {"status_text_protobuf_s", Median(text_pb_s)},
      {"status_json_protobuf_s", Median(json_pb_s)},
      {"read_snapshot_protobuf_s", Median(read_pb_s)},
      {"kubectl_get_pods_json_s", Median(kubectl_s)},

      {"status_and_text_s", Median(compute_s)},
      {"list_pages", pages},
      {"listed_pods", listed_pods},
      {"text_bytes", text_bytes},
      {"json_bytes", json_bytes},
      {"json_nodes",
       head.is_discarded() ? -1 : static_cast<int64_t>(head.value("nodes", json::array()).size())}};
  std::cout << out.dump() << "\n";
  absl::Status stopped = (*cp)->Stop();
  if (!stopped.ok()) std::cerr << stopped << "\n";
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app("tessera status at scale, without the API server");
  int nodes = 10'000;
  int runs = 5;
  bool apiserver = false;
  int concurrency = 64;
  app.add_option("--nodes", nodes)->check(CLI::Range(1, 1'000'000));
  app.add_option("--runs", runs)->check(CLI::Range(1, 100));
  app.add_flag("--apiserver", apiserver,
               "End to end against a real API server started here (test/controlplane)");
  app.add_option("--concurrency", concurrency, "--apiserver: creates in flight")
      ->check(CLI::Range(1, 1000));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::off);

  // Per node (a realistic mixed GPU node): GPUs 0-1 shared by two 20Gi/25% inference pods each,
  // GPUs 2-5 held by one 4-GPU training pod, GPUs 6-7 free: 5 bound pods per node.
  std::vector<json> node_objects, pod_objects;
  for (int n = 0; n < nodes; ++n) {
    const std::string name = StrCat("gpu-", n);
    node_objects.push_back(
        NodeObject(name).Gpus(8).NvSwitch().Cpu("128").Memory("1Ti").Ready().Json());
    for (int g = 0; g < 2; ++g) {
      for (int k = 0; k < 2; ++k) {
        pod_objects.push_back(PodObject(StrCat("ns-", n % 100), StrCat("share-", n, "-", g, "-", k))
                                  .Limit("tessera.dev/gpu-memory", "20Gi")
                                  .Limit("tessera.dev/gpu-compute", "25")
                                  .Request("cpu", "2")
                                  .Assigned(GpuAssignment(name, {g}, 20 * 1024, 250, false))
                                  .Json());
      }
    }
    pod_objects.push_back(PodObject(StrCat("ns-", n % 100), StrCat("train-", n))
                              .Limit("tessera.dev/gpu", "4")
                              .Request("cpu", "32")
                              .Assigned(GpuAssignment(name, {2, 3, 4, 5}, 81920, 1000, true))
                              .Json());
  }
  const int pending = std::max(1, nodes / 10);
  for (int i = 0; i < pending; ++i) {
    PodObject p("queue", StrCat("wait-", i));
    if (i % 2 == 0) {
      p.Limit("tessera.dev/gpu", "8").Unschedulable("0/N nodes are available: no 8 free GPUs");
    } else {
      p.Limit("tessera.dev/gpu-memory", "70Gi");
    }
    pod_objects.push_back(p.Created("2026-03-01T10:00:00Z").Json());
  }

  if (apiserver) return AgainstApiServer(node_objects, pod_objects, pending, runs, concurrency);

  std::vector<double> decode, status, text, json_s;
  size_t text_bytes = 0, json_bytes = 0;
  int64_t stranded = 0;
  for (int r = 0; r < runs; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    ClusterSnapshot snap = ClusterSnapshot::FromObjects(node_objects, pod_objects);
    auto t1 = std::chrono::steady_clock::now();
    absl::StatusOr<ClusterStatus> s = ComputeStatus(snap, StatusOptions{});
    if (!s.ok()) {
      std::cerr << s.status() << "\n";
      return 1;
    }
    auto t2 = std::chrono::steady_clock::now();
    text_bytes = RenderStatusText(*s).size();
    auto t3 = std::chrono::steady_clock::now();
    std::ostringstream streamed;
    WriteStatusJson(*s, streamed, 2);
    auto t4 = std::chrono::steady_clock::now();
    json_bytes = streamed.str().size();
    stranded = s->totals.stranded_mib;
    auto sec = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    decode.push_back(sec(t0, t1));
    status.push_back(sec(t1, t2));
    text.push_back(sec(t2, t3));
    json_s.push_back(sec(t3, t4));
  }
  json out = {{"nodes", nodes},
              {"gpus", nodes * 8},
              {"pods", pod_objects.size()},
              {"pending", pending},
              {"runs", runs},
              {"decode_s", Median(decode)},
              {"status_s", Median(status)},
              {"text_s", Median(text)},
              {"json_s", Median(json_s)},
              {"total_s", Median(decode) + Median(status) + Median(text)},
              {"text_bytes", text_bytes},
              {"json_bytes", json_bytes},
              {"stranded_mib", stranded}};
  std::cout << out.dump() << "\n";
  return 0;
}

}  // namespace
}  // namespace tessera::k8s

int main(int argc, char** argv) { return tessera::k8s::Main(argc, argv); }
