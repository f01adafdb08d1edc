// Load generator and stopwatch for scheduler benchmarks against a real API server
// (bench/run_scheduler.sh drives it):
//
//   k8s_bench nodes --kubeconfig K --count 10000 --gpus 8 [--koordinator] [--nvlink-domain-label]
//       Nodes with status and tessera's inventory; their allocatable also has nvidia.com/gpu and
//       Koordinator's GPU resources, and with --koordinator each gets the Device object that
//       koordlet would write (koord-scheduler reads GPUs from it). With --nvlink-domain-label each
//       node is labelled tessera.dev/nvlink-domain=<its name>: one 8-GPU NVSwitch server is one
//       NVLink domain, said as a label that a PodGroup's topology key (and so kube-scheduler's
//       TopologyPlacementGenerator) can name.
//   k8s_bench pods --kubeconfig K --namespace ns --count 80000 --scheduler NAME
//                  [--flavour tessera|koordinator] (--gpu 1 | --gpu-memory 10Gi)
//                  [--gang-size 8 [--gang-topology LEVEL | --pod-groups [--pod-group-topology
//                  KEY]]]
//       Pods, many creates in flight. tessera: tessera.dev/gpu or tessera.dev/gpu-memory and
//       tessera.dev/gang*; koordinator: nvidia.com/gpu or koordinator.sh/gpu-memory and
//       gang.scheduling.koordinator.sh/*. With --pod-groups the gangs are upstream PodGroups
//       (scheduling.k8s.io/v1beta1, created first: gang-G with schedulingPolicy.gang.minCount =
//       gang size and, unless KEY is empty, schedulingConstraints.topology [{key: KEY}], default
//       tessera.dev/nvlink-domain) and each pod names its own in spec.schedulingGroup.podGroupName,
//       with no gang annotation: what kube-scheduler's GangScheduling and tessera both read.
//   k8s_bench watch --kubeconfig K --namespace ns --count 80000 --ready-file F --start-file S
//       Times the bindings.
//   k8s_bench bind --kubeconfig K --namespace ns --count 8000 --nodes 10000 [--gpus 8]
//                  [--concurrency 64] [--http2]
//       The API server's own binding ceiling: no scheduling at all. Binds pod-I (the pods that
//       `pods` made) to bench-node-(I mod nodes) with a one-GPU tessera.dev/assignment, the same
//       POST .../binding request and annotation tessera's binder sends, with --concurrency in
//       flight (HTTP/1.1 keep-alive connections, or multiplexed on HTTP/2 with --http2). Prints
//       one JSON line: binds, seconds, binds per second, and the latency of one bind (p50, p99).
//   k8s_bench churn --kubeconfig K --count 10000 --rate 100 --stop-file F
//       Every second, `rate` nodes change: half a label, half a NoSchedule taint (each tainted
//       node is untainted the next second), until F exists. Prints what it did.
//
// `watch` lists and watches the namespace's pods, writes F when it is watching, and records the
// wall-clock time at which it first sees each pod bound. At the end it reads S (the scheduler's
// start, epoch nanoseconds, written by the script just before starting it) and prints one JSON
// line: pods bound, time from start to the first and the last binding, pods per second, and from
// the pods' GPU records (tessera.dev/assignment, or Koordinator's
// scheduling.koordinator.sh/device-allocated) the GPUs used and any over-commitment. Pods in
// groups (spec.schedulingGroup.podGroupName, tessera.dev/gang, or Koordinator's
// gang.scheduling.koordinator.sh/name) add: the groups, those with every member bound
// (groups_complete), groups per second (complete groups / the time the last of them completed),
// and how many complete groups have all members on one node (groups_one_node: one NVLink domain
// for these 8-GPU NVSwitch servers) and on one value of the tessera.dev/nvlink-domain label
// when the nodes have it (the watch reads the nodes too).
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <semaphore>
#include <set>
#include <thread>

#include "CLI/CLI.hpp"
#include "api_load.h"
#include "common/random.h"
#include "common/strings.h"
#include "core/model/quantity.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/client/informer.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/names.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

