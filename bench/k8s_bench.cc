// Load generator and stopwatch for scheduler benchmarks against a real API server
// (bench/run_scheduler.sh drives it):
//
//   k8s_bench nodes --kubeconfig K --count 1000 --gpus 8            Nodes with status + inventory
//   k8s_bench pods  --kubeconfig K --namespace ns --count 8000 --scheduler NAME (--gpu 1 |
//                   --gpu-memory 10Gi)                                 pods, many creates in flight
//   k8s_bench watch --kubeconfig K --namespace ns --count 8000 --ready-file F --start-file S
//                                                                      times the bindings
//
// `watch` lists and watches the namespace's pods, writes F when it is watching, and records the
// wall-clock time at which it first sees each pod bound. At the end it reads S (the scheduler's
// start, epoch nanoseconds, written by the script just before starting it) and prints one JSON
// line: pods bound, time from start to the first and the last binding, pods per second, and from
// the tessera.dev/assignment annotations (when present) the GPUs used and any over-commitment.
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
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/names.h"

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
      if (!resp.ok()) {
        if (failures_++ < 5) {
          std::cerr << FromAbsl(StatusFromResponse(r, resp).message()) << "\n";
        }
      } else if (then) {
        then(resp);
      }
      ++done_;
    });
  }
  void Wait() {
    async_.Drain(std::chrono::hours(1));
    if (failures_ > 0) {
      std::cerr << failures_ << " requests failed\n";
      std::exit(1);
    }
  }
  int done() const { return done_; }

 private:
  AsyncClient async_;
  std::atomic<int> failures_{0};
  std::atomic<int> done_{0};
};

int CreateNodes(ApiClient& client, int count, int gpus, const std::string& prefix,
                int concurrency) {
  auto start = std::chrono::steady_clock::now();
  Runner runner(client, concurrency);
  for (int i = 0; i < count; ++i) {
    std::string name = StrCat(prefix, "-", i);
    json node = testing::NodeObject(name)
                    .Gpus(gpus)
                    .NvSwitch()
                    .Cpu("64")
                    .Memory("512Gi")
                    .Label("tessera.dev/bench", "true")
                    .Json();
    json status = node["status"];
    node.erase("status");
    runner.Submit(HttpRequest{"POST", "/api/v1/nodes", node.dump(), "application/json"},
                  [&runner, name, status](const HttpResponse&) {
                    runner.Submit(HttpRequest{"PATCH", StrCat("/api/v1/nodes/", name, "/status"),
                                              json{{"status", status}}.dump(),
                                              std::string(ContentTypeOf(PatchType::kMerge))});
                  });
  }
  runner.Wait();
  std::cerr << "created " << count << " nodes of " << gpus << " GPUs in "
            << Seconds(std::chrono::steady_clock::now() - start) << " s\n";
  return 0;
}

