// The agent's publishing loop against the real API server of the test control plane: the test
// creates the Node (as a kubelet would), the agent advertises the GPUs of a description file, and
// the test changes things under it (the file, the Node) and checks what the Node says.
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/discovery/fake_discovery.h"
#include "agent/node_agent.h"
#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "records/assignment.h"
#include "records/inventory.h"

namespace tessera::agent {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

e2e::ControlPlane& Cp() { return e2e::ControlPlane::Shared(); }

std::unique_ptr<k8s::ApiClient> Admin() {
  absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
  EXPECT_TRUE(config.ok()) << config.status();
  absl::StatusOr<std::unique_ptr<k8s::ApiClient>> client = k8s::ApiClient::Create(*config);
  EXPECT_TRUE(client.ok()) << client.status();
  return std::move(*client);
}

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// A Node as the kubelet registers it: CPU, memory and pods in its status.
void CreateNode(k8s::ApiClient& c, const std::string& name) {
  json node = {{"apiVersion", "v1"},
               {"kind", "Node"},
               {"metadata", {{"name", name}, {"labels", {{"kubernetes.io/hostname", name}}}}}};
  ASSERT_TRUE(c.Create("/api/v1/nodes", node).ok());
  json status = {{"status",
                  {{"capacity", {{"cpu", "64"}, {"memory", "512Gi"}, {"pods", "110"}}},
                   {"allocatable", {{"cpu", "63"}, {"memory", "500Gi"}, {"pods", "110"}}}}}};
  ASSERT_TRUE(c.Patch("/api/v1/nodes/" + name + "/status", k8s::PatchType::kMerge, status).ok());
}

json GpuFile(int n, const std::vector<int>& xids_of_gpu1 = {}, bool fabric = false) {
  json gpus = json::array(), links = json::array();
  for (int i = 0; i < n; ++i) {
    json g = {{"index", i},
              {"uuid", StrCat("GPU-6f1c2a9e-0000-4000-8000-00000000000", i)},
              {"model", "H100-80GB"},
              {"memory_mib", 81559}};
    if (i == 1 && !xids_of_gpu1.empty()) g["xid"] = xids_of_gpu1;
    gpus.push_back(g);
    json row = json::array();
    for (int k = 0; k < n; ++k) row.push_back(i == k ? "X" : "NV18");
    links.push_back(row);
  }
  json doc = {{"version", 1}, {"gpus", gpus}, {"links", links}};
  if (fabric) {
    doc["fabric"] = {{"cluster_uuid", "b7f0e0a1-1234-4abc-8def-0123456789ab"}, {"clique_id", 3}};
  }
  return doc;
}

// Writes atomically (rename), as a harness or a person's editor would.
void WriteFile(const std::string& path, const json& doc) {
  std::ofstream(path + ".tmp") << doc.dump(2);
  std::filesystem::rename(path + ".tmp", path);
}

class RunningAgent {
 public:
  RunningAgent(k8s::ApiClient& client, const std::string& node, const std::string& file)
      : RunningAgent(client, file, Options(node)) {}
  RunningAgent(k8s::ApiClient& client, const std::string& file, NodeAgentOptions options)
      : discovery_(file), agent_(discovery_, client, std::move(options)) {
    thread_ = std::thread([this] { status_ = agent_.Run(stop_); });
  }
  ~RunningAgent() { Stop().IgnoreError(); }
  absl::Status Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    return status_;
  }
  NodeAgent& agent() { return agent_; }

  static NodeAgentOptions Options(const std::string& node) {
    NodeAgentOptions o;
    o.node_name = node;
    o.rediscover_interval = std::chrono::milliseconds(200);
    o.retry_interval = std::chrono::milliseconds(200);
    return o;
  }

 private:
  FakeDiscovery discovery_;
  NodeAgent agent_;
  std::atomic<bool> stop_{false};
  absl::Status status_;
  std::thread thread_;
};

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) / name).string();
}

json Node(k8s::ApiClient& c, const std::string& name) {
  absl::StatusOr<json> node = c.Get("/api/v1/nodes/" + name);
  EXPECT_TRUE(node.ok()) << node.status();
  return node.ok() ? *node : json::object();
}

std::string Annotation(const json& node, const std::string& key) {
  const json& a = node["metadata"].value("annotations", json::object());
  return a.contains(key) ? a[key].get<std::string>() : "";
}