using bench::Connect;
using bench::Runner;
using bench::Seconds;

// Koordinator's names (apis/extension in koordinator-sh/koordinator v1.8.0).
constexpr std::string_view kKoordGpuCore = "koordinator.sh/gpu-core";
constexpr std::string_view kKoordGpuMemory = "koordinator.sh/gpu-memory";
constexpr std::string_view kKoordGpuMemoryRatio = "koordinator.sh/gpu-memory-ratio";
constexpr std::string_view kKoordDeviceAllocated = "scheduling.koordinator.sh/device-allocated";
constexpr std::string_view kNvidiaGpu = "nvidia.com/gpu";
constexpr int64_t kGpuMemoryGi = 80;

int CreateNodes(ApiClient& client, int count, int gpus, const std::string& prefix, int concurrency,
                bool koordinator, bool nvlink_domain_label) {
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
    if (nvlink_domain_label) {
      node["metadata"]["labels"][std::string(records::kNvlinkDomainLabel)] = name;
    }
    json status = node["status"];
    node.erase("status");
    for (const char* list : {"capacity", "allocatable"}) {
      json& r = status[list];
      r[std::string(kNvidiaGpu)] = std::to_string(gpus);
      r[std::string(kKoordGpuCore)] = std::to_string(100 * gpus);
      r[std::string(kKoordGpuMemoryRatio)] = std::to_string(100 * gpus);
      r[std::string(kKoordGpuMemory)] = StrCat(kGpuMemoryGi * gpus, "Gi");
    }
    runner.Submit(HttpRequest{"POST", "/api/v1/nodes", node.dump(), "application/json"},
                  [&runner, name, status](const HttpResponse&) {
                    runner.Submit(HttpRequest{"PATCH", StrCat("/api/v1/nodes/", name, "/status"),
                                              json{{"status", status}}.dump(),
                                              std::string(ContentTypeOf(PatchType::kMerge))});
                  });
    if (koordinator) {
      json devices = json::array();
      for (int g = 0; g < gpus; ++g) {
        devices.push_back({{"type", "gpu"},
                           {"id", StrCat("GPU-", name, "-", g)},
                           {"minor", g},
                           {"health", true},
                           {"resources",
                            {{std::string(kKoordGpuCore), "100"},
                             {std::string(kKoordGpuMemoryRatio), "100"},
                             {std::string(kKoordGpuMemory), StrCat(kGpuMemoryGi, "Gi")}}}});
      }
      json device = {{"apiVersion", "scheduling.koordinator.sh/v1alpha1"},
                     {"kind", "Device"},
                     {"metadata", {{"name", name}}},
                     {"spec", {{"devices", devices}}}};
      runner.Submit(HttpRequest{"POST", "/apis/scheduling.koordinator.sh/v1alpha1/devices",
                                device.dump(), "application/json"});
    }
  }
  runner.Wait();
  std::cerr << "created " << count << " nodes of " << gpus << " GPUs"
            << (koordinator ? " (and their Device objects)" : "") << " in "
            << Seconds(std::chrono::steady_clock::now() - start) << " s\n";
  return 0;
}

struct PodOptions {
  std::string ns = "bench";
  std::string scheduler = "tessera";
  std::string flavour = "tessera";  // or "koordinator"
  std::string gpu;                  // whole GPUs per pod
  std::string gpu_memory;           // a share of one GPU
  int gang_size = 0;                // > 0: gangs of this many pods
  std::string gang_topology;        // tessera: a level the gang stays inside
  bool pod_groups = false;          // gangs as upstream PodGroups instead of annotations
  std::string pod_group_topology{records::kNvlinkDomainLabel};  // their topology key ("": none)
  std::string prefix = "pod";
  int concurrency = 64;
};

