// The operator's commands against the real API server, as a user runs them: `tessera status`
// (and `kubectl tessera status`) and `tessera simulate --from-cluster`, on a placement the real
// `tessera scheduler` made. Nodes are plain Node objects (status and the tessera.dev/gpu-inventory
// annotation); there is no kubelet, so pods are bound and never run, and the known placement is
// read back from their tessera.dev/assignment annotations.
//
// Each test has its own namespace, scheduler name, node label and Lease; TearDown kills the
// scheduler and deletes its pods and nodes, so each test sees only its own nodes.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "controlplane/controlplane.h"
#include "dashboard_check.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/snapshot/snapshot.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/inventory.h"
#include "scoped_process.h"
#include "sim/cluster_file.h"

namespace tessera::e2e {
namespace {

using k8s::testing::NodeObject;
using k8s::testing::PodObject;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

ControlPlane& Cp() { return ControlPlane::Shared(); }

template <typename Pred>
bool WaitUntil(Pred pred, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(100));
  }
  return pred();
}

struct Ran {
  int status = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

class OperatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = k8s::ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (char c : name) id_ += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    id_ = id_.substr(0, 30);
    ns_ = StrCat("op-", id_);
    scheduler_name_ = StrCat("tessera-", id_);
    dir_ = StrCat(::testing::TempDir(), "/tessera-op-e2e-", getpid(), "-", id_);
    std::filesystem::create_directories(dir_);
    for (const std::string& ns : {ns_, StrCat(ns_, "-other")}) {
      absl::StatusOr<json> created =
          api_->Create("/api/v1/namespaces",
                       {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns}}}});
      ASSERT_TRUE(created.ok() || created.status().code() == absl::StatusCode::kAlreadyExists)
          << created.status();
    }
    std::ofstream(dir_ + "/config.yaml")
        << StrCat("apiVersion: tessera.dev/v1alpha1\nkind: SchedulerConfiguration\nschedulerName: ",
                  scheduler_name_, "\nnodeSelector: \"tessera-e2e/test=", id_,
                  "\"\nleaderElection:\n  resourceNamespace: ", ns_,
                  "\n  resourceName: tessera-scheduler\n  leaseDuration: 3s\n  renewDeadline: 2s\n"
                  "  retryPeriod: 500ms\nmetrics: {bindAddress: 127.0.0.1, port: 0}\n"
                  "retry: {minInterval: 200ms, period: 2s}\n");
  }

  void TearDown() override {
    scheduler_.reset();
    for (const std::string& b : cluster_bindings_) {
      (void)Cp().Kubectl({"delete", "clusterrolebinding", b});
    }
    if (api_) {
      for (const std::string& ns : {ns_, StrCat(ns_, "-other")}) {
        (void)api_->Delete(StrCat("/api/v1/namespaces/", ns, "/pods?gracePeriodSeconds=0"));
      }
      (void)api_->Delete(StrCat("/api/v1/nodes?labelSelector=",
                                k8s::QueryEscape(StrCat("tessera-e2e/test=", id_))));
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  void StartScheduler() {
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", Cp().kubeconfig(),
                              "--config", dir_ + "/config.yaml", "--identity", "op"},
                             dir_ + "/scheduler.log");
    ASSERT_TRUE(p.ok()) << p.status();
    scheduler_ = std::move(*p);
  }

  // Runs a command through the shell (as a user would), stdout and stderr apart.
  Ran Shell(const std::string& command) {
    const std::string out = dir_ + "/cmd.out", err = dir_ + "/cmd.err";
    const int raw = std::system(StrCat(command, " >", out, " 2>", err).c_str());
    Ran r;
    r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
    std::ifstream o(out), e(err);
    r.out.assign(std::istreambuf_iterator<char>(o), {});
    r.err.assign(std::istreambuf_iterator<char>(e), {});
    return r;
  }
  Ran Tessera(const std::string& args) {
    return Shell(StrCat(TESSERA_BINARY, " ", args, " --kubeconfig ", Cp().kubeconfig()));
  }
  json StatusJson(const std::string& extra = "") {
    Ran r = Tessera(StrCat("status -o json --scheduler-name ", scheduler_name_, " ", extra));
    EXPECT_EQ(r.status, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  }

  std::string NodeName(const std::string& base) { return StrCat(id_.substr(0, 20), "-", base); }
  void AddNode(NodeObject node) {
    node.Label("tessera-e2e/test", id_);
    json j = node.Json();
    json status = j["status"];
    j.erase("status");
    absl::StatusOr<json> created = api_->Create("/api/v1/nodes", j);
    ASSERT_TRUE(created.ok()) << created.status();
    absl::StatusOr<json> patched =
        api_->Patch(StrCat("/api/v1/nodes/", std::string(j["metadata"]["name"]), "/status"),
                    k8s::PatchType::kMerge, {{"status", status}});
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  void AddPod(PodObject pod, const std::string& ns = "") {
    pod.Scheduler(scheduler_name_);
    absl::StatusOr<json> created =
        api_->Create(StrCat("/api/v1/namespaces/", ns.empty() ? ns_ : ns, "/pods"), pod.Json());
    ASSERT_TRUE(created.ok()) << created.status();
  }

  json Pods() {
    json all = json::array();
    for (const std::string& ns : {ns_, StrCat(ns_, "-other")}) {
      absl::StatusOr<json> list = api_->Get(StrCat("/api/v1/namespaces/", ns, "/pods"));
      EXPECT_TRUE(list.ok()) << list.status();
      if (list.ok()) {
        for (json& p : (*list)["items"]) all.push_back(std::move(p));
      }
    }
    return all;
  }
  static std::string Key(const json& pod) {
    return StrCat(pod["metadata"]["namespace"].get<std::string>(), "/",
                  pod["metadata"]["name"].get<std::string>());
  }
  int BoundCount() {
    int n = 0;
    for (const json& p : Pods()) n += p["spec"].value("nodeName", "").empty() ? 0 : 1;
    return n;
  }
  // The PodScheduled=False message of a pod, or "".
  std::string UnschedulableMessage(const std::string& key) {
    for (const json& p : Pods()) {
      if (Key(p) != key) continue;
      for (const json& c : p["status"].value("conditions", json::array())) {
        if (c["type"] == "PodScheduled" && c["status"] == "False") return c.value("message", "");
      }
    }
    return "";
  }
  // Every bound pod's assignment, by "ns/name".
  std::map<std::string, records::Assignment> Assignments() {
    std::map<std::string, records::Assignment> out;
    for (const json& p : Pods()) {
      if (p["spec"].value("nodeName", "").empty()) continue;
      const json& ann = p["metadata"].value("annotations", json::object());
      auto it = ann.find(std::string(records::kAssignmentAnnotation));
      if (it == ann.end()) continue;
      absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(it->get<std::string>());
      EXPECT_TRUE(a.ok()) << a.status();
      if (a.ok()) out[Key(p)] = *a;
    }
    return out;
  }

  // A token of a new ServiceAccount `name` in ns_ (TokenRequest), bound to `role` (a ClusterRole,
  // cluster-wide) or, with `namespaced`, to a Role in ns_ allowing only reads of pods and events.
  std::string ServiceAccountToken(const std::string& name, const std::string& role,
                                  bool namespaced) {
    EXPECT_TRUE(Cp().KubectlOk({"-n", ns_, "create", "serviceaccount", name}).ok());
    const std::string subject = StrCat(ns_, ":", name);
    if (namespaced) {
      EXPECT_TRUE(Cp().KubectlOk({"-n", ns_, "create", "role", name, "--verb=get,list,watch",
                                  "--resource=pods,events"})
                      .ok());
      EXPECT_TRUE(Cp().KubectlOk({"-n", ns_, "create", "rolebinding", name, "--role", name,
                                  "--serviceaccount", subject})
                      .ok());
    } else {
      EXPECT_TRUE(Cp().KubectlOk({"create", "clusterrolebinding", StrCat(ns_, "-", name),
                                  "--clusterrole", role, "--serviceaccount", subject})
                      .ok());
      cluster_bindings_.push_back(StrCat(ns_, "-", name));
    }
    absl::StatusOr<std::string> token =
        Cp().KubectlOk({"-n", ns_, "create", "token", name, "--duration", "1h"});
    EXPECT_TRUE(token.ok()) << token.status();
    std::string t = token.ok() ? *token : "";
    while (!t.empty() && (t.back() == '\n' || t.back() == ' ')) t.pop_back();
    return t;
  }
  // A kubeconfig with the harness's cluster and `user` (YAML of a users[].user map), context
  // namespace `ns`, written to dir_/name.
  std::string Kubeconfig(const std::string& name, const std::string& user, const std::string& ns) {
    const std::string path = StrCat(dir_, "/", name);
    std::ofstream(path) << StrCat(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: harness\n"
        "  cluster: {server: \"",
        Cp().server(), "\", certificate-authority: ", Cp().ca_file(),
        "}\nusers:\n- name: u\n  user:\n", user,
        "contexts:\n- name: c\n  context: {cluster: harness, user: u, "
        "namespace: ",
        ns, "}\ncurrent-context: c\n");
    return path;
  }

  std::unique_ptr<k8s::ApiClient> api_;
  std::vector<std::string> cluster_bindings_;
  std::string id_, ns_, scheduler_name_, dir_;
  std::unique_ptr<ScopedProcess> scheduler_;
};

// One GPU's grants as a map pod -> (memory, compute, exclusive).
using Grants = std::map<std::string, std::tuple<int64_t, int64_t, bool>>;

TEST_F(OperatorTest, StatusShowsTheSchedulersPlacement) {
  const std::string a = NodeName("a"), b = NodeName("b");
  AddNode(NodeObject(a).Gpus(4).NvSwitch().Cpu("64").Memory("512Gi").Ready().Unhealthy(
      3, {79}, "XID 79: GPU has fallen off the bus"));
  AddNode(NodeObject(b).Gpus(2).Cpu("32").Memory("256Gi").Ready());
  StartScheduler();
  for (int i = 0; i < 5; ++i) {
    AddPod(PodObject(ns_, StrCat("infer-", i))
               .Limit("tessera.dev/gpu-memory", "20Gi")
               .Limit("tessera.dev/gpu-compute", "25")
               .Request("cpu", "1"));
  }
  AddPod(PodObject(StrCat(ns_, "-other"), "other-0").Limit("tessera.dev/gpu-memory", "30Gi"),
         StrCat(ns_, "-other"));
  AddPod(PodObject(ns_, "whole").Limit("tessera.dev/gpu", "1").Request("cpu", "4"));
  // More whole GPUs than any node has: pending, with the scheduler's reason.
  AddPod(PodObject(ns_, "huge").Limit("tessera.dev/gpu", "8"));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 7; }, seconds(60)))
      << BoundCount() << " of 7 bound\n"
      << scheduler_->Log();
  const std::string huge = StrCat(ns_, "/huge");
  ASSERT_TRUE(WaitUntil([&] { return !UnschedulableMessage(huge).empty(); }, seconds(30)))
      << scheduler_->Log();
  const std::map<std::string, records::Assignment> assignments = Assignments();
  ASSERT_EQ(assignments.size(), 7u);

  // What the assignments say, per GPU.
  std::map<std::pair<std::string, int>, Grants> expected;
  int64_t granted = 0;
  for (const auto& [pod, as] : assignments) {
    for (const records::AssignedGpu& g : as.gpus) {
      expected[{as.node, g.grant.gpu}][pod] = {g.grant.memory_mib, g.grant.compute_milli,
                                               g.grant.exclusive};
      granted += g.grant.memory_mib;
    }
  }

  const int gpus_with_grants = static_cast<int>(expected.size());

  json s = StatusJson();
  EXPECT_EQ(s["version"], 1);
  EXPECT_EQ(s["server"], Cp().server());
  // The same document over JSON and over Kubernetes' protobuf wire (the default: the lists of
  // nodes and pods decoded from protobuf into the same records, k8s/client/protobuf_wire.h):
  // equal but for when it was read.
  {
    json over_protobuf = s;
    json over_json = StatusJson("--wire json");
    for (json* d : {&over_json, &over_protobuf}) {
      d->erase("time");
      d->erase("read_seconds");
    }
    EXPECT_EQ(over_protobuf, over_json) << over_protobuf.dump(2);
    // ... and the API server did answer in protobuf, every page of both lists.
    k8s::SnapshotOptions o;
    o.protobuf = true;
    absl::StatusOr<k8s::ClusterSnapshot> snap = k8s::ReadSnapshot(*api_, o);
    ASSERT_TRUE(snap.ok()) << snap.status();
    EXPECT_GE(snap->pages, 2);
    EXPECT_EQ(snap->protobuf_pages, snap->pages);
  }
  ASSERT_EQ(s["nodes"].size(), 2u) << s.dump(2);
  for (const json& n : s["nodes"]) {
    const std::string node = n["name"];
    EXPECT_TRUE(n["ready"]) << node;
    EXPECT_EQ(n["gpus"].size(), node == a ? 4u : 2u);
    EXPECT_EQ(n["interconnect"], node == a ? "NVLink" : "PCIe");
    for (const json& g : n["gpus"]) {
      const int index = g["index"];
      Grants shown;
      int64_t memory = 0;
      for (const json& p : g["pods"]) {
        shown[p["pod"]] = {p["memory_mib"], p["compute_milli"], p["exclusive"]};
        memory += p["memory_mib"].get<int64_t>();
      }
      EXPECT_EQ(shown, (expected[{node, index}])) << node << " GPU " << index;
      EXPECT_EQ(g["memory_granted_mib"], memory) << node << " GPU " << index;
      EXPECT_EQ(g["uuid"], StrCat("GPU-", node, "-", index));
      EXPECT_EQ(g["memory_mib"], 81920);
      const bool bad = node == a && index == 3;
      EXPECT_EQ(g["healthy"], !bad) << node << " GPU " << index;
      if (bad) {
        EXPECT_EQ(g["xids"], json::array({79}));
        EXPECT_EQ(g["health_reason"], "XID 79: GPU has fallen off the bus");
      }
      if (bad) {
        // The scheduler holds what is free on an unhealthy GPU: nothing new goes there.
        EXPECT_EQ(g["free_memory_mib"], 0) << node << " GPU " << index << " is unhealthy";
      } else if (!shown.empty() && std::get<2>(shown.begin()->second)) {
        EXPECT_EQ(g["free_memory_mib"], 0) << node << " GPU " << index << " is held whole";
      } else {
        EXPECT_EQ(g["free_memory_mib"], 81920 - memory) << node << " GPU " << index;
      }
    }
  }
  ASSERT_EQ(s["pending"].size(), 1u) << s["pending"].dump(2);
  EXPECT_EQ(s["pending"][0]["pod"], huge);
  EXPECT_EQ(s["pending"][0]["gpus"], 8);
  EXPECT_EQ(s["pending"][0]["reason"], UnschedulableMessage(huge));
  EXPECT_TRUE(s["pending"][0]["never_fits"]);
  const json& t = s["totals"];
  EXPECT_EQ(t["gpu_nodes"], 2);
  EXPECT_EQ(t["gpus"], 6);
  EXPECT_EQ(t["gpus_unhealthy"], 1);
  EXPECT_EQ(t["gpus_in_use"], gpus_with_grants);
  EXPECT_EQ(t["gpus_exclusive"], 1);
  EXPECT_EQ(t["memory_mib"], 6 * 81920);
  EXPECT_EQ(t["memory_granted_mib"], granted);
  EXPECT_EQ(t["running_gpu_pods"], 7);
  EXPECT_EQ(t["pending_gpu_pods"], 1);
  EXPECT_EQ(t["pending_whole_gpus"], 8);
  EXPECT_LE(t["stranded_too_small_mib"].get<int64_t>(), t["stranded_mib"].get<int64_t>());
  EXPECT_LE(t["stranded_mib"].get<int64_t>(), t["free_memory_mib"].get<int64_t>());

  // The table a person reads.
  Ran text = Tessera(StrCat("status --scheduler-name ", scheduler_name_));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr(StrCat("NODE ", a, "  4 x A100-80GB, NVLink  Ready")));
  EXPECT_THAT(text.out, HasSubstr("XID 79"));
  EXPECT_THAT(text.out, HasSubstr(StrCat(ns_, "/whole (whole)")));
  EXPECT_THAT(text.out, HasSubstr(huge));
  EXPECT_THAT(text.out, HasSubstr(UnschedulableMessage(huge)));
  EXPECT_THAT(text.out, HasSubstr("TOTALS"));

  // --node, --namespace.
  json one = StatusJson(StrCat("--node ", b));
  ASSERT_EQ(one["nodes"].size(), 1u);
  EXPECT_EQ(one["nodes"][0]["name"], b);
  EXPECT_EQ(one["totals"], s["totals"]);
  json other = StatusJson(StrCat("-n ", ns_, "-other"));
  int shown = 0, hidden = 0;
  for (const json& n : other["nodes"]) {
    for (const json& g : n["gpus"]) {
      for (const json& p : g["pods"]) {
        EXPECT_EQ(p["pod"], StrCat(ns_, "-other/other-0"));
        ++shown;
      }
      hidden += g["pods_hidden"].get<int>();
    }
  }
  EXPECT_EQ(shown, 1);
  // Only that namespace's pods were asked for: the others are not there to hide.
  EXPECT_EQ(hidden, 0);
  EXPECT_EQ(other["pods_namespace"], StrCat(ns_, "-other"));
  EXPECT_EQ(other["totals"]["running_gpu_pods"], 1);
  EXPECT_TRUE(other["pending"].empty());
  Ran missing = Tessera("status --node no-such-node");
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.err, HasSubstr("node \"no-such-node\" not found"));

  // The kubectl plugin: kubectl finds kubectl-tessera on PATH.
  const std::string bin_dir = std::filesystem::path(TESSERA_BINARY).parent_path();
  Ran plugin =
      Shell(StrCat("PATH=", bin_dir, ":$PATH kubectl tessera status -o json --scheduler-name ",
                   scheduler_name_, " --kubeconfig ", Cp().kubeconfig()));
  ASSERT_EQ(plugin.status, 0) << plugin.err;
  json via_kubectl = json::parse(plugin.out, nullptr, false);
  ASSERT_FALSE(via_kubectl.is_discarded()) << plugin.out;
  EXPECT_EQ(via_kubectl["nodes"], s["nodes"]);
  Ran plugin_help = Shell(StrCat("PATH=", bin_dir, ":$PATH kubectl tessera --help"));
  EXPECT_THAT(plugin_help.out, HasSubstr("kubectl tessera"));

  // --watch: a JSON line at start, another when something changes.
  {
    absl::StatusOr<std::unique_ptr<ScopedProcess>> watch = ScopedProcess::Start(
        {TESSERA_BINARY, "status", "--watch", "-o", "json", "--interval", "0.2", "--scheduler-name",
         scheduler_name_, "--kubeconfig", Cp().kubeconfig()},
        dir_ + "/watch.log");
    ASSERT_TRUE(watch.ok()) << watch.status();
    ASSERT_TRUE((*watch)->WaitForLog("\"version\":1", seconds(30))) << (*watch)->Log();
    AddPod(PodObject(ns_, "late").Limit("tessera.dev/gpu", "16"));
    EXPECT_TRUE((*watch)->WaitForLog(StrCat(ns_, "/late"), seconds(30))) << (*watch)->Log();
  }

  // A server that does not answer: exit 1, and the message names it.
  std::ifstream kc(Cp().kubeconfig());
  std::string kubeconfig((std::istreambuf_iterator<char>(kc)), {});
  const std::string server = Cp().server();
  kubeconfig.replace(kubeconfig.find(server), server.size(), "https://127.0.0.1:1");
  std::ofstream(dir_ + "/dead.kubeconfig") << kubeconfig;
  Ran dead = Shell(StrCat(TESSERA_BINARY, " status --kubeconfig ", dir_, "/dead.kubeconfig"));
  EXPECT_EQ(dead.status, 1);
  EXPECT_THAT(dead.err, HasSubstr("https://127.0.0.1:1"));
}

