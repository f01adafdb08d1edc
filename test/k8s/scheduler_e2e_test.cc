// `tessera scheduler` as a process against the real API server (one control plane for this
// binary; see test/controlplane/controlplane.h). Nodes are plain Node objects with status and the
// tessera.dev/gpu-inventory annotation; there is no kubelet, so pods never run: they are bound,
// and what the scheduler decided is read back from their tessera.dev/assignment annotations.
//
// Each test has its own namespace, scheduler name, node label (the scheduler's --node-selector)
// and Lease, so tests cannot see each other's pods or nodes; TearDown kills the schedulers it
// started and deletes its pods and nodes.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "controlplane/controlplane.h"
#include "core/model/mig.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "scoped_process.h"

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

std::string TestId() {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::string id;
  for (char c : name) {
    if (std::isupper(static_cast<unsigned char>(c)) && !id.empty()) id += '-';
    id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  id = id.substr(0, 40);
  while (!id.empty() && id.back() == '-') id.pop_back();
  return id;
}

// One GPU of a node, as assignments name it.
using GpuKey = std::pair<std::string, int>;

struct GpuUse {
  int64_t memory_mib = 0;
  int64_t compute_milli = 0;
  int exclusive = 0;
  int pods = 0;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = k8s::ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    id_ = TestId();
    ns_ = StrCat("e2e-", id_);
    scheduler_name_ = StrCat("tessera-", id_);
    dir_ = StrCat(::testing::TempDir(), "/tessera-e2e-", getpid(), "-", id_);
    std::filesystem::create_directories(dir_);
    absl::StatusOr<json> created =
        api_->Create("/api/v1/namespaces",
                     {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok() || created.status().code() == absl::StatusCode::kAlreadyExists)
        << created.status();
    WriteConfig("");
  }

  void TearDown() override {
    schedulers_.clear();  // SIGKILL and reap
    if (api_) {
      (void)api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods?gracePeriodSeconds=0"));
      (void)api_->Delete(StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", ns_, "/podgroups"));
      (void)api_->Delete(StrCat("/api/v1/nodes?labelSelector=",
                                k8s::QueryEscape(StrCat("tessera-e2e/test=", id_))));
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // The scheduler's configuration: this test's scheduler name, nodes and Lease, short timings.
  // The agent marks GPU `gpu` of `node` (`gpus` GPUs on an NVSwitch) unhealthy in its inventory
  // (an XID 79), as its fault policy does.
  absl::Status GpuFails(const std::string& node, int gpus, int gpu) {
    return api_
        ->Patch(StrCat("/api/v1/nodes/", node), k8s::PatchType::kMerge,
                {{"metadata",
                  {{"annotations",
                    {{"tessera.dev/gpu-inventory",
                      NodeObject(node)
                          .Gpus(gpus)
                          .NvSwitch()
                          .Unhealthy(gpu, {79}, "XID 79: fallen off the bus")
                          .InventoryJson()}}}}}})
        .status();
  }
  void WriteConfig(const std::string& extra) {
    std::ofstream(dir_ + "/config.yaml") << StrCat(R"(apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: )",
                                                   scheduler_name_, R"(
nodeSelector: "tessera-e2e/test=)",
                                                   id_, R"("
leaderElection:
  resourceNamespace: )",
                                                   ns_, R"(
  resourceName: tessera-scheduler
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 500ms
metrics: {bindAddress: 127.0.0.1, port: 0}
retry: {minInterval: 200ms, period: 5s}
)",
                                                   extra);
  }

  ScopedProcess* StartScheduler(const std::string& identity,
                                std::vector<std::string> extra_args = {},
                                const std::string& kubeconfig = "",
                                const std::string& config = "") {
    std::vector<std::string> argv = {
        TESSERA_BINARY, "scheduler",
        "--kubeconfig", kubeconfig.empty() ? Cp().kubeconfig() : kubeconfig,
        "--config",     config.empty() ? dir_ + "/config.yaml" : config,
        "--identity",   identity};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start(argv, StrCat(dir_, "/", identity, ".log"));
    EXPECT_TRUE(p.ok()) << p.status();
    schedulers_.push_back(std::move(*p));
    return schedulers_.back().get();
  }

  // The port the scheduler logged for /metrics.
  int MetricsPort(const ScopedProcess& p) {
    EXPECT_TRUE(p.WaitForLog("/readyz on http://", seconds(20))) << p.Log();
    std::smatch m;
    std::string log = p.Log();
    if (!std::regex_search(log, m, std::regex("/readyz on http://127\\.0\\.0\\.1:([0-9]+)"))) {
      ADD_FAILURE() << "no metrics port in the log:\n" << log;
      return 0;
    }
    return std::stoi(m[1]);
  }

  // GET on the scheduler's HTTP endpoint: (status, body).
  std::pair<long, std::string> HttpGet(int port, const std::string& path) {
    k8s::ClientConfig c;
    c.server = StrCat("http://127.0.0.1:", port);
    auto client = k8s::ApiClient::Create(c, k8s::ApiClientOptions{"e2e", 1, {}});
    k8s::HttpResponse r = (*client)->Call(k8s::HttpRequest{"GET", path});
    return {r.status, r.body};
  }

  // The value of one metric line (exact name with labels), or -1.
  double Metric(int port, const std::string& series) {
    std::string text = HttpGet(port, "/metrics").second;
    if (!text.empty()) {
      // promtool passes on every /metrics the tests scrape.
      absl::Status lint = ::tessera::testing::PromtoolCheckMetricsOnce(text);
      EXPECT_TRUE(lint.ok()) << lint;
    }
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
    }
    return -1;
  }

  void AddNode(NodeObject node) {
    node.Label("tessera-e2e/test", id_);
    json j = node.Json();
    json status = j["status"];
    j.erase("status");
    absl::StatusOr<json> created = api_->Create("/api/v1/nodes", j);
    ASSERT_TRUE(created.ok()) << created.status();
    // Capacity and allocatable go through the status subresource, as a kubelet writes them.
    absl::StatusOr<json> patched =
        api_->Patch(StrCat("/api/v1/nodes/", std::string(j["metadata"]["name"]), "/status"),
                    k8s::PatchType::kMerge, {{"status", status}});
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  std::string NodeName(const std::string& base) { return StrCat(id_.substr(0, 20), "-", base); }

  void AddPod(PodObject pod) {
    pod.Scheduler(scheduler_name_);
    absl::StatusOr<json> created =
        api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), pod.Json());
    ASSERT_TRUE(created.ok()) << created.status();
  }
  PodObject Pod(const std::string& name) { return PodObject(ns_, name); }

  json Pods() {
    absl::StatusOr<json> list = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/pods"));
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? (*list)["items"] : json::array();
  }
  json GetPod(const std::string& name) {
    absl::StatusOr<json> p = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/pods/", name));
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : json();
  }
  static bool IsBound(const json& pod) {
    return !pod["spec"].value("nodeName", std::string()).empty();
  }
  int BoundCount() {
    int n = 0;
    for (const json& p : Pods()) n += IsBound(p) ? 1 : 0;
    return n;
  }
  bool WaitBound(int n, milliseconds timeout) {
    return WaitUntil([&] { return BoundCount() >= n; }, timeout);
  }

  // The assignment of every bound pod; checks it names the pod's node.
  std::map<std::string, records::Assignment> Assignments() {
    std::map<std::string, records::Assignment> out;
    for (const json& p : Pods()) {
      if (!IsBound(p)) continue;
      std::string name = p["metadata"]["name"];
      const json& ann = p["metadata"].value("annotations", json::object());
      auto it = ann.find("tessera.dev/assignment");
      if (it == ann.end()) {
        ADD_FAILURE() << "pod " << name << " is bound without an assignment";
        continue;
      }
      absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(it->get<std::string>());
      if (!a.ok()) {
        ADD_FAILURE() << name << ": " << a.status();
        continue;
      }
      EXPECT_EQ(a->node, p["spec"]["nodeName"]) << name;
      out[name] = *a;
    }
    return out;
  }

  // Sums what the assignments grant on each GPU; fails on any over-commitment of the 80Gi GPUs.
  std::map<GpuKey, GpuUse> CheckNoOvercommit(const std::map<std::string, records::Assignment>& as) {
    std::map<GpuKey, GpuUse> use;
    for (const auto& [pod, a] : as) {
      for (const records::AssignedGpu& g : a.gpus) {
        GpuUse& u = use[{a.node, g.grant.gpu}];
        u.memory_mib += g.grant.memory_mib;
        u.compute_milli += g.grant.compute_milli;
        u.exclusive += g.grant.exclusive ? 1 : 0;
        ++u.pods;
        EXPECT_EQ(g.uuid, StrCat("GPU-", a.node, "-", g.grant.gpu)) << pod;
      }
    }
    for (const auto& [gpu, u] : use) {
      EXPECT_LE(u.memory_mib, 81920) << gpu.first << "/" << gpu.second;
      EXPECT_LE(u.compute_milli, 1000) << gpu.first << "/" << gpu.second;
      if (u.exclusive > 0) {
        EXPECT_EQ(u.pods, 1) << gpu.first << "/" << gpu.second << " is exclusive and shared";
      }
    }
    return use;
  }

  json Lease() {
    absl::StatusOr<json> l = api_->Get(
        StrCat("/apis/coordination.k8s.io/v1/namespaces/", ns_, "/leases/tessera-scheduler"));
    return l.ok() ? *l : json();
  }
  std::string LeaseHolder() {
    json l = Lease();
    return l.is_null() ? "" : l["spec"].value("holderIdentity", "");
  }

  json EventsFor(const std::string& pod) {
    absl::StatusOr<json> list = api_->Get(
        StrCat("/api/v1/namespaces/", ns_,
               "/events?fieldSelector=", k8s::QueryEscape(StrCat("involvedObject.name=", pod))));
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? (*list)["items"] : json::array();
  }
  // The PodScheduled condition's (status, reason, message).
  std::tuple<std::string, std::string, std::string> Scheduled(const json& pod) {
    for (const json& c : pod["status"].value("conditions", json::array())) {
      if (c["type"] == "PodScheduled") {
        return {c.value("status", ""), c.value("reason", ""), c.value("message", "")};
      }
    }
    return {"", "", ""};
  }

  // The body of the two LostGangMember tests (pod_group: the gang is an upstream PodGroup).
  void ReplacesALostGangMemberBesideTheSurvivors(bool pod_group);

  std::unique_ptr<k8s::ApiClient> api_;
  std::string id_, ns_, scheduler_name_, dir_;
  std::vector<std::unique_ptr<ScopedProcess>> schedulers_;
};

