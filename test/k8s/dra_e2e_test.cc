// `tessera scheduler` in DRA mode against the real API server and kube-controller-manager (its
// resourceclaim controller turns templates into claims, removes pods that are gone from
// reservedFor, deallocates claims nobody reserves and deletes template claims with their pods).
// Nodes are plain Node objects with the tessera.dev/gpu-inventory annotation, as the agent keeps
// publishing it in DRA mode, and the test publishes their ResourceSlices in the driver's format
// (notes/dra-contract.md); pods never run: they are bound, and what the scheduler decided is read
// back from the ResourceClaims' status.
//
// Each test has its own namespace, scheduler name, node label and Lease; slices are named after
// the test's nodes. TearDown kills the schedulers it started and deletes what it made.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/testing/dra_objects.h"
#include "k8s/testing/objects.h"
#include "scoped_process.h"

namespace tessera::e2e {
namespace {

using k8s::testing::ClaimObject;
using k8s::testing::NodeObject;
using k8s::testing::PodObject;
using k8s::testing::SliceObject;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kResource[] = "/apis/resource.k8s.io/v1";

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

std::string TestId() {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::string id;
  for (char c : name) {
    if (std::isupper(static_cast<unsigned char>(c)) && !id.empty()) id += '-';
    id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  id = id.substr(0, 30);
  while (!id.empty() && id.back() == '-') id.pop_back();
  return id;
}

class DraTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = k8s::ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    id_ = TestId();
    ns_ = StrCat("dra-", id_);
    scheduler_name_ = StrCat("tessera-", id_);
    dir_ = StrCat(::testing::TempDir(), "/tessera-dra-e2e-", getpid(), "-", id_);
    std::filesystem::create_directories(dir_);
    Create("/api/v1/namespaces",
           {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
    // The driver's classes (deploy/ ships them; cluster-scoped, shared by the tests).
    Create(StrCat(kResource, "/deviceclasses"), k8s::testing::GpuClass());
    Create(StrCat(kResource, "/deviceclasses"), k8s::testing::ShareClass());
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
dra: {enabled: true}
)");
  }

  void TearDown() override {
    schedulers_.clear();
    if (api_) {
      (void)api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods?gracePeriodSeconds=0"));
      for (const std::string& n : nodes_) {
        (void)api_->Delete(StrCat(kResource, "/resourceslices/", n, "-gpu.tessera.dev"));
        (void)api_->Delete(StrCat(kResource, "/resourceslices/", n, "-gpu.tessera.dev-counters"));
      }
      (void)api_->Delete(StrCat("/api/v1/nodes?labelSelector=",
                                k8s::QueryEscape(StrCat("tessera-e2e/test=", id_))));
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  void Create(const std::string& path, const json& object) {
    absl::StatusOr<json> created = api_->Create(path, object);
    ASSERT_TRUE(created.ok() || created.status().code() == absl::StatusCode::kAlreadyExists)
        << path << ": " << created.status();
  }

  ScopedProcess* StartScheduler(const std::string& identity) {
    std::vector<std::string> argv = {TESSERA_BINARY,    "scheduler", "--kubeconfig",
                                     Cp().kubeconfig(), "--config",  dir_ + "/config.yaml",
                                     "--identity",      identity};
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start(argv, StrCat(dir_, "/", identity, ".log"));
    EXPECT_TRUE(p.ok()) << p.status();
    schedulers_.push_back(std::move(*p));
    return schedulers_.back().get();
  }

  std::string NodeName(const std::string& base) { return StrCat(id_.substr(0, 20), "-", base); }

  // A Node with its inventory, and its ResourceSlice as the driver publishes it.
  void AddNode(NodeObject node, const std::string& name, SliceObject slice) {
    node.Label("tessera-e2e/test", id_);
    json j = node.Json();
    json status = j["status"];
    j.erase("status");
    Create("/api/v1/nodes", j);
    absl::StatusOr<json> patched = api_->Patch(StrCat("/api/v1/nodes/", name, "/status"),
                                               k8s::PatchType::kMerge, {{"status", status}});
    ASSERT_TRUE(patched.ok()) << patched.status();
    Create(StrCat(kResource, "/resourceslices"), slice.Json());
    if (slice.Json()["spec"]["pool"]["resourceSliceCount"] == 2) {
      Create(StrCat(kResource, "/resourceslices"), slice.CountersJson());  // MIG: counter sets
    }
    nodes_.push_back(name);
  }

  PodObject Pod(const std::string& name) {
    return PodObject(ns_, name)
        .Scheduler(scheduler_name_)
        .Request("cpu", "1")
        .Request("memory", "1Gi");
  }
  void AddPod(const json& pod) { Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), pod); }
  void AddClaim(const ClaimObject& c) {
    Create(StrCat(kResource, "/namespaces/", ns_, "/resourceclaims"), c.Json());
  }
  void AddTemplate(const ClaimObject& c) {
    Create(StrCat(kResource, "/namespaces/", ns_, "/resourceclaimtemplates"), c.TemplateJson());
  }

  json List(const std::string& path) {
    absl::StatusOr<json> list = api_->Get(path);
    EXPECT_TRUE(list.ok()) << list.status();
    return list.ok() ? (*list)["items"] : json::array();
  }
  json Pods() { return List(StrCat("/api/v1/namespaces/", ns_, "/pods")); }
  json Claims() { return List(StrCat(kResource, "/namespaces/", ns_, "/resourceclaims")); }
  json Claim(const std::string& name) {
    absl::StatusOr<json> c =
        api_->Get(StrCat(kResource, "/namespaces/", ns_, "/resourceclaims/", name));
    return c.ok() ? *c : json();
  }
  static bool IsBound(const json& pod) {
    return !pod["spec"].value("nodeName", std::string()).empty();
  }
  int BoundCount() {
    int n = 0;
    for (const json& p : Pods()) n += IsBound(p) ? 1 : 0;
    return n;
  }
  std::string NodeOf(const std::string& pod) {
    absl::StatusOr<json> p = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/pods/", pod));
    return p.ok() ? (*p)["spec"].value("nodeName", std::string()) : "";
  }
  std::string EventMessages(const std::string& pod) {
    std::string all;
    for (const json& e : List(StrCat("/api/v1/namespaces/", ns_, "/events?fieldSelector=",
                                     k8s::QueryEscape(StrCat("involvedObject.name=", pod))))) {
      StrAppend(&all, e.value("reason", ""), ": ", e.value("message", ""), "\n");
    }
    return all;
  }

  std::unique_ptr<k8s::ApiClient> api_;
  std::string id_, ns_, scheduler_name_, dir_;
  std::vector<std::string> nodes_;
  std::vector<std::unique_ptr<ScopedProcess>> schedulers_;
};

// The reality check through claims: 20 pods each with a claim (from a template) for 4Gi of one
// GPU land on one GPU by consumable capacity; a gang of 8 pods with one-GPU claims that must
// share an NVLink domain lands on the NVSwitch node.
TEST_F(DraTest, RealityCheckThroughClaims) {
  const std::string nvswitch = NodeName("nvswitch"), pcie = NodeName("pcie");
  AddNode(NodeObject(nvswitch).Gpus(8, "H100-80GB", 81920).NvSwitch().Cpu("128").Memory("1Ti"),
          nvswitch, SliceObject(nvswitch).Gpus(8, "H100-80GB", "80Gi"));
  AddNode(NodeObject(pcie).Gpus(2, "H100-80GB", 81920).Cpu("32").Memory("256Gi"), pcie,
          SliceObject(pcie).Gpus(2, "H100-80GB", "80Gi"));
  AddTemplate(ClaimObject(ns_, "share-4gi")
                  .Request("gpu", "gpu-share.tessera.dev")
                  .Capacity("memory", "4Gi"));
  AddTemplate(ClaimObject(ns_, "one-gpu").Request("gpu", "gpu.tessera.dev"));
  ScopedProcess* s = StartScheduler("rc");
  for (int i = 0; i < 20; ++i) {
    AddPod(
        k8s::testing::WithClaimTemplate(Pod(StrCat("inference-", i)).Json(), "gpu", "share-4gi"));
  }
  for (int i = 0; i < 8; ++i) {
    AddPod(k8s::testing::WithClaimTemplate(
        Pod(StrCat("train-", i)).Gang("train", 8, "nvlink-domain").Json(), "gpu", "one-gpu"));
  }
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 28; }, seconds(120)))
      << BoundCount() << " of 28 bound\n"
      << s->Log();

  std::map<std::string, std::string> pod_node, pod_uid;
  for (const json& p : Pods()) {
    const std::string name = p["metadata"]["name"];
    pod_node[name] = p["spec"]["nodeName"].get<std::string>();
    pod_uid[name] = p["metadata"]["uid"].get<std::string>();
  }
  std::set<std::pair<std::string, std::string>> inference_devices, train_devices;
  std::set<std::string> share_ids;
  int claims = 0;
  for (const json& c : Claims()) {
    ++claims;
    const std::string name = c["metadata"]["name"];
    ASSERT_TRUE(c.contains("status") && c["status"].contains("allocation")) << c.dump(2);
    const json& reserved = c["status"]["reservedFor"];
    ASSERT_EQ(reserved.size(), 1u) << c.dump(2);
    const std::string pod = reserved[0]["name"].get<std::string>();
    EXPECT_EQ(reserved[0]["uid"], pod_uid[pod]) << name;
    EXPECT_THAT(c["metadata"]["finalizers"].dump(),
                HasSubstr("resource.kubernetes.io/delete-protection"));
    const json& alloc = c["status"]["allocation"];
    EXPECT_EQ(alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0],
              pod_node[pod])
        << name;
    const json& results = alloc["devices"]["results"];
    ASSERT_EQ(results.size(), 1u) << name;
    const json& r = results[0];
    EXPECT_EQ(r["driver"], "gpu.tessera.dev");
    EXPECT_EQ(r["pool"], pod_node[pod]);
    share_ids.insert(r.value("shareID", ""));
    if (pod.rfind("inference-", 0) == 0) {
      EXPECT_EQ(r["consumedCapacity"]["memory"], "4Gi") << name;
      EXPECT_EQ(r["consumedCapacity"]["compute"], "0") << name;
      inference_devices.insert({r["pool"].get<std::string>(), r["device"].get<std::string>()});
    } else {
      EXPECT_EQ(pod_node[pod], nvswitch) << pod;
      EXPECT_EQ(r["consumedCapacity"]["memory"], "80Gi") << name << ": a whole GPU";
      train_devices.insert({r["pool"].get<std::string>(), r["device"].get<std::string>()});
    }
  }
  EXPECT_EQ(claims, 28);
  EXPECT_EQ(share_ids.size(), 28u) << "every result has its own shareID";
  EXPECT_EQ(inference_devices.size(), 1u) << "the 20 shares are on one GPU";
  EXPECT_EQ(train_devices.size(), 8u) << "the gang has 8 distinct GPUs of the NVSwitch node";
  for (const auto& d : inference_devices) EXPECT_EQ(train_devices.count(d), 0u);
}

