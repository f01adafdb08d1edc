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
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>

#include "CLI/CLI.hpp"
#include "common/strings.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/client/informer.h"
#include "k8s/dra/objects.h"
#include "k8s/testing/dra_objects.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

std::unique_ptr<ApiClient> Connect(const std::string& kubeconfig) {
  absl::StatusOr<ClientConfig> config = LoadKubeconfig(kubeconfig);
  if (!config.ok()) {
    std::cerr << config.status().message() << "\n";
    std::exit(2);
  }
  auto client = ApiClient::Create(*config);
  if (!client.ok()) {
    std::cerr << client.status().message() << "\n";
    std::exit(2);
  }
  return std::move(*client);
}

double Seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Runs requests with `concurrency` in flight; exits non-zero if any fails.
class Runner {
 public:
  Runner(ApiClient& client, int concurrency)
      : async_(client.transport(), AsyncClientOptions{concurrency, 8, {}, true}) {}
  void Submit(HttpRequest r, std::function<void(const HttpResponse&)> then = nullptr) {
    async_.Submit(r, [this, r, then](const HttpResponse& resp) {
      if (!resp.ok() && resp.status != 409) {
        if (failures_++ < 5) {
          std::cerr << FromAbsl(StatusFromResponse(r, resp).message()) << "\n";
        }
      } else if (then) {
        then(resp);
      }
    });
  }
  void Wait() {
    async_.Drain(std::chrono::hours(1));
    if (failures_ > 0) {
      std::cerr << failures_ << " requests failed\n";
      std::exit(1);
    }
  }

 private:
  AsyncClient async_;
  std::atomic<int> failures_{0};
};

int CreateNodes(ApiClient& client, int count, int gpus, const std::string& prefix,
                int concurrency) {
  auto start = std::chrono::steady_clock::now();
  Runner runner(client, concurrency);
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
  Runner runner(client, concurrency);
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
  for (const auto& [dev, u] : use) over += u.first > *dra::ParseMilli("80Gi") ? 1 : 0;
  out["claims_allocated"] = allocated;
  out["gpus_used"] = use.size();
  out["gpus_overcommitted"] = over;
  std::cout << out.dump() << "\n";
  return static_cast<int>(times.size()) >= count ? 0 : 1;
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
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<ApiClient> client = Connect(kubeconfig);
  if (*nodes) return CreateNodes(*client, count, gpus, node_prefix, concurrency);
  if (*pods) {
    if (whole == !share_memory.empty()) {
      std::cerr << "pods: give exactly one of --whole and --share-memory\n";
      return 2;
    }
    return CreatePods(*client, ns, count, scheduler, whole, share_memory, pod_prefix, concurrency);
  }
  return Watch(*client, ns, count, ready_file, start_file, timeout_s);
}
