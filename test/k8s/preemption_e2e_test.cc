// Preemption and reclaim with `tessera scheduler` as a process against the real API server.
// Nodes are plain Node objects (no kubelet): pods are bound but never run, so the test plays the
// kubelet where one is needed: it reports pods running (the Eviction API ignores budgets for
// pending pods) and removes pods that are terminating after an eviction (a kubelet does that once
// their containers stopped).
//
// Each test has its own namespace, scheduler name, node label and Lease.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <thread>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "controlplane/controlplane.h"
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
    std::this_thread::sleep_for(milliseconds(200));
  }
  return pred();
}

class PreemptionE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = k8s::ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    id_ = "pe-";
    for (char c : name) id_ += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    id_ = id_.substr(0, 40);
    ns_ = id_;
    scheduler_name_ = StrCat("tessera-", id_);
    dir_ = StrCat(::testing::TempDir(), "/tessera-e2e-", getpid(), "-", id_);
    std::filesystem::create_directories(dir_);
    absl::StatusOr<json> created =
        api_->Create("/api/v1/namespaces",
                     {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok() || created.status().code() == absl::StatusCode::kAlreadyExists)
        << created.status();
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
retry: {minInterval: 200ms, period: 3s}
)");
  }

  void TearDown() override {
    schedulers_.clear();
    if (api_) {
      (void)api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods?gracePeriodSeconds=0"));
      (void)api_->Delete(StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", ns_, "/podgroups"));
      (void)api_->Delete(StrCat("/api/v1/nodes?labelSelector=",
                                k8s::QueryEscape(StrCat("tessera-e2e/test=", id_))));
      (void)api_->Delete("/apis/tessera.dev/v1alpha1/queues?labelSelector=" +
                         k8s::QueryEscape(StrCat("tessera-e2e/test=", id_)));
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  ScopedProcess* StartScheduler(const std::string& identity) {
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", Cp().kubeconfig(),
                              "--config", dir_ + "/config.yaml", "--identity", identity},
                             StrCat(dir_, "/", identity, ".log"));
    EXPECT_TRUE(p.ok()) << p.status();
    schedulers_.push_back(std::move(*p));
    return schedulers_.back().get();
  }

  std::string AddNode(const std::string& base, int gpus, bool nvswitch = false) {
    const std::string name = StrCat(id_.substr(0, 30), "-", base);
    NodeObject node(name);
    node.Gpus(gpus).Label("tessera-e2e/test", id_);
    if (nvswitch) node.NvSwitch();
    json j = node.Json();
    json status = j["status"];
    j.erase("status");
    absl::StatusOr<json> created = api_->Create("/api/v1/nodes", j);
    EXPECT_TRUE(created.ok()) << created.status();
    absl::StatusOr<json> patched = api_->Patch(StrCat("/api/v1/nodes/", name, "/status"),
                                               k8s::PatchType::kMerge, {{"status", status}});
    EXPECT_TRUE(patched.ok()) << patched.status();
    return name;
  }

  void AddPod(PodObject pod, const std::map<std::string, std::string>& labels = {}) {
    json j = pod.Scheduler(scheduler_name_).Json();
    for (const auto& [k, v] : labels) j["metadata"]["labels"][k] = v;
    absl::StatusOr<json> created = api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), j);
    ASSERT_TRUE(created.ok()) << created.status();
  }
  PodObject Share(const std::string& name, int priority, const std::string& queue = "default") {
    return PodObject(ns_, name)
        .Limit("tessera.dev/gpu-memory", "20Gi")
        .Priority(priority)
        .Annotation("tessera.dev/queue", queue);
  }
  PodObject Whole(const std::string& name, int priority, const std::string& queue = "default") {
    return PodObject(ns_, name)
        .Limit("tessera.dev/gpu", "1")
        .Priority(priority)
        .Annotation("tessera.dev/queue", queue);
  }

  json Pods() {
    absl::StatusOr<json> list = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/pods"));
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? (*list)["items"] : json::array();
  }
  json GetPod(const std::string& name) {
    absl::StatusOr<json> p = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/pods/", name));
    return p.ok() ? *p : json();
  }
  static bool Bound(const json& pod) {
    return pod.is_object() && !pod["spec"].value("nodeName", std::string()).empty();
  }
  static bool Terminating(const json& pod) { return pod["metadata"].contains("deletionTimestamp"); }
  std::set<std::string> Names(bool (*pred)(const json&)) {
    std::set<std::string> out;
    for (const json& p : Pods()) {
      if (pred(p)) out.insert(p["metadata"]["name"]);
    }
    return out;
  }
  size_t BoundCount() { return Names(&Bound).size(); }
  std::set<std::string> Evicted() { return Names(&Terminating); }
  std::string Nominated(const std::string& pod) {
    json p = GetPod(pod);
    return p.is_object() ? p["status"].value("nominatedNodeName", "") : "";
  }
  std::string Message(const std::string& pod) {
    for (const json& c : GetPod(pod)["status"].value("conditions", json::array())) {
      if (c["type"] == "PodScheduled") return c.value("message", "");
    }
    return "";
  }
  // As a kubelet would: the pod runs and is ready.
  void Running(const std::string& pod) {
    absl::StatusOr<json> r = api_->Patch(
        StrCat("/api/v1/namespaces/", ns_, "/pods/", pod, "/status"), k8s::PatchType::kMerge,
        {{"status",
          {{"phase", "Running"},
           {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}});
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // As a kubelet would once the containers of a terminating pod stopped.
  void RemoveTerminating() {
    for (const std::string& name : Evicted()) {
      (void)api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/", name),
                         {{"gracePeriodSeconds", 0}});
    }
  }
  bool EventOn(const std::string& pod, const std::string& reason, const std::string& text) {
    absl::StatusOr<json> list = api_->Get(
        StrCat("/api/v1/namespaces/", ns_,
               "/events?fieldSelector=", k8s::QueryEscape(StrCat("involvedObject.name=", pod))));
    if (!list.ok()) return false;
    for (const json& e : (*list)["items"]) {
      if (e.value("reason", "") == reason &&
          e.value("message", "").find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

  // A Queue (queues.tessera.dev) deserving `deserved` GPUs (the CRD applied first).
  bool MakeQueue(const std::string& name, int deserved) {
    std::string kubectl =
        StrCat("KUBECONFIG=", Cp().kubeconfig(), " ", Cp().kubectl_path(), " apply -f ",
               TESSERA_SOURCE_DIR, "/deploy/queue-crd.yaml > ", dir_, "/kubectl.log 2>&1");
    if (std::system(kubectl.c_str()) != 0) return false;
    json q = {{"apiVersion", "tessera.dev/v1alpha1"},
              {"kind", "Queue"},
              {"metadata", {{"name", name}, {"labels", {{"tessera-e2e/test", id_}}}}},
              {"spec", {{"deserved", {{"gpu", std::to_string(deserved)}}}}}};
    return WaitUntil([&] { return api_->Create("/apis/tessera.dev/v1alpha1/queues", q).ok(); },
                     seconds(20));
  }

  // Issue 35: queue tb (owed 4) asks 4 GPUs while queue ta (owed 4) holds all 8 of one node, as
  // 4 pods or as one gang of 4 (`gang`). All 4 victims are evicted in one pass, without waiting
  // for any to end; the 4 tb pods are nominated, nothing more is evicted, and all 4 bind once
  // the victims are deleted.
  void ReclaimFourAtOnce(bool gang) {
    const std::string ta = id_.substr(0, 20) + "-ta", tb = id_.substr(0, 20) + "-tb";
    ASSERT_TRUE(MakeQueue(ta, 4));
    ASSERT_TRUE(MakeQueue(tb, 4));
    const std::string node = AddNode("n", 8);
    ScopedProcess* s = StartScheduler("a");
    for (int i = 0; i < 8; ++i) AddPod(Whole(StrCat("a-", i), 0, ta));
    ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 8; }, seconds(60))) << s->Log();
    for (int i = 0; i < 8; ++i) Running(StrCat("a-", i));
    std::this_thread::sleep_for(seconds(2));  // the queue shares are read back
    for (int i = 0; i < 4; ++i) {
      PodObject p = Whole(StrCat("b-", i), 0, tb);
      if (gang) p.Gang("b", 4);
      AddPod(p);
    }
    const auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(WaitUntil([&] { return Evicted().size() >= 4; }, seconds(20))) << s->Log();
    const auto evicted_in = std::chrono::steady_clock::now() - start;
    std::cerr << "4 victims evicted in "
              << std::chrono::duration_cast<milliseconds>(evicted_in).count() << " ms\n";
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (int i = 0; i < 4; ++i) {
            if (Nominated(StrCat("b-", i)) != node) return false;
          }
          return true;
        },
        seconds(20)))
        << s->Log();
    std::this_thread::sleep_for(seconds(3));
    EXPECT_EQ(Evicted().size(), 4u);
    for (const std::string& v : Evicted()) EXPECT_EQ(v.rfind("a-", 0), 0u) << v;
    RemoveTerminating();
    ASSERT_TRUE(WaitUntil(
        [&] {
          for (int i = 0; i < 4; ++i) {
            if (!Bound(GetPod(StrCat("b-", i)))) return false;
          }
          return true;
        },
        seconds(30)))
        << s->Log();
    std::this_thread::sleep_for(seconds(2));
    EXPECT_TRUE(Evicted().empty());
    EXPECT_EQ(BoundCount(), 8u);
  }

  // Fair share that remembers (queues.usageHalfLife, issue 31), on one GPU: queue `burst` holds
  // it for 10 s while `steady` holds nothing; the scheduler stops; burst's pod is gone and both
  // queues ask for the GPU, burst's pod first; a new scheduler starts. With a half-life of 1m
  // (`remember`) burst's lately used GPU (about 0.1 GPU of decayed usage, written to its Queue's
  // status every second and read back by the new scheduler) puts steady first although it asked
  // later; with half-life 0 arrival decides and burst goes first. Both queues deserve nothing,
  // so neither may reclaim from the other: only the order decides.
  void DecayedUsageOrders(bool remember) {
    std::ofstream(dir_ + "/config.yaml", std::ios::app)
        << "queues: {usageHalfLife: " << (remember ? "1m" : "0s") << ", usageWriteInterval: 1s}\n";
    const std::string burst = id_.substr(0, 20) + "-burst", steady = id_.substr(0, 20) + "-steady";
    ASSERT_TRUE(MakeQueue(burst, 0));
    ASSERT_TRUE(MakeQueue(steady, 0));
    AddNode("n", 1);
    ScopedProcess* s = StartScheduler("a");
    AddPod(Whole("burst-0", 0, burst));
    ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("burst-0")); }, seconds(60))) << s->Log();
    Running("burst-0");
    std::this_thread::sleep_for(seconds(10));
    auto written = [&] {
      absl::StatusOr<json> q = api_->Get(StrCat("/apis/tessera.dev/v1alpha1/queues/", burst));
      if (!q.ok()) return false;
      const json usage = q->value("/status/usage"_json_pointer, json::object());
      return usage.is_object() && usage.value("gpuMilli", 0) > 50;
    };
    if (remember) {
      ASSERT_TRUE(WaitUntil(written, seconds(10))) << s->Log();
    } else {
      EXPECT_FALSE(written());  // no history is kept, so none is written
    }
    schedulers_.clear();
    ASSERT_TRUE(api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/burst-0"),
                             {{"gracePeriodSeconds", 0}})
                    .ok());
    ASSERT_TRUE(WaitUntil([&] { return !GetPod("burst-0").is_object(); }, seconds(20)));
    AddPod(Whole("burst-1", 0, burst));
    std::this_thread::sleep_for(milliseconds(1100));  // creationTimestamp has whole seconds
    AddPod(Whole("steady-1", 0, steady));
    ScopedProcess* again = StartScheduler("b");
    ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 1; }, seconds(60))) << again->Log();
    std::this_thread::sleep_for(seconds(3));  // a retry period: nothing changes
    EXPECT_EQ(Bound(GetPod("steady-1")), remember) << again->Log();
    EXPECT_EQ(Bound(GetPod("burst-1")), !remember) << again->Log();
    EXPECT_TRUE(Evicted().empty());
  }

  // The scheduler's /metrics ("" until it serves them).
  std::string Metrics(ScopedProcess& scheduler) {
    std::smatch m;
    const std::string log = scheduler.Log();
    if (!std::regex_search(log, m, std::regex("/readyz on http://127\\.0\\.0\\.1:([0-9]+)"))) {
      return "";
    }
    k8s::ClientConfig c;
    c.server = StrCat("http://127.0.0.1:", m[1].str());
    auto client = k8s::ApiClient::Create(c, k8s::ApiClientOptions{"e2e", 1, {}});
    if (!client.ok()) return "";
    k8s::HttpResponse r = (*client)->Call(k8s::HttpRequest{"GET", "/metrics"});
    if (r.status != 200) return "";
    // promtool passes on every /metrics the tests scrape.
    absl::Status lint = ::tessera::testing::PromtoolCheckMetricsOnce(r.body);
    EXPECT_TRUE(lint.ok()) << lint;
    return r.body;
  }

  std::unique_ptr<k8s::ApiClient> api_;
  std::string id_, ns_, scheduler_name_, dir_;
  std::vector<std::unique_ptr<ScopedProcess>> schedulers_;
};