std::string Label(const json& node, const std::string& key) {
  const json& l = node["metadata"].value("labels", json::object());
  return l.contains(key) ? l[key].get<std::string>() : "";
}

std::string Resource(const json& node, const std::string& list, const std::string& key) {
  const json& r = node["status"].value(list, json::object());
  return r.contains(key) ? r[key].get<std::string>() : "";
}

TEST(NodeAgentE2e, PublishesAndThenLeavesTheNodeAlone) {
  auto c = Admin();
  const std::string name = "agent-publish";
  CreateNode(*c, name);
  const std::string file = TempPath("agent_publish_gpus.json");
  WriteFile(file, GpuFile(8));
  RunningAgent agent(*c, name, file);

  ASSERT_TRUE(WaitFor([&] {
    return !Annotation(Node(*c, name), "tessera.dev/gpu-inventory").empty() &&
           Resource(Node(*c, name), "allocatable", "tessera.dev/gpu") == "8";
  }));
  json node = Node(*c, name);
  absl::StatusOr<records::Inventory> inv =
      records::InventoryFromJson(Annotation(node, "tessera.dev/gpu-inventory"));
  ASSERT_TRUE(inv.ok()) << inv.status();
  EXPECT_EQ(inv->gpus.size(), 8u);
  EXPECT_EQ(inv->gpus[7].uuid, "GPU-6f1c2a9e-0000-4000-8000-000000000007");
  EXPECT_EQ(inv->links.at(0, 7), (core::Link{core::LinkKind::kNvLink, 18}));
  EXPECT_EQ(Label(node, "tessera.dev/gpu-model"), "H100-80GB");
  EXPECT_EQ(Label(node, "tessera.dev/gpu-count"), "8");
  EXPECT_EQ(Label(node, "kubernetes.io/hostname"), name);  // the kubelet's labels stay
  EXPECT_EQ(Resource(node, "capacity", "tessera.dev/gpu"), "8");
  EXPECT_EQ(Resource(node, "capacity", "tessera.dev/gpu-memory"), "652472Mi");
  EXPECT_EQ(Resource(node, "capacity", "tessera.dev/gpu-compute"), "800");
  EXPECT_EQ(Resource(node, "allocatable", "tessera.dev/gpu-memory"), "652472Mi");
  EXPECT_EQ(Resource(node, "capacity", "cpu"), "64");  // the kubelet's resources stay

  // Nothing changes: many rediscoveries later the Node has not been written again.
  const std::string version = node["metadata"]["resourceVersion"];
  const int64_t patches = agent.agent().patch_requests();
  const int64_t discoveries = agent.agent().discoveries();
  ASSERT_TRUE(WaitFor([&] { return agent.agent().discoveries() >= discoveries + 10; }));
  EXPECT_EQ(Node(*c, name)["metadata"]["resourceVersion"], version);
  EXPECT_EQ(agent.agent().patch_requests(), patches);
  EXPECT_TRUE(agent.Stop().ok());
  ASSERT_TRUE(c->Delete("/api/v1/nodes/" + name).ok());
}