int CreatePods(ApiClient& client, const std::string& ns, int count, const std::string& scheduler,
               const std::string& gpu, const std::string& gpu_memory, const std::string& prefix,
               int concurrency) {
  (void)client.Create("/api/v1/namespaces",
                      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
  auto start = std::chrono::steady_clock::now();
  Runner runner(client, concurrency);
  for (int i = 0; i < count; ++i) {
    testing::PodObject p(ns, StrCat(prefix, "-", i));
    p.Scheduler(scheduler).Request("cpu", "100m").Request("memory", "128Mi");
    if (!gpu.empty()) p.Limit(std::string(records::kGpuResource), gpu);
    if (!gpu_memory.empty()) p.Limit(std::string(records::kGpuMemoryResource), gpu_memory);
    json pod = p.Json();
    pod.erase("status");
    runner.Submit(HttpRequest{"POST", StrCat("/api/v1/namespaces/", ns, "/pods"), pod.dump(),
                              "application/json"});
  }
  runner.Wait();
  double s = Seconds(std::chrono::steady_clock::now() - start);
  std::cerr << "created " << count << " pods in " << s << " s (" << count / s << " pods/s, "
            << concurrency << " in flight)\n";
  std::cout << json{{"created", count}, {"seconds", s}, {"pods_per_second", count / s}}.dump()
            << "\n";
  return 0;
}

struct PodLite {
  std::string node;
  std::string assignment;
};

int Watch(ApiClient& client, const std::string& ns, int count, const std::string& ready_file,
          const std::string& start_file, int timeout_s) {
  std::mutex mu;
  std::map<std::string, std::chrono::system_clock::time_point> bound_at;
  std::map<std::string, std::string> assignments;
  ListWatchOptions o;
  o.resource = "pods";
  o.path = StrCat("/api/v1/namespaces/", ns, "/pods");
  Informer<PodLite> pods(
      client, o,
      [](const json& j) {
        auto p = std::make_shared<PodLite>();
        p->node = j["spec"].value("nodeName", "");
        const json& ann = j["metadata"].value("annotations", json::object());
        p->assignment = ann.value(std::string(records::kAssignmentAnnotation), "");
        return p;
      },
      [&](Informer<PodLite>::Event&& e) {
        if (e.kind == Informer<PodLite>::Event::kSynced || !e.object) return;
        if (e.object->node.empty()) return;
        auto now = std::chrono::system_clock::now();
        std::lock_guard<std::mutex> lock(mu);
        bound_at.try_emplace(e.key, now);
        assignments[e.key] = e.object->assignment;
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
  std::lock_guard<std::mutex> lock(mu);
  std::vector<double> times;
  for (const auto& [k, t] : bound_at)
    times.push_back(std::chrono::duration<double>(t - start).count());
  std::sort(times.begin(), times.end());
  json out = {{"pods", count}, {"bound", times.size()}};
  if (!times.empty()) {
    double first = times.front(), last = times.back();
    out["first_bind_s"] = first;
    out["last_bind_s"] = last;
    out["pods_per_second"] = static_cast<double>(times.size()) / last;
    if (last > first) out["pods_per_second_first_to_last"] = (times.size() - 1) / (last - first);
  }
  // What the assignments say (tessera only): GPUs used, and any over-commitment.
  std::map<std::pair<std::string, int>, std::pair<int64_t, int>> use;  // memory, exclusive pods
  int with_assignment = 0, bad = 0;
  for (const auto& [k, text] : assignments) {
    if (text.empty()) continue;
    absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(text);
    if (!a.ok()) {
      ++bad;
      continue;
    }
    ++with_assignment;
    for (const records::AssignedGpu& g : a->gpus) {
      auto& u = use[{a->node, g.grant.gpu}];
      u.first += g.grant.memory_mib;
      u.second += g.grant.exclusive ? 1 : 0;
    }
  }
  if (with_assignment > 0) {
    int over = 0;
    for (const auto& [gpu, u] : use) {
      if (u.first > 81920 || u.second > 1) ++over;
    }
    out["with_assignment"] = with_assignment;
    out["gpus_used"] = use.size();
    out["gpus_overcommitted"] = over;
    out["bad_assignments"] = bad;
  }
  std::cout << out.dump() << "\n";
  return static_cast<int>(times.size()) >= count ? 0 : 1;
}

}  // namespace
}  // namespace tessera::k8s

int main(int argc, char** argv) {
  CLI::App app("Scheduler benchmark helper: nodes, pods, and a stopwatch for bindings.");
  app.require_subcommand(1);
  std::string kubeconfig, ns = "bench", scheduler = "tessera", gpu, gpu_memory,
                          node_prefix = "bench-node", pod_prefix = "pod", ready_file, start_file;
  int count = 0, gpus = 8, concurrency = 64, timeout_s = 600;
  auto common = [&](CLI::App* c) {
    c->add_option("--kubeconfig", kubeconfig)->required();
    c->add_option("--count", count)->required();
  };
  CLI::App* nodes = app.add_subcommand("nodes", "Create nodes with GPU capacity and inventory");
  common(nodes);
  nodes->add_option("--gpus", gpus);
  nodes->add_option("--prefix", node_prefix);
  nodes->add_option("--concurrency", concurrency);
  CLI::App* pods = app.add_subcommand("pods", "Create pods");
  common(pods);
  pods->add_option("--namespace", ns);
  pods->add_option("--scheduler", scheduler);
  pods->add_option("--gpu", gpu);
  pods->add_option("--gpu-memory", gpu_memory);
  pods->add_option("--prefix", pod_prefix);
  pods->add_option("--concurrency", concurrency);
  CLI::App* watch = app.add_subcommand("watch", "Time the bindings of a namespace's pods");
  common(watch);
  watch->add_option("--namespace", ns);
  watch->add_option("--ready-file", ready_file);
  watch->add_option("--start-file", start_file);
  watch->add_option("--timeout", timeout_s);
  CLI11_PARSE(app, argc, argv);
  auto client = tessera::k8s::Connect(kubeconfig);
  if (*nodes) return tessera::k8s::CreateNodes(*client, count, gpus, node_prefix, concurrency);
  if (*pods) {
    return tessera::k8s::CreatePods(*client, ns, count, scheduler, gpu, gpu_memory, pod_prefix,
                                    concurrency);
  }
  return tessera::k8s::Watch(*client, ns, count, ready_file, start_file, timeout_s);
}