// Eight 20Gi shares fill a 2-GPU node; one whole-GPU pod of higher priority evicts the four on
// one GPU, no more, is nominated there, and lands there once they are gone.
TEST_F(PreemptionE2e, FourSharesMakeRoomForOneWholeGpu) {
  const std::string node = AddNode("n", 2);
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 8; ++i) AddPod(Share(StrCat("share-", i), 0));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 8; }, seconds(60))) << s->Log();
  AddPod(Whole("urgent", 100));
  ASSERT_TRUE(WaitUntil([&] { return Evicted().size() >= 4; }, seconds(60))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Nominated("urgent") == node; }, seconds(30))) << s->Log();
  std::this_thread::sleep_for(seconds(3));  // nobody else goes meanwhile
  std::set<std::string> evicted = Evicted();
  EXPECT_EQ(evicted.size(), 4u);
  EXPECT_FALSE(Bound(GetPod("urgent")));
  EXPECT_THAT(Message("urgent"), HasSubstr("nominated to node " + node));
  EXPECT_TRUE(WaitUntil(
      [&] { return EventOn(*evicted.begin(), "Preempted", StrCat("for pod ", ns_, "/urgent")); },
      seconds(20)));
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("urgent")); }, seconds(60))) << s->Log();
  EXPECT_EQ(GetPod("urgent")["spec"]["nodeName"], node);
  EXPECT_EQ(BoundCount(), 5u);  // the four others stay
  EXPECT_TRUE(Evicted().empty());
}

