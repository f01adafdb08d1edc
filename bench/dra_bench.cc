// Load generator and stopwatch for the DRA scheduler benchmark against a real API server
// (bench/run_dra.sh drives it):
//
//   dra_bench nodes --kubeconfig K --count 1000 --gpus 8
//       Nodes (status + tessera.dev/gpu-inventory, as in DRA mode the agent keeps publishing it),
//       one ResourceSlice per node in the driver's format (notes: dra-contract.md; pool = node,
//       devices gpu-0..7 shareable by memory and compute), and the DeviceClasses gpu.tessera.dev
//       and gpu-share.tessera.dev.
//   dra_bench pods --kubeconfig K --namespace ns --count 8000 --scheduler NAME
//                  (--whole | --share-memory 10Gi)
//       per pod a ResourceClaim (one GPU, or a share with a memory capacity request) and a pod
//       that uses it (spec.resourceClaims[].resourceClaimName), many creates in flight.
//   dra_bench watch --kubeconfig K --namespace ns --count 8000 --ready-file F --start-file S
//       times the bindings like k8s_bench watch, then reads every claim's status.allocation:
//       devices (GPUs) used, claims allocated, and devices whose consumed memory exceeds their
//       capacity (over-commitment; 0 expected from any correct allocator).
//   dra_bench writes --kubeconfig K --namespace ns --count 8000 --nodes 1000 --gpus 8
//                    (--whole | --share-memory 10Gi) [--concurrency 64]
//       no scheduler: the writes an allocator must make for each pod, and nothing else, through
//       tessera's own ClaimBinder (the claim's finalizer, its status.allocation and reservedFor,
//       the binding; 64 in flight over HTTP/1.1, as the scheduler's defaults), with a fixed
//       placement (pod i on the GPUs in order, 8 shares to a GPU). The API server's ceiling for
//       these writes: the rate no allocator that makes them can pass on this control plane.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "CLI/CLI.hpp"
#include "api_load.h"
#include "common/strings.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/client/informer.h"
#include "k8s/dra/objects.h"
#include "k8s/dra/planner.h"
#include "k8s/scheduler/claim_binder.h"
#include "k8s/scheduler/objects.h"
#include "k8s/testing/dra_objects.h"
#include "k8s/testing/objects.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

using bench::Connect;
using bench::Runner;
using bench::Seconds;

int CreateNodes(ApiClient& client, int count, int gpus, const std::string& prefix,
                int concurrency) {
  auto start = std::chrono::steady_clock::now();
  Runner runner(client, concurrency, /*conflict_ok=*/true);
  const std::string classes = StrCat(dra::kResourceApi, "/deviceclasses");
  runner.Submit(HttpRequest{"POST", classes, testing::GpuClass().dump(), "application/json"});
  runner.Submit(HttpRequest{"POST", classes, testing::ShareClass().dump(), "application/json"});
  for (int i = 0; i < count; ++i) {
    std::string name = StrCat(prefix, "-", i);
    json node = testing::NodeObject(name)
                    .Gpus(gpus, "H100-80GB", 81920)
                    .NvSwitch()
                    .Cpu("64")
                    .Memory("512Gi")
                    .Label("tessera.dev/bench", "true")
                    .Json();
    json status = node["status"];
    node.erase("status");
    // DRA mode: the GPUs are devices, not extended resources.
    status["capacity"].erase("tessera.dev/gpu");
    status["allocatable"].erase("tessera.dev/gpu");
    json slice = testing::SliceObject(name).Gpus(gpus, "H100-80GB", "80Gi").Json();
    runner.Submit(HttpRequest{"POST", "/api/v1/nodes", node.dump(), "application/json"},
                  [&runner, name, status](const HttpResponse&) {
                    runner.Submit(HttpRequest{"PATCH", StrCat("/api/v1/nodes/", name, "/status"),
                                              json{{"status", status}}.dump(),
                                              std::string(ContentTypeOf(PatchType::kMerge))});
                  });
    runner.Submit(HttpRequest{"POST", StrCat(dra::kResourceApi, "/resourceslices"), slice.dump(),
                              "application/json"});
  }
  runner.Wait();
  std::cerr << "created " << count << " nodes of " << gpus << " GPUs and their ResourceSlices in "
            << Seconds(std::chrono::steady_clock::now() - start) << " s\n";
  return 0;
}