TEST_F(OperatorTest, SimulateFromClusterStartsWhereTheClusterStands) {
  const std::string a = NodeName("a"), b = NodeName("b");
  AddNode(NodeObject(a).Gpus(2).Cpu("64").Memory("512Gi").Ready());
  AddNode(NodeObject(b).Gpus(2).Cpu("64").Memory("512Gi").Ready());
  StartScheduler();
  for (int i = 0; i < 3; ++i) {
    AddPod(PodObject(ns_, StrCat("train-", i))
               .Limit("tessera.dev/gpu", "1")
               .Request("cpu", "2")
               .Request("memory", "8Gi"));
  }
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 3; }, seconds(60))) << scheduler_->Log();
  const std::map<std::string, records::Assignment> assignments = Assignments();
  ASSERT_EQ(assignments.size(), 3u);
  scheduler_.reset();  // nothing moves from here on

  // 3 of 4 GPUs are held whole, so of two more whole-GPU pods one fits.
  const std::string workload = dir_ + "/workload.yaml";
  std::ofstream(workload) << "jobs:\n  - {name: more, replicas: 2, cpu: 1, memory: 1Gi, "
                             "gpu: {count: 1}}\n";
  const std::string saved = dir_ + "/snapshot.yaml";
  Ran live = Tessera(StrCat("simulate --from-cluster --workload ", workload,
                            " --policy tessera,whole-gpu --json --save ", saved));
  ASSERT_EQ(live.status, 0) << live.err;
  json results = json::parse(live.out, nullptr, false);
  ASSERT_FALSE(results.is_discarded()) << live.out;
  ASSERT_EQ(results["results"].size(), 2u);
  for (const json& r : results["results"]) {
    EXPECT_EQ(r["placed"], 1) << r["policy"];
    EXPECT_EQ(r["pending"], 1) << r["policy"];
    EXPECT_EQ(r["gpus_in_use"], 4) << r["policy"];
  }

  // The saved snapshot: the nodes as the API server has them, every bound pod with its record.
  absl::StatusOr<sim::ClusterFile> file = sim::LoadClusterFile(saved);
  ASSERT_TRUE(file.ok()) << file.status();
  std::set<std::string> nodes;
  for (const core::NodeSpec& n : file->nodes) {
    nodes.insert(n.name);
    EXPECT_EQ(n.gpus.at(0).uuid, StrCat("GPU-", n.name, "-0"));
    EXPECT_EQ(n.cpu_milli, 64000);
  }
  EXPECT_EQ(nodes, (std::set<std::string>{a, b}));
  ASSERT_EQ(file->running.size(), 3u);
  for (const sim::RunningPod& p : file->running) {
    ASSERT_TRUE(assignments.contains(p.name)) << p.name;
    const records::Assignment& want = assignments.at(p.name);
    EXPECT_EQ(p.assignment.node, want.node) << p.name;
    ASSERT_EQ(p.assignment.gpus.size(), 1u);
    EXPECT_EQ(p.assignment.gpus[0].grant, want.gpus[0].grant) << p.name;
    EXPECT_EQ(p.assignment.gpus[0].uuid, want.gpus[0].uuid) << p.name;
    EXPECT_EQ(p.cpu_milli, 2000);
    EXPECT_EQ(p.memory_mib, 8192);
  }

  // Replayed offline, the saved file gives the same answers.
  Ran replay = Shell(StrCat(TESSERA_BINARY, " simulate --cluster ", saved, " --workload ", workload,
                            " --policy tessera,whole-gpu --json"));
  ASSERT_EQ(replay.status, 0) << replay.err;
  json replayed = json::parse(replay.out, nullptr, false);
  ASSERT_FALSE(replayed.is_discarded());
  EXPECT_EQ(replayed, results);

  // "Or with one more node?"
  Ran more = Tessera(StrCat("simulate --from-cluster --workload ", workload,
                            " --policy tessera --json --add-nodes dgx-a100:1"));
  ASSERT_EQ(more.status, 0) << more.err;
  json with_more = json::parse(more.out, nullptr, false);
  ASSERT_FALSE(with_more.is_discarded());
  EXPECT_EQ(with_more["results"][0]["placed"], 2);

  // The table, and a cordoned node.
  absl::StatusOr<json> cordoned = api_->Patch(StrCat("/api/v1/nodes/", b), k8s::PatchType::kMerge,
                                              {{"spec", {{"unschedulable", true}}}});
  ASSERT_TRUE(cordoned.ok()) << cordoned.status();
  Ran table = Tessera(StrCat("simulate --from-cluster --workload ", workload, " --policy tessera"));
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("already there: 3 running pods, 1 cordoned nodes"));
  EXPECT_THAT(table.out, HasSubstr("workload: 1 jobs, 2 pods"));

  // --save alone writes the snapshot; bad flags say what to do.
  Ran only_save = Tessera(StrCat("simulate --from-cluster --save ", dir_, "/only.yaml"));
  EXPECT_EQ(only_save.status, 0) << only_save.err;
  EXPECT_THAT(only_save.out, HasSubstr("3 running pods"));
  absl::StatusOr<sim::ClusterFile> only = sim::LoadClusterFile(dir_ + "/only.yaml");
  ASSERT_TRUE(only.ok()) << only.status();
  EXPECT_EQ(only->cordoned, std::vector<std::string>{b});
  Ran no_workload = Tessera("simulate --from-cluster");
  EXPECT_EQ(no_workload.status, 2);
  EXPECT_THAT(no_workload.err, HasSubstr("--from-cluster needs --workload"));
  Ran bad_profile =
      Tessera(StrCat("simulate --from-cluster --workload ", workload, " --add-nodes nope:2"));
  EXPECT_EQ(bad_profile.status, 2);
  EXPECT_THAT(bad_profile.err, HasSubstr("--add-nodes \"nope:2\""));
}