// A claim shared by two pods: allocated once, reserved for both; freed only when the last is gone
// (the resourceclaim controller deallocates it), and then its GPU serves a waiting pod.
TEST_F(DraTest, SharedClaimIsFreedWhenItsLastPodIsGone) {
  const std::string node = NodeName("one");
  AddNode(NodeObject(node).Gpus(1, "H100-80GB", 81920).Cpu("32").Memory("256Gi"), node,
          SliceObject(node).Gpus(1, "H100-80GB", "80Gi"));
  AddClaim(ClaimObject(ns_, "shared").Request("gpu", "gpu.tessera.dev"));
  AddClaim(ClaimObject(ns_, "later").Request("gpu", "gpu.tessera.dev"));
  ScopedProcess* s = StartScheduler("shared");
  AddPod(k8s::testing::WithClaims(Pod("a").Json(), {{"gpu", "shared"}}));
  AddPod(k8s::testing::WithClaims(Pod("b").Json(), {{"gpu", "shared"}}));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 2; }, seconds(60))) << s->Log();
  json c = Claim("shared");
  EXPECT_EQ(c["status"]["reservedFor"].size(), 2u) << c.dump(2);
  EXPECT_EQ(NodeOf("a"), node);
  EXPECT_EQ(NodeOf("b"), node);
  // The only GPU is taken: a pod with another claim waits, and says why.
  AddPod(k8s::testing::WithClaims(Pod("c").Json(), {{"gpu", "later"}}));
  ASSERT_TRUE(WaitUntil([&] { return !EventMessages("c").empty(); }, seconds(30))) << s->Log();
  EXPECT_THAT(EventMessages("c"), HasSubstr("FailedScheduling"));
  EXPECT_EQ(NodeOf("c"), "");

  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/a?gracePeriodSeconds=0")).ok());
  ASSERT_TRUE(
      WaitUntil([&] { return Claim("shared")["status"]["reservedFor"].size() == 1; }, seconds(60)));
  EXPECT_TRUE(Claim("shared")["status"].contains("allocation"));
  EXPECT_EQ(NodeOf("c"), "") << "the claim still holds the GPU for pod b";
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/b?gracePeriodSeconds=0")).ok());
  ASSERT_TRUE(WaitUntil([&] { return NodeOf("c") == node; }, seconds(90)))
      << Claim("shared").dump(2) << "\n"
      << s->Log();
  EXPECT_FALSE(Claim("shared")["status"].contains("allocation"));
  EXPECT_EQ(Claim("later")["status"]["reservedFor"][0]["name"], "c");
}