int CreatePods(ApiClient& client, const std::string& ns, int count, const std::string& scheduler,
               bool whole, const std::string& share_memory, const std::string& prefix,
               int concurrency) {
  (void)client.Create("/api/v1/namespaces",
                      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  auto start = std::chrono::steady_clock::now();
  Runner runner(client, concurrency, /*conflict_ok=*/true);
  for (int i = 0; i < count; ++i) {
    const std::string name = StrCat(prefix, "-", i);
    testing::ClaimObject claim(ns, name);
    if (whole) {
      claim.Request("gpu", "gpu.tessera.dev");
    } else {
      claim.Request("gpu", "gpu-share.tessera.dev").Capacity("memory", share_memory);
    }
    testing::PodObject p(ns, name);
    p.Scheduler(scheduler).Request("cpu", "100m").Request("memory", "128Mi");
    json pod = testing::WithClaims(p.Json(), {{"gpu", name}});
    pod.erase("status");
    const std::string pods = StrCat("/api/v1/namespaces/", ns, "/pods");
    runner.Submit(
        HttpRequest{"POST", StrCat(dra::kResourceApi, "/namespaces/", ns, "/resourceclaims"),
                    claim.Json().dump(), "application/json"},
        [&runner, pods, pod](const HttpResponse&) {
          runner.Submit(HttpRequest{"POST", pods, pod.dump(), "application/json"});
        });
  }
  runner.Wait();
  double s = Seconds(std::chrono::steady_clock::now() - start);
  std::cerr << "created " << count << " claims and pods in " << s << " s\n";
  std::cout << json{{"created", count}, {"seconds", s}, {"pods_per_second", count / s}}.dump()
            << "\n";
  return 0;
}

int Watch(ApiClient& client, const std::string& ns, int count, const std::string& ready_file,
          const std::string& start_file, int timeout_s) {
  std::mutex mu;
  std::map<std::string, std::chrono::system_clock::time_point> bound_at;
  ListWatchOptions o;
  o.resource = "pods";
  o.path = StrCat("/api/v1/namespaces/", ns, "/pods");
  Informer<std::string> pods(
      client, o,
      [](const json& j) { return std::make_shared<std::string>(j["spec"].value("nodeName", "")); },
      [&](Informer<std::string>::Event&& e) {
        if (e.kind == Informer<std::string>::Event::kSynced || !e.object) return;
        if (e.object->empty()) return;
        auto now = std::chrono::system_clock::now();
        std::lock_guard<std::mutex> lock(mu);
        bound_at.try_emplace(e.key, now);
      });
  pods.Start();
  while (!pods.synced()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (!ready_file.empty()) std::ofstream(ready_file) << "ready\n";
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (static_cast<int>(bound_at.size()) >= count) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  pods.Stop();
  std::chrono::system_clock::time_point start{};
  if (!start_file.empty()) {
    std::ifstream in(start_file);
    int64_t ns_since_epoch = 0;
    in >> ns_since_epoch;
    start = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::nanoseconds(ns_since_epoch)));
  }
  std::vector<double> times;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& [k, t] : bound_at) {
      times.push_back(std::chrono::duration<double>(t - start).count());
    }
  }
  std::sort(times.begin(), times.end());
  json out = {{"pods", count}, {"bound", times.size()}};
  if (!times.empty()) {
    out["first_bind_s"] = times.front();
    out["last_bind_s"] = times.back();
    out["pods_per_second"] = static_cast<double>(times.size()) / times.back();
  }
  // What the claims say, whoever allocated them: devices used and over-commitment.
  std::map<std::pair<std::string, std::string>, std::pair<int64_t, int>> use;  // memory, claims
  int allocated = 0;
  std::string cont;
  do {
    std::string path = StrCat(dra::kResourceApi, "/namespaces/", ns, "/resourceclaims?limit=500");
    if (!cont.empty()) StrAppend(&path, "&continue=", QueryEscape(cont));
    absl::StatusOr<json> list = client.Get(path);
    if (!list.ok()) {
      std::cerr << list.status().message() << "\n";
      return 2;
    }
    for (const json& c : (*list)["items"]) {
      std::shared_ptr<const dra::ClaimInfo> info = dra::DecodeClaim(c);
      if (!info->allocation) continue;
      ++allocated;
      for (const dra::AllocatedDevice& d : info->allocation->results) {
        auto& u = use[{d.pool, d.device}];
        auto m = d.consumed.find("memory");
        // No consumed capacity: an exclusive device (the whole of it).
        u.first += m == d.consumed.end() ? *dra::ParseMilli("80Gi") : m->second;
        ++u.second;
      }
    }
    cont = (*list)["metadata"].value("continue", "");
  } while (!cont.empty());
  int over = 0;
  const int64_t capacity = *dra::ParseMilli("80Gi");
  int64_t consumed = 0;
  for (const auto& [dev, u] : use) {
    over += u.first > capacity ? 1 : 0;
    consumed += u.first;
  }
  out["claims_allocated"] = allocated;
  out["gpus_used"] = use.size();
  // The fewest GPUs that hold what the claims consume (memory): the optimum for shares.
  out["gpus_min"] = (consumed + capacity - 1) / capacity;
  out["gpus_overcommitted"] = over;
  std::cout << out.dump() << "\n";
  return static_cast<int>(times.size()) >= count ? 0 : 1;
}