// The Grafana dashboard queries only metrics and labels a running scheduler's /metrics serves.
TEST_F(OperatorTest, DashboardQueriesOnlyServedMetrics) {
  AddNode(NodeObject(NodeName("a")).Gpus(2).Ready());
  StartScheduler();
  AddPod(PodObject(ns_, "p").Limit("tessera.dev/gpu-memory", "4Gi"));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 1; }, seconds(60))) << scheduler_->Log();
  ASSERT_TRUE(scheduler_->WaitForLog("/readyz on http://", seconds(20))) << scheduler_->Log();
  std::smatch m;
  const std::string log = scheduler_->Log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("/readyz on http://127\\.0\\.0\\.1:([0-9]+)")));
  k8s::ClientConfig c;
  c.server = StrCat("http://127.0.0.1:", m[1].str());
  auto client = k8s::ApiClient::Create(c, k8s::ApiClientOptions{"e2e", 1, {}});
  ASSERT_TRUE(client.ok()) << client.status();
  // The per-node gauges appear once the scheduler has published its first node figures.
  k8s::HttpResponse metrics;
  ASSERT_TRUE(WaitUntil(
      [&] {
        metrics = (*client)->Call(k8s::HttpRequest{"GET", "/metrics"});
        return metrics.status == 200 &&
               metrics.body.find("\ntessera_scheduler_gpu_memory_allocated_bytes{") !=
                   std::string::npos;
      },
      seconds(30)))
      << metrics.status << "\n"
      << metrics.body;

  absl::Status lint = ::tessera::testing::PromtoolCheckMetrics(metrics.body);
  EXPECT_TRUE(lint.ok()) << lint;
  // The scheduler's panels here; the agent's are checked on an installed chart
  // (test/helm/helm_install_e2e_test.cc), where agents serve pods.
  const std::vector<std::string> exprs = DashboardQueries();
  ASSERT_GE(exprs.size(), 15u);
  DashboardCheck check = CheckDashboard(exprs, metrics.body, "tessera_scheduler_");
  EXPECT_THAT(check.problems, ::testing::IsEmpty());
  EXPECT_GE(check.metrics.size(), 15u);
}