// The reality check as real pods: 20 inference pods of 4Gi and a gang of 8 one-GPU pods that must
// share one NVLink domain, on an 8-GPU NVSwitch node and a 2-GPU PCIe node.
TEST_F(SchedulerTest, RealityCheck) {
  const std::string nvswitch = NodeName("nvswitch"), pcie = NodeName("pcie");
  AddNode(NodeObject(nvswitch).Gpus(8).NvSwitch().Cpu("128").Memory("1Ti"));
  AddNode(NodeObject(pcie).Gpus(2).Cpu("32").Memory("256Gi"));
  ScopedProcess* s = StartScheduler("rc");
  for (int i = 0; i < 20; ++i) {
    AddPod(Pod(StrCat("inference-", i))
               .Limit("tessera.dev/gpu-memory", "4Gi")
               .Request("cpu", "1")
               .Request("memory", "8Gi"));
  }
  for (int i = 0; i < 8; ++i) {
    AddPod(Pod(StrCat("train-", i))
               .Limit("tessera.dev/gpu", "1")
               .Request("cpu", "8")
               .Request("memory", "64Gi")
               .Gang("train", 8, "nvlink-domain"));
  }
  ASSERT_TRUE(WaitBound(28, seconds(60))) << BoundCount() << " of 28 bound\n" << s->Log();
  auto assignments = Assignments();
  ASSERT_EQ(assignments.size(), 28u);
  std::set<GpuKey> inference_gpus;
  std::set<GpuKey> train_gpus;
  for (const auto& [pod, a] : assignments) {
    ASSERT_EQ(a.gpus.size(), 1u) << pod;
    GpuKey k{a.node, a.gpus[0].grant.gpu};
    if (pod.rfind("inference-", 0) == 0) {
      EXPECT_EQ(a.gpus[0].grant.memory_mib, 4096) << pod;
      EXPECT_FALSE(a.gpus[0].grant.exclusive) << pod;
      inference_gpus.insert(k);
    } else {
      EXPECT_EQ(a.node, nvswitch) << pod;
      EXPECT_TRUE(a.gpus[0].grant.exclusive) << pod;
      train_gpus.insert(k);
    }
  }
  EXPECT_EQ(inference_gpus.size(), 1u) << "the 20 inference pods share one GPU";
  EXPECT_EQ(train_gpus.size(), 8u) << "the gang has 8 distinct GPUs of the NVSwitch node";
  auto use = CheckNoOvercommit(assignments);
  EXPECT_EQ(use[*inference_gpus.begin()].memory_mib, 20 * 4096);
  // The metrics say the same.
  int port = MetricsPort(*s);
  EXPECT_EQ(Metric(port, "tessera_scheduler_pods_scheduled_total"), 28);
  auto allocated = [&] {  // published about once a second
    return Metric(port,
                  StrCat("tessera_scheduler_gpu_memory_allocated_bytes{node=\"", nvswitch, "\"}")) +
           Metric(port,
                  StrCat("tessera_scheduler_gpu_memory_allocated_bytes{node=\"", pcie, "\"}"));
  };
  EXPECT_TRUE(WaitUntil([&] { return allocated() == (8 * 81920 + 20 * 4096) * (int64_t{1} << 20); },
                        seconds(5)))
      << allocated();
  EXPECT_EQ(HttpGet(port, "/healthz"), std::make_pair(200L, std::string("ok")));
  EXPECT_EQ(HttpGet(port, "/readyz").first, 200L);
}

// SIGKILL while pods stream in and are bound; a new process finishes the job. Every pod ends
// bound, with an assignment naming its node, and no GPU is granted twice.
TEST_F(SchedulerTest, RestartAfterSigkillNeverDoubleAllocates) {
  for (int n = 0; n < 20; ++n) AddNode(NodeObject(NodeName(StrCat("n", n))).Gpus(8).NvSwitch());
  const int whole = 120, shares = 40;  // 120 GPUs + 10 shared of 160
  std::atomic<int> created{0};
  std::thread creator([&] {
    for (int i = 0; i < whole + shares; ++i) {
      PodObject p = i % 4 == 3 ? Pod(StrCat("share-", i)).Limit("tessera.dev/gpu-memory", "20Gi")
                               : Pod(StrCat("whole-", i)).Limit("tessera.dev/gpu", "1");
      p.Scheduler(scheduler_name_);
      absl::StatusOr<json> r = api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), p.Json());
      EXPECT_TRUE(r.ok()) << r.status();
      ++created;
      std::this_thread::sleep_for(milliseconds(15));
    }
  });
  ScopedProcess* first = StartScheduler("first");
  bool some_bound = WaitUntil([&] { return BoundCount() >= 30; }, seconds(60));
  first->Signal(SIGKILL);
  EXPECT_EQ(first->Wait(seconds(10)), 128 + SIGKILL);
  int bound_at_kill = BoundCount();
  ASSERT_TRUE(some_bound) << first->Log();
  ScopedProcess* second = StartScheduler("second");
  creator.join();
  EXPECT_LT(bound_at_kill, whole + shares) << "the kill came after everything was bound";
  ASSERT_TRUE(WaitBound(whole + shares, seconds(90))) << BoundCount() << " bound\n"
                                                      << second->Log();
  auto assignments = Assignments();
  EXPECT_EQ(assignments.size(), static_cast<size_t>(whole + shares));
  auto use = CheckNoOvercommit(assignments);
  int exclusive = 0;
  for (const auto& [gpu, u] : use) exclusive += u.exclusive;
  EXPECT_EQ(exclusive, whole);
  // The second process restored what the first bound (its metric counts only its own binds).
  int port = MetricsPort(*second);
  EXPECT_EQ(Metric(port, "tessera_scheduler_pods_scheduled_total"), whole + shares - bound_at_kill);
  EXPECT_EQ(Metric(port, "tessera_scheduler_restore_failures_total"), 0);
}

TEST_F(SchedulerTest, GangIsAllOrNothing) {
  AddNode(NodeObject(NodeName("a")).Gpus(4).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(4).NvSwitch());
  ScopedProcess* s = StartScheduler("gang");
  for (int i = 0; i < 6; ++i) {
    AddPod(Pod(StrCat("g-", i)).Limit("tessera.dev/gpu", "1").Gang("six", 6, "nvlink-domain"));
  }
  // Six GPUs are free but no NVLink domain has six: nothing is bound, all six say why.
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& p : Pods()) {
          if (std::get<1>(Scheduled(p)) != "Unschedulable") return false;
        }
        return true;
      },
      seconds(30)))
      << s->Log();
  EXPECT_EQ(BoundCount(), 0);
  EXPECT_THAT(std::get<2>(Scheduled(GetPod("g-0"))), HasSubstr("six"));
  // A node with a big enough domain arrives: the whole gang goes there, together.
  const std::string big = NodeName("big");
  AddNode(NodeObject(big).Gpus(8).NvSwitch());
  ASSERT_TRUE(WaitBound(6, seconds(30))) << s->Log();
  for (const auto& [pod, a] : Assignments()) EXPECT_EQ(a.node, big) << pod;
}