TEST(NodeAgentE2e, RepublishesWhatChangesAndRestoresWhatOthersUndo) {
  auto c = Admin();
  const std::string name = "agent-changes";
  CreateNode(*c, name);
  // A pod bound to the node whose assignment holds GPU 1 (as the scheduler's Binding writes it).
  const std::string ns = "agent-changes";
  ASSERT_TRUE(c->Create("/api/v1/namespaces",
                        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}})
                  .ok());
  records::Assignment a;
  a.node = name;
  records::AssignedGpu g;
  g.grant.gpu = 1;
  g.grant.memory_mib = 4096;
  g.uuid = "GPU-6f1c2a9e-0000-4000-8000-000000000001";
  a.gpus.push_back(g);
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", "on-gpu-1"},
                {"namespace", ns},
                {"annotations",
                 {{std::string(records::kAssignmentAnnotation), records::AssignmentToJson(a)}}}}},
              {"spec",
               {{"nodeName", name},
                {"containers", {{{"name", "c"}, {"image", "tessera.local/busybox:1"}}}}}}};
  ASSERT_TRUE(c->Create("/api/v1/namespaces/" + ns + "/pods", pod).ok());

  const std::string file = TempPath("agent_changes_gpus.json");
  WriteFile(file, GpuFile(2));
  RunningAgent agent(*c, name, file);
  ASSERT_TRUE(
      WaitFor([&] { return Resource(Node(*c, name), "capacity", "tessera.dev/gpu") == "2"; }));

  // GPU 1 falls off the bus: the inventory says so, the resources do not change, its pod is told.
  WriteFile(file, GpuFile(2, {79}));
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<records::Inventory> inv =
        records::InventoryFromJson(Annotation(Node(*c, name), "tessera.dev/gpu-inventory"));
    return inv.ok() && !inv->healthy(1);
  }));
  json node = Node(*c, name);
  absl::StatusOr<records::Inventory> inv =
      records::InventoryFromJson(Annotation(node, "tessera.dev/gpu-inventory"));
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->healthy(0));
  EXPECT_EQ(inv->health[1].xids, std::vector<int32_t>{79});
  EXPECT_EQ(Resource(node, "allocatable", "tessera.dev/gpu"), "2");
  json events;
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<json> list = c->Get("/api/v1/namespaces/" + ns + "/events");
    if (!list.ok()) return false;
    events = (*list)["items"];
    return !events.empty();
  }));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["reason"], "GPUUnhealthy");
  EXPECT_EQ(events[0]["type"], "Warning");
  EXPECT_EQ(events[0]["involvedObject"]["name"], "on-gpu-1");
  EXPECT_THAT(events[0]["message"].get<std::string>(),
              HasSubstr("GPU 1 (GPU-6f1c2a9e-0000-4000-8000-000000000001) on node agent-changes is "
                        "unhealthy: XID 79: GPU has fallen off the bus"));

  // A re-registered kubelet zeroes extended resources; someone removes the annotation.
  ASSERT_TRUE(c->Patch("/api/v1/nodes/" + name + "/status", k8s::PatchType::kMerge,
                       {{"status",
                         {{"capacity", {{"tessera.dev/gpu", "0"}}},
                          {"allocatable", {{"tessera.dev/gpu", "0"}}}}}})
                  .ok());
  ASSERT_TRUE(
      WaitFor([&] { return Resource(Node(*c, name), "allocatable", "tessera.dev/gpu") == "2"; }));
  ASSERT_TRUE(c->Patch("/api/v1/nodes/" + name, k8s::PatchType::kMerge,
                       {{"metadata", {{"annotations", {{"tessera.dev/gpu-inventory", nullptr}}}}}})
                  .ok());
  ASSERT_TRUE(
      WaitFor([&] { return !Annotation(Node(*c, name), "tessera.dev/gpu-inventory").empty(); }));

  // The GPUs join a fabric clique, then leave it: the agent's label comes and goes; an
  // administrator's label on another key is never touched.
  ASSERT_TRUE(c->Patch("/api/v1/nodes/" + name, k8s::PatchType::kMerge,
                       {{"metadata", {{"labels", {{"tessera.dev/rack", "r7"}}}}}})
                  .ok());
  WriteFile(file, GpuFile(2, {79}, /*fabric=*/true));
  ASSERT_TRUE(WaitFor([&] {
    return Label(Node(*c, name), "tessera.dev/nvlink-domain") ==
           "b7f0e0a1-1234-4abc-8def-0123456789ab.3";
  }));
  WriteFile(file, GpuFile(2, {79}, /*fabric=*/false));
  ASSERT_TRUE(WaitFor([&] { return Label(Node(*c, name), "tessera.dev/nvlink-domain").empty(); }));
  EXPECT_EQ(Label(Node(*c, name), "tessera.dev/rack"), "r7");

  // A broken file keeps the last good inventory.
  std::ofstream(file) << "{\"version\": 1, \"gpus\": [";
  const int64_t discoveries = agent.agent().discoveries();
  ASSERT_TRUE(WaitFor([&] { return agent.agent().discoveries() >= discoveries + 3; }));
  EXPECT_EQ(Resource(Node(*c, name), "capacity", "tessera.dev/gpu"), "2");
  EXPECT_FALSE(Annotation(Node(*c, name), "tessera.dev/gpu-inventory").empty());

  EXPECT_TRUE(agent.Stop().ok());
  ASSERT_TRUE(c->Delete("/api/v1/nodes/" + name).ok());
}