// `tessera plan defrag --from-cluster` and `plan scale-up --from-cluster` on a known fragmented
// placement, written as the scheduler writes it (spec.nodeName and tessera.dev/assignment): node
// a holds three 20Gi shares on GPUs 0..2, node b one on GPU 0; a 4-GPU pod waits. The only
// one-move plan moves b's share to a; then the pod takes b.
TEST_F(OperatorTest, PlanFromClusterNamesTheMoves) {
  const std::string a = NodeName("a"), b = NodeName("b");
  AddNode(NodeObject(a).Gpus(4).NvSwitch().Cpu("64").Memory("512Gi").Ready());
  AddNode(NodeObject(b).Gpus(4).NvSwitch().Cpu("64").Memory("512Gi").Ready());
  auto share = [](const std::string& node, int gpu) {
    return k8s::testing::OneGpuAssignment(node, gpu, 20480);
  };
  for (int g = 0; g < 3; ++g) {
    AddPod(PodObject(ns_, StrCat("a", g))
               .Limit("tessera.dev/gpu-memory", "20Gi")
               .Controller("ReplicaSet", "infer")
               .Assigned(share(a, g)));
  }
  AddPod(PodObject(ns_, "b0")
             .Limit("tessera.dev/gpu-memory", "20Gi")
             .Controller("ReplicaSet", "infer")
             .Assigned(share(b, 0)));
  AddPod(PodObject(ns_, "big").Limit("tessera.dev/gpu", "4").Controller("Job", "train"));
  const std::string from = StrCat("--from-cluster --scheduler-name ", scheduler_name_,
                                  " --node-selector tessera-e2e/test=", id_);

  Ran json_run = Tessera(StrCat("plan defrag --json ", from));
  ASSERT_EQ(json_run.status, 0) << json_run.out << json_run.err;
  json doc = json::parse(json_run.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << json_run.out;
  EXPECT_EQ(doc["placed"], 4);
  EXPECT_EQ(doc["waiting"], 1);
  ASSERT_EQ(doc["plans"].size(), 1u) << doc.dump(2);
  const json& plan = doc["plans"][0];
  EXPECT_EQ(plan["pods"], json::array({StrCat(ns_, "/big")}));
  EXPECT_EQ(plan["verdict"], "plan") << plan.dump(2);
  EXPECT_TRUE(plan["proven_minimal"]);
  ASSERT_EQ(plan["moves"].size(), 1u) << plan.dump(2);
  EXPECT_EQ(plan["moves"][0]["pod"], StrCat(ns_, "/b0"));
  EXPECT_EQ(plan["moves"][0]["from"]["node"], b);
  EXPECT_EQ(plan["moves"][0]["from"]["gpus"][0]["index"], 0);
  EXPECT_EQ(plan["moves"][0]["to"]["node"], a);
  EXPECT_EQ(plan["moves"][0]["whole_gpus"], 0);
  ASSERT_EQ(plan["placements"].size(), 1u);
  EXPECT_EQ(plan["placements"][0]["node"], b);
  EXPECT_EQ(plan["placements"][0]["gpus"].size(), 4u);

  // The text a person reads says the same.
  Ran text = Tessera(StrCat("plan defrag ", from));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_THAT(text.out,
              HasSubstr(StrCat("1. move ", ns_, "/b0  from ", b, " GPU 0 (20Gi)  to ", a)));
  EXPECT_THAT(text.out, HasSubstr(StrCat("then it goes to: ", b, " GPUs 0,1,2,3")));
  EXPECT_THAT(text.out, HasSubstr("4 running, 1 wait"));

  // Pinning b0 (or a bare pod: nothing would recreate it) leaves three moves on a: over a
  // budget of two.
  Ran pinned = Tessera(StrCat("plan defrag --json --max-moves 2 --pin ", ns_, "/b0 ", from));
  EXPECT_EQ(pinned.status, 3) << pinned.out << pinned.err;
  json p = json::parse(pinned.out, nullptr, false);
  ASSERT_FALSE(p.is_discarded()) << pinned.out;
  EXPECT_EQ(p["plans"][0]["verdict"], "over-budget") << p.dump(2);

  // Scale-up on the same cluster: one hgx-h100 runs the 4-GPU pod.
  std::ofstream(dir_ + "/templates.yaml")
      << "nodes:\n  - name: h100\n    profile: hgx-h100\n  - name: l4\n    gpus: {model: L4, "
         "count: 1}\n    cpu: 16\n    memory: 64Gi\n";
  Ran up = Tessera(StrCat("plan scale-up --json --templates ", dir_, "/templates.yaml ", from));
  ASSERT_EQ(up.status, 0) << up.out << up.err;
  json u = json::parse(up.out, nullptr, false);
  ASSERT_FALSE(u.is_discarded()) << up.out;
  EXPECT_EQ(u["recommended"], "h100") << u.dump(2);
  EXPECT_EQ(u["options"][0]["nodes"], 1);
  EXPECT_EQ(u["options"][0]["pods_placed"], 1);
  EXPECT_EQ(u["options"][1]["pods_placed"], 0);
  EXPECT_EQ(u["spares_per_domain"], 0);

  // A scheduler keeping one hot spare per NVLink domain said so on a (its GPU 3): every domain
  // keeps one here too, so b's four GPUs are not all free and a new node keeps one of its own.
  ASSERT_TRUE(
      api_->Patch(StrCat("/api/v1/nodes/", a), k8s::PatchType::kMerge,
                  {{"metadata",
                    {{"annotations", {{std::string(records::kSpareGpusAnnotation), "3"}}}}}})
          .ok());
  Ran spared = Tessera(StrCat("plan scale-up --json --templates ", dir_, "/templates.yaml ", from));
  ASSERT_EQ(spared.status, 0) << spared.out << spared.err;
  json sp = json::parse(spared.out, nullptr, false);
  ASSERT_FALSE(sp.is_discarded()) << spared.out;
  EXPECT_EQ(sp["spares_per_domain"], 1) << sp.dump(2);
  EXPECT_EQ(sp["recommended"], "h100") << sp.dump(2);
  EXPECT_EQ(sp["options"][0]["nodes"], 1);
  Ran spared_text = Tessera(StrCat("plan scale-up --templates ", dir_, "/templates.yaml ", from));
  EXPECT_THAT(spared_text.out, HasSubstr("hot spares: 1 per NVLink domain"));
  // Defragmentation with the spares kept: b0 is not moved onto a's spare, and since b keeps one
  // of its own, no moves make room for 4 GPUs there: capacity, not moves (before the spares
  // counted, this planned b0's move to a's GPU 3, the spare).
  Ran spared_defrag = Tessera(StrCat("plan defrag --json ", from));
  EXPECT_EQ(spared_defrag.status, 3) << spared_defrag.out << spared_defrag.err;
  json sd = json::parse(spared_defrag.out, nullptr, false);
  ASSERT_FALSE(sd.is_discarded()) << spared_defrag.out;
  EXPECT_EQ(sd["spares_per_domain"], 1) << sd.dump(2);
  EXPECT_EQ(sd["plans"][0]["verdict"], "needs-capacity") << sd.dump(2);
  EXPECT_EQ(sd["plans"][0]["moves"].size(), 0u) << sd.dump(2);
  Ran spared_defrag_text = Tessera(StrCat("plan defrag ", from));
  EXPECT_THAT(spared_defrag_text.out,
              HasSubstr("hot spares: 1 per NVLink domain, as the nodes' tessera.dev/spare-gpus "
                        "show them (no pod is moved onto them; no waiting pod takes them)"));

  // Flags that contradict each other, and a cluster that cannot be read.
  Ran both = Tessera(StrCat("plan defrag --cluster ", dir_, "/templates.yaml ", from));
  EXPECT_EQ(both.status, 2);
  EXPECT_THAT(both.err, HasSubstr("leave out --cluster and --workload"));
  std::ifstream kc(Cp().kubeconfig());
  std::string kubeconfig((std::istreambuf_iterator<char>(kc)), {});
  kubeconfig.replace(kubeconfig.find(Cp().server()), Cp().server().size(), "https://127.0.0.1:1");
  std::ofstream(dir_ + "/nowhere.kubeconfig") << kubeconfig;
  Ran down = Shell(StrCat(TESSERA_BINARY, " plan defrag --from-cluster --kubeconfig ", dir_,
                          "/nowhere.kubeconfig"));
  EXPECT_EQ(down.status, 1) << down.err;
  EXPECT_THAT(down.err, HasSubstr("cannot read the cluster at https://127.0.0.1:1"));
}

// The scheduler's scale-up signal on the real API server: a pod too big for the cluster gets the
// tessera.dev/ScaleUp condition naming the template, and `tessera status` shows it.
TEST_F(OperatorTest, ScaleUpSignalReachesTheStatus) {
  std::ofstream(dir_ + "/config.yaml", std::ios::app)
      << "scaleUp: {templates: [{name: h100, profile: hgx-h100}], interval: 1s}\n";
  AddNode(NodeObject(NodeName("a")).Gpus(4).Cpu("64").Memory("512Gi").Ready());
  StartScheduler();
  AddPod(PodObject(ns_, "big").Limit("tessera.dev/gpu", "8"));
  const std::string want = "adding 1 node of template h100 (8 GPUs) would let it run";
  json s;
  ASSERT_TRUE(WaitUntil(
      [&] {
        s = StatusJson();
        return s["pending"].size() == 1 && s["pending"][0]["scale_up"].is_string() &&
               s["pending"][0]["scale_up"].get<std::string>().find(want) != std::string::npos;
      },
      seconds(60)))
      << s.dump(2) << scheduler_->Log();
  bool condition = false;
  for (const json& p : Pods()) {
    for (const json& c : p["status"].value("conditions", json::array())) {
      if (c["type"] == "tessera.dev/ScaleUp") {
        condition = c["status"] == "True" && c["reason"] == "NodesWouldHelp";
      }
    }
  }
  EXPECT_TRUE(condition);
  Ran text = Tessera(StrCat("status --scheduler-name ", scheduler_name_));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("SCALE-UP SIGNAL"));
  EXPECT_THAT(text.out, HasSubstr(want));
}

