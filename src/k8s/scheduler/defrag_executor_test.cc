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
#include "k8s/scheduler/testing/core_fixture.h"
#include "k8s/scheduler/testing/recorder.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::NodeObject;
using ::testing::Not;
using testing::PodObject;

using testing::Recorder;

records::Assignment Share(const std::string& node, int gpu, int64_t memory_mib = 20480) {
  return testing::OneGpuAssignment(node, gpu, memory_mib);
}

class DefragExecutorTest : public testing::CoreFixture {
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
    o.defrag.hold_for = hold_for_;
    o.spare_gpus_per_domain = spares_;
    CreateCore(o);
    for (const char* n : {"a", "b"}) {
      core_->OnNode(Change::kAdded,
                    DecodeNode(NodeObject(n).Gpus(4).NvSwitch().Label("test/node", n).Json()));
    }
    for (const auto& [key, pod] : objects_) core_->OnPod(Change::kAdded, DecodePod(pod));
    core_->SetSynced(true, true);
  }
  void Update(const std::string& key) {
    core_->OnPod(Change::kUpdated, DecodePod(objects_.at(key)));
  }
  // The replacement a ReplicaSet makes for a moved 20Gi share of ReplicaSet `rs`.
  json Replacement(const std::string& name, const std::string& rs = "infer",
                   const std::string& memory = "20Gi") {
    return PodObject("ns", name)
        .Limit("tessera.dev/gpu-memory", memory)
        .Controller("ReplicaSet", rs)
        .Json();
  }
  // Shares too big to sit beside a 20Gi one fill a's GPUs 0-2, and a hold lasts 90 s: after a
  // minute ns/big's plan moves b0 to a's GPU 3.
  void MoveB0ToAGpu3() {
    for (int g = 0; g < 3; ++g) {
      objects_[StrCat("ns/a", g)] = PodObject("ns", StrCat("a", g))
                                        .Limit("tessera.dev/gpu-memory", "70Gi")
                                        .Controller("ReplicaSet", "big-infer")
                                        .Assigned(Share("a", g, 70 * 1024))
                                        .Json();
    }
    hold_for_ = std::chrono::milliseconds(90'000);
    Start();
    core_->ScheduleSome();
    Advance(61'000);
    core_->ScheduleSome();
  }
  std::chrono::milliseconds hold_for_{120'000};
  int spares_ = 0;
};

TEST_F(DefragExecutorTest, MovesTheSharePlacesThePodAndNeverEvictsTwice) {
  Start();
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), IsEmpty());
  EXPECT_THAT(rec_.evicted, IsEmpty());  // it has not waited long enough
  EXPECT_THAT(rec_.failures["ns/big"], HasSubstr("preemption would not help"));

  Advance(61'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/b0"));
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/big->b"));
  ASSERT_EQ(rec_.warnings.size(), 1u);
  EXPECT_THAT(
      Recorder::Texts(rec_.warnings)[0],
      HasSubstr("ns/b0 DefragmentationMove: evicted by tessera to defragment: pod ns/big "
                "(priority 0, 4 whole GPUs) has waited 61s and fits on node b once this pod "
                "moves from b GPU 0 (20Gi) to a"));
  ASSERT_EQ(rec_.normals.size(), 1u);
  EXPECT_THAT(Recorder::Texts(rec_.normals)[0],
              HasSubstr("ns/big Defragmentation: waited 61s: moving 1 pod(s) to make room on "
                        "node b: ns/b0 from b GPU 0 (20Gi) to a"));
  EXPECT_THAT(rec_.failures["ns/big"], HasSubstr("nominated to node b: waiting for 1 pod(s) moved "
                                                 "away for defragmentation"));
  // Counted as a defragmentation move, not as a preemption.
  EXPECT_EQ(metrics_.defrag_moves.load(), 1);
  EXPECT_EQ(metrics_.preemptions.load(), 0);
  EXPECT_EQ(metrics_.preemption_victims.load(), 0);

  // The watch shows b0 terminating; retries while it is there evict nothing more.
  objects_["ns/b0"]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
  Update("ns/b0");
  for (int i = 0; i < 4; ++i) {
    Advance(31'000);
    core_->ScheduleSome();
  }
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/b0"));
  EXPECT_EQ(metrics_.defrag_moves.load(), 1);  // nor counted twice
  EXPECT_THAT(metrics_.Render(), HasSubstr("tessera_scheduler_defrag_moves_total 1\n"));

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
  EXPECT_THAT(rec_.BindTexts(), IsEmpty());

  // b0 is gone (its ReplicaSet would create a new pod): the pod lands on b.
  core_->OnPod(Change::kDeleted, DecodePod(objects_.at("ns/b0")));
  Advance(2'000);  // past retry.minInterval
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), ElementsAre("ns/big->b"));
}

// Two pods waiting for room in one cycle: the second plan takes the first as done (the first
// pod's room on b, its movers gone from b and standing at their destinations on a), so it gets
// its own plan at once instead of waiting for the first pod to land, and never counts on the
// room kept for the first (b's two free GPUs are the first pod's).
// With a hot spare per NVLink domain (each server here), a's GPU 3 is its spare and b keeps one
// too: the plan of MoveB0ToAGpu3 (b0 onto a's GPU 3) would move a pod onto a spare, for a pod that
// cannot fit on b while b keeps its own. Nothing is evicted.
TEST_F(DefragExecutorTest, NoPodIsMovedOntoAHotSpare) {
  spares_ = 1;
  MoveB0ToAGpu3();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_EQ(metrics_.defrag_moves.load(), 0);
  EXPECT_THAT(rec_.BindTexts(), IsEmpty());
}

TEST_F(DefragExecutorTest, ASecondPodWaitingGetsItsPlanWithTheFirstTakenAsDone) {
  objects_["ns/b1"] = PodObject("ns", "b1")
                          .Limit("tessera.dev/gpu-memory", "20Gi")
                          .Controller("ReplicaSet", "infer")
                          .Assigned(Share("b", 1))
                          .Json();
  Start();
  core_->ScheduleSome();
  Advance(61'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/big->b"));
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/b0", "ns/b1"));
  Terminating("ns/b0");
  Terminating("ns/b1");

  // A 2-GPU pod comes: b's two free GPUs are kept for big; a has one free GPU.
  Pod(PodObject("ns", "two").Limit("tessera.dev/gpu", "2").Json());
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), IsEmpty());

  // It has waited long enough while b0 and b1 still terminate: its plan moves shares on a (where
  // b0's and b1's replacements are to stand too), not b's, and evicts nothing on b again.
  Advance(61'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/big->b", "ns/two->a"));
  ASSERT_GT(rec_.evicted.size(), 2u);
  for (size_t i = 2; i < rec_.evicted.size(); ++i) {
    EXPECT_THAT(rec_.evicted[i], ::testing::StartsWith("ns/a"));
  }
  EXPECT_THAT(rec_.failures["ns/two"], HasSubstr("nominated to node a: waiting for"));

  // Everything moved comes back where the plans said; both pods land.
  const std::vector<std::string> moved = rec_.evicted;
  for (const std::string& key : moved) {
    if (objects_.count(key) == 0) continue;
    Gone(key);
  }
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), ::testing::UnorderedElementsAre("ns/big->b", "ns/two->a"));
  for (size_t i = 0; i < moved.size(); ++i) Pod(Replacement(StrCat("r", i)));
  Advance(2'000);
  core_->ScheduleSome();
  for (size_t i = 0; i < moved.size(); ++i) {
    EXPECT_THAT(rec_.BindTexts(), ::testing::Contains(StrCat("ns/r", i, "->a")));
  }
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

// A gang: two members of 2 whole GPUs each that must share one NVLink domain (a node here): a has
// one free GPU, b three. Once the gang has waited, b's share moves to a: both members are
// nominated to b, the share's replacement goes where the plan said (a), not to b's free GPUs,
// and the gang lands on b, all or nothing. A restart evicts nothing twice.
TEST_F(DefragExecutorTest, GangMovesAShareAndLandsInItsDomain) {
  objects_.erase("ns/big");
  for (int i = 0; i < 2; ++i) {
    objects_[StrCat("ns/train-", i)] = PodObject("ns", StrCat("train-", i))
                                           .Limit("tessera.dev/gpu", "2")
                                           .Gang("train", 2, "nvlink-domain")
                                           .Json();
  }
  Start();
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), IsEmpty());
  EXPECT_THAT(rec_.evicted, IsEmpty());  // it has not waited long enough
  Advance(61'000);
  core_->ScheduleSome();
  ASSERT_THAT(rec_.evicted, ElementsAre("ns/b0"));
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/train-0->b", "ns/train-1->b"));
  ASSERT_EQ(rec_.warnings.size(), 1u);
  EXPECT_THAT(Recorder::Texts(rec_.warnings)[0],
              HasSubstr("ns/b0 DefragmentationMove: evicted by tessera to defragment: gang "
                        "ns/train (2 pods, priority 0, 2 whole GPUs each) has waited 61s and "
                        "fits on node b once this pod moves from b GPU 0 (20Gi) to a"));
  ASSERT_EQ(rec_.normals.size(), 2u);  // one on each member
  EXPECT_THAT(Recorder::Texts(rec_.normals)[1],
              HasSubstr("ns/train-1 Defragmentation: gang ns/train waited 61s: moving 1 pod(s) "
                        "to make room on node b: ns/b0 from b GPU 0 (20Gi) to a"));
  EXPECT_THAT(rec_.failures["ns/train-0"],
              HasSubstr("gang ns/train nominated to node(s) b (this pod to b): waiting for 1 "
                        "pod(s) moved away for defragmentation"));
  ASSERT_EQ(core_->move_holds().holds().size(), 1u);
  const std::string destination = core_->move_holds().holds()[0].where;
  EXPECT_THAT(destination, ::testing::StartsWith("a GPU "));

  // b0 terminates; its ReplicaSet makes a replacement at once: it goes to the plan's destination.
  Terminating("ns/b0");
  Pod(Replacement("b0-x"));
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), ElementsAre("ns/b0-x->a"));
  EXPECT_EQ(core_->HeldFor("ns/b0-x")->node, "a");
  EXPECT_THAT(Recorder::Texts(rec_.normals).back(),
              HasSubstr(StrCat("ns/b0-x DefragmentationDestination: placed at ", destination,
                               ", where defragmentation for gang ns/train moved pod ns/b0")));
  EXPECT_TRUE(core_->move_holds().empty());  // taken
  objects_["ns/b0-x"] = PodObject("ns", "b0-x")
                            .Limit("tessera.dev/gpu-memory", "20Gi")
                            .Controller("ReplicaSet", "infer")
                            .Assigned(*core_->HeldFor("ns/b0-x"))
                            .Json();

  // A restart while b0 terminates: the nominations come back, nothing is evicted again.
  for (int i = 0; i < 2; ++i) objects_[StrCat("ns/train-", i)]["status"]["nominatedNodeName"] = "b";
  rec_ = Recorder();
  Start();
  for (int i = 0; i < 3; ++i) {
    Advance(61'000);
    core_->ScheduleSome();
  }
  EXPECT_THAT(rec_.evicted, IsEmpty());

  // b0 is gone: the whole gang lands on b.
  Gone("ns/b0");
  Advance(2'000);
  core_->ScheduleSome();
  std::vector<std::string> binds = rec_.BindTexts();
  std::sort(binds.begin(), binds.end());
  EXPECT_THAT(binds, ElementsAre("ns/train-0->b", "ns/train-1->b"));
}

// A gang one of whose members already runs: an elastic gang (2 members of 1 GPU, min 1, in one
// NVLink domain) starts with one member on a's only free GPU; its other member must join it there,
// where the other GPUs hold pods that cannot move. A plan for that member alone would move b's
// share to give it b's GPU 0, where it could not go: no plan is carried out.
TEST_F(DefragExecutorTest, NoPlanForAGangWithMembersRunning) {
  objects_.clear();
  auto whole = [](const std::string& node, int gpu) {
    return testing::OneGpuAssignment(node, gpu, 0, 0, /*exclusive=*/true);
  };
  for (int gpu = 0; gpu < 3; ++gpu) {  // bare pods: never moved
    objects_[StrCat("ns/pa", gpu)] = PodObject("ns", StrCat("pa", gpu))
                                         .Limit("tessera.dev/gpu", "1")
                                         .Assigned(whole("a", gpu))
                                         .Json();
    objects_[StrCat("ns/pb", gpu)] = PodObject("ns", StrCat("pb", gpu))
                                         .Limit("tessera.dev/gpu", "1")
                                         .Assigned(whole("b", gpu + 1))
                                         .Json();
  }
  objects_["ns/b0"] = PodObject("ns", "b0")
                          .Limit("tessera.dev/gpu-memory", "20Gi")
                          .Controller("ReplicaSet", "infer")
                          .Assigned(Share("b", 0))
                          .Json();
  for (int i = 0; i < 2; ++i) {
    objects_[StrCat("ns/train-", i)] = PodObject("ns", StrCat("train-", i))
                                           .Limit("tessera.dev/gpu", "1")
                                           .Gang("train", 2, "nvlink-domain")
                                           .Annotation("tessera.dev/gang-min", "1")
                                           .Json();
  }
  Start();
  for (int i = 0; i < 4; ++i) {
    core_->ScheduleSome();
    Advance(31'000);
  }
  ASSERT_EQ(rec_.BindTexts().size(), 1u);
  EXPECT_THAT(rec_.BindTexts()[0], ::testing::EndsWith("->a"));
  EXPECT_THAT(rec_.evicted, IsEmpty());
}

// Holds: a whole-GPU pod that comes while the moved share's replacement has not would take the
// share's destination (a's GPU 3: the shares on a are too big to sit beside); it is kept out of
// it (and b is kept for the waiting pod), the replacement takes its destination, and once no hold
// is left the whole-GPU pod is placed. Without a replacement, a hold ends after holdFor.
TEST_F(DefragExecutorTest, TheDestinationIsKeptForTheReplacementForABoundedTime) {
  MoveB0ToAGpu3();
  ASSERT_THAT(rec_.evicted, ElementsAre("ns/b0"));
  ASSERT_EQ(core_->move_holds().holds().size(), 1u);
  EXPECT_EQ(core_->move_holds().holds()[0].where, "a GPU 3 (20Gi)");
  Terminating("ns/b0");

  // Another pod of the same priority, for node a, that GPU 3 would fit: kept out of it, it waits.
  json whole = PodObject("ns", "whole").Limit("tessera.dev/gpu", "1").Json();
  whole["spec"]["nodeSelector"] = {{"test/node", "a"}};
  Pod(whole);
  // A pod like the moved one but of another controller is no replacement: kept out too (20Gi
  // fits nowhere else but b, which is kept for ns/big).
  Pod(Replacement("other", "another-rs"));
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), IsEmpty());
  EXPECT_THAT(rec_.failures["ns/whole"],
              HasSubstr("the room at a GPU 3 (20Gi) is kept 88s more for the replacement of pod "
                        "ns/b0, moved there by defragmentation for pod ns/big"));

  // The replacement comes: it takes its destination. The hold is over: `other` may go to a.
  Pod(Replacement("b0-x"));
  Advance(2'000);
  core_->ScheduleSome();
  ASSERT_FALSE(rec_.BindTexts().empty());
  EXPECT_EQ(rec_.BindTexts()[0], "ns/b0-x->a");
  EXPECT_EQ(core_->HeldFor("ns/b0-x")->gpus[0].grant.gpu, 3);
  EXPECT_TRUE(core_->move_holds().empty());

  // b0 is gone: the waiting pod lands where the plan said.
  Gone("ns/b0");
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), ::testing::Contains("ns/big->b"));
}