// An upstream PodGroup (scheduling.k8s.io/v1beta1, this binary's API server runs with the
// GenericWorkload gate) with a gang of 6 in one NVLink domain: its pods wait for the PodGroup,
// then for a domain with room (none binds; the PodGroup's PodGroupInitiallyScheduled condition
// says Unschedulable), then all six bind there together and the condition says Scheduled.
TEST_F(SchedulerTest, PodGroupGangIsAllOrNothingAndItsConditionIsWritten) {
  AddNode(NodeObject(NodeName("a")).Gpus(4).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(4).NvSwitch());
  ScopedProcess* s = StartScheduler("podgroup");
  for (int i = 0; i < 6; ++i) {
    AddPod(Pod(StrCat("w-", i)).Limit("tessera.dev/gpu", "1").PodGroup("train"));
  }
  // No PodGroup yet: the pods wait, and say for what.
  ASSERT_TRUE(WaitUntil(
      [&] {
        return std::get<2>(Scheduled(GetPod("w-5"))).find("waiting for PodGroup") !=
               std::string::npos;
      },
      seconds(30)))
      << s->Log();
  const std::string groups =
      StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", ns_, "/podgroups");
  absl::StatusOr<json> created = api_->Create(
      groups, k8s::testing::PodGroupJson(ns_, "train", 6, "tessera.dev/nvlink-domain"));
  ASSERT_TRUE(created.ok()) << created.status();
  auto condition = [&]() -> json {
    absl::StatusOr<json> g = api_->Get(StrCat(groups, "/train"));
    // An empty object until the condition is written (value() throws on null).
    if (!g.ok()) return json::object();
    for (const json& c : g->value("status", json::object()).value("conditions", json::array())) {
      if (c["type"] == "PodGroupInitiallyScheduled") return c;
    }
    return json::object();
  };
  // Six GPUs are free but no NVLink domain has six: nothing binds, the PodGroup says why.
  ASSERT_TRUE(WaitUntil([&] { return condition().value("status", "") == "False"; }, seconds(30)))
      << s->Log();
  EXPECT_EQ(condition()["reason"], "Unschedulable");
  EXPECT_EQ(BoundCount(), 0);
  const std::string big = NodeName("big");
  AddNode(NodeObject(big).Gpus(8).NvSwitch());
  ASSERT_TRUE(WaitBound(6, seconds(30))) << s->Log();
  for (const auto& [pod, a] : Assignments()) {
    EXPECT_EQ(a.node, big) << pod;
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(a.gang->name, "train");
    EXPECT_EQ(a.gang->min, 6);
  }
  ASSERT_TRUE(WaitUntil([&] { return condition().value("status", "") == "True"; }, seconds(30)))
      << s->Log();
  EXPECT_EQ(condition()["reason"], "Scheduled");
  EXPECT_EQ(condition()["message"], StrCat("6 pods of gang ", ns_, "/train scheduled together"));
}

// minCount is mutable in scheduling.k8s.io/v1beta1 ("to support workload scaling"; applied in
// later cycles, never to pods already placed): a gang PodGroup of minCount 6 on one 4-GPU NVLink
// domain binds nothing; lowered to 4 while its pods wait, 4 start together in the domain and the
// other 2 wait to grow it; raised to 6 again, the 4 running are left as they are (nothing is
// evicted) and the 2 still wait.
TEST_F(SchedulerTest, APodGroupsMinCountPatchedWhileItWaitsResizesItsGang) {
  const std::string a = NodeName("a");
  AddNode(NodeObject(a).Gpus(4).NvSwitch());
  ScopedProcess* s = StartScheduler("resize");
  const std::string groups =
      StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", ns_, "/podgroups");
  absl::StatusOr<json> created = api_->Create(
      groups, k8s::testing::PodGroupJson(ns_, "train", 6, "tessera.dev/nvlink-domain"));
  ASSERT_TRUE(created.ok()) << created.status();
  for (int i = 0; i < 6; ++i) {
    AddPod(Pod(StrCat("w-", i)).Limit("tessera.dev/gpu", "1").PodGroup("train"));
  }
  auto said = [&](const std::string& pod, const std::string& text) {
    return std::get<2>(Scheduled(GetPod(pod))).find(text) != std::string::npos;
  };
  ASSERT_TRUE(WaitUntil([&] { return said("w-5", "gang"); }, seconds(30))) << s->Log();
  std::this_thread::sleep_for(seconds(2));  // a retry period: still nothing binds
  EXPECT_EQ(BoundCount(), 0);
  auto min_count = [&](int n) {
    absl::StatusOr<json> patched =
        api_->Patch(StrCat(groups, "/train"), k8s::PatchType::kMerge,
                    {{"spec", {{"schedulingPolicy", {{"gang", {{"minCount", n}}}}}}}});
    ASSERT_TRUE(patched.ok()) << patched.status();
  };
  min_count(4);
  ASSERT_TRUE(WaitBound(4, seconds(30))) << s->Log();
  std::map<std::string, records::Assignment> running = Assignments();
  ASSERT_EQ(running.size(), 4u);
  for (const auto& [pod, asg] : running) {
    EXPECT_EQ(asg.node, a) << pod;
    ASSERT_TRUE(asg.gang.has_value()) << pod;
    EXPECT_EQ(asg.gang->min, 4) << pod;
  }
  min_count(6);
  std::this_thread::sleep_for(seconds(3));  // the change seen, a retry period
  EXPECT_EQ(Assignments(), running);
  for (const json& p : Pods()) EXPECT_FALSE(p["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(BoundCount(), 4);
  CheckNoOvercommit(running);
}

// examples/k8s/podgroup/gang.yaml (docs/workloads.md), applied with kubectl as written but for
// its scheduler name (each test runs a scheduler of its own name) and the namespace it goes into:
// the PodGroup's two trainers bind together on the node with an NVLink domain of room, one gang of
// min 2 named as the PodGroup, and the PodGroup says Scheduled. Its pods carry no tessera
// annotation. (Nodes here have no kubelet: binding is what is checked; the helm install test runs
// the classic examples' pods.)
TEST_F(SchedulerTest, PodGroupExampleIsScheduledAsWritten) {
  AddNode(NodeObject(NodeName("pcie")).Gpus(4));  // no NVLink domain: the gang may not go here
  const std::string dgx = NodeName("dgx");
  AddNode(NodeObject(dgx).Gpus(4).NvSwitch());
  ScopedProcess* s = StartScheduler("podgroup-example");
  std::ifstream in(StrCat(TESSERA_SOURCE_DIR, "/examples/k8s/podgroup/gang.yaml"));
  std::stringstream text;
  text << in.rdbuf();
  std::string manifest = text.str();
  ASSERT_EQ(manifest.find("tessera.dev/gang"), std::string::npos) << "no tessera annotation";
  const std::string name = "schedulerName: tessera\n";
  int replaced = 0;
  for (size_t at; (at = manifest.find(name)) != std::string::npos; ++replaced) {
    manifest.replace(at, name.size(), StrCat("schedulerName: ", scheduler_name_, "\n"));
  }
  ASSERT_EQ(replaced, 2);
  CommandResult applied = Cp().Kubectl({"apply", "-n", ns_, "-f", "-"}, manifest);
  ASSERT_TRUE(applied.ok()) << applied.err;
  ASSERT_TRUE(WaitBound(2, seconds(30))) << s->Log();
  const auto assignments = Assignments();
  ASSERT_EQ(assignments.size(), 2u);
  for (const auto& [pod, a] : assignments) {
    EXPECT_EQ(a.node, dgx) << pod;
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(a.gang->name, "train");
    EXPECT_EQ(a.gang->min, 2);
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        absl::StatusOr<json> g = api_->Get(
            StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", ns_, "/podgroups/train"));
        if (!g.ok()) return false;
        for (const json& c :
             g->value("status", json::object()).value("conditions", json::array())) {
          if (c["type"] == "PodGroupInitiallyScheduled") return c.value("status", "") == "True";
        }
        return false;
      },
      seconds(30)))
      << s->Log();
}

// An elastic gang (tessera.dev/gang-size 8, tessera.dev/gang-min 4) on a cluster with room for 4
// in one NVLink domain: 4 start together; room on another node does not pull the gang apart;
// room in its own domain lets the other 4 join. The assignments and Events say how many run.
TEST_F(SchedulerTest, ElasticGangStartsWithFourAndGrowsToEight) {
  const std::string dgx = NodeName("dgx");
  AddNode(NodeObject(dgx).Gpus(8).NvSwitch());
  ScopedProcess* s = StartScheduler("elastic");
  AddPod(Pod("filler").Limit("tessera.dev/gpu", "4"));
  ASSERT_TRUE(WaitBound(1, seconds(30))) << s->Log();
  for (int i = 0; i < 8; ++i) {
    AddPod(Pod(StrCat("w-", i))
               .Limit("tessera.dev/gpu", "1")
               .Gang("train", 8, "nvlink-domain")
               .Annotation("tessera.dev/gang-min", "4"));
  }
  // 4 fit: they start, on dgx, and their records say 4 of 8 (min 4).
  ASSERT_TRUE(WaitBound(5, seconds(30))) << s->Log();
  auto waiting = [&](const std::string& text) {
    int n = 0;
    for (const json& p : Pods()) {
      if (!IsBound(p) && std::get<2>(Scheduled(p)).find(text) != std::string::npos) ++n;
    }
    return n;
  };
  ASSERT_TRUE(
      WaitUntil([&] { return waiting("gang train: 4 of 8 members run") == 4; }, seconds(30)))
      << s->Log();
  EXPECT_EQ(BoundCount(), 5);
  std::map<std::string, records::Assignment> first = Assignments();
  int members = 0;
  for (const auto& [pod, a] : first) {
    if (pod == "filler") continue;
    ++members;
    EXPECT_EQ(a.node, dgx) << pod;
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(*a.gang, (records::GangRecord{"train", 8, 4, 4})) << pod;
  }
  EXPECT_EQ(members, 4);
  const std::string started =
      first.begin()->first == "filler" ? std::next(first.begin())->first : first.begin()->first;
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& e : EventsFor(started)) {
          if (e["reason"] == "GangMembers" && e["type"] == "Normal" &&
              e["message"] == StrCat("gang ", ns_, "/train: 4 of 8 members running (min 4)")) {
            return true;
          }
        }
        return false;
      },
      seconds(10)));

  // Room on another node: the gang keeps its NVLink domain, nothing moves there.
  AddNode(NodeObject(NodeName("other")).Gpus(8).NvSwitch());
  ASSERT_TRUE(WaitUntil(
      [&] { return waiting("4 of 8 members run in one nvlink-domain, and it has no room") == 4; },
      seconds(30)))
      << s->Log();
  EXPECT_EQ(BoundCount(), 5);

  // Room in its domain: the filler goes, the other 4 join the gang on dgx.
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/filler?gracePeriodSeconds=0")).ok());
  ASSERT_TRUE(WaitBound(8, seconds(30))) << s->Log();
  std::map<std::string, records::Assignment> all = Assignments();
  ASSERT_EQ(all.size(), 8u);
  std::set<int> gpus;
  int joined = 0;
  for (const auto& [pod, a] : all) {
    EXPECT_EQ(a.node, dgx) << pod;
    gpus.insert(a.gpus[0].grant.gpu);
    ASSERT_TRUE(a.gang.has_value()) << pod;
    if (a.gang->running == 8) ++joined;
  }
  EXPECT_EQ(gpus.size(), 8u);
  EXPECT_EQ(joined, 4);
  CheckNoOvercommit(all);
  // The gang's oldest member tells the latest count (one GangMembers Event a placement round,
  // not one per member), as kubectl describe shows it.
  CommandResult describe;
  EXPECT_TRUE(WaitUntil(
      [&] {
        describe = Cp().Kubectl({"describe", "pod", "-n", ns_, started});
        return describe.ok() &&
               describe.out.find("8 of 8 members running (min 4)") != std::string::npos;
      },
      seconds(10)))
      << describe.out << describe.err;
}