// Exec credential plugins and KUBECONFIG=a:b, as EKS/GKE/AKS/OIDC users have them: a plugin
// script (a ServiceAccount's token, refused once to check the renewal on a 401; then a client
// certificate) for `tessera status`, the kubectl plugin and `tessera simulate --from-cluster`.
TEST_F(OperatorTest, ExecCredentialPluginsAndMergedKubeconfigs) {
  AddNode(NodeObject(NodeName("a")).Gpus(2).Ready());
  const std::string token = ServiceAccountToken("exec-admin", "cluster-admin", false);
  ASSERT_FALSE(token.empty());
  std::ofstream(dir_ + "/token") << token;
  const std::string plugin = dir_ + "/get-token";
  std::ofstream(plugin) << StrCat(
      "#!/bin/sh\n"
      "n=$(cat ",
      dir_, "/runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > ", dir_, "/runs\n",
      "echo \"$KUBERNETES_EXEC_INFO\" > ", dir_, "/exec-info.$n\n",
      "if [ $n -eq 1 ]; then t=expired-token; else t=$(cat ", dir_, "/token); fi\n",
      "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"token\":\"%s\",\"expirationTimestamp\":\"2099-01-01T00:00:00Z\"}}' \"$t\"\n");
  std::filesystem::permissions(plugin, std::filesystem::perms::owner_all);
  // File a: the exec user and the current context; file b: the cluster (and a context of its
  // own, which a's current-context overrides).
  const std::string a = dir_ + "/a.kubeconfig";
  std::ofstream(a) << StrCat(
      "apiVersion: v1\nkind: Config\nusers:\n- name: sso\n  user:\n    exec:\n"
      "      apiVersion: client.authentication.k8s.io/v1\n      command: ",
      plugin,
      "\n      args: [--cluster, e2e]\n      interactiveMode: Never\n"
      "      provideClusterInfo: true\ncontexts:\n- name: sso\n  context: {cluster: harness, "
      "user: sso}\ncurrent-context: sso\n");
  const std::string b = Kubeconfig("b.kubeconfig",
                                   StrCat("    client-certificate: ", Cp().client_cert_file(),
                                          "\n    client-key: ", Cp().client_key_file(), "\n"),
                                   "default");
  const std::string env = StrCat("KUBECONFIG=", a, ":", b, " ");
  auto runs = [&] {
    std::ifstream in(dir_ + "/runs");
    int n = 0;
    in >> n;
    return n;
  };

  Ran status = Shell(StrCat(env, TESSERA_BINARY, " status -o json --node ", NodeName("a")));
  ASSERT_EQ(status.status, 0) << status.err;
  json s = json::parse(status.out, nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << status.out;
  EXPECT_EQ(s["server"], Cp().server());
  EXPECT_EQ(s["nodes"].size(), 1u);
  // The first token was refused (401): the plugin ran again, once, and the lists went through.
  EXPECT_EQ(runs(), 2);
  std::ifstream info_file(dir_ + "/exec-info.1");
  json info =
      json::parse(std::string(std::istreambuf_iterator<char>(info_file), {}), nullptr, false);
  ASSERT_FALSE(info.is_discarded());
  EXPECT_EQ(info["apiVersion"], "client.authentication.k8s.io/v1");
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"], Cp().server());
  EXPECT_FALSE(info["spec"]["cluster"]["certificate-authority-data"].get<std::string>().empty());

  // The kubectl plugin, and --from-cluster, with the same credentials.
  const std::string bin_dir = std::filesystem::path(TESSERA_BINARY).parent_path();
  Ran plugin_run =
      Shell(StrCat(env, "PATH=", bin_dir, ":$PATH kubectl tessera status --node ", NodeName("a")));
  ASSERT_EQ(plugin_run.status, 0) << plugin_run.err;
  EXPECT_THAT(plugin_run.out, HasSubstr(StrCat("NODE ", NodeName("a"))));
  std::ofstream(dir_ + "/w.yaml") << "jobs:\n  - {name: one, gpu: {count: 1}}\n";
  Ran sim = Shell(StrCat(env, TESSERA_BINARY, " simulate --from-cluster --workload ", dir_,
                         "/w.yaml --policy tessera -o json"));
  ASSERT_EQ(sim.status, 0) << sim.err;
  EXPECT_THAT(sim.out, HasSubstr("\"placed\": 1"));

  // A plugin that hands out the admin's client certificate instead of a token.
  const std::string certs = dir_ + "/get-cert";
  std::ofstream(certs) << StrCat(
      "#!/bin/sh\n"
      "c=$(awk '{printf \"%s\\\\n\", $0}' ",
      Cp().client_cert_file(), ")\n", "k=$(awk '{printf \"%s\\\\n\", $0}' ", Cp().client_key_file(),
      ")\n",
      "printf "
      "'{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\",\"kind\":\"ExecCredential\","
      "\"status\":{\"clientCertificateData\":\"%s\",\"clientKeyData\":\"%s\"}}' \"$c\" \"$k\"\n");
  std::filesystem::permissions(certs, std::filesystem::perms::owner_all);
  const std::string cert_kc = Kubeconfig(
      "cert.kubeconfig",
      StrCat("    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: ", certs,
             "}\n"),
      "default");
  Ran with_cert = Shell(
      StrCat(TESSERA_BINARY, " status -o json --kubeconfig ", cert_kc, " --node ", NodeName("a")));
  ASSERT_EQ(with_cert.status, 0) << with_cert.err;

  // A plugin that fails: exit 1, and the message names it.
  const std::string broken = dir_ + "/broken";
  std::ofstream(broken) << "#!/bin/sh\necho 'no SSO session: run aws sso login' >&2\nexit 3\n";
  std::filesystem::permissions(broken, std::filesystem::perms::owner_all);
  const std::string broken_kc =
      Kubeconfig("broken.kubeconfig",
                 StrCat("    exec: {apiVersion: client.authentication.k8s.io/v1, command: ", broken,
                        ", interactiveMode: Never}\n"),
                 "default");
  Ran failed = Shell(StrCat(TESSERA_BINARY, " status --kubeconfig ", broken_kc));
  EXPECT_EQ(failed.status, 1);
  EXPECT_THAT(failed.err, HasSubstr("no SSO session"));  // the plugin's own stderr
  EXPECT_THAT(failed.err, HasSubstr(StrCat("exec credential plugin ", broken)));
  EXPECT_THAT(failed.err, HasSubstr("failed with exit code 3"));
}

// A user whose RBAC covers one namespace: `status -n` lists only its pods (no nodes), and
// `explain` answers for its pods.
TEST_F(OperatorTest, NamespaceScopedUserSeesItsOwnPods) {
  AddNode(NodeObject(NodeName("a")).Gpus(2).Cpu("64").Memory("512Gi").Ready());
  StartScheduler();
  AddPod(PodObject(ns_, "mine").Limit("tessera.dev/gpu-memory", "10Gi"));
  AddPod(PodObject(StrCat(ns_, "-other"), "theirs").Limit("tessera.dev/gpu-memory", "20Gi"),
         StrCat(ns_, "-other"));
  AddPod(PodObject(ns_, "huge").Limit("tessera.dev/gpu", "8"));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 2; }, seconds(60))) << scheduler_->Log();
  const std::string huge = StrCat(ns_, "/huge");
  ASSERT_TRUE(WaitUntil([&] { return !UnschedulableMessage(huge).empty(); }, seconds(30)));
  const std::string token = ServiceAccountToken("viewer", "", true);
  const std::string kc = Kubeconfig("viewer.kubeconfig", StrCat("    token: ", token, "\n"), ns_);

  Ran ns_status = Shell(StrCat(TESSERA_BINARY, " status -n ", ns_, " --json --scheduler-name ",
                               scheduler_name_, " --kubeconfig ", kc));
  ASSERT_EQ(ns_status.status, 0) << ns_status.err;
  json s = json::parse(ns_status.out, nullptr, false);
  ASSERT_FALSE(s.is_discarded()) << ns_status.out;
  EXPECT_EQ(s["pods_namespace"], ns_);
  EXPECT_THAT(s["nodes_error"].get<std::string>(), HasSubstr("403"));
  EXPECT_TRUE(s["nodes"].empty());
  ASSERT_EQ(s["running"].size(), 1u) << s.dump(2);
  EXPECT_EQ(s["running"][0]["pod"], StrCat(ns_, "/mine"));
  EXPECT_EQ(s["running"][0]["node"], NodeName("a"));
  EXPECT_EQ(s["running"][0]["gpus"][0]["memory_mib"], 10240);
  ASSERT_EQ(s["pending"].size(), 1u);
  EXPECT_EQ(s["pending"][0]["reason"], UnschedulableMessage(huge));
  Ran text = Shell(StrCat(TESSERA_BINARY, " status -n ", ns_, " --scheduler-name ", scheduler_name_,
                          " --kubeconfig ", kc));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Nodes cannot be read"));
  EXPECT_THAT(text.out, HasSubstr(StrCat(ns_, "/mine")));
  EXPECT_THAT(text.out, ::testing::Not(HasSubstr("theirs")));
  // Without -n the user may not list pods: exit 1, saying so.
  Ran all = Shell(StrCat(TESSERA_BINARY, " status --kubeconfig ", kc));
  EXPECT_EQ(all.status, 1);
  EXPECT_THAT(all.err, HasSubstr("403"));

  // explain, as that user: the scheduler's word; what it could not read is said.
  Ran why = Shell(StrCat(TESSERA_BINARY, " explain pod huge -o json --scheduler-name ",
                         scheduler_name_, " --kubeconfig ", kc));
  ASSERT_EQ(why.status, 0) << why.err;
  json e = json::parse(why.out, nullptr, false);
  ASSERT_FALSE(e.is_discarded()) << why.out;
  EXPECT_EQ(e["pod"], huge);
  EXPECT_EQ(e["summary"], UnschedulableMessage(huge));
  EXPECT_EQ(e["scheduled"]["reason"], "Unschedulable");
  EXPECT_FALSE(e["unreadable"].empty());
}