// Eviction would not help (the one GPU is held by a pod of higher priority): nobody is evicted.
TEST_F(PreemptionE2e, NothingIsEvictedWhenItWouldNotHelp) {
  AddNode("n", 1);
  ScopedProcess* s = StartScheduler("a");
  AddPod(Whole("high", 50));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 1; }, seconds(60))) << s->Log();
  AddPod(Whole("urgent", 10));
  ASSERT_TRUE(WaitUntil([&] { return !Message("urgent").empty(); }, seconds(30))) << s->Log();
  EXPECT_THAT(Message("urgent"), HasSubstr("preemption would not help"));
  std::this_thread::sleep_for(seconds(4));  // a retry period
  EXPECT_TRUE(Evicted().empty());
  EXPECT_EQ(Nominated("urgent"), "");
}

// A PodDisruptionBudget that allows no disruption covers the cheaper victim (priority 0): the
// scheduler reads it before planning and evicts the other pod (priority 5) instead, so the
// Eviction API never has to refuse anything. Once only the protected pod is left, nothing is
// evicted and the pod is told why.
TEST_F(PreemptionE2e, ADisruptionBudgetIsRespected) {
  AddNode("a", 1);
  AddNode("b", 1);
  // The budget first, with the status the disruption controller would write (it does not run
  // here): the scheduler lists it as it starts.
  absl::StatusOr<json> pdb = api_->Create(
      StrCat("/apis/policy/v1/namespaces/", ns_, "/poddisruptionbudgets"),
      {{"apiVersion", "policy/v1"},
       {"kind", "PodDisruptionBudget"},
       {"metadata", {{"name", "keep"}}},
       {"spec", {{"minAvailable", 1}, {"selector", {{"matchLabels", {{"app", "keep"}}}}}}}});
  ASSERT_TRUE(pdb.ok()) << pdb.status();
  ASSERT_TRUE(
      api_->Patch(StrCat("/apis/policy/v1/namespaces/", ns_, "/poddisruptionbudgets/keep/status"),
                  k8s::PatchType::kMerge,
                  {{"status",
                    {{"observedGeneration", (*pdb)["metadata"]["generation"]},
                     {"disruptionsAllowed", 0},
                     {"currentHealthy", 1},
                     {"desiredHealthy", 1},
                     {"expectedPods", 1}}}})
          .ok());
  ScopedProcess* s = StartScheduler("a");
  AddPod(Whole("keep", 0), {{"app", "keep"}});
  AddPod(Whole("other", 5), {{"app", "other"}});
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 2; }, seconds(60))) << s->Log();
  Running("keep");
  Running("other");
  const std::string other_node = GetPod("other")["spec"]["nodeName"];
  AddPod(Whole("urgent", 100));
  ASSERT_TRUE(WaitUntil([&] { return !Evicted().empty(); }, seconds(60))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Nominated("urgent") == other_node; }, seconds(30)))
      << s->Log();
  std::this_thread::sleep_for(seconds(3));  // nobody else goes meanwhile
  EXPECT_EQ(Evicted(), std::set<std::string>{"other"});
  EXPECT_EQ(s->Log().find("refused"), std::string::npos) << s->Log();  // no 429 was needed
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("urgent")); }, seconds(60))) << s->Log();
  EXPECT_EQ(GetPod("urgent")["spec"]["nodeName"], other_node);

  // Only the protected pod is left below priority 100: nothing is evicted, and the pod says why.
  AddPod(Whole("urgent-2", 100));
  ASSERT_TRUE(
      WaitUntil([&] { return Message("urgent-2").find("disruption budget") != std::string::npos; },
                seconds(30)))
      << s->Log();
  EXPECT_THAT(Message("urgent-2"),
              HasSubstr(StrCat("disruption budget ", ns_, "/keep, which allows no eviction now")));
  std::this_thread::sleep_for(seconds(4));  // a retry period
  EXPECT_TRUE(Evicted().empty());
  EXPECT_TRUE(Bound(GetPod("keep")));
  EXPECT_EQ(Nominated("urgent-2"), "");
  EXPECT_EQ(s->Log().find("refused"), std::string::npos) << s->Log();
}