// What tessera does not allocate is refused with an Event naming the claim and the reason: a
// selector outside the CEL subset, and a claim tessera cannot serve (a share of two GPUs).
TEST_F(DraTest, UnsupportedSelectorAndMalformedClaimGiveEvents) {
  const std::string node = NodeName("n");
  AddNode(NodeObject(node).Gpus(2, "H100-80GB", 81920).Cpu("32").Memory("256Gi"), node,
          SliceObject(node).Gpus(2, "H100-80GB", "80Gi"));
  AddClaim(ClaimObject(ns_, "regex")
               .Request("gpu", "gpu.tessera.dev")
               .Selector("device.attributes[\"gpu.tessera.dev\"].model.matches(\"^H100\")"));
  AddClaim(ClaimObject(ns_, "two-shares")
               .Request("gpu", "gpu-share.tessera.dev", 2)
               .Capacity("memory", "4Gi"));
  AddClaim(ClaimObject(ns_, "fine").Request("gpu", "gpu.tessera.dev"));
  ScopedProcess* s = StartScheduler("refusals");
  AddPod(k8s::testing::WithClaims(Pod("regex").Json(), {{"gpu", "regex"}}));
  AddPod(k8s::testing::WithClaims(Pod("two-shares").Json(), {{"gpu", "two-shares"}}));
  AddPod(k8s::testing::WithClaims(Pod("missing").Json(), {{"gpu", "no-such-claim"}}));
  AddPod(k8s::testing::WithClaims(Pod("fine").Json(), {{"gpu", "fine"}}));
  ASSERT_TRUE(WaitUntil(
      [&] {
        return EventMessages("regex").find("matches") != std::string::npos &&
               !EventMessages("two-shares").empty() && !EventMessages("missing").empty();
      },
      seconds(60)))
      << s->Log();
  EXPECT_THAT(EventMessages("regex"), HasSubstr("claim " + ns_ + "/regex request gpu"));
  EXPECT_THAT(EventMessages("regex"), HasSubstr("the method 'matches'"));
  EXPECT_THAT(EventMessages("two-shares"), HasSubstr("must ask one device"));
  EXPECT_THAT(EventMessages("missing"), HasSubstr("no-such-claim does not exist"));
  // None of them was allocated anything; the valid pod next to them was.
  EXPECT_FALSE(Claim("regex")["status"].contains("allocation"));
  EXPECT_FALSE(Claim("two-shares")["status"].contains("allocation"));
  ASSERT_TRUE(WaitUntil([&] { return NodeOf("fine") == node; }, seconds(30))) << s->Log();
  EXPECT_EQ(NodeOf("regex"), "");
}