// `tessera explain pod`: the scheduler's reason and the queue position; the engine's what-if
// where the scheduler left nothing; a gang short of members. Also as `kubectl tessera explain`.
TEST_F(OperatorTest, ExplainSaysWhyAPodWaits) {
  AddNode(NodeObject(NodeName("a")).Gpus(2).Cpu("64").Memory("512Gi").Ready());
  StartScheduler();
  AddPod(PodObject(ns_, "huge").Limit("tessera.dev/gpu", "8"));
  const std::string huge = StrCat(ns_, "/huge");
  ASSERT_TRUE(WaitUntil([&] { return !UnschedulableMessage(huge).empty(); }, seconds(30)))
      << scheduler_->Log();
  auto explain = [&](const std::string& pod) {
    Ran r = Tessera(StrCat("explain pod ", pod, " -o json --scheduler-name ", scheduler_name_));
    EXPECT_EQ(r.status, 0) << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out;
    return j;
  };
  json e = explain(huge);
  EXPECT_EQ(e["summary"], UnschedulableMessage(huge));
  EXPECT_EQ(e["queue"]["position"], 1);
  EXPECT_EQ(e["queue"]["waiting_pods"], 1);
  bool failed_event = false;
  for (const json& ev : e["events"]) failed_event |= ev["reason"] == "FailedScheduling";
  EXPECT_TRUE(failed_event) << e.dump(2);

  // The scheduler stops: a new pod has no word from it; the engine says where it would go.
  scheduler_.reset();
  AddPod(PodObject(ns_, "late").Limit("tessera.dev/gpu", "1"));
  e = explain(StrCat(ns_, "/late"));
  EXPECT_TRUE(e["what_if"]["fits"]) << e.dump(2);
  EXPECT_THAT(e["summary"].get<std::string>(), HasSubstr("has not tried it yet"));
  EXPECT_EQ(e["queue"]["waiting_pods"], 2);
  AddPod(PodObject(ns_, "w-0").Limit("tessera.dev/gpu", "1").Gang("train", 2));
  e = explain(StrCat(ns_, "/w-0"));
  EXPECT_THAT(e["summary"].get<std::string>(), HasSubstr("gang train has 1 of the 2 members"));

  const std::string bin_dir = std::filesystem::path(TESSERA_BINARY).parent_path();
  Ran plugin =
      Shell(StrCat("PATH=", bin_dir, ":$PATH kubectl tessera explain pod late -n ", ns_,
                   " --scheduler-name ", scheduler_name_, " --kubeconfig ", Cp().kubeconfig()));
  ASSERT_EQ(plugin.status, 0) << plugin.err;
  EXPECT_THAT(plugin.out, HasSubstr("WHAT-IF"));
  Ran missing = Tessera(StrCat("explain pod ", ns_, "/nope"));
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.err, HasSubstr(StrCat("pod ", ns_, "/nope not found")));
  Ran bad = Tessera("explain pod a/b/c");
  EXPECT_EQ(bad.status, 2);
}