TEST_F(PreemptionE2e, AQueueOverItsShareGivesBack) {
  const std::string train = id_.substr(0, 20) + "-train", infer = id_.substr(0, 20) + "-infer";
  ASSERT_TRUE(MakeQueue(train, 2));
  ASSERT_TRUE(MakeQueue(infer, 2));
  AddNode("n", 4);
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 4; ++i) AddPod(Whole(StrCat("train-", i), 100, train));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 4; }, seconds(60))) << s->Log();
  for (int i = 0; i < 3; ++i) AddPod(Whole(StrCat("infer-", i), 0, infer));
  // Two come back to infer (its share), both evicted in one pass (issue 35); the third waits.
  ASSERT_TRUE(WaitUntil([&] { return Evicted().size() >= 2; }, seconds(60))) << s->Log();
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(Evicted().size(), 2u);
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 4; }, seconds(60))) << s->Log();
  std::this_thread::sleep_for(seconds(4));
  EXPECT_TRUE(Evicted().empty());
  int infer_bound = 0;
  for (const json& p : Pods()) {
    if (Bound(p) && std::string(p["metadata"]["name"]).rfind("infer-", 0) == 0) ++infer_bound;
  }
  EXPECT_EQ(infer_bound, 2);
  EXPECT_EQ(BoundCount(), 4u);
}

TEST_F(PreemptionE2e, FourPodsOfAQueueReclaimTheirShareInOnePass) { ReclaimFourAtOnce(false); }

TEST_F(PreemptionE2e, AGangOfFourReclaimsItsShareInOnePassWhole) { ReclaimFourAtOnce(true); }

// The queue hijack: a pod of another namespace names a team's queue to use its share. A Queue
// says which namespaces may use it; the intruder is not placed, and an Event says why, while the
// team's own pod is placed (issue 27; ctest label security: security_queue_hijack_namespace).
TEST_F(PreemptionE2e, QueueHijackAPodOfAnotherNamespaceIsRefused) {
  std::string kubectl =
      StrCat("KUBECONFIG=", Cp().kubeconfig(), " ", Cp().kubectl_path(), " apply -f ",
             TESSERA_SOURCE_DIR, "/deploy/queue-crd.yaml > ", dir_, "/kubectl.log 2>&1");
  ASSERT_EQ(std::system(kubectl.c_str()), 0);
  const std::string team = id_.substr(0, 20) + "-team";
  json q = {{"apiVersion", "tessera.dev/v1alpha1"},
            {"kind", "Queue"},
            {"metadata", {{"name", team}, {"labels", {{"tessera-e2e/test", id_}}}}},
            {"spec", {{"deserved", {{"gpu", "2"}}}, {"namespaces", {ns_}}}}};
  ASSERT_TRUE(WaitUntil([&] { return api_->Create("/apis/tessera.dev/v1alpha1/queues", q).ok(); },
                        seconds(20)));
  const std::string intruders = id_.substr(0, 40) + "-x";
  ASSERT_TRUE(api_->Create("/api/v1/namespaces", {{"apiVersion", "v1"},
                                                  {"kind", "Namespace"},
                                                  {"metadata", {{"name", intruders}}}})
                  .ok());
  AddNode("n", 2);
  ScopedProcess* s = StartScheduler("a");
  json intruder = PodObject(intruders, "intruder")
                      .Limit("tessera.dev/gpu", "1")
                      .Annotation("tessera.dev/queue", team)
                      .Scheduler(scheduler_name_)
                      .Json();
  ASSERT_TRUE(api_->Create(StrCat("/api/v1/namespaces/", intruders, "/pods"), intruder).ok());
  AddPod(Whole("member", 0, team));
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("member")); }, seconds(60))) << s->Log();
  const std::string why = StrCat("queue ", team, " does not admit pods of namespace ", intruders);
  auto intruder_refused = [&] {
    absl::StatusOr<json> list = api_->Get(
        StrCat("/api/v1/namespaces/", intruders,
               "/events?fieldSelector=", k8s::QueryEscape("involvedObject.name=intruder")));
    if (!list.ok()) return false;
    for (const json& e : (*list)["items"]) {
      if (e.value("reason", "") == "FailedScheduling" &&
          e.value("message", "").find(why) != std::string::npos) {
        return true;
      }
    }
    return false;
  };
  EXPECT_TRUE(WaitUntil(intruder_refused, seconds(60))) << s->Log();
  absl::StatusOr<json> still =
      api_->Get(StrCat("/api/v1/namespaces/", intruders, "/pods/intruder"));
  ASSERT_TRUE(still.ok());
  EXPECT_FALSE(Bound(*still)) << "the intruder was placed on the team's queue";
  (void)api_->Delete(StrCat("/api/v1/namespaces/", intruders, "/pods?gracePeriodSeconds=0"));
  (void)api_->Delete(StrCat("/api/v1/namespaces/", intruders));
}

// The scheduler is killed after evicting and nominating; the next one evicts nobody more, keeps
// the nomination, and places the pod there once the victims are gone.
TEST_F(PreemptionE2e, RestartMidPreemption) {
  const std::string node = AddNode("n", 1);
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 4; ++i) AddPod(Share(StrCat("share-", i), 0));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 4; }, seconds(60))) << s->Log();
  AddPod(Whole("urgent", 100));
  ASSERT_TRUE(
      WaitUntil([&] { return Evicted().size() == 4 && Nominated("urgent") == node; }, seconds(60)))
      << s->Log();
  schedulers_.clear();       // SIGKILL
  AddPod(Share("late", 0));  // arrives while nobody schedules
  ScopedProcess* again = StartScheduler("b");
  ASSERT_TRUE(again->WaitForLog("caches synced", seconds(60))) << again->Log();
  std::this_thread::sleep_for(seconds(4));
  EXPECT_EQ(Evicted().size(), 4u);  // nobody more
  EXPECT_EQ(Nominated("urgent"), node);
  EXPECT_FALSE(Bound(GetPod("late")));
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("urgent")); }, seconds(60))) << again->Log();
  EXPECT_EQ(GetPod("urgent")["spec"]["nodeName"], node);
  EXPECT_FALSE(Bound(GetPod("late")));  // the room was kept for urgent
}