// A restarted scheduler rebuilds what the claims hold from their status: nothing is granted
// twice. The first scheduler takes both GPUs of the node; the second, started after it is killed,
// must keep a third pod pending.
TEST_F(DraTest, RestartKeepsClaimsAccounted) {
  const std::string node = NodeName("n");
  AddNode(NodeObject(node).Gpus(2, "H100-80GB", 81920).Cpu("32").Memory("256Gi"), node,
          SliceObject(node).Gpus(2, "H100-80GB", "80Gi"));
  AddTemplate(ClaimObject(ns_, "one-gpu").Request("gpu", "gpu.tessera.dev"));
  ScopedProcess* first = StartScheduler("first");
  AddPod(k8s::testing::WithClaimTemplate(Pod("p0").Json(), "gpu", "one-gpu"));
  AddPod(k8s::testing::WithClaimTemplate(Pod("p1").Json(), "gpu", "one-gpu"));
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 2; }, seconds(60))) << first->Log();
  schedulers_.clear();  // SIGKILL
  // The lease of the first must expire before the second leads (3 s).
  ScopedProcess* second = StartScheduler("second");
  AddPod(k8s::testing::WithClaimTemplate(Pod("p2").Json(), "gpu", "one-gpu"));
  ASSERT_TRUE(WaitUntil([&] { return !EventMessages("p2").empty(); }, seconds(60)))
      << second->Log();
  EXPECT_EQ(NodeOf("p2"), "");
  // p0 goes: its template claim is deleted by the controller, and p2 gets that GPU.
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/p0?gracePeriodSeconds=0")).ok());
  ASSERT_TRUE(WaitUntil([&] { return NodeOf("p2") == node; }, seconds(90))) << second->Log();
  std::set<std::string> devices;
  for (const json& c : Claims()) {
    if (!c["status"].contains("allocation")) continue;
    for (const json& r : c["status"]["allocation"]["devices"]["results"]) {
      devices.insert(r["device"].get<std::string>());
    }
  }
  EXPECT_EQ(devices.size(), 2u) << "p1 and p2 hold different GPUs";
}

}  // namespace
}  // namespace tessera::e2e