// `tessera simulate --from-cluster -f`: the user's own manifests as the workload.
TEST_F(OperatorTest, SimulateFromClusterTakesTheUsersManifests) {
  AddNode(NodeObject(NodeName("a")).Gpus(2).Cpu("64").Memory("512Gi").Ready());
  AddPod(PodObject(ns_, "held")
             .Limit("tessera.dev/gpu", "1")
             .Assigned(k8s::testing::GpuAssignment(NodeName("a"), {0}, 81920, 1000, true)));
  std::ofstream(dir_ + "/app.yaml") << R"(apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  template:
    spec:
      schedulerName: tessera
      containers: [{name: c, resources: {limits: {tessera.dev/gpu-memory: 30Gi}}}]
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec: {ports: [{port: 80}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train, namespace: ml}
spec:
  parallelism: 2
  template:
    spec:
      schedulerName: tessera
      containers: [{name: c, resources: {limits: {tessera.dev/gpu: 1}}}]
)";
  Ran r =
      Tessera(StrCat("simulate --from-cluster -f ", dir_, "/app.yaml --policy tessera -o json"));
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  // GPU 1 is free: the two 30Gi shares fit on it, the Job's two whole GPUs do not.
  const json& res = j["results"][0];
  EXPECT_EQ(res["placed"], 2) << res.dump(2);
  EXPECT_EQ(res["pending"], 2);
  EXPECT_THAT(r.err, HasSubstr("skipped Service web"));
  Ran text = Tessera(StrCat("simulate --from-cluster -f ", dir_, "/app.yaml --policy tessera"));
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("workload: 2 jobs, 4 pods"));
  std::ofstream(dir_ + "/bad.yaml") << "kind: Deployment\nmetadata: {name: d}\nspec: {}\n";
  Ran bad = Tessera(StrCat("simulate --from-cluster -f ", dir_, "/bad.yaml"));
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("bad.yaml:1 (Deployment d): no pod template"));
}