// The scheduler restarts while the moved pod b0 terminates: the hold, written on b0 (condition
// tessera.dev/Moving) before its eviction, is read back, so a pod that GPU 3 would fit is still
// kept out and the replacement lands there.
TEST_F(DefragExecutorTest, ARestartedSchedulerHoldsTheMovedPodsDestinationAgain) {
  MoveB0ToAGpu3();
  ASSERT_THAT(rec_.evicted, ElementsAre("ns/b0"));
  ASSERT_EQ(rec_.moving_marks.size(), 1u);
  EXPECT_EQ(rec_.moving_marks[0].key, "ns/b0");
  EXPECT_THAT(rec_.moving_marks[0].message,
              ::testing::StartsWith("moved for pod ns/big; to node a GPUs 3; held until "));
  objects_["ns/b0"]["status"]["conditions"] =
      json::array({{{"type", "tessera.dev/Moving"},
                    {"status", "True"},
                    {"message", rec_.moving_marks[0].message}}});
  objects_["ns/b0"]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";

  // A new scheduler, the objects as the API server has them.
  rec_ = Recorder();
  Start();
  ASSERT_EQ(core_->move_holds().holds().size(), 1u);
  EXPECT_EQ(core_->move_holds().holds()[0].where, "a GPU 3");
  json whole = PodObject("ns", "whole").Limit("tessera.dev/gpu", "1").Json();
  whole["spec"]["nodeSelector"] = {{"test/node", "a"}};
  Pod(whole);
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), ::testing::Not(::testing::Contains("ns/whole->a")));
  EXPECT_THAT(rec_.failures["ns/whole"], HasSubstr("is kept 8")) << rec_.failures["ns/whole"];
  Pod(Replacement("b0-x"));
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), ::testing::Contains("ns/b0-x->a"));
  ASSERT_TRUE(core_->HeldFor("ns/b0-x").has_value());
  EXPECT_EQ(core_->HeldFor("ns/b0-x")->gpus[0].grant.gpu, 3);
}