namespace tessera::e2e {
namespace {

// The stock kube-scheduler allocates tessera's devices as published (a whole GPU and a share by
// consumable capacity), and tessera, on the same cluster, accounts what kube-scheduler's claims
// hold: it never hands out a GPU kube-scheduler allocated.
TEST_F(DraTest, KubeSchedulerAllocatesTesseraDevicesAndTesseraAccountsThem) {
  const std::string node = NodeName("n");
  AddNode(NodeObject(node).Gpus(2, "H100-80GB", 81920).Cpu("32").Memory("256Gi"), node,
          SliceObject(node).Gpus(2, "H100-80GB", "80Gi"));
  AddClaim(ClaimObject(ns_, "ks-whole").Request("gpu", "gpu.tessera.dev"));
  AddClaim(ClaimObject(ns_, "ks-share")
               .Request("gpu", "gpu-share.tessera.dev")
               .Capacity("memory", "4Gi"));
  AddClaim(ClaimObject(ns_, "t1").Request("gpu", "gpu.tessera.dev"));
  AddClaim(ClaimObject(ns_, "t2").Request("gpu", "gpu.tessera.dev"));
  // Pods without schedulerName: the harness's kube-scheduler (default-scheduler) takes them.
  auto stock = [&](const std::string& name, const std::string& claim) {
    json pod = k8s::testing::WithClaims(PodObject(ns_, name).Json(), {{"gpu", claim}});
    pod["spec"].erase("schedulerName");
    pod.erase("status");
    AddPod(pod);
  };
  stock("ks-whole", "ks-whole");
  ASSERT_TRUE(WaitUntil([&] { return NodeOf("ks-whole") == node; }, seconds(60)))
      << Claim("ks-whole").dump(2);
  stock("ks-share", "ks-share");
  ASSERT_TRUE(WaitUntil([&] { return NodeOf("ks-share") == node; }, seconds(60)))
      << Claim("ks-share").dump(2);
  const json whole = Claim("ks-whole")["status"]["allocation"]["devices"]["results"][0];
  const json share = Claim("ks-share")["status"]["allocation"]["devices"]["results"][0];
  EXPECT_EQ(whole["pool"], node);
  EXPECT_EQ(share["consumedCapacity"]["memory"], "4Gi");
  EXPECT_NE(whole["device"], share["device"]) << "kube-scheduler shares the free GPU";

  // tessera now: both GPUs are taken (one whole, one shared), so neither of its whole-GPU claims
  // fits until kube-scheduler's pods go.
  ScopedProcess* s = StartScheduler("after-stock");
  AddPod(k8s::testing::WithClaims(Pod("t1").Json(), {{"gpu", "t1"}}));
  ASSERT_TRUE(WaitUntil([&] { return !EventMessages("t1").empty(); }, seconds(60))) << s->Log();
  EXPECT_EQ(NodeOf("t1"), "");
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/ks-whole?gracePeriodSeconds=0")).ok());
  ASSERT_TRUE(WaitUntil([&] { return NodeOf("t1") == node; }, seconds(90))) << s->Log();
  EXPECT_EQ(Claim("t1")["status"]["allocation"]["devices"]["results"][0]["device"], whole["device"])
      << "the GPU kube-scheduler's claim freed";
  AddPod(k8s::testing::WithClaims(Pod("t2").Json(), {{"gpu", "t2"}}));
  ASSERT_TRUE(WaitUntil([&] { return !EventMessages("t2").empty(); }, seconds(60))) << s->Log();
  EXPECT_EQ(NodeOf("t2"), "") << "the other GPU still holds kube-scheduler's share";
}

}  // namespace
}  // namespace tessera::e2e