// A gang member lost (evicted for a GPU fault, say) and made again by its controller: the
// replacement goes beside the survivors, into their NVLink domain d1, though the other domain d2
// has more room and the policy (spread: the emptiest node) would choose it on its own. d1 is the
// only room when the gang starts; d2 joins while it runs. Once as a gang of annotations with no
// topology, once as an upstream PodGroup requiring a rack (both domains are in rack r1). With no
// kubelet the lost member is deleted with grace period 0, as a kubelet would confirm it gone.
void SchedulerTest::ReplacesALostGangMemberBesideTheSurvivors(bool pod_group) {
  WriteConfig("policy: spread\n");
  auto node = [&](const std::string& name, int gpus, const std::string& domain) {
    AddNode(NodeObject(NodeName(name))
                .Gpus(gpus)
                .NvSwitch()
                .Label("tessera.dev/nvlink-domain", StrCat(id_.substr(0, 20), "-", domain))
                .Label("tessera.dev/rack", StrCat(id_.substr(0, 20), "-r1")));
  };
  node("a1", 4, "d1");
  node("a2", 4, "d1");
  ScopedProcess* s = StartScheduler("replace");
  if (pod_group) {
    absl::StatusOr<json> created =
        api_->Create(StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", ns_, "/podgroups"),
                     k8s::testing::PodGroupJson(ns_, "train", 6, "tessera.dev/rack"));
    ASSERT_TRUE(created.ok()) << created.status();
  }
  auto member = [&](const std::string& name) {
    PodObject p = Pod(name).Limit("tessera.dev/gpu", "1");
    if (pod_group) {
      p.PodGroup("train");
    } else {
      p.Gang("train", 6);
    }
    AddPod(p);
  };
  for (int i = 0; i < 6; ++i) member(StrCat("w-", i));
  ASSERT_TRUE(WaitBound(6, seconds(30))) << s->Log();
  const std::set<std::string> d1 = {NodeName("a1"), NodeName("a2")};
  std::map<std::string, records::Assignment> before = Assignments();
  for (const auto& [pod, a] : before) ASSERT_TRUE(d1.contains(a.node)) << pod;

  // Another NVLink domain with more room joins: a pod of no gang goes there (spread's choice, and
  // proof that the scheduler sees it); then a member is lost and made again.
  node("b1", 8, "d2");
  node("b2", 4, "d2");
  AddPod(Pod("alone").Limit("tessera.dev/gpu", "1"));
  ASSERT_TRUE(WaitBound(7, seconds(30))) << s->Log();
  EXPECT_EQ(Assignments()["alone"].node, NodeName("b1"));
  const std::string lost = "w-0";
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/", lost), {{"gracePeriodSeconds", 0}})
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 6; }, seconds(30)));
  member("w-0-again");
  ASSERT_TRUE(WaitBound(7, seconds(30))) << s->Log();
  std::map<std::string, records::Assignment> after = Assignments();
  ASSERT_TRUE(after.contains("w-0-again"));
  EXPECT_TRUE(d1.contains(after["w-0-again"].node))
      << "the replacement went to " << after["w-0-again"].node << "\n"
      << s->Log();
  ASSERT_TRUE(after["w-0-again"].gang.has_value());
  EXPECT_EQ(after["w-0-again"].gang->name, "train");
  for (const auto& [pod, a] : after) {
    if (pod != "alone") EXPECT_TRUE(d1.contains(a.node)) << pod;
  }
  CheckNoOvercommit(after);
}

TEST_F(SchedulerTest, LostGangMemberIsReplacedBesideTheSurvivors) {
  ReplacesALostGangMemberBesideTheSurvivors(/*pod_group=*/false);
}

TEST_F(SchedulerTest, LostPodGroupMemberIsReplacedBesideTheSurvivors) {
  ReplacesALostGangMemberBesideTheSurvivors(/*pod_group=*/true);
}