// A gang's members nominated to a node keep the room being made there as one, across a restart:
// a pod of lower priority that would fit beside either member alone, and a gang of lower
// priority, arriving while nobody schedules, are not placed there; the gang lands once the
// victims are gone.
TEST_F(PreemptionE2e, AGangKeepsItsNominatedRoomAcrossARestart) {
  const std::string node = AddNode("n", 2);
  ScopedProcess* s = StartScheduler("a");
  AddPod(Whole("old-0", 0).Gang("old", 2));
  AddPod(Whole("old-1", 0).Gang("old", 2));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 2; }, seconds(60))) << s->Log();
  AddPod(Whole("new-0", 100).Gang("new", 2));
  AddPod(Whole("new-1", 100).Gang("new", 2));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Evicted().size() == 2 && Nominated("new-0") == node && Nominated("new-1") == node;
      },
      seconds(60)))
      << s->Log();
  schedulers_.clear();  // SIGKILL
  AddPod(Whole("late", 1));
  AddPod(Whole("late-g0", 1).Gang("late-g", 2));
  AddPod(Whole("late-g1", 1).Gang("late-g", 2));
  ScopedProcess* again = StartScheduler("b");
  ASSERT_TRUE(again->WaitForLog("caches synced", seconds(60))) << again->Log();
  std::this_thread::sleep_for(seconds(4));
  EXPECT_EQ(Evicted().size(), 2u);  // nobody more
  EXPECT_EQ(Nominated("new-0"), node);
  EXPECT_EQ(Nominated("new-1"), node);
  RemoveTerminating();
  ASSERT_TRUE(
      WaitUntil([&] { return Bound(GetPod("new-0")) && Bound(GetPod("new-1")); }, seconds(60)))
      << again->Log();
  EXPECT_EQ(GetPod("new-0")["spec"]["nodeName"], node);
  EXPECT_EQ(GetPod("new-1")["spec"]["nodeName"], node);
  for (const char* p : {"late", "late-g0", "late-g1"}) EXPECT_FALSE(Bound(GetPod(p))) << p;
}

// A pending gang evicts a whole running gang (two pods of priority 0, cheaper than the two
// singles of priority 50), both of its members are nominated, and both land once the victims are
// gone; nobody else is evicted.
TEST_F(PreemptionE2e, AGangEvictsAWholeGang) {
  const std::string node = AddNode("n", 4);
  ScopedProcess* s = StartScheduler("a");
  AddPod(Whole("old-0", 0).Gang("old", 2));
  AddPod(Whole("old-1", 0).Gang("old", 2));
  AddPod(Whole("single-0", 50));
  AddPod(Whole("single-1", 50));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 4; }, seconds(60))) << s->Log();
  for (const char* p : {"old-0", "old-1", "single-0", "single-1"}) Running(p);
  AddPod(Whole("new-0", 100).Gang("new", 2));
  AddPod(Whole("new-1", 100).Gang("new", 2));
  ASSERT_TRUE(WaitUntil([&] { return Evicted().size() >= 2; }, seconds(60))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Nominated("new-0") == node && Nominated("new-1") == node; },
                        seconds(30)))
      << s->Log();
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(Evicted(), (std::set<std::string>{"old-0", "old-1"}));
  EXPECT_THAT(Message("new-0"),
              HasSubstr(StrCat("gang ", ns_, "/new nominated to node(s) ", node)));
  EXPECT_TRUE(
      WaitUntil([&] { return EventOn("old-0", "Preempted", StrCat("for gang ", ns_, "/new")); },
                seconds(20)));
  RemoveTerminating();
  ASSERT_TRUE(
      WaitUntil([&] { return Bound(GetPod("new-0")) && Bound(GetPod("new-1")); }, seconds(60)))
      << s->Log();
  EXPECT_EQ(BoundCount(), 4u);
  EXPECT_TRUE(Evicted().empty());
}

// Workload-aware preemption with upstream PodGroups: a PodGroup of priority 100 (spec.priority;
// its pod says 0) evicts a running gang PodGroup whose spec.disruptionMode is all as one unit: all
// three of its pods go, although the newcomer needs one GPU and the member above the group's
// minCount alone would do under mode single; the pod of priority 200 stays.
TEST_F(PreemptionE2e, APodGroupPreemptsWithItsPriorityAndIsEvictedAsAUnit) {
  const std::string node = AddNode("n", 4, true);
  auto group = [&](const std::string& name, int min, json extra) {
    json g = k8s::testing::PodGroupJson(ns_, name, min);
    g["spec"].update(extra);
    absl::StatusOr<json> created =
        api_->Create(StrCat("/apis/scheduling.k8s.io/v1beta1/namespaces/", ns_, "/podgroups"), g);
    ASSERT_TRUE(created.ok()) << created.status();
  };
  group("low", 2, {{"disruptionMode", {{"all", json::object()}}}});
  group("high", 1, {{"priority", 100}});
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 3; ++i) {
    AddPod(PodObject(ns_, StrCat("low-", i)).Limit("tessera.dev/gpu", "1").PodGroup("low"));
  }
  AddPod(Whole("keep", 200));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 4; }, seconds(60))) << s->Log();
  for (const char* p : {"low-0", "low-1", "low-2", "keep"}) Running(p);
  AddPod(PodObject(ns_, "high-0").Limit("tessera.dev/gpu", "1").PodGroup("high"));
  ASSERT_TRUE(WaitUntil([&] { return Evicted().size() >= 3; }, seconds(60))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Nominated("high-0") == node; }, seconds(30))) << s->Log();
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(Evicted(), (std::set<std::string>{"low-0", "low-1", "low-2"}));
  EXPECT_TRUE(
      WaitUntil([&] { return EventOn("low-2", "Preempted", StrCat("for gang ", ns_, "/high")); },
                seconds(20)))
      << s->Log();
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("high-0")); }, seconds(60))) << s->Log();
  EXPECT_TRUE(Bound(GetPod("keep")));
}