TEST_F(DefragExecutorTest, AHoldEndsAfterHoldForAndAReplacementWaitsOnlyThatLong) {
  hold_for_ = std::chrono::milliseconds(30'000);
  Start();
  core_->ScheduleSome();
  Advance(61'000);
  core_->ScheduleSome();
  ASSERT_THAT(rec_.evicted, ElementsAre("ns/b0"));
  // Terminating until the end, as the API server shows it (the room on b stays nominated for
  // big while b0 leaves: without this the eviction would look forgotten after kEvictingFor).
  Terminating("ns/b0");
  ASSERT_EQ(core_->move_holds().holds().size(), 1u);
  // The destination is taken by a pod of a higher priority (holds keep out no such pod).
  const std::string where = core_->move_holds().holds()[0].where;
  ASSERT_THAT(where, ::testing::StartsWith("a GPU "));
  const int gpu = where[6] - '0';  // "a GPU n (20Gi)"; GPUs 0..2 hold a 20Gi share each
  const int vip_gi = gpu < 3 ? 50 : 70;
  Pod(PodObject("ns", "vip")
          .Limit("tessera.dev/gpu-memory", StrCat(vip_gi, "Gi"))
          .Priority(10)
          .Assigned(Share("a", gpu, vip_gi * 1024))
          .Json());
  // The replacement comes: its destination is full: it waits for it, saying why.
  Pod(Replacement("b0-x"));
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), IsEmpty());
  EXPECT_THAT(rec_.failures["ns/b0-x"],
              HasSubstr(StrCat("replacement of pod ns/b0, moved by defragmentation for pod "
                               "ns/big: waiting for its destination ",
                               where, " (kept for it 28s more, then placed anywhere)")));
  // holdFor passes: the hold ends (the scheduler wakes for it), and the replacement is placed
  // where the engine chooses.
  ASSERT_TRUE(core_->NextWakeup().has_value());
  EXPECT_LE(*core_->NextWakeup(), now_ + std::chrono::milliseconds(28'000));
  Advance(29'000);
  core_->ScheduleSome();
  EXPECT_TRUE(core_->move_holds().empty());
  EXPECT_THAT(rec_.failures["ns/b0-x"], Not(HasSubstr("replacement of pod")));
  Gone("ns/b0");
  Advance(2'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.BindTexts(), ::testing::Contains("ns/big->b"));
  EXPECT_THAT(rec_.BindTexts(), ::testing::Contains(::testing::StartsWith("ns/b0-x->")));
}

}  // namespace
}  // namespace tessera::k8s