// Every object of a namespaced list (all pages).
std::vector<json> ListAll(ApiClient& client, const std::string& path) {
  std::vector<json> items;
  std::string cont;
  do {
    std::string p = StrCat(path, "?limit=500");
    if (!cont.empty()) StrAppend(&p, "&continue=", QueryEscape(cont));
    absl::StatusOr<json> list = client.Get(p);
    if (!list.ok()) {
      std::cerr << list.status().message() << "\n";
      std::exit(2);
    }
    for (json& item : (*list)["items"]) items.push_back(std::move(item));
    cont = (*list)["metadata"].value("continue", "");
  } while (!cont.empty());
  return items;
}

int Writes(ApiClient& client, const std::string& ns, int count, int nodes, int gpus, bool whole,
           const std::string& share_memory, const std::string& node_prefix, int concurrency,
           bool linger) {
  const auto start = std::chrono::steady_clock::now();
  std::map<std::string, std::shared_ptr<const dra::ClaimInfo>> claims;
  for (const json& c :
       ListAll(client, StrCat(dra::kResourceApi, "/namespaces/", ns, "/resourceclaims"))) {
    std::shared_ptr<const dra::ClaimInfo> info = dra::DecodeClaim(c);
    claims[info->name] = info;
  }
  std::vector<std::shared_ptr<const PodInfo>> pods;
  for (const json& p : ListAll(client, StrCat("/api/v1/namespaces/", ns, "/pods"))) {
    pods.push_back(DecodePod(p));
  }
  const double listed_s = Seconds(std::chrono::steady_clock::now() - start);
  if (static_cast<int>(pods.size()) != count) {
    std::cerr << "writes: " << pods.size() << " pods in namespace " << ns << ", expected " << count
              << "\n";
    return 2;
  }
  const int per_gpu = whole ? 1 : 8;
  if (static_cast<int64_t>(pods.size()) > int64_t{nodes} * gpus * per_gpu) {
    std::cerr << "writes: " << pods.size() << " pods do not fit " << nodes << " nodes of " << gpus
              << " GPUs\n";
    return 2;
  }
  std::mutex mu;
  std::condition_variable cv;
  int done = 0, failed = 0;
  AsyncClientOptions o;
  o.max_in_flight = concurrency;
  o.http2 = false;
  AsyncClient async(client.transport(), o);
  ClaimBinder binder(async, [&](const std::string& key, uint64_t, absl::Status status) {
    std::lock_guard<std::mutex> lock(mu);
    if (!status.ok() && failed++ < 5) std::cerr << key << ": " << status.message() << "\n";
    ++done;
    cv.notify_all();
  });
  int submitted = 0;
  for (size_t i = 0; i < pods.size(); ++i) {
    const PodInfo& pod = *pods[i];
    if (pod.claims.refs.size() != 1) continue;
    auto c = claims.find(pod.claims.refs[0].claim);
    if (c == claims.end()) continue;
    const int64_t gpu = static_cast<int64_t>(i) / per_gpu;
    const std::string node = StrCat(node_prefix, "-", gpu / gpus);
    json result = {{"request", "gpu"},
                   {"driver", "gpu.tessera.dev"},
                   {"pool", node},
                   {"device", StrCat("gpu-", gpu % gpus)}};
    if (!whole) {
      result["shareID"] = dra::NewShareId();
      result["consumedCapacity"] = {{"memory", share_memory}, {"compute", "0"}};
    }
    ClaimWrite w;
    w.claim = c->second;
    w.allocation = {{"devices", {{"results", json::array({result})}}},
                    {"nodeSelector", dra::NodeSelectorFor(node)}};
    binder.Bind(pod, node, {w}, 1);
    ++submitted;
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done == submitted; });
  }
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  std::cerr << "writes: " << submitted << " pods (" << failed << " failed) in " << s
            << " s, the lists " << listed_s << " s of it\n";
  // Until SIGTERM's default action ends the process.
  while (linger) pause();
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tessera::k8s