// `tessera doctor` on a cluster set up as an install leaves it (a namespace, the scheduler's and
// the agent's pods, a GPU node publishing its inventory): clean, then each fault planted.
TEST_F(OperatorTest, DoctorFindsEachPlantedFault) {
  const std::string tns = StrCat(ns_, "-sys");
  ASSERT_TRUE(Cp().KubectlOk({"create", "namespace", tns}).ok());
  ASSERT_TRUE(
      Cp().KubectlOk({"label", "namespace", tns, "pod-security.kubernetes.io/enforce=privileged"})
          .ok());
  const std::string node = NodeName("gpu");
  AddNode(NodeObject(node).Gpus(2).Ready().Label("tessera.dev/gpu-node", "true"));
  auto component = [&](const std::string& name, const std::string& role, const std::string& image,
                       const std::string& on) {
    json pod = {{"apiVersion", "v1"},
                {"kind", "Pod"},
                {"metadata", {{"name", name}, {"namespace", tns}}},
                {"spec",
                 {{"nodeName", on},
                  {"containers", {{{"name", "c"}, {"image", image}, {"args", {role}}}}}}}};
    absl::StatusOr<json> made = api_->Create(StrCat("/api/v1/namespaces/", tns, "/pods"), pod);
    ASSERT_TRUE(made.ok()) << made.status();
    // No kubelet runs these Node objects: the test says the pods run, as a kubelet would.
    absl::StatusOr<json> running =
        api_->Patch(StrCat("/api/v1/namespaces/", tns, "/pods/", name, "/status"),
                    k8s::PatchType::kMerge, {{"status", {{"phase", "Running"}}}});
    ASSERT_TRUE(running.ok()) << running.status();
  };
  component("scheduler-0", "scheduler", "tessera:0.2.0", node);
  component("agent-0", "agent", "tessera:0.2.0", node);
  auto doctor = [&](const std::string& extra, int want) {
    Ran r = Tessera(StrCat("doctor --namespace ", tns, " -o json ", extra));
    EXPECT_EQ(r.status, want) << r.out << r.err;
    json j = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.out << r.err;
    return j;
  };
  auto find = [](const json& report, const std::string& check, const std::string& severity) {
    for (const json& f : report["findings"]) {
      if (f["check"] == check && f["severity"] == severity) return f;
    }
    return json();
  };
  json clean = doctor("", 0);
  EXPECT_EQ(clean["errors"], 0) << clean.dump(2);
  EXPECT_EQ(clean["warnings"], 0) << clean.dump(2);
  EXPECT_FALSE(find(clean, "kubernetes-version", "ok").is_null());

  // Planted: another device plugin on the node, a baseline namespace, a second agent on another
  // image, and a GPU node without an inventory.
  ASSERT_TRUE(api_->Patch(StrCat("/api/v1/nodes/", node, "/status"), k8s::PatchType::kMerge,
                          {{"status",
                            {{"allocatable", {{"nvidia.com/gpu", "2"}}},
                             {"capacity", {{"nvidia.com/gpu", "2"}}}}}})
                  .ok());
  ASSERT_TRUE(Cp().KubectlOk({"label", "namespace", tns,
                              "pod-security.kubernetes.io/enforce=baseline", "--overwrite"})
                  .ok());
  AddNode(NodeObject(NodeName("bare")).Ready().Label("tessera.dev/gpu-node", "true"));
  component("agent-1", "agent", "tessera:0.1.0", NodeName("bare"));
  json faulty = doctor("", 4);
  EXPECT_EQ(find(faulty, "other-device-plugin", "error")["object"], StrCat("node/", node))
      << faulty.dump(2);
  EXPECT_THAT(find(faulty, "pod-security", "error")["fix"].get<std::string>(),
              HasSubstr(StrCat("kubectl label namespace ", tns,
                               " pod-security.kubernetes.io/enforce=privileged --overwrite")));
  EXPECT_THAT(find(faulty, "version-skew", "warning")["what"].get<std::string>(),
              HasSubstr("tessera:0.1.0"));
  EXPECT_EQ(find(faulty, "inventory", "error")["object"], StrCat("node/", NodeName("bare")));
  Ran text = Tessera(StrCat("doctor --namespace ", tns));
  EXPECT_EQ(text.status, 4);
  EXPECT_THAT(text.out, HasSubstr("ERROR other-device-plugin"));
  EXPECT_THAT(text.out, HasSubstr("fix: kubectl label node"));

  // DRA mode on this API server: resource.k8s.io/v1 and the gates are on; the DeviceClasses are
  // missing until applied.
  json dra = doctor("--mode dra", 4);
  EXPECT_FALSE(find(dra, "dra-api", "ok").is_null()) << dra.dump(2);
  EXPECT_FALSE(find(dra, "device-classes", "error").is_null());
  EXPECT_EQ(find(dra, "feature-gates", "warning"), json()) << dra.dump(2);

  // The kubectl plugin, and a namespace that does not exist.
  const std::string bin_dir = std::filesystem::path(TESSERA_BINARY).parent_path();
  Ran plugin = Shell(StrCat("PATH=", bin_dir, ":$PATH kubectl tessera doctor --namespace nope-",
                            id_, " --kubeconfig ", Cp().kubeconfig()));
  EXPECT_EQ(plugin.status, 4) << plugin.err;
  EXPECT_THAT(plugin.out, HasSubstr(StrCat("namespace nope-", id_, " does not exist")));
  (void)Cp().Kubectl({"delete", "namespace", tns, "--wait=false"});
}
}  // namespace
}  // namespace tessera::e2e
