// The defragmentation executor in SchedulerCore, step by step: a known fragmented placement
// (bound pods with their assignments), a pod that fits nowhere and that preemption cannot help
// (equal priorities); after it has waited long enough, the plan's pods are evicted, the pod is
// nominated and told, the movers are told; the room is kept until they are gone, a restart
// evicts nothing twice, and the pod lands where the plan said. A recording fake of the Binder,
// Reporter and PreemptionWriter interfaces (which we own) stands for the API server; the same
// against the real API server is in test/k8s/preemption_e2e_test.cc.
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/scheduler_core.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::NodeObject;
using testing::PodObject;

class Recorder : public Binder, public Reporter, public PreemptionWriter {
 public:
  void Bind(const PodInfo& pod, const records::Assignment& assignment, uint64_t) override {
    binds.push_back(StrCat(pod.key, "->", assignment.node));
  }
  void ReportFailure(const PodInfo& pod, std::string_view, const std::string& message,
                     bool) override {
    failures[pod.key] = message;
  }
  void ReportWarning(const PodInfo& pod, std::string_view reason,
                     const std::string& message) override {
    warnings.push_back(StrCat(pod.key, " ", reason, ": ", message));
  }
  void ReportNormal(const PodInfo& pod, std::string_view reason,
                    const std::string& message) override {
    normals.push_back(StrCat(pod.key, " ", reason, ": ", message));
  }
  void Nominate(const PodInfo& pod, const std::string& node) override {
    nominated.push_back(StrCat(pod.key, "->", node));
  }
  void Evict(const PodInfo& victim) override { evicted.push_back(victim.key); }
  std::vector<Refusal> TakeRefusals() override { return {}; }

  std::vector<std::string> binds, warnings, normals, nominated, evicted;
  std::map<std::string, std::string> failures;
};

records::Assignment Share(const std::string& node, int gpu) {
  records::Assignment a;
  a.node = node;
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.memory_mib = 20480;
  g.uuid = StrCat("GPU-", node, "-", gpu);
  a.gpus.push_back(g);
  return a;
}

class DefragExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    objects_["ns/big"] = PodObject("ns", "big").Limit("tessera.dev/gpu", "4").Json();
    for (int g = 0; g < 3; ++g) {
      const std::string name = StrCat("a", g);
      objects_[StrCat("ns/", name)] = PodObject("ns", name)
                                          .Limit("tessera.dev/gpu-memory", "20Gi")
                                          .Controller("ReplicaSet", "infer")
                                          .Assigned(Share("a", g))
                                          .Json();
    }
    objects_["ns/b0"] = PodObject("ns", "b0")
                            .Limit("tessera.dev/gpu-memory", "20Gi")
                            .Controller("ReplicaSet", "infer")
                            .Assigned(Share("b", 0))
                            .Json();
  }
  void Start() {
    SchedulerCoreOptions o;
    o.retry_min_interval = std::chrono::milliseconds(1000);
    o.retry_period = std::chrono::milliseconds(30'000);
    o.defrag.enabled = true;
    o.defrag.after = std::chrono::milliseconds(60'000);
    o.defrag.max_moves = 2;
    auto c = SchedulerCore::Create(o, &rec_, &rec_, nullptr, [this] { return now_; });
    ASSERT_TRUE(c.ok()) << c.status();
    core_ = std::move(*c);
    core_->EnablePreemption(&rec_);
    for (const char* n : {"a", "b"}) {
      core_->OnNode(Change::kAdded, DecodeNode(NodeObject(n).Gpus(4).NvSwitch().Json()));
    }
    for (const auto& [key, pod] : objects_) core_->OnPod(Change::kAdded, DecodePod(pod));
    core_->SetSynced(true, true);
  }
  void Update(const std::string& key) {
    core_->OnPod(Change::kUpdated, DecodePod(objects_.at(key)));
  }
  void Advance(int ms) { now_ += std::chrono::milliseconds(ms); }

  Recorder rec_;
  std::map<std::string, json> objects_;
  std::chrono::steady_clock::time_point now_ =
      std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  std::unique_ptr<SchedulerCore> core_;
};

TEST_F(DefragExecutorTest, MovesTheSharePlacesThePodAndNeverEvictsTwice) {
  Start();
  core_->ScheduleSome();
  EXPECT_THAT(rec_.binds, IsEmpty());
  EXPECT_THAT(rec_.evicted, IsEmpty());  // it has not waited long enough
  EXPECT_THAT(rec_.failures["ns/big"], HasSubstr("preemption would not help"));

  Advance(61'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/b0"));
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/big->b"));
  ASSERT_EQ(rec_.warnings.size(), 1u);
  EXPECT_THAT(
      rec_.warnings[0],
      HasSubstr("ns/b0 DefragmentationMove: evicted by tessera to defragment: pod ns/big "
                "(priority 0, 4 whole GPUs) has waited 61s and fits on node b once this pod "
                "moves from b GPU 0 (20Gi) to a"));
  ASSERT_EQ(rec_.normals.size(), 1u);
  EXPECT_THAT(rec_.normals[0],
              HasSubstr("ns/big Defragmentation: waited 61s: moving 1 pod(s) to make room on "
                        "node b: ns/b0 from b GPU 0 (20Gi) to a"));
  EXPECT_THAT(rec_.failures["ns/big"], HasSubstr("nominated to node b: waiting for 1 pod(s) moved "
                                                 "away for defragmentation"));

  // The watch shows b0 terminating; retries while it is there evict nothing more.
  objects_["ns/b0"]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
  Update("ns/b0");
  for (int i = 0; i < 4; ++i) {
    Advance(31'000);
    core_->ScheduleSome();
  }
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/b0"));

  // A restart: the nomination comes back from status.nominatedNodeName, b0 is terminating: no
  // second eviction.
  objects_["ns/big"]["status"]["nominatedNodeName"] = "b";
  rec_ = Recorder();
  Start();
  Advance(61'000);
  core_->ScheduleSome();
  Advance(61'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_THAT(rec_.binds, IsEmpty());

  // b0 is gone (its ReplicaSet would create a new pod): the pod lands on b.
  core_->OnPod(Change::kDeleted, DecodePod(objects_.at("ns/b0")));
  Advance(2'000);  // past retry.minInterval
  core_->ScheduleSome();
  EXPECT_THAT(rec_.binds, ElementsAre("ns/big->b"));
}

TEST_F(DefragExecutorTest, OffByDefaultAndNeverMovesBarePodsOrForLowPriority) {
  // Off: nothing is evicted however long the pod waits.
  SchedulerCoreOptions o;
  auto c = SchedulerCore::Create(o, &rec_, &rec_, nullptr, [this] { return now_; });
  ASSERT_TRUE(c.ok());
  core_ = std::move(*c);
  core_->EnablePreemption(&rec_);
  for (const char* n : {"a", "b"}) {
    core_->OnNode(Change::kAdded, DecodeNode(NodeObject(n).Gpus(4).NvSwitch().Json()));
  }
  for (const auto& [key, pod] : objects_) core_->OnPod(Change::kAdded, DecodePod(pod));
  core_->SetSynced(true, true);
  for (int i = 0; i < 5; ++i) {
    core_->ScheduleSome();
    Advance(61'000);
  }
  EXPECT_THAT(rec_.evicted, IsEmpty());

  // On, but b0 is a bare pod: nothing would bring it back, so it is not moved, and the only
  // other plan (a's three shares) is over the budget of 2.
  objects_["ns/b0"]["metadata"].erase("ownerReferences");
  rec_ = Recorder();
  Start();
  for (int i = 0; i < 4; ++i) {
    Advance(31'000);
    core_->ScheduleSome();
  }
  EXPECT_THAT(rec_.evicted, IsEmpty());
}

}  // namespace
}  // namespace tessera::k8s