namespace tessera::e2e {
namespace {

constexpr char kMigSelector[] = "device.attributes[\"gpu.tessera.dev\"].type == \"mig\"";

// MIG through claims, beside kube-scheduler: GPU 0 of the node is in MIG mode (its partitions
// published on the GPU's counters). kube-scheduler allocates a 3g.40gb partition first; tessera
// reads it as that instance (not as a node it cannot use), places a whole GPU on GPU 1 and the
// other 3g.40gb placement on GPU 0, and then has no room left for a third.
TEST_F(DraTest, MigClaimsBesideKubeSchedulersMigAllocation) {
  const std::string node = NodeName("n");
  Create(StrCat(kResource, "/deviceclasses"),
         k8s::testing::ClassObject("mig.tessera.dev", {kMigSelector}));
  AddNode(NodeObject(node).Gpus(2, "H100-80GB", 81920).Mig(0).Cpu("32").Memory("256Gi"), node,
          SliceObject(node).Gpus(2, "H100-80GB", "80Gi").MigMode(0));
  auto mig_claim = [&](const std::string& name) {
    AddClaim(ClaimObject(ns_, name)
                 .Request("gpu", "mig.tessera.dev")
                 .Selector("device.attributes[\"gpu.tessera.dev\"].profile == \"3g.40gb\""));
  };
  mig_claim("ks-mig");
  mig_claim("t-mig");
  mig_claim("t-mig-2");
  AddClaim(ClaimObject(ns_, "t-whole")
               .Request("gpu", "gpu.tessera.dev")
               .Selector("device.attributes[\"gpu.tessera.dev\"].type == \"gpu\""));
  json stock = k8s::testing::WithClaims(PodObject(ns_, "ks-mig").Json(), {{"gpu", "ks-mig"}});
  stock["spec"].erase("schedulerName");
  stock.erase("status");
  AddPod(stock);
  ASSERT_TRUE(WaitUntil([&] { return NodeOf("ks-mig") == node; }, seconds(60)))
      << Claim("ks-mig").dump(2);
  const std::string ks_device =
      Claim("ks-mig")["status"]["allocation"]["devices"]["results"][0]["device"];
  ASSERT_THAT(ks_device, ::testing::StartsWith("gpu-0-mig-3g-40gb-"));

  ScopedProcess* s = StartScheduler("mig");
  AddPod(k8s::testing::WithClaims(Pod("t-whole").Json(), {{"gpu", "t-whole"}}));
  AddPod(k8s::testing::WithClaims(Pod("t-mig").Json(), {{"gpu", "t-mig"}}));
  ASSERT_TRUE(
      WaitUntil([&] { return NodeOf("t-whole") == node && NodeOf("t-mig") == node; }, seconds(60)))
      << EventMessages("t-whole") << EventMessages("t-mig") << s->Log();
  EXPECT_EQ(Claim("t-whole")["status"]["allocation"]["devices"]["results"][0]["device"], "gpu-1");
  const std::string t_device =
      Claim("t-mig")["status"]["allocation"]["devices"]["results"][0]["device"];
  EXPECT_EQ((std::set<std::string>{ks_device, t_device}),
            (std::set<std::string>{"gpu-0-mig-3g-40gb-0", "gpu-0-mig-3g-40gb-4"}));
  // GPU 0's slices are all taken now.
  AddPod(k8s::testing::WithClaims(Pod("t-mig-2").Json(), {{"gpu", "t-mig-2"}}));
  ASSERT_TRUE(WaitUntil([&] { return !EventMessages("t-mig-2").empty(); }, seconds(60)))
      << s->Log();
  EXPECT_EQ(NodeOf("t-mig-2"), "");
  EXPECT_THAT(s->Log(), ::testing::Not(HasSubstr("in MIG mode: it takes MIG grants only")));
}

// A gang of classic pods (`tessera.dev/gpu: 1` and the gang annotations) in DRA mode: a
// DeviceClass serves tessera.dev/gpu, so each member gets an extended-resource claim, and the
// gang is placed all together in one NVLink domain (the NVSwitch node, not the PCIe one); a gang
// too big for any domain places none of its members and says why.
TEST_F(DraTest, AGangOfClassicPodsGoesThroughClaims) {
  const std::string nvswitch = NodeName("nvswitch"), pcie = NodeName("pcie");
  Create(StrCat(kResource, "/deviceclasses"),
         k8s::testing::ClassObject("gpu-classic.tessera.dev",
                                   {"device.attributes[\"gpu.tessera.dev\"].type == \"gpu\""},
                                   "tessera.dev/gpu"));
  AddNode(NodeObject(nvswitch).Gpus(4, "H100-80GB", 81920).NvSwitch().Cpu("64").Memory("512Gi"),
          nvswitch, SliceObject(nvswitch).Gpus(4, "H100-80GB", "80Gi"));
  AddNode(NodeObject(pcie).Gpus(4, "H100-80GB", 81920).Cpu("64").Memory("512Gi"), pcie,
          SliceObject(pcie).Gpus(4, "H100-80GB", "80Gi"));
  ScopedProcess* s = StartScheduler("classic-gang");
  for (int i = 0; i < 4; ++i) {
    AddPod(Pod(StrCat("w-", i)).Limit("tessera.dev/gpu", "1").Gang("g", 4, "nvlink-domain").Json());
  }
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() >= 4; }, seconds(90)))
      << BoundCount() << " of 4 bound\n"
      << s->Log();
  std::set<std::string> devices;
  for (const json& p : Pods()) {
    const std::string name = p["metadata"]["name"];
    EXPECT_EQ(p["spec"]["nodeName"], nvswitch) << name;
    const json& ext = p["status"]["extendedResourceClaimStatus"];
    ASSERT_TRUE(ext.contains("resourceClaimName")) << p.dump(2);
    EXPECT_EQ(ext["requestMappings"][0]["resourceName"], "tessera.dev/gpu");
    const json c = Claim(ext["resourceClaimName"]);
    const json& results = c["status"]["allocation"]["devices"]["results"];
    ASSERT_EQ(results.size(), 1u) << c.dump(2);
    EXPECT_EQ(results[0]["pool"], nvswitch);
    devices.insert(results[0]["device"].get<std::string>());
    EXPECT_EQ(c["status"]["reservedFor"][0]["name"], name);
  }
  EXPECT_EQ(devices.size(), 4u);
  // Five members in one NVLink domain fit nowhere: none is placed, each hears why.
  for (int i = 0; i < 5; ++i) {
    AddPod(Pod(StrCat("big-", i))
               .Limit("tessera.dev/gpu", "1")
               .Gang("big", 5, "nvlink-domain")
               .Json());
  }
  ASSERT_TRUE(WaitUntil([&] { return !EventMessages("big-4").empty(); }, seconds(60))) << s->Log();
  EXPECT_THAT(EventMessages("big-0"), HasSubstr("FailedScheduling"));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(NodeOf(StrCat("big-", i)), "");
}

}  // namespace
}  // namespace tessera::e2e