// tessera.dev/gang-restart: all. A gang of 3 runs on dgx; GPU of member w-1 fails (the agent
// marks it unhealthy in the node's inventory) and w-1 is evicted through the Eviction API, as the
// agent's fault policy does: the scheduler evicts w-0 and w-2 the same way (Warning GangRestart).
// The members the gang's controller makes again wait while any old member is left, saying so;
// once the old are gone (a kubelet would confirm it; here grace period 0) all three are placed
// together, as a gang that starts (each record: 3 running). The failed GPU takes none of them.
TEST_F(SchedulerTest, GangRestartAllEvictsTheGangAndPlacesItAgain) {
  const std::string dgx = NodeName("dgx");
  AddNode(NodeObject(dgx).Gpus(4).NvSwitch());
  ScopedProcess* s = StartScheduler("restart");
  auto member = [&](const std::string& name) {
    AddPod(Pod(name)
               .Limit("tessera.dev/gpu", "1")
               .Gang("train", 3)
               .Annotation("tessera.dev/gang-restart", "all"));
  };
  for (int i = 0; i < 3; ++i) member(StrCat("w-", i));
  ASSERT_TRUE(WaitBound(3, seconds(30))) << s->Log();
  const int failed = Assignments()["w-1"].gpus.at(0).grant.gpu;
  ASSERT_TRUE(GpuFails(dgx, 4, failed).ok());
  auto evict = [&](const std::string& name) {
    return api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods/", name, "/eviction"),
                        {{"apiVersion", "policy/v1"},
                         {"kind", "Eviction"},
                         {"metadata", {{"name", name}, {"namespace", ns_}}}});
  };
  ASSERT_TRUE(evict("w-1").ok());
  auto terminating = [&](const std::string& name) {
    return GetPod(name)["metadata"].contains("deletionTimestamp");
  };
  ASSERT_TRUE(WaitUntil([&] { return terminating("w-0") && terminating("w-2"); }, seconds(30)))
      << s->Log();
  for (const std::string& pod : {"w-0", "w-2"}) {
    bool told = false;
    for (const json& e : EventsFor(pod)) {
      told = told || (e["reason"] == "GangRestart" &&
                      e["message"].get<std::string>().find(
                          StrCat("member ", ns_, "/w-1 was lost to a GPU fault (GPU ", failed,
                                 " of node ", dgx, " is unhealthy)")) != std::string::npos);
    }
    EXPECT_TRUE(told) << pod << ": " << EventsFor(pod).dump(2);
  }

  // The controller's new members wait while old ones are left.
  for (int i = 0; i < 3; ++i) member(StrCat("v-", i));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return std::get<2>(Scheduled(GetPod("v-0"))).find("restarts whole") != std::string::npos;
      },
      seconds(30)))
      << s->Log();
  EXPECT_FALSE(IsBound(GetPod("v-0")));
  for (const std::string& old : {"w-0", "w-1", "w-2"}) {
    ASSERT_TRUE(
        api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/", old), {{"gracePeriodSeconds", 0}})
            .ok());
  }
  ASSERT_TRUE(WaitUntil(
      [&] {
        int fresh = 0;
        for (const json& p : Pods()) {
          fresh += IsBound(p) && p["metadata"]["name"].get<std::string>().starts_with("v-");
        }
        return fresh == 3;
      },
      seconds(30)))
      << s->Log();
  std::map<std::string, records::Assignment> again = Assignments();
  ASSERT_EQ(again.size(), 3u);
  for (const auto& [pod, a] : again) {
    EXPECT_EQ(pod.substr(0, 2), "v-");
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(*a.gang, (records::GangRecord{"train", 3, 3, 3})) << pod;
    EXPECT_NE(a.gpus.at(0).grant.gpu, failed) << pod;
  }
}

// Hot spares (spareGpusPerDomain: 1) on a 4-GPU NVSwitch node: the scheduler keeps GPU 3 and
// says so on the node (tessera.dev/spare-gpus, which tessera status shows); a gang of 3 fills
// GPUs 0-2 and a pod of no gang waits, told that only a spare is left. The GPU of w-1 fails (the
// agent's inventory says so) and w-1 is gone; the member its controller makes again takes the
// spare, beside the survivors, while the lone pod still waits; the node then shows no spare.
TEST_F(SchedulerTest, ASpareIsUsedOnlyForAReplacement) {
  WriteConfig("spareGpusPerDomain: 1\n");
  const std::string dgx = NodeName("dgx");
  AddNode(NodeObject(dgx).Gpus(4).NvSwitch());
  ScopedProcess* s = StartScheduler("spares");
  auto spares = [&] {
    absl::StatusOr<json> node = api_->Get(StrCat("/api/v1/nodes/", dgx));
    if (!node.ok()) return std::string("?");
    const json& a = (*node)["metadata"].value("annotations", json::object());
    return a.contains("tessera.dev/spare-gpus") ? a["tessera.dev/spare-gpus"].get<std::string>()
                                                : std::string();
  };
  ASSERT_TRUE(WaitUntil([&] { return spares() == "3"; }, seconds(30))) << s->Log();
  CommandResult status = RunCommand({TESSERA_BINARY, "status", "--kubeconfig", Cp().kubeconfig(),
                                     "--scheduler-name", scheduler_name_, "--node", dgx});
  EXPECT_THAT(status.out, HasSubstr("spare (kept for gang replacements)"))
      << status.out << status.err;

  auto member = [&](const std::string& name) {
    AddPod(Pod(name).Limit("tessera.dev/gpu", "1").Gang("train", 3));
  };
  for (int i = 0; i < 3; ++i) member(StrCat("w-", i));
  ASSERT_TRUE(WaitBound(3, seconds(30))) << s->Log();
  for (const auto& [pod, a] : Assignments()) EXPECT_NE(a.gpus.at(0).grant.gpu, 3) << pod;
  AddPod(Pod("alone").Limit("tessera.dev/gpu", "1"));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return std::get<2>(Scheduled(GetPod("alone"))).find("kept spare for gang replacements") !=
               std::string::npos;
      },
      seconds(30)))
      << s->Log();

  const int failed = Assignments()["w-1"].gpus.at(0).grant.gpu;
  ASSERT_TRUE(GpuFails(dgx, 4, failed).ok());
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/w-1"), {{"gracePeriodSeconds", 0}})
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 2; }, seconds(30)));
  member("w-1-again");
  ASSERT_TRUE(WaitBound(3, seconds(30))) << s->Log();
  std::map<std::string, records::Assignment> after = Assignments();
  ASSERT_TRUE(after.contains("w-1-again"));
  EXPECT_EQ(after["w-1-again"].node, dgx);
  EXPECT_EQ(after["w-1-again"].gpus.at(0).grant.gpu, 3);
  EXPECT_FALSE(IsBound(GetPod("alone")));
  EXPECT_TRUE(WaitUntil([&] { return spares().empty(); }, seconds(30)))
      << "tessera.dev/spare-gpus: \"" << spares() << "\"\n"
      << s->Log();
  CheckNoOvercommit(after);
}

TEST_F(SchedulerTest, UnschedulableConditionAndEventAsKubectlDescribeShows) {
  AddNode(NodeObject(NodeName("small")).Gpus(2));
  ScopedProcess* s = StartScheduler("unsched");
  AddPod(Pod("too-big").Limit("tessera.dev/gpu", "4"));
  ASSERT_TRUE(WaitUntil(
      [&] { return std::get<1>(Scheduled(GetPod("too-big"))) == "Unschedulable"; }, seconds(30)))
      << s->Log();
  auto [status, reason, message] = Scheduled(GetPod("too-big"));
  EXPECT_EQ(status, "False");
  EXPECT_THAT(message, HasSubstr("4"));
  ASSERT_TRUE(WaitUntil([&] { return !EventsFor("too-big").empty(); }, seconds(10)));
  json event = EventsFor("too-big")[0];
  EXPECT_EQ(event["reason"], "FailedScheduling");
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["message"], message);
  EXPECT_EQ(event["source"]["component"], scheduler_name_);
  CommandResult describe = Cp().Kubectl({"describe", "pod", "-n", ns_, "too-big"});
  ASSERT_TRUE(describe.ok()) << describe.err;
  EXPECT_THAT(describe.out, HasSubstr("FailedScheduling"));
  EXPECT_THAT(describe.out, HasSubstr(message.substr(0, 40)));
  // No busy loop: it is not retried (nor reported again) while nothing changes.
  int port = MetricsPort(*s);
  double failed = Metric(port, "tessera_scheduler_pods_failed_total{reason=\"unschedulable\"}");
  std::this_thread::sleep_for(seconds(2));
  EXPECT_EQ(Metric(port, "tessera_scheduler_pods_failed_total{reason=\"unschedulable\"}"), failed);
  EXPECT_EQ(EventsFor("too-big").size(), 1u);
}

// Deleted and finished pods release their GPUs: the deletion and the status update reach the
// scheduler through its pod watch, which is in protobuf by default and in JSON with --wire json.
class SchedulerWireTest : public SchedulerTest {
 protected:
  void ReleasesGpusOnTheWatchedChanges(const std::string& wire);
};

