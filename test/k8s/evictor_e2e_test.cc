// The Eviction API on the real API server: a PodDisruptionBudget that allows nothing is honoured
// (429, the pod stays), a pod without one is deleted gracefully (it keeps running, terminating,
// until its node's kubelet stops it: here there is no kubelet, so it stays terminating), a pod
// recreated under the same name is not evicted by the old uid, and a pod that is gone says so.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/eviction/evictor.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

class EvictorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<ClientConfig> config = LoadKubeconfig(e2e::ControlPlane::Shared().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    async_ = std::make_unique<AsyncClient>(api_->transport(), AsyncClientOptions{});
    absl::StatusOr<json> ns =
        api_->Create("/api/v1/namespaces",
                     {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(ns.ok() || ns.status().code() == absl::StatusCode::kAlreadyExists) << ns.status();
  }
  void TearDown() override {
    async_.reset();
    (void)api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods?gracePeriodSeconds=0"));
  }

  // A pod bound to a node that has no kubelet (it never stops by itself), reported running.
  std::string BoundPod(const std::string& name) {
    json pod = {
        {"apiVersion", "v1"},
        {"kind", "Pod"},
        {"metadata", {{"name", name}, {"labels", {{"app", "victim"}}}}},
        {"spec",
         {{"terminationGracePeriodSeconds", 600},
          {"containers", json::array({{{"name", "c"}, {"image", "tessera.local/busybox:1"}}})}}}};
    absl::StatusOr<json> created = api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), pod);
    EXPECT_TRUE(created.ok()) << created.status();
    if (!created.ok()) return "";
    std::string uid = (*created)["metadata"]["uid"];
    absl::Status bound = api_->Bind(ns_, name, uid, "no-kubelet-node");
    EXPECT_TRUE(bound.ok()) << bound;
    // Running and ready, as its kubelet would say (the Eviction API ignores budgets for pods
    // that are still pending).
    absl::StatusOr<json> running = api_->Patch(
        StrCat("/api/v1/namespaces/", ns_, "/pods/", name, "/status"), PatchType::kMerge,
        {{"status",
          {{"phase", "Running"},
           {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}});
    EXPECT_TRUE(running.ok()) << running.status();
    return uid;
  }

  EvictionResult Evict(const EvictionTarget& target) {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<EvictionResult> result;
    ApiEvictor evictor(*async_);
    evictor.Evict(target, [&](const EvictionTarget&, const EvictionResult& r) {
      std::lock_guard<std::mutex> lock(mu);
      result = r;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return result.has_value(); });
    EXPECT_TRUE(result.has_value());
    return result.value_or(EvictionResult{});
  }

  json Pod(const std::string& name) {
    absl::StatusOr<json> p = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/pods/", name));
    return p.ok() ? *p : json();
  }

  std::string ns_ = "e2e-evictor";
  std::unique_ptr<ApiClient> api_;
  std::unique_ptr<AsyncClient> async_;
};

TEST_F(EvictorTest, BudgetIsHonouredAndEvictionIsGraceful) {
  const std::string guarded = BoundPod("guarded");
  const std::string free_uid = BoundPod("free");
  ASSERT_FALSE(guarded.empty());
  // A budget that allows no disruption of the guarded pod. Without a disruption controller its
  // status is written here as the controller would (disruptionsAllowed 0).
  json pdb = {{"apiVersion", "policy/v1"},
              {"kind", "PodDisruptionBudget"},
              {"metadata", {{"name", "keep"}}},
              {"spec", {{"minAvailable", 1}, {"selector", {{"matchLabels", {{"pdb", "keep"}}}}}}}};
  ASSERT_TRUE(api_->Patch(StrCat("/api/v1/namespaces/", ns_, "/pods/guarded"), PatchType::kMerge,
                          {{"metadata", {{"labels", {{"pdb", "keep"}}}}}})
                  .ok());
  absl::StatusOr<json> made =
      api_->Create(StrCat("/apis/policy/v1/namespaces/", ns_, "/poddisruptionbudgets"), pdb);
  ASSERT_TRUE(made.ok()) << made.status();
  json status = {{"status",
                  {{"observedGeneration", (*made)["metadata"]["generation"]},
                   {"disruptionsAllowed", 0},
                   {"currentHealthy", 1},
                   {"desiredHealthy", 1},
                   {"expectedPods", 1}}}};
  ASSERT_TRUE(
      api_->Patch(StrCat("/apis/policy/v1/namespaces/", ns_, "/poddisruptionbudgets/keep/status"),
                  PatchType::kMerge, status)
          .ok());

  EvictionResult refused = Evict({ns_, "guarded", guarded, std::nullopt});
  EXPECT_EQ(refused.outcome, EvictionOutcome::kBudget) << refused.message;
  EXPECT_FALSE(Pod("guarded")["metadata"].contains("deletionTimestamp"));

  EvictionResult evicted = Evict({ns_, "free", free_uid, std::nullopt});
  EXPECT_EQ(evicted.outcome, EvictionOutcome::kEvicted) << evicted.message;
  json after = Pod("free");
  ASSERT_TRUE(after.is_object());  // graceful: still there, terminating
  EXPECT_TRUE(after["metadata"].contains("deletionTimestamp"));
  EXPECT_EQ(after["metadata"]["deletionGracePeriodSeconds"], 600);

  // A pod of the same name made again is not evicted by the old uid.
  ASSERT_TRUE(
      api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods/free"), {{"gracePeriodSeconds", 0}})
          .ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  BoundPod("free");
  EvictionResult stale = Evict({ns_, "free", free_uid, std::nullopt});
  EXPECT_EQ(stale.outcome, EvictionOutcome::kGone) << stale.message;
  EXPECT_FALSE(Pod("free")["metadata"].contains("deletionTimestamp"));

  EvictionResult gone = Evict({ns_, "never-was", "", std::nullopt});
  EXPECT_EQ(gone.outcome, EvictionOutcome::kGone) << gone.message;
}

}  // namespace
}  // namespace tessera::k8s