// An elastic gang (size 4, min 2) evicts for its min only: 2 of the 4 low-priority pods go, its
// two oldest members are nominated and land; the other two wait and evict nobody (an elastic gang
// grows into room that frees up), until a low-priority pod ends by itself.
TEST_F(PreemptionE2e, AnElasticGangEvictsForItsMinOnly) {
  const std::string node = AddNode("n", 4);
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 4; ++i) AddPod(Whole(StrCat("low-", i), 0));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 4; }, seconds(60))) << s->Log();
  for (int i = 0; i < 4; ++i) Running(StrCat("low-", i));
  for (int i = 0; i < 4; ++i) {
    AddPod(Whole(StrCat("e-", i), 100).Gang("e", 4).Annotation("tessera.dev/gang-min", "2"));
  }
  ASSERT_TRUE(WaitUntil([&] { return Evicted().size() >= 2; }, seconds(60))) << s->Log();
  ASSERT_TRUE(
      WaitUntil([&] { return Nominated("e-0") == node && Nominated("e-1") == node; }, seconds(30)))
      << s->Log();
  std::this_thread::sleep_for(seconds(3));
  EXPECT_EQ(Evicted().size(), 2u);
  EXPECT_EQ(Nominated("e-2"), "");
  EXPECT_THAT(Message("e-3"), HasSubstr(StrCat("gang ", ns_, "/e: 2 of its members nominated")));
  EXPECT_THAT(Message("e-3"), HasSubstr("joins when room frees up"));
  EXPECT_TRUE(
      WaitUntil([&] { return EventOn(*Evicted().begin(), "Preempted", "(2 pods, priority 100"); },
                seconds(20)));
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("e-0")) && Bound(GetPod("e-1")); }, seconds(60)))
      << s->Log();
  // Running at its min: retried (a period), it evicts nobody to grow.
  std::this_thread::sleep_for(seconds(4));
  EXPECT_TRUE(Evicted().empty());
  EXPECT_FALSE(Bound(GetPod("e-2")));
  EXPECT_THAT(Message("e-2"), HasSubstr("2 of 4 members running (min 2); no room for more now"));
  std::string left;
  for (int i = 0; i < 4 && left.empty(); ++i) {
    if (Bound(GetPod(StrCat("low-", i)))) left = StrCat("low-", i);
  }
  ASSERT_FALSE(left.empty());
  (void)api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/", left),
                     {{"gracePeriodSeconds", 0}});
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("e-2")); }, seconds(60))) << s->Log();
  EXPECT_FALSE(Bound(GetPod("e-3")));
  EXPECT_TRUE(Evicted().empty());
}

// The scheduling queue serves the queue furthest below its fair share first (dominant-resource
// fairness), not the one whose pods came first nor queues in turns. `big` holds 3 GPUs; the
// scheduler is down while 4 more of its pods and then 2 of `small`'s arrive, and a node with 2
// free GPUs appears. Fair shares (implicit queues, weight 1, 5 GPUs): big 3, small 2; small is at
// 0, big at its share: both of small's pods get the 2 GPUs, none of big's (by arrival big-3 and
// big-4 would; by turns big-3 and small-0).
TEST_F(PreemptionE2e, TheQueueFurthestBelowItsShareGoesFirst) {
  AddNode("a", 3);
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 3; ++i) AddPod(Whole(StrCat("big-", i), 0, "big"));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 3; }, seconds(60))) << s->Log();
  schedulers_.clear();
  for (int i = 3; i < 7; ++i) AddPod(Whole(StrCat("big-", i), 0, "big"));
  std::this_thread::sleep_for(milliseconds(1100));  // creationTimestamp has whole seconds
  AddPod(Whole("small-0", 0, "small"));
  AddPod(Whole("small-1", 0, "small"));
  AddNode("b", 2);
  ScopedProcess* again = StartScheduler("b");
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 5; }, seconds(60))) << again->Log();
  std::this_thread::sleep_for(seconds(4));  // a retry period: nothing else lands
  EXPECT_TRUE(Bound(GetPod("small-0")));
  EXPECT_TRUE(Bound(GetPod("small-1")));
  for (int i = 3; i < 7; ++i) EXPECT_FALSE(Bound(GetPod(StrCat("big-", i)))) << i;
  EXPECT_TRUE(Evicted().empty());
  // The per-queue figures on /metrics say the same (published every second).
  const std::vector<std::string> want = {
      "tessera_scheduler_queue_allocated_gpus{queue=\"big\"} 3\n",
      "tessera_scheduler_queue_allocated_gpus{queue=\"small\"} 2\n",
      "tessera_scheduler_queue_fair_share_gpus{queue=\"small\"} 2\n",
      "tessera_scheduler_queue_pending_gpus{queue=\"big\"} 4\n",
      "tessera_scheduler_queue_pending_pods{queue=\"big\"} 4\n",
      "tessera_scheduler_queue_pending_pods{queue=\"small\"} 0\n",
      "tessera_scheduler_queue_borrowed_gpus{queue=\"big\"} 3\n",
      "tessera_scheduler_queue_deserved_gpus{queue=\"big\"} 0\n",
  };
  std::string body;
  EXPECT_TRUE(WaitUntil(
      [&] {
        body = Metrics(*again);
        for (const std::string& w : want) {
          if (body.find(w) == std::string::npos) return false;
        }
        return true;
      },
      seconds(20)))
      << body;
}

TEST_F(PreemptionE2e, AQueueThatBurstLatelyGoesAfterOneThatDidNot) { DecayedUsageOrders(true); }

TEST_F(PreemptionE2e, WithoutAHalfLifeArrivalDecidesAfterABurst) { DecayedUsageOrders(false); }