// A running pod bound to `node` whose assignment holds GPU `gpu` (as the scheduler's Binding
// writes it). Running as a kubelet would report it (no kubelet runs here): the Eviction API
// ignores the budgets of a Pending pod.
void CreateGpuPod(k8s::ApiClient& c, const std::string& ns, const std::string& name,
                  const std::string& node, int gpu, const json& labels = json::object()) {
  records::Assignment a;
  a.node = node;
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.memory_mib = 4096;
  g.uuid = StrCat("GPU-6f1c2a9e-0000-4000-8000-00000000000", gpu);
  a.gpus.push_back(g);
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata",
               {{"name", name},
                {"namespace", ns},
                {"labels", labels},
                {"annotations",
                 {{std::string(records::kAssignmentAnnotation), records::AssignmentToJson(a)}}}}},
              {"spec",
               {{"nodeName", node},
                {"containers", {{{"name", "c"}, {"image", "tessera.local/busybox:1"}}}}}}};
  ASSERT_TRUE(c.Create("/api/v1/namespaces/" + ns + "/pods", pod).ok());
  ASSERT_TRUE(c.Patch(StrCat("/api/v1/namespaces/", ns, "/pods/", name, "/status"),
                      k8s::PatchType::kMerge, {{"status", {{"phase", "Running"}}}})
                  .ok());
}

// The Events with `reason` about the object `name` in `ns`.
std::vector<json> EventsAbout(k8s::ApiClient& c, const std::string& ns, const std::string& name,
                              const std::string& reason) {
  absl::StatusOr<json> list = c.Get(StrCat("/api/v1/namespaces/", ns, "/events"));
  std::vector<json> out;
  if (!list.ok()) return out;
  for (const json& e : (*list)["items"]) {
    if (e["involvedObject"].value("name", "") == name && e.value("reason", "") == reason) {
      out.push_back(e);
    }
  }
  return out;
}