int CreatePods(ApiClient& client, int count, const PodOptions& o) {
  (void)client.Create(
      "/api/v1/namespaces",
      {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", o.ns}}}});
  const bool koord = o.flavour == "koordinator";
  auto start = std::chrono::steady_clock::now();
  Runner runner(client, o.concurrency);
  if (o.pod_groups) {
    const std::string path =
        StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", o.ns, "/podgroups");
    const int groups = (count + o.gang_size - 1) / o.gang_size;
    for (int g = 0; g < groups; ++g) {
      json group =
          testing::PodGroupJson(o.ns, StrCat("gang-", g), o.gang_size, o.pod_group_topology);
      group["metadata"].erase("uid");
      runner.Submit(HttpRequest{"POST", path, group.dump(), "application/json"});
    }
    runner.Wait();
    // Without feature gate TopologyAwareWorkloadScheduling the API server drops the constraint
    // silently (and the comparison would be of unconstrained gangs): refuse to go on.
    if (!o.pod_group_topology.empty()) {
      absl::StatusOr<json> g0 = client.Get(StrCat(path, "/gang-0"));
      if (!g0.ok() || !g0->contains("spec") || !(*g0)["spec"].contains("schedulingConstraints")) {
        std::cerr << "the API server dropped PodGroup gang-0's spec.schedulingConstraints (or "
                     "cannot read it back): start it with feature gate "
                     "TopologyAwareWorkloadScheduling (cluster.sh start --with-workloads)\n";
        return 1;
      }
    }
    std::cerr << "created " << groups << " PodGroups of minCount " << o.gang_size << " in "
              << Seconds(std::chrono::steady_clock::now() - start) << " s\n";
  }
  for (int i = 0; i < count; ++i) {
    testing::PodObject p(o.ns, StrCat(o.prefix, "-", i));
    p.Scheduler(o.scheduler).Request("cpu", "100m").Request("memory", "128Mi");
    if (!o.gpu.empty()) {
      p.Limit(std::string(koord ? kNvidiaGpu : records::kGpuResource), o.gpu);
    }
    if (!o.gpu_memory.empty()) {
      p.Limit(std::string(koord ? kKoordGpuMemory : records::kGpuMemoryResource), o.gpu_memory);
    }
    if (o.gang_size > 0) {
      const std::string gang = StrCat("gang-", i / o.gang_size);
      if (o.pod_groups) {
        p.PodGroup(gang);
      } else if (koord) {
        p.Annotation("gang.scheduling.koordinator.sh/name", gang);
        p.Annotation("gang.scheduling.koordinator.sh/min-available", std::to_string(o.gang_size));
      } else {
        p.Gang(gang, o.gang_size, o.gang_topology);
      }
    }
    json pod = p.Json();
    pod.erase("status");
    runner.Submit(HttpRequest{"POST", StrCat("/api/v1/namespaces/", o.ns, "/pods"), pod.dump(),
                              "application/json"});
  }
  runner.Wait();
  double s = Seconds(std::chrono::steady_clock::now() - start);
  std::cerr << "created " << count << " pods in " << s << " s (" << count / s << " pods/s, "
            << o.concurrency << " in flight)\n";
  std::cout << json{{"created", count}, {"seconds", s}, {"pods_per_second", count / s}}.dump()
            << "\n";
  return 0;
}

// Every second `rate` nodes change (half a label, half a NoSchedule taint that is taken off again
// the next second) until `stop_file` exists.
int Churn(ApiClient& client, int count, const std::string& prefix, int rate,
          const std::string& stop_file) {
  Runner runner(client, 64);
  Random rnd(20261201);
  std::vector<std::string> tainted;
  int64_t labels = 0, taints = 0, seconds = 0;
  auto next = std::chrono::steady_clock::now();
  auto node = [&](int i) { return StrCat("/api/v1/nodes/", prefix, "-", i); };
  const std::string merge(ContentTypeOf(PatchType::kMerge));
  while (!std::ifstream(stop_file).good()) {
    next += std::chrono::seconds(1);
    ++seconds;
    for (const std::string& path : tainted) {
      runner.Submit(
          HttpRequest{"PATCH", path, json{{"spec", {{"taints", nullptr}}}}.dump(), merge});
    }
    tainted.clear();
    for (int k = 0; k < rate; ++k) {
      const std::string path = node(static_cast<int>(rnd.Uniform(count)));
      if (k % 2 == 0) {
        runner.Submit(HttpRequest{
            "PATCH", path,
            json{{"metadata", {{"labels", {{"bench/churn", std::to_string(seconds)}}}}}}.dump(),
            merge});
        ++labels;
      } else {
        runner.Submit(
            HttpRequest{"PATCH", path,
                        json{{"spec",
                              {{"taints", json::array({{{"key", "bench/churn"},
                                                        {"value", std::to_string(seconds)},
                                                        {"effect", "NoSchedule"}}})}}}}
                            .dump(),
                        merge});
        tainted.push_back(path);
        ++taints;
      }
    }
    std::this_thread::sleep_until(next);
  }
  // What the API server had applied when told to stop: on a busy machine it falls behind the
  // asked rate. The figures are printed before the backlog and the last taints are drained, so
  // that a benchmark can stop this process (on a cluster it throws away) instead of waiting.
  const int64_t submitted = labels + 2 * taints - static_cast<int64_t>(tainted.size());
  const int64_t applied = runner.done();
  std::cout << json{{"churn_seconds", seconds},
                    {"label_changes", labels},
                    {"taint_changes", taints},
                    {"node_changes_per_second",
                     seconds > 0 ? static_cast<double>(labels + taints) / seconds : 0.0},
                    {"churn_patches_submitted", submitted},
                    {"churn_patches_applied", applied},
                    {"churn_patches_applied_per_second",
                     seconds > 0 ? static_cast<double>(applied) / seconds : 0.0}}
                   .dump()
            << std::endl;
  for (const std::string& path : tainted) {
    runner.Submit(HttpRequest{"PATCH", path, json{{"spec", {{"taints", nullptr}}}}.dump(), merge});
  }
  runner.Wait();
  return 0;
}

// Binds pods pod-0..count-1 to nodes round-robin, nothing else: what this API server (and etcd)
// sustain for bindings when the binder's client is the only cost. The request is the one
// AnnotationBinder sends (the same Binding body with a one-GPU assignment record).
int Bind(ApiClient& client, const std::string& ns, int count, int nodes, int gpus,
         const std::string& pod_prefix, const std::string& node_prefix, int concurrency,
         bool http2) {
  AsyncClient async(client.transport(), AsyncClientOptions{concurrency, 8, {}, http2});
  std::mutex mu;
  std::vector<double> latencies;
  latencies.reserve(count);
  std::atomic<int> failures{0};
  // At most `concurrency` submitted at once, so that a bind's latency is the server's answer
  // time, not a wait in the client's queue.
  std::counting_semaphore<> slots(concurrency);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < count; ++i) {
    slots.acquire();
    const int node = i % nodes;
    records::Assignment a;
    a.node = StrCat(node_prefix, "-", node);
    records::AssignedGpu g;
    g.grant.gpu = (i / nodes) % gpus;
    g.grant.memory_mib = kGpuMemoryGi * 1024;
    g.grant.exclusive = true;
    g.uuid = StrCat("GPU-", a.node, "-", g.grant.gpu);
    a.gpus.push_back(g);
    const std::string pod = StrCat(pod_prefix, "-", i);
    json annotations = {
        {std::string(records::kAssignmentAnnotation), records::AssignmentToJson(a)}};
    HttpRequest req{"POST", StrCat("/api/v1/namespaces/", ns, "/pods/", pod, "/binding"),
                    BindingBody(ns, pod, "", a.node, annotations).dump(), "application/json"};
    const auto sent = std::chrono::steady_clock::now();
    async.Submit(req, [&, req, sent](const HttpResponse& resp) {
      if (!resp.ok()) {
        if (failures++ < 5) std::cerr << FromAbsl(StatusFromResponse(req, resp).message()) << "\n";
      } else {
        const double s = Seconds(std::chrono::steady_clock::now() - sent);
        std::lock_guard<std::mutex> lock(mu);
        latencies.push_back(s);
      }
      slots.release();
    });
  }
  async.Drain(std::chrono::hours(1));
  const double s = Seconds(std::chrono::steady_clock::now() - start);
  std::lock_guard<std::mutex> lock(mu);
  std::sort(latencies.begin(), latencies.end());
  auto at = [](const std::vector<double>& v, double q) {
    return v.empty() ? 0.0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
  };
  std::cerr << "bound " << latencies.size() << " pods in " << s << " s (" << latencies.size() / s
            << " binds/s, " << concurrency << " in flight, " << (http2 ? "HTTP/2" : "HTTP/1.1")
            << ")\n";
  std::cout << json{{"binds", latencies.size()},
                    {"bind_failures", failures.load()},
                    {"bind_seconds", s},
                    {"binds_per_second", latencies.size() / s},
                    {"bind_latency_p50_s", at(latencies, 0.5)},
                    {"bind_latency_p99_s", at(latencies, 0.99)},
                    {"bind_concurrency", concurrency},
                    {"bind_http2", http2}}
                   .dump()
            << std::endl;
  return failures > 0 ? 1 : 0;
}

struct PodLite {
  std::string node;
  std::string group;       // the pod's gang or PodGroup ("" when in none)
  std::string assignment;  // tessera.dev/assignment
  std::string koord;       // scheduling.koordinator.sh/device-allocated
};

// The pod's group: its PodGroup (spec.schedulingGroup.podGroupName), else its tessera.dev/gang,
// else Koordinator's gang name; "" when in none.
std::string GroupOf(const json& pod) {
  const json& spec = pod.value("spec", json::object());
  if (auto it = spec.find("schedulingGroup"); it != spec.end() && it->is_object()) {
    std::string name = it->value("podGroupName", "");
    if (!name.empty()) return StrCat("podgroup/", name);
  }
  const json& ann = pod["metadata"].value("annotations", json::object());
  std::string gang = ann.value(std::string(records::kGangAnnotation), "");
  if (!gang.empty()) return StrCat("gang/", gang);
  gang = ann.value("gang.scheduling.koordinator.sh/name", "");
  if (!gang.empty()) return StrCat("koord/", gang);
  return "";
}

// Node name -> its tessera.dev/nvlink-domain label, for the nodes that have one (read in pages).
std::map<std::string, std::string> NvlinkDomains(ApiClient& client) {
  std::map<std::string, std::string> out;
  const std::string label(records::kNvlinkDomainLabel);
  std::string cont;
  do {
    std::string path = StrCat("/api/v1/nodes?limit=500&labelSelector=", label);
    if (!cont.empty()) path += StrCat("&continue=", cont);
    absl::StatusOr<json> page = client.Get(path);
    if (!page.ok()) {
      std::cerr << "listing the nodes' NVLink domains: " << page.status().message() << "\n";
      return {};
    }
    for (const json& n : page->value("items", json::array())) {
      out[n["metadata"].value("name", "")] =
          n["metadata"].value("labels", json::object()).value(label, "");
    }
    cont = (*page)["metadata"].value("continue", "");
  } while (!cont.empty());
  return out;
}

int Watch(ApiClient& client, const std::string& ns, int count, const std::string& ready_file,
          const std::string& start_file, int timeout_s) {
  std::mutex mu;
  std::map<std::string, std::chrono::system_clock::time_point> bound_at;
  std::map<std::string, std::string> group_of, node_of;  // pod key -> group, node
  std::map<std::string, std::string> assignments;
  std::map<std::string, std::pair<std::string, std::string>> koord;  // node, device-allocated
  ListWatchOptions o;
  o.resource = "pods";
  o.path = StrCat("/api/v1/namespaces/", ns, "/pods");
  Informer<PodLite> pods(
      client, o,
      [](const json& j) {
        auto p = std::make_shared<PodLite>();
        p->node = j["spec"].value("nodeName", "");
        p->group = GroupOf(j);
        const json& ann = j["metadata"].value("annotations", json::object());
        p->assignment = ann.value(std::string(records::kAssignmentAnnotation), "");
        if (p->assignment.empty()) {
          p->koord = ann.value(std::string(kKoordDeviceAllocated), "");
        }
        return p;
      },
      [&](Informer<PodLite>::Event&& e) {
        if (e.kind == Informer<PodLite>::Event::kSynced || !e.object) return;
        if (!e.object->group.empty()) {
          std::lock_guard<std::mutex> lock(mu);
          group_of[e.key] = e.object->group;
        }
        if (e.object->node.empty()) return;
        auto now = std::chrono::system_clock::now();
        std::lock_guard<std::mutex> lock(mu);
        bound_at.try_emplace(e.key, now);
        node_of[e.key] = e.object->node;
        assignments[e.key] = e.object->assignment;
        if (!e.object->koord.empty()) koord[e.key] = {e.object->node, e.object->koord};
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
  // The groups: complete (every member bound), when, and whether on one node / NVLink domain.
  if (!group_of.empty()) {
    std::map<std::string, std::vector<std::string>> members;
    for (const auto& [pod, group] : group_of) members[group].push_back(pod);
    std::map<std::string, std::string> domains = NvlinkDomains(client);
    int complete = 0, partial = 0, one_node = 0, one_domain = 0;
    double last_complete = 0;
    for (const auto& [group, keys] : members) {
      int bound = 0;
      double done = 0;
      std::set<std::string> nodes, values;
      for (const std::string& pod : keys) {
        auto t = bound_at.find(pod);
        if (t == bound_at.end()) continue;
        ++bound;
        done = std::max(done, std::chrono::duration<double>(t->second - start).count());
        nodes.insert(node_of[pod]);
        auto d = domains.find(node_of[pod]);
        values.insert(d == domains.end() ? "" : d->second);
      }
      if (bound == 0) continue;
      if (bound < static_cast<int>(keys.size())) {
        ++partial;
        continue;
      }
      ++complete;
      last_complete = std::max(last_complete, done);
      if (nodes.size() == 1) ++one_node;
      if (values.size() == 1 && !values.begin()->empty()) ++one_domain;
    }
    out["groups"] = members.size();
    out["groups_complete"] = complete;
    out["groups_partly_bound"] = partial;
    out["groups_one_node"] = one_node;
    if (!domains.empty()) out["groups_one_nvlink_domain_label"] = one_domain;
    if (complete > 0 && last_complete > 0) {
      out["groups_last_complete_s"] = last_complete;
      out["groups_per_second"] = complete / last_complete;
    }
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
  // Koordinator's record: {"gpu": [{"minor": 0, "resources": {"koordinator.sh/gpu-memory":
  // "10Gi", "koordinator.sh/gpu-core": 100, ...}}]}.
  for (const auto& [k, rec] : koord) {
    json doc = json::parse(rec.second, nullptr, /*allow_exceptions=*/false);
    if (!doc.is_object() || !doc.contains("gpu") || !doc["gpu"].is_array()) {
      ++bad;
      continue;
    }
    ++with_assignment;
    for (const json& g : doc["gpu"]) {
      auto& u = use[{rec.first, g.value("minor", -1)}];
      const json& res = g.value("resources", json::object());
      int64_t core = 0;
      if (res.contains(std::string(kKoordGpuCore))) {
        const json& c = res[std::string(kKoordGpuCore)];
        core = c.is_number() ? c.get<int64_t>() : std::stoll(c.get<std::string>());
      }
      if (res.contains(std::string(kKoordGpuMemory))) {
        absl::StatusOr<int64_t> mib = core::ParseMemoryMiB(
            res[std::string(kKoordGpuMemory)].get<std::string>(), core::Rounding::kUp);
        if (mib.ok()) u.first += *mib;
      }
      if (core >= 100) u.second += 1;  // a whole GPU's cores
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
  CLI::App app("Scheduler benchmark helper: nodes, pods, churn, and a stopwatch for bindings.");
  app.require_subcommand(1);
  std::string kubeconfig, node_prefix = "bench-node", ready_file, start_file, stop_file;
  tessera::k8s::PodOptions po;
  int count = 0, gpus = 8, concurrency = 64, timeout_s = 600, rate = 100;
  bool koordinator = false, nvlink_domain_label = false;
  auto common = [&](CLI::App* c) {
    c->add_option("--kubeconfig", kubeconfig)->required();
    c->add_option("--count", count)->required();
  };
  CLI::App* nodes = app.add_subcommand("nodes", "Create nodes with GPU capacity and inventory");
  common(nodes);
  nodes->add_option("--gpus", gpus);
  nodes->add_option("--prefix", node_prefix);
  nodes->add_option("--concurrency", concurrency);
  nodes->add_flag("--koordinator", koordinator, "Also create Koordinator's Device objects");
  nodes->add_flag("--nvlink-domain-label", nvlink_domain_label,
                  "Label each node tessera.dev/nvlink-domain=<its name> (one NVLink domain each)");
  CLI::App* pods = app.add_subcommand("pods", "Create pods");
  common(pods);
  pods->add_option("--namespace", po.ns);
  pods->add_option("--scheduler", po.scheduler);
  pods->add_option("--flavour", po.flavour, "tessera or koordinator resource names")
      ->check(CLI::IsMember({"tessera", "koordinator"}));
  pods->add_option("--gpu", po.gpu);
  pods->add_option("--gpu-memory", po.gpu_memory);
  pods->add_option("--gang-size", po.gang_size);
  pods->add_option("--gang-topology", po.gang_topology);
  pods->add_flag("--pod-groups", po.pod_groups,
                 "Gangs as upstream PodGroups (scheduling.k8s.io/v1beta1), not annotations");
  pods->add_option("--pod-group-topology", po.pod_group_topology,
                   "The PodGroups' topology key (a node label; empty: no constraint)");
  pods->add_option("--prefix", po.prefix);
  pods->add_option("--concurrency", po.concurrency);
  CLI::App* watch = app.add_subcommand("watch", "Time the bindings of a namespace's pods");
  common(watch);
  watch->add_option("--namespace", po.ns);
  watch->add_option("--ready-file", ready_file);
  watch->add_option("--start-file", start_file);
  watch->add_option("--timeout", timeout_s);
  int bind_nodes = 0;
  bool http2 = false;
  CLI::App* bind = app.add_subcommand(
      "bind", "Bind pods to nodes with no scheduling at all: the API server's binding ceiling");
  common(bind);
  bind->add_option("--namespace", po.ns);
  bind->add_option("--prefix", po.prefix, "Pod name prefix");
  bind->add_option("--node-prefix", node_prefix);
  bind->add_option("--nodes", bind_nodes, "Nodes to spread the pods over")->required();
  bind->add_option("--gpus", gpus, "GPUs per node");
  bind->add_option("--concurrency", concurrency, "Binds in flight");
  bind->add_flag("--http2", http2, "Multiplex on HTTP/2 instead of HTTP/1.1 keep-alive");
  CLI::App* churn = app.add_subcommand("churn", "Change node labels and taints every second");
  common(churn);
  churn->add_option("--prefix", node_prefix);
  churn->add_option("--rate", rate, "Node changes per second");
  churn->add_option("--stop-file", stop_file)->required();
  CLI11_PARSE(app, argc, argv);
  // stdout carries the JSON results; the client library's logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("k8s_bench"));
  auto client = tessera::k8s::Connect(kubeconfig);
  if (*nodes) {
    return tessera::k8s::CreateNodes(*client, count, gpus, node_prefix, concurrency, koordinator,
                                     nvlink_domain_label);
  }
  if (*pods) {
    if (po.pod_groups && po.gang_size <= 0) {
      std::cerr << "--pod-groups needs --gang-size (the PodGroups' minCount)\n";
      return 2;
    }
    return tessera::k8s::CreatePods(*client, count, po);
  }
  if (*bind) {
    return tessera::k8s::Bind(*client, po.ns, count, bind_nodes, gpus, po.prefix, node_prefix,
                              concurrency, http2);
  }
  if (*churn) return tessera::k8s::Churn(*client, count, node_prefix, rate, stop_file);
  return tessera::k8s::Watch(*client, po.ns, count, ready_file, start_file, timeout_s);
}