void SchedulerWireTest::ReleasesGpusOnTheWatchedChanges(const std::string& wire) {
  AddNode(NodeObject(NodeName("one")).Gpus(1));
  ScopedProcess* s = StartScheduler("release", {"--wire", wire});
  AddPod(Pod("first").Limit("tessera.dev/gpu", "1"));
  ASSERT_TRUE(WaitBound(1, seconds(30))) << s->Log();
  AddPod(Pod("second").Limit("tessera.dev/gpu", "1"));
  ASSERT_TRUE(WaitUntil([&] { return std::get<1>(Scheduled(GetPod("second"))) == "Unschedulable"; },
                        seconds(30)));
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/first?gracePeriodSeconds=0")).ok());
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("second")); }, seconds(30))) << s->Log();
  // A pod that finishes (phase Succeeded) frees its GPU too.
  AddPod(Pod("third").Limit("tessera.dev/gpu", "1"));
  ASSERT_TRUE(WaitUntil([&] { return std::get<1>(Scheduled(GetPod("third"))) == "Unschedulable"; },
                        seconds(30)));
  ASSERT_TRUE(api_->Patch(StrCat("/api/v1/namespaces/", ns_, "/pods/second/status"),
                          k8s::PatchType::kMerge, {{"status", {{"phase", "Succeeded"}}}})
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("third")); }, seconds(30))) << s->Log();
  // Both lists came in the wire asked for, every page (informer.h logs it).
  const std::string log = s->Log();
  const std::string of = wire == "json" ? "JSON" : "protobuf";
  for (const char* what : {"pods", "nodes"}) {
    EXPECT_TRUE(std::regex_search(
        log, std::regex(StrCat(what,
                               ": listed [0-9]+ at resourceVersion [0-9]+: [0-9]+ pages?, "
                               "[0-9.]+ MB of ",
                               of, " in"))))
        << what << " not listed in " << of << ":\n"
        << log;
  }
}

TEST_F(SchedulerWireTest, DeletedAndFinishedPodsReleaseTheirGpus) {
  ReleasesGpusOnTheWatchedChanges("protobuf");
}

TEST_F(SchedulerWireTest, DeletedAndFinishedPodsReleaseTheirGpusOverJson) {
  ReleasesGpusOnTheWatchedChanges("json");
}

TEST_F(SchedulerTest, TwoReplicasOneLeaderAndFailover) {
  for (int n = 0; n < 2; ++n) AddNode(NodeObject(NodeName(StrCat("n", n))).Gpus(8));
  ScopedProcess* r1 = StartScheduler("replica-1");
  ScopedProcess* r2 = StartScheduler("replica-2");
  ASSERT_TRUE(WaitUntil([&] { return !LeaseHolder().empty(); }, seconds(20)));
  std::string leader = LeaseHolder();
  ScopedProcess* lead = leader == "replica-1" ? r1 : r2;
  ScopedProcess* follow = leader == "replica-1" ? r2 : r1;
  int lead_port = MetricsPort(*lead), follow_port = MetricsPort(*follow);
  for (int i = 0; i < 6; ++i) AddPod(Pod(StrCat("a-", i)).Limit("tessera.dev/gpu", "1"));
  ASSERT_TRUE(WaitBound(6, seconds(30)));
  EXPECT_EQ(Metric(lead_port, "tessera_scheduler_pods_scheduled_total"), 6);
  EXPECT_EQ(Metric(follow_port, "tessera_scheduler_pods_scheduled_total"), 0);
  EXPECT_EQ(Metric(lead_port, "tessera_scheduler_is_leader"), 1);
  EXPECT_EQ(Metric(follow_port, "tessera_scheduler_is_leader"), 0);
  // The leader dies without giving the lease up; the other takes over once it expires.
  lead->Signal(SIGKILL);
  lead->Wait(seconds(10));
  for (int i = 0; i < 6; ++i) AddPod(Pod(StrCat("b-", i)).Limit("tessera.dev/gpu", "1"));
  ASSERT_TRUE(WaitBound(12, seconds(30))) << follow->Log();
  EXPECT_EQ(LeaseHolder(), follow == r1 ? "replica-1" : "replica-2");
  EXPECT_EQ(Metric(follow_port, "tessera_scheduler_pods_scheduled_total"), 6);
  EXPECT_GE(Lease()["spec"]["leaseTransitions"].get<int>(), 1);
  CheckNoOvercommit(Assignments());
  // SIGTERM: a clean stop that gives the lease up.
  follow->Signal(SIGTERM);
  EXPECT_EQ(follow->Wait(seconds(20)), 0) << follow->Log();
  EXPECT_EQ(LeaseHolder(), "");
}

TEST_F(SchedulerTest, BadPodInputGetsAnEventNamingTheFieldAndOthersGoOn) {
  AddNode(NodeObject(NodeName("n")).Gpus(4));
  ScopedProcess* s = StartScheduler("badpod");
  // The API server checks quantity syntax itself; what it lets through and tessera refuses is a
  // compute share over 100% or whole GPUs mixed with a share.
  AddPod(Pod("bad-quantity").Limit("tessera.dev/gpu-compute", "150"));
  AddPod(Pod("bad-mix").Limit("tessera.dev/gpu", "1").Limit("tessera.dev/gpu-memory", "1Gi"));
  AddPod(Pod("bad-topology")
             .Limit("tessera.dev/gpu", "2")
             .Annotation("tessera.dev/topology", "telepathy"));
  AddPod(Pod("good").Limit("tessera.dev/gpu-memory", "4Gi"));
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("good")); }, seconds(30))) << s->Log();
  ASSERT_TRUE(WaitUntil(
      [&] { return !EventsFor("bad-quantity").empty() && !EventsFor("bad-topology").empty(); },
      seconds(30)));
  EXPECT_THAT(std::string(EventsFor("bad-quantity")[0]["message"]),
              HasSubstr("spec.containers[0].resources.limits[tessera.dev/gpu-compute]: \"150\""));
  ASSERT_TRUE(WaitUntil([&] { return !EventsFor("bad-mix").empty(); }, seconds(10)));
  EXPECT_THAT(std::string(EventsFor("bad-mix")[0]["message"]),
              HasSubstr("tessera.dev/gpu (whole GPUs) cannot be combined"));
  EXPECT_THAT(std::string(EventsFor("bad-topology")[0]["message"]),
              HasSubstr("metadata.annotations[tessera.dev/topology]"));
  EXPECT_FALSE(IsBound(GetPod("bad-quantity")));
  // Fixing the annotation makes the pod schedulable.
  ASSERT_TRUE(
      api_->Patch(StrCat("/api/v1/namespaces/", ns_, "/pods/bad-topology"), k8s::PatchType::kMerge,
                  {{"metadata", {{"annotations", {{"tessera.dev/topology", "pcie-switch"}}}}}})
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("bad-topology")); }, seconds(30))) << s->Log();
  EXPECT_TRUE(s->Running());
  int port = MetricsPort(*s);
  EXPECT_GE(Metric(port, "tessera_scheduler_pods_failed_total{reason=\"invalid_pod\"}"), 3);
}

TEST_F(SchedulerTest, BadNodeInventoryMakesThatNodeUnusableForGpusUntilFixed) {
  const std::string broken = NodeName("broken");
  AddNode(NodeObject(broken).Gpus(4).RawInventory("{\"version\": 1, \"gpus\": \"many\"}"));
  ScopedProcess* s = StartScheduler("badnode");
  AddPod(Pod("gpu").Limit("tessera.dev/gpu", "1"));
  AddPod(Pod("cpu").Request("cpu", "1"));
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("cpu")); }, seconds(30))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return std::get<1>(Scheduled(GetPod("gpu"))) == "Unschedulable"; },
                        seconds(30)));
  EXPECT_TRUE(s->WaitForLog(StrCat("node ", broken,
                                   ": annotation tessera.dev/gpu-inventory is "
                                   "unusable"),
                            seconds(5)))
      << s->Log();
  int port = MetricsPort(*s);
  ASSERT_TRUE(WaitUntil([&] { return Metric(port, "tessera_scheduler_nodes_bad_inventory") == 1; },
                        seconds(5)));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return Metric(port,
                      StrCat("tessera_scheduler_node_inventory_valid{node=\"", broken, "\"}")) == 0;
      },
      seconds(5)));
  // The agent (here: the test) fixes the annotation: the GPU pod is placed.
  ASSERT_TRUE(
      api_->Patch(
              StrCat("/api/v1/nodes/", broken), k8s::PatchType::kMerge,
              {{"metadata",
                {{"annotations",
                  {{"tessera.dev/gpu-inventory", NodeObject(broken).Gpus(4).InventoryJson()}}}}}})
          .ok());
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("gpu")); }, seconds(30))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Metric(port, "tessera_scheduler_nodes_bad_inventory") == 0; },
                        seconds(5)));
}