// A GPU fault from end to end against the API server: an application XID is told to the pod that
// caused it and leaves the GPU in service; a hardware XID with the driver's "reset required"
// takes the GPU out, tells its pods and evicts them through the Eviction API (a pod whose
// PodDisruptionBudget allows nothing stays, and is told so); the reset brings the GPU back after
// the quiet period, with an Event, without a restart.
TEST(NodeAgentE2e, FromAnXidToEvictionsAndBackWithoutARestart) {
  auto c = Admin();
  const std::string name = "agent-faults";
  const std::string ns = "agent-faults";
  CreateNode(*c, name);
  ASSERT_TRUE(c->Create("/api/v1/namespaces",
                        {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}})
                  .ok());
  CreateGpuPod(*c, ns, "app", name, 0);
  CreateGpuPod(*c, ns, "victim", name, 1);
  CreateGpuPod(*c, ns, "guarded", name, 1, {{"app", "guarded"}});
  // No disruption controller runs here: the budget's status is never computed, so the Eviction
  // API refuses every eviction of a running pod it covers (429), as a budget with no disruption
  // allowed does.
  ASSERT_TRUE(
      c->Create(
           StrCat("/apis/policy/v1/namespaces/", ns, "/poddisruptionbudgets"),
           {{"apiVersion", "policy/v1"},
            {"kind", "PodDisruptionBudget"},
            {"metadata", {{"name", "guarded"}}},
            {"spec", {{"minAvailable", 1}, {"selector", {{"matchLabels", {{"app", "guarded"}}}}}}}})
          .ok());

  const std::string file = TempPath("agent_faults_gpus.json");
  WriteFile(file, GpuFile(2));
  std::filesystem::remove(file + ".events");
  NodeAgentOptions o = RunningAgent::Options(name);
  o.health.quiet_period = std::chrono::seconds(1);
  o.faults.retry_interval = std::chrono::milliseconds(300);
  RunningAgent agent(*c, file, o);
  ASSERT_TRUE(
      WaitFor([&] { return !Annotation(Node(*c, name), "tessera.dev/gpu-inventory").empty(); }));

  // An MMU fault of the pod on GPU 0.
  std::ofstream(file + ".events", std::ios::app) << R"({"gpu": 0, "xid": 31})"
                                                 << "\n";
  ASSERT_TRUE(WaitFor([&] { return !EventsAbout(*c, ns, "app", "GPUApplicationError").empty(); }));
  EXPECT_THAT(EventsAbout(*c, ns, "app", "GPUApplicationError")[0]["message"].get<std::string>(),
              HasSubstr("XID 31: GPU memory page fault on GPU 0"));
  EXPECT_TRUE(EventsAbout(*c, ns, "victim", "GPUApplicationError").empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  absl::StatusOr<records::Inventory> inv =
      records::InventoryFromJson(Annotation(Node(*c, name), "tessera.dev/gpu-inventory"));
  ASSERT_TRUE(inv.ok());
  EXPECT_TRUE(inv->healthy(0));
  EXPECT_FALSE((*c->Get(StrCat("/api/v1/namespaces/", ns, "/pods/app")))["metadata"].contains(
      "deletionTimestamp"));

  // A double bit ECC error on GPU 1, and the driver asks for a reset.
  json sick = GpuFile(2);
  sick["gpus"][1]["recovery_action"] = "reset";
  WriteFile(file, sick);
  std::ofstream(file + ".events", std::ios::app) << R"({"gpu": 1, "xid": 48})"
                                                 << "\n";
  ASSERT_TRUE(WaitFor([&] {
    absl::StatusOr<records::Inventory> i =
        records::InventoryFromJson(Annotation(Node(*c, name), "tessera.dev/gpu-inventory"));
    return i.ok() && !i->healthy(1);
  }));
  auto terminating = [&](const std::string& pod) {
    absl::StatusOr<json> p = c->Get(StrCat("/api/v1/namespaces/", ns, "/pods/", pod));
    return p.ok() && (*p)["metadata"].contains("deletionTimestamp");
  };
  EXPECT_TRUE(WaitFor([&] { return terminating("victim"); })) << "evicted";
  EXPECT_TRUE(
      WaitFor([&] { return !EventsAbout(*c, ns, "guarded", "GPUEvictionBlocked").empty(); }));
  EXPECT_FALSE(terminating("guarded")) << "its budget holds it";
  EXPECT_FALSE(terminating("app")) << "its GPU is fine";
  for (const char* pod : {"victim", "guarded"}) {
    std::vector<json> told = EventsAbout(*c, ns, pod, "GPUUnhealthy");
    ASSERT_EQ(told.size(), 1u) << pod;
    EXPECT_THAT(
        told[0]["message"].get<std::string>(),
        HasSubstr("GPU 1 (GPU-6f1c2a9e-0000-4000-8000-000000000001) on node agent-faults is "
                  "unhealthy: XID 48: double bit ECC error"));
  }
  EXPECT_FALSE(EventsAbout(*c, "default", name, "GPUUnhealthy").empty());
  EXPECT_GE(agent.agent().discoveries(), 2);

  // The reset: nothing is reported any more; back after the quiet period, with an Event.
  WriteFile(file, GpuFile(2));
  EXPECT_TRUE(WaitFor([&] {
    absl::StatusOr<records::Inventory> i =
        records::InventoryFromJson(Annotation(Node(*c, name), "tessera.dev/gpu-inventory"));
    return i.ok() && i->healthy(1);
  }));
  EXPECT_TRUE(WaitFor([&] { return !EventsAbout(*c, "default", name, "GPUHealthy").empty(); }));
  EXPECT_TRUE(agent.Stop().ok());
  ASSERT_TRUE(c->Delete("/api/v1/nodes/" + name).ok());
}

TEST(NodeAgentE2e, WaitsForItsNodeToBeRegistered) {
  auto c = Admin();
  const std::string name = "agent-late-node";
  const std::string file = TempPath("agent_late_gpus.json");
  WriteFile(file, GpuFile(1));
  RunningAgent agent(*c, name, file);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // a few failed attempts
  CreateNode(*c, name);
  ASSERT_TRUE(
      WaitFor([&] { return Resource(Node(*c, name), "capacity", "tessera.dev/gpu") == "1"; }));
  EXPECT_EQ(Label(Node(*c, name), "tessera.dev/gpu-count"), "1");
  EXPECT_TRUE(agent.Stop().ok());
  ASSERT_TRUE(c->Delete("/api/v1/nodes/" + name).ok());
}

TEST(NodeAgentE2e, ABadFileAtStartIsAnError) {
  auto c = Admin();
  const std::string file = TempPath("agent_bad_gpus.json");
  std::ofstream(file) << "{\"version\": 1,\n \"gpus\": 3}\n";
  FakeDiscovery discovery(file);
  NodeAgentOptions o;
  o.node_name = "agent-bad-file";
  NodeAgent agent(discovery, *c, o);
  std::atomic<bool> stop{false};
  absl::Status s = agent.Run(stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr(":2: gpus: expected an array, found 3"));
}

}  // namespace
}  // namespace tessera::agent