// The defragmentation executor (defrag: in the scheduler's configuration): node a holds three
// 20Gi shares on GPUs 0..2, node b one on GPU 0, all of one ReplicaSet; a 4-GPU pod of the same
// priority waits (preemption cannot help). Once it has waited `after`, the scheduler evicts b's
// share (a disruption budget first refuses it, and nothing is evicted while it does), nominates
// the pod to b, says so in Events, and the pod lands on b once the share is gone.
TEST_F(PreemptionE2e, DefragmentationMovesAShareAndThePodLands) {
  std::ofstream(dir_ + "/config.yaml", std::ios::app)
      << "defrag: {enabled: true, after: 3s, maxMoves: 2}\n";
  const std::string a = AddNode("a", 4), b = AddNode("b", 4);
  auto share = [](const std::string& node, int gpu) {
    return k8s::testing::OneGpuAssignment(node, gpu, 20480);
  };
  for (int g = 0; g < 3; ++g) {
    AddPod(Share(StrCat("a", g), 0).Controller("ReplicaSet", "infer").Assigned(share(a, g)),
           {{"app", "infer"}});
  }
  AddPod(Share("b0", 0).Controller("ReplicaSet", "infer").Assigned(share(b, 0)),
         {{"app", "infer-b"}});
  for (const char* p : {"a0", "a1", "a2", "b0"}) Running(p);
  // A budget that allows no disruption of b0 (what the disruption controller would write).
  absl::StatusOr<json> pdb = api_->Create(
      StrCat("/apis/policy/v1/namespaces/", ns_, "/poddisruptionbudgets"),
      {{"apiVersion", "policy/v1"},
       {"kind", "PodDisruptionBudget"},
       {"metadata", {{"name", "infer-b"}}},
       {"spec", {{"minAvailable", 1}, {"selector", {{"matchLabels", {{"app", "infer-b"}}}}}}}});
  ASSERT_TRUE(pdb.ok()) << pdb.status();
  ASSERT_TRUE(api_->Patch(StrCat("/apis/policy/v1/namespaces/", ns_,
                                 "/poddisruptionbudgets/infer-b/status"),
                          k8s::PatchType::kMerge,
                          {{"status",
                            {{"observedGeneration", (*pdb)["metadata"]["generation"]},
                             {"disruptionsAllowed", 0},
                             {"currentHealthy", 1},
                             {"desiredHealthy", 1},
                             {"expectedPods", 1}}}})
                  .ok());
  ScopedProcess* s = StartScheduler("a");
  AddPod(Whole("big", 0).Limit("tessera.dev/gpu", "4"));
  ASSERT_TRUE(
      WaitUntil([&] { return s->Log().find("defragmentation: evicting pod") != std::string::npos; },
                seconds(60)))
      << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return s->Log().find("refused") != std::string::npos; }, seconds(30)))
      << s->Log();
  EXPECT_TRUE(Evicted().empty());  // the budget holds b0
  EXPECT_FALSE(Bound(GetPod("big")));

  // The budget allows one now: the next plan's eviction goes through.
  ASSERT_TRUE(api_->Patch(StrCat("/apis/policy/v1/namespaces/", ns_,
                                 "/poddisruptionbudgets/infer-b/status"),
                          k8s::PatchType::kMerge, {{"status", {{"disruptionsAllowed", 1}}}})
                  .ok());
  ASSERT_TRUE(WaitUntil([&] { return Evicted() == std::set<std::string>{"b0"}; }, seconds(90)))
      << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Nominated("big") == b; }, seconds(30))) << s->Log();
  EXPECT_THAT(Message("big"), HasSubstr("nominated to node " + b));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return EventOn("b0", "DefragmentationMove",
                       StrCat("to defragment: pod ", ns_, "/big (priority 0, 4 whole GPUs)"));
      },
      seconds(20)))
      << s->Log();
  EXPECT_TRUE(WaitUntil(
      [&] {
        return EventOn(
            "big", "Defragmentation",
            StrCat("to make room on node ", b, ": ", ns_, "/b0 from ", b, " GPU 0 (20Gi) to ", a));
      },
      seconds(20)))
      << s->Log();
  std::this_thread::sleep_for(seconds(4));
  EXPECT_EQ(Evicted(), std::set<std::string>{"b0"});  // nothing more, nothing twice
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("big")); }, seconds(60))) << s->Log();
  EXPECT_EQ(GetPod("big")["spec"]["nodeName"], b);
  EXPECT_EQ(BoundCount(), 4u);  // a0..a2 stay where they were
}