TEST_F(SchedulerTest, RespectsCordonTaintsAndNodeSelectors) {
  const std::string tainted = NodeName("tainted"), plain = NodeName("plain"),
                    cordoned = NodeName("cordoned");
  NodeObject t(tainted);
  t.Gpus(2).Label("pool", "train");
  AddNode(t);
  ASSERT_TRUE(api_->Patch(StrCat("/api/v1/nodes/", tainted), k8s::PatchType::kMerge,
                          {{"spec",
                            {{"taints", json::array({{{"key", "dedicated"},
                                                      {"value", "train"},
                                                      {"effect", "NoSchedule"}}})}}}})
                  .ok());
  AddNode(NodeObject(plain).Gpus(2).Label("pool", "serve"));
  AddNode(NodeObject(cordoned).Gpus(8));
  ASSERT_TRUE(api_->Patch(StrCat("/api/v1/nodes/", cordoned), k8s::PatchType::kMerge,
                          {{"spec", {{"unschedulable", true}}}})
                  .ok());
  ScopedProcess* s = StartScheduler("restrict");
  json tolerant = Pod("tolerant").Limit("tessera.dev/gpu", "1").Scheduler(scheduler_name_).Json();
  tolerant["spec"]["tolerations"] = json::array({{{"key", "dedicated"},
                                                  {"operator", "Equal"},
                                                  {"value", "train"},
                                                  {"effect", "NoSchedule"}}});
  tolerant["spec"]["nodeSelector"] = {{"pool", "train"}};
  ASSERT_TRUE(api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), tolerant).ok());
  json intolerant =
      Pod("intolerant").Limit("tessera.dev/gpu", "1").Scheduler(scheduler_name_).Json();
  intolerant["spec"]["nodeSelector"] = {{"pool", "train"}};
  ASSERT_TRUE(api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), intolerant).ok());
  AddPod(Pod("anywhere").Limit("tessera.dev/gpu", "2"));  // only the plain node is left for it
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("tolerant")) && IsBound(GetPod("anywhere")); },
                        seconds(30)))
      << s->Log();
  EXPECT_EQ(GetPod("tolerant")["spec"]["nodeName"], tainted);
  EXPECT_EQ(GetPod("anywhere")["spec"]["nodeName"], plain);
  ASSERT_TRUE(
      WaitUntil([&] { return std::get<1>(Scheduled(GetPod("intolerant"))) == "Unschedulable"; },
                seconds(30)));
  EXPECT_THAT(std::get<2>(Scheduled(GetPod("intolerant"))), HasSubstr("taints"));
  // Uncordoned: a big pod can use the 8-GPU node.
  AddPod(Pod("big").Limit("tessera.dev/gpu", "8"));
  ASSERT_TRUE(WaitUntil([&] { return std::get<1>(Scheduled(GetPod("big"))) == "Unschedulable"; },
                        seconds(30)));
  ASSERT_TRUE(api_->Patch(StrCat("/api/v1/nodes/", cordoned), k8s::PatchType::kMerge,
                          {{"spec", {{"unschedulable", false}}}})
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("big")); }, seconds(30))) << s->Log();
  EXPECT_EQ(GetPod("big")["spec"]["nodeName"], cordoned);
}

// The MIG and GPU-model asks of docs/workloads.md on the real API server: `tessera.dev/mig:
// PROFILE` gets a MIG instance of that profile on a MIG-enabled GPU (its assignment names profile
// and start slice), `tessera.dev/gpu-model` keeps a pod to those models, and a restarted scheduler
// restores the instances so that no two granted instances ever share a slice.
TEST_F(SchedulerTest, MigProfilesAndGpuModelsFromPodAnnotations) {
  const std::string mig = NodeName("a100-mig"), h100 = NodeName("h100");
  AddNode(NodeObject(mig).Gpus(1, "A100-80GB").Mig());
  AddNode(NodeObject(h100).Gpus(2, "H100-80GB"));
  ScopedProcess* s = StartScheduler("mig-1");
  AddPod(Pod("m-4g").Annotation("tessera.dev/mig", "4g.40gb"));
  AddPod(Pod("m-1g").Limit("tessera.dev/gpu", "1").Annotation("tessera.dev/mig", "1g.10gb"));
  AddPod(Pod("h100-only")
             .Limit("tessera.dev/gpu", "1")
             .Annotation("tessera.dev/gpu-model", "H100-80GB,H200-141GB"));
  AddPod(
      Pod("b200-only").Limit("tessera.dev/gpu", "1").Annotation("tessera.dev/gpu-model", "B200"));
  ASSERT_TRUE(WaitBound(3, seconds(30))) << s->Log();
  ASSERT_TRUE(WaitUntil(
      [&] { return std::get<1>(Scheduled(GetPod("b200-only"))) == "Unschedulable"; }, seconds(30)));
  EXPECT_THAT(std::get<2>(Scheduled(GetPod("b200-only"))), HasSubstr("B200"));
  // Restarted: what the first process granted is restored before anything else is decided.
  schedulers_.clear();
  AddPod(Pod("m-2g").Annotation("tessera.dev/mig", "2g.20gb"));
  AddPod(Pod("m-2g-b").Annotation("tessera.dev/mig", "2g.20gb"));
  AddPod(Pod("m-1g-b").Annotation("tessera.dev/mig", "1g.10gb"));
  s = StartScheduler("mig-2");
  auto decided = [&](const std::string& pod) {
    json j = GetPod(pod);
    return IsBound(j) || std::get<1>(Scheduled(j)) == "Unschedulable";
  };
  ASSERT_TRUE(WaitUntil([&] { return decided("m-2g") && decided("m-2g-b") && decided("m-1g-b"); },
                        seconds(30)))
      << s->Log();
  std::map<std::string, records::Assignment> as = Assignments();
  EXPECT_EQ(as.at("h100-only").node, h100);
  const core::MigModel& model = *core::FindMigModel("A100-80GB");
  uint8_t used = 0;
  int mig_pods = 0;
  for (const auto& [name, a] : as) {
    if (a.node != mig) continue;
    ASSERT_EQ(a.gpus.size(), 1u) << name;
    const records::AssignedGpu& g = a.gpus[0];
    ASSERT_FALSE(g.mig_profile.empty()) << name << " has no MIG instance";
    const int p = model.Find(g.mig_profile);
    ASSERT_GE(p, 0) << g.mig_profile;
    const uint8_t slots = model.profiles[p].slots(g.mig_start);
    EXPECT_EQ(used & slots, 0) << name << "'s " << g.mig_profile << "@" << g.mig_start
                               << " shares a slice with another pod's instance";
    used |= slots;
    ++mig_pods;
  }
  // The 4g.40gb and 1g.10gb of the first process, and at least one pod of the second: the 8
  // memory slices cannot hold all five.
  EXPECT_GE(mig_pods, 3);
  EXPECT_LT(mig_pods, 5);
  EXPECT_EQ(as.at("m-4g").gpus[0].mig_profile, "4g.40gb");
  EXPECT_EQ(as.at("m-1g").gpus[0].mig_profile, "1g.10gb");
}