int main(int argc, char** argv) {
  using namespace tessera::k8s;
  CLI::App app{"tessera DRA scheduler benchmark: nodes and slices, claims and pods, stopwatch"};
  app.require_subcommand(1);
  std::string kubeconfig, ns = "bench", scheduler = "tessera", share_memory, ready_file, start_file,
                          node_prefix = "bench-node", pod_prefix = "p";
  int count = 0, gpus = 8, concurrency = 64, timeout_s = 900;
  bool whole = false;
  auto common = [&](CLI::App* c) {
    c->add_option("--kubeconfig", kubeconfig)->required();
    c->add_option("--count", count)->required();
  };
  CLI::App* nodes = app.add_subcommand("nodes", "Nodes with inventory, ResourceSlices, classes");
  common(nodes);
  nodes->add_option("--gpus", gpus);
  nodes->add_option("--prefix", node_prefix);
  nodes->add_option("--concurrency", concurrency);
  CLI::App* pods = app.add_subcommand("pods", "one ResourceClaim and one pod using it, each");
  common(pods);
  pods->add_option("--namespace", ns);
  pods->add_option("--scheduler", scheduler);
  pods->add_flag("--whole", whole, "claims of one whole GPU");
  pods->add_option("--share-memory", share_memory, "claims of a share with this memory (10Gi)");
  pods->add_option("--prefix", pod_prefix);
  pods->add_option("--concurrency", concurrency);
  CLI::App* watch = app.add_subcommand("watch", "time the bindings; read the claims");
  common(watch);
  watch->add_option("--namespace", ns);
  watch->add_option("--ready-file", ready_file);
  watch->add_option("--start-file", start_file);
  watch->add_option("--timeout", timeout_s);
  int node_count = 1000;
  CLI::App* writes =
      app.add_subcommand("writes", "no scheduler: each pod's claim writes and binding, only");
  common(writes);
  writes->add_option("--namespace", ns);
  writes->add_option("--nodes", node_count, "nodes made by `nodes`");
  writes->add_option("--gpus", gpus);
  writes->add_option("--node-prefix", node_prefix);
  writes->add_flag("--whole", whole, "claims of one whole GPU");
  writes->add_option("--share-memory", share_memory, "claims of a share with this memory (10Gi)");
  writes->add_option("--concurrency", concurrency);
  bool linger = false;
  writes->add_flag("--linger", linger,
                   "when done, wait for SIGTERM (so that the caller can read the CPU time)");
  CLI11_PARSE(app, argc, argv);
  // stdout carries the JSON results; the client library's logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("dra_bench"));
  std::unique_ptr<ApiClient> client = Connect(kubeconfig);
  if (*nodes) return CreateNodes(*client, count, gpus, node_prefix, concurrency);
  if (*pods) {
    if (whole == !share_memory.empty()) {
      std::cerr << "pods: give exactly one of --whole and --share-memory\n";
      return 2;
    }
    return CreatePods(*client, ns, count, scheduler, whole, share_memory, pod_prefix, concurrency);
  }
  if (*writes) {
    if (whole == !share_memory.empty()) {
      std::cerr << "writes: give exactly one of --whole and --share-memory\n";
      return 2;
    }
    return Writes(*client, ns, count, node_count, gpus, whole, share_memory, node_prefix,
                  concurrency, linger);
  }
  return Watch(*client, ns, count, ready_file, start_file, timeout_s);
}