// A gang under the defragmentation executor, and the moved pod's replacement steered: nodes a and
// b (4 GPUs on an NVSwitch each); a holds three 70Gi shares on GPUs 0..2, b one 20Gi share on GPU
// 0, all with a controller. A gang of two pods of 2 GPUs each that must share one NVLink domain
// fits nowhere (a has one free GPU, b three). Once it has waited, the scheduler evicts b's share,
// nominates both members to b and says so in Events; the replacement the share's ReplicaSet would
// make (another name, the same owner and request) goes to the plan's destination, a's GPU 3, not
// to b's free GPUs; the gang lands on b, both members, once the share is gone.
TEST_F(PreemptionE2e, DefragmentationMovesAShareForAGangAndSteersItsReplacement) {
  std::ofstream(dir_ + "/config.yaml", std::ios::app)
      << "defrag: {enabled: true, after: 3s, maxMoves: 2, holdFor: 60s}\n";
  const std::string a = AddNode("a", 4, /*nvswitch=*/true);
  const std::string b = AddNode("b", 4, /*nvswitch=*/true);
  auto share = [](const std::string& node, int gpu, int64_t gi) {
    return k8s::testing::OneGpuAssignment(node, gpu, gi * 1024);
  };
  for (int g = 0; g < 3; ++g) {
    AddPod(PodObject(ns_, StrCat("a", g))
               .Limit("tessera.dev/gpu-memory", "70Gi")
               .Controller("ReplicaSet", "big-infer")
               .Assigned(share(a, g, 70)));
  }
  AddPod(Share("b0", 0).Controller("ReplicaSet", "infer").Assigned(share(b, 0, 20)));
  for (const char* p : {"a0", "a1", "a2", "b0"}) Running(p);
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 2; ++i) {
    AddPod(Whole(StrCat("train-", i), 0)
               .Limit("tessera.dev/gpu", "2")
               .Gang("train", 2, "nvlink-domain"));
  }
  ASSERT_TRUE(WaitUntil([&] { return Evicted() == std::set<std::string>{"b0"}; }, seconds(60)))
      << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Nominated("train-0") == b && Nominated("train-1") == b; },
                        seconds(30)))
      << s->Log();
  EXPECT_THAT(Message("train-1"),
              HasSubstr(StrCat("gang ", ns_, "/train nominated to node(s) ", b)));
  EXPECT_TRUE(WaitUntil(
      [&] {
        return EventOn(
            "b0", "DefragmentationMove",
            StrCat("to defragment: gang ", ns_, "/train (2 pods, priority 0, 2 whole GPUs each)"));
      },
      seconds(20)))
      << s->Log();
  for (const char* m : {"train-0", "train-1"}) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          return EventOn(m, "Defragmentation",
                         StrCat("to make room on node ", b, ": ", ns_, "/b0 from ", b,
                                " GPU 0 (20Gi) to ", a, " GPU 3 (20Gi)"));
        },
        seconds(20)))
        << s->Log();
  }

  // b0 terminates (its kubelet has not removed it yet); its ReplicaSet's replacement comes now.
  AddPod(Share("b0-x", 0).Controller("ReplicaSet", "infer"));
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("b0-x")); }, seconds(30))) << s->Log();
  json replacement = GetPod("b0-x");
  EXPECT_EQ(replacement["spec"]["nodeName"], a);
  absl::StatusOr<records::Assignment> placed = records::AssignmentFromJson(
      replacement["metadata"]["annotations"].value("tessera.dev/assignment", ""));
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_EQ(placed->gpus.size(), 1u);
  EXPECT_EQ(placed->gpus[0].grant.gpu, 3);
  EXPECT_TRUE(EventOn("b0-x", "DefragmentationDestination",
                      StrCat("placed at ", a, " GPU 3 (20Gi), where defragmentation for gang ", ns_,
                             "/train moved pod ", ns_, "/b0")));
  EXPECT_FALSE(Bound(GetPod("train-0")));

  RemoveTerminating();
  ASSERT_TRUE(
      WaitUntil([&] { return Bound(GetPod("train-0")) && Bound(GetPod("train-1")); }, seconds(60)))
      << s->Log();
  EXPECT_EQ(GetPod("train-0")["spec"]["nodeName"], b);
  EXPECT_EQ(GetPod("train-1")["spec"]["nodeName"], b);
  EXPECT_EQ(Evicted(), std::set<std::string>{});  // nothing else moved
  EXPECT_EQ(BoundCount(), 6u);                    // a0..a2, b0-x and the gang
}

// Issue 35, defragmentation: two pods that wait need moves on the same node. Node a holds four
// 30Gi bare shares (never moved; 50Gi free on each GPU), node b three 50Gi shares of one
// ReplicaSet on GPUs 1..3 (two never fit on one GPU) and a free GPU 0. Two 2-GPU pods of the same
// priority wait. The first fits on b once one share moves to a; the second's plan takes the first
// as done (its mover gone, the first pod standing on b, the mover's replacement at its held
// destination on a), so it moves the other two shares at once rather than counting on the free
// GPU the first pod needs (such a plan is refused, and the pod waited for the first to land): all
// three shares are evicted and both pods nominated to b before any share has ended; both land on
// b once the shares are gone, and nothing more is evicted.
TEST_F(PreemptionE2e, DefragmentationForTwoPodsOnOneNodeMovesForBothInOnePass) {
  std::ofstream(dir_ + "/config.yaml", std::ios::app)
      << "defrag: {enabled: true, after: 3s, maxMoves: 2, holdFor: 60s}\n";
  const std::string a = AddNode("a", 4), b = AddNode("b", 4);
  auto share = [](const std::string& node, int gpu, int64_t gi) {
    return k8s::testing::OneGpuAssignment(node, gpu, gi * 1024);
  };
  for (int g = 0; g < 4; ++g) {
    AddPod(PodObject(ns_, StrCat("a", g))
               .Limit("tessera.dev/gpu-memory", "30Gi")
               .Assigned(share(a, g, 30)));
    Running(StrCat("a", g));
  }
  for (int g = 1; g < 4; ++g) {
    AddPod(PodObject(ns_, StrCat("b", g))
               .Limit("tessera.dev/gpu-memory", "50Gi")
               .Controller("ReplicaSet", "infer")
               .Assigned(share(b, g, 50)));
    Running(StrCat("b", g));
  }
  ScopedProcess* s = StartScheduler("a");
  for (int i = 0; i < 2; ++i) AddPod(Whole(StrCat("p", i), 0).Limit("tessera.dev/gpu", "2"));
  const std::set<std::string> shares = {"b1", "b2", "b3"};
  ASSERT_TRUE(WaitUntil([&] { return Evicted() == shares; }, seconds(60))) << s->Log();
  ASSERT_TRUE(WaitUntil([&] { return Nominated("p0") == b && Nominated("p1") == b; }, seconds(30)))
      << s->Log();
  for (const char* p : {"p0", "p1"}) {
    EXPECT_TRUE(
        WaitUntil([&] { return EventOn(p, "Defragmentation", StrCat("to make room on node ", b)); },
                  seconds(20)))
        << s->Log();
  }
  std::this_thread::sleep_for(seconds(4));
  EXPECT_EQ(Evicted(), shares);  // nothing more, nothing twice
  RemoveTerminating();
  ASSERT_TRUE(WaitUntil([&] { return Bound(GetPod("p0")) && Bound(GetPod("p1")); }, seconds(60)))
      << s->Log();
  EXPECT_EQ(GetPod("p0")["spec"]["nodeName"], b);
  EXPECT_EQ(GetPod("p1")["spec"]["nodeName"], b);
  EXPECT_TRUE(Evicted().empty());
  EXPECT_EQ(BoundCount(), 6u);  // a0..a3 and both pods
}

}  // namespace
}  // namespace tessera::e2e