// The other promises of docs/workloads.md about pods, each checked on the real API server: compute
// shares, the interconnect a multi-GPU pod asks for, CPU and memory counted as kube-scheduler
// counts them (init containers included), required node affinity, and the order of pending pods
// (higher priority first, then queues taking turns).
TEST_F(SchedulerTest, ReadmePodPromises) {
  const std::string nv = NodeName("nv"), pcie = NodeName("pcie"), small = NodeName("small");
  AddNode(NodeObject(nv).Gpus(4).NvSwitch().Label("pool", "nv"));
  AddNode(NodeObject(pcie).Gpus(4).Label("pool", "pcie"));  // two GPUs per PCIe switch
  AddNode(NodeObject(small).Gpus(3).Cpu("4").Memory("16Gi").Label("pool", "small"));
  auto create = [&](json pod) {
    absl::StatusOr<json> c = api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), pod);
    ASSERT_TRUE(c.ok()) << c.status();
  };
  auto in_pool = [&](PodObject p, const std::string& pool) {
    json j = p.Scheduler(scheduler_name_).Json();
    j["spec"]["nodeSelector"] = {{"pool", pool}};
    return j;
  };
  // Created before the scheduler starts, so that it finds them all pending at once. The small
  // node has 3 GPUs: the high-priority pod first, then queues a and b take turns: b's one pod gets
  // a GPU although queue a has three (which of a's three is first depends on the order the
  // informer lists them). The harness runs kube-apiserver without the Priority admission plugin,
  // so spec.priority is given directly, as that plugin sets it from a PriorityClass.
  for (const char* name : {"a-1", "a-2", "a-3"}) {
    create(in_pool(Pod(name).Limit("tessera.dev/gpu", "1").Annotation("tessera.dev/queue", "a"),
                   "small"));
  }
  create(in_pool(Pod("b-1").Limit("tessera.dev/gpu", "1").Annotation("tessera.dev/queue", "b"),
                 "small"));
  create(in_pool(Pod("z-high")
                     .Limit("tessera.dev/gpu", "1")
                     .Annotation("tessera.dev/queue", "a")
                     .Priority(1000),
                 "small"));
  // Interconnect: two GPUs joined by NVLink (only the NVSwitch node has them), and two behind
  // one PCIe switch, kept to the PCIe node by required node affinity.
  create(Pod("tp")
             .Limit("tessera.dev/gpu", "2")
             .Annotation("tessera.dev/topology", "nvlink")
             .Annotation("tessera.dev/topology-mode", "required")
             .Scheduler(scheduler_name_)
             .Json());
  json pix = Pod("pix")
                 .Limit("tessera.dev/gpu", "2")
                 .Annotation("tessera.dev/topology", "pcie-switch")
                 .Annotation("tessera.dev/topology-mode", "required")
                 .Scheduler(scheduler_name_)
                 .Json();
  pix["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
     ["nodeSelectorTerms"] = json::array(
         {{{"matchExpressions",
            json::array({{{"key", "pool"}, {"operator", "In"}, {"values", {"pcie"}}}})}}});
  create(pix);
  // Compute shares, on the NVSwitch node beside tp: 60% and 60% cannot share one GPU; 40% fits
  // beside either.
  for (const char* name : {"c-60a", "c-60b"}) {
    create(in_pool(
        Pod(name).Limit("tessera.dev/gpu-memory", "1Gi").Limit("tessera.dev/gpu-compute", "60"),
        "nv"));
  }
  create(in_pool(Pod("c-40").Limit("tessera.dev/gpu-compute", "40"), "nv"));
  ScopedProcess* s = StartScheduler("readme");
  auto decided = [&](const std::string& pod) {
    json j = GetPod(pod);
    return IsBound(j) || std::get<1>(Scheduled(j)) == "Unschedulable";
  };
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const char* p :
             {"z-high", "a-1", "a-2", "a-3", "b-1", "tp", "pix", "c-60a", "c-60b", "c-40"}) {
          if (!decided(p)) return false;
        }
        return true;
      },
      seconds(30)))
      << s->Log();
  for (const char* p : {"z-high", "b-1", "tp", "pix", "c-60a", "c-60b", "c-40"}) {
    EXPECT_TRUE(IsBound(GetPod(p))) << p << " is not bound\n" << s->Log();
  }
  int a_bound = 0;
  for (const char* p : {"a-1", "a-2", "a-3"}) a_bound += IsBound(GetPod(p)) ? 1 : 0;
  EXPECT_EQ(a_bound, 1) << "queue a took more than its turn, or none";
  std::map<std::string, records::Assignment> as = Assignments();
  CheckNoOvercommit(as);
  EXPECT_EQ(as.at("z-high").node, small);
  EXPECT_EQ(as.at("b-1").node, small);
  EXPECT_EQ(as.at("tp").node, nv);
  ASSERT_EQ(as.at("pix").gpus.size(), 2u);
  EXPECT_EQ(as.at("pix").node, pcie);
  EXPECT_EQ(as.at("pix").gpus[0].grant.gpu / 2, as.at("pix").gpus[1].grant.gpu / 2)
      << "the two GPUs are behind different PCIe switches";
  // Compute: granted as asked, and the two 60% shares are on different GPUs.
  const records::AssignedGpu& a60 = as.at("c-60a").gpus.at(0);
  const records::AssignedGpu& b60 = as.at("c-60b").gpus.at(0);
  EXPECT_EQ(a60.grant.compute_milli, 600);
  EXPECT_EQ(a60.grant.memory_mib, 1024);
  EXPECT_EQ(as.at("c-40").gpus.at(0).grant.compute_milli, 400);
  EXPECT_NE(a60.grant.gpu, b60.grant.gpu);

  // CPU and memory as kube-scheduler counts them: the small node has 4 CPUs; a pod whose init
  // container asks 3 CPUs (more than its container's 1) holds 3, so a second such pod waits.
  auto init_heavy = [&](const std::string& name) {
    json j = in_pool(Pod(name).Request("cpu", "1").Request("memory", "1Gi"), "small");
    j["spec"]["initContainers"] =
        json::array({{{"name", "init"},
                      {"image", "registry.invalid/init:1"},
                      {"resources", {{"requests", {{"cpu", "3"}, {"memory", "2Gi"}}}}}}});
    return j;
  };
  create(init_heavy("init-1"));
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("init-1")); }, seconds(30))) << s->Log();
  create(init_heavy("init-2"));
  ASSERT_TRUE(WaitUntil([&] { return std::get<1>(Scheduled(GetPod("init-2"))) == "Unschedulable"; },
                        seconds(30)));
  EXPECT_THAT(std::get<2>(Scheduled(GetPod("init-2"))), HasSubstr("CPU"));
}

// deploy/ against the real API server: every object is accepted by a server-side dry run, and the
// ServiceAccount with those RBAC rules (applied for real) can do everything the scheduler does.
TEST_F(SchedulerTest, DeployManifestsAreValidAndTheirRbacIsEnough) {
  const std::string deploy = StrCat(TESSERA_SOURCE_DIR, "/deploy");
  ASSERT_TRUE(Cp().KubectlOk({"apply", "-f", deploy + "/namespace.yaml"}).ok());
  CommandResult dry = Cp().Kubectl({"apply", "--dry-run=server", "-f", deploy});
  ASSERT_TRUE(dry.ok()) << dry.out << dry.err;
  for (const char* what : {"deployment.apps/tessera-scheduler", "serviceaccount/tessera-scheduler",
                           "clusterrole.rbac.authorization.k8s.io/tessera-scheduler",
                           "role.rbac.authorization.k8s.io/tessera-scheduler-leader-election",
                           "configmap/tessera-scheduler-config"}) {
    EXPECT_THAT(dry.out, HasSubstr(what)) << dry.out;
  }
  EXPECT_THAT(dry.out, HasSubstr("(server dry run)"));
  // Nothing was created by the dry run.
  EXPECT_FALSE(Cp().Kubectl({"get", "-n", "tessera-system", "deployment/tessera-scheduler"}).ok());
  // The configuration in the ConfigMap is one the scheduler accepts.
  std::string cm = *Cp().KubectlOk(
      {"apply", "--dry-run=client", "-o", "json", "-f", deploy + "/configmap.yaml"});
  std::ofstream(dir_ + "/deployed.yaml") << std::string(json::parse(cm)["data"]["config.yaml"]);

  // RBAC for real, then the scheduler with the ServiceAccount's token.
  ASSERT_TRUE(
      Cp().KubectlOk({"apply", "-f", deploy + "/serviceaccount.yaml", "-f", deploy + "/rbac.yaml"})
          .ok());
  absl::StatusOr<json> token =
      api_->Create("/api/v1/namespaces/tessera-system/serviceaccounts/tessera-scheduler/token",
                   {{"apiVersion", "authentication.k8s.io/v1"},
                    {"kind", "TokenRequest"},
                    {"spec", {{"expirationSeconds", 3600}}}});
  ASSERT_TRUE(token.ok()) << token.status();
  std::ofstream(dir_ + "/token") << std::string((*token)["status"]["token"]);
  std::ofstream(dir_ + "/sa.kubeconfig")
      << StrCat(R"(apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: ")",
                Cp().server(), R"(", certificate-authority: ")", Cp().ca_file(), R"("}
users:
- name: sa
  user: {tokenFile: ")",
                dir_, R"(/token"}
contexts:
- name: sa
  context: {cluster: c, user: sa}
current-context: sa
)");
  AddNode(NodeObject(NodeName("n")).Gpus(1));
  ScopedProcess* s =
      StartScheduler("rbac",
                     {"--scheduler-name", scheduler_name_, "--node-selector",
                      StrCat("tessera-e2e/test=", id_), "--metrics-bind-address", "127.0.0.1",
                      "--metrics-port", "0", "--lease-name", StrCat("tessera-", id_)},
                     dir_ + "/sa.kubeconfig", dir_ + "/deployed.yaml");
  AddPod(Pod("fits").Limit("tessera.dev/gpu", "1"));
  AddPod(Pod("does-not").Limit("tessera.dev/gpu", "2"));
  ASSERT_TRUE(WaitUntil([&] { return IsBound(GetPod("fits")); }, seconds(40))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return !EventsFor("does-not").empty(); }, seconds(20))) << s->Log();
  EXPECT_EQ(std::get<1>(Scheduled(GetPod("does-not"))), "Unschedulable");
  EXPECT_THAT(s->Log(), ::testing::Not(HasSubstr("forbidden")));
  absl::StatusOr<json> lease = api_->Get(
      StrCat("/apis/coordination.k8s.io/v1/namespaces/tessera-system/leases/tessera-", id_));
  ASSERT_TRUE(lease.ok()) << lease.status();
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "rbac");
}

}  // namespace
}  // namespace tessera::e2e
