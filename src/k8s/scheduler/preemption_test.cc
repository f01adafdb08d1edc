// Preemption in SchedulerCore, step by step: pods placed and bound through the core, then a pod
// that does not fit; what is nominated, evicted and told (a recording fake of the Binder,
// Reporter and PreemptionWriter interfaces, which we own), and what happens as the watch shows
// the victims leaving, after a restart, and when a budget refuses.
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/scheduler_core.h"
#include "k8s/scheduler/testing/core_fixture.h"
#include "k8s/scheduler/testing/recorder.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/names.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::NodeObject;
using testing::PodObject;
using ::testing::UnorderedElementsAre;
using Stage = SchedulerCore::Stage;

using testing::Recorder;

class PreemptionTest : public testing::CoreFixture {
 protected:
  void SetUp() override { Make(); }
  void Make() {
    SchedulerCoreOptions o;
    o.retry_min_interval = std::chrono::milliseconds(1000);
    CreateCore(o);
  }
  void Node(const json& node) { core_->OnNode(Change::kAdded, DecodeNode(node)); }
  void Group(const json& group) { core_->OnPodGroup(Change::kAdded, DecodePodGroup(group)); }
  // A PodGroup gang of `min` with what workload-aware preemption reads ("" / -1: unset).
  json GroupJson(const std::string& name, int min, const std::string& disruption, int priority = -1,
                 const std::string& policy = "") {
    json g = testing::PodGroupJson("ns", name, min);
    if (!disruption.empty()) g["spec"]["disruptionMode"] = {{disruption, json::object()}};
    if (priority >= 0) g["spec"]["priority"] = priority;
    if (!policy.empty()) g["spec"]["preemptionPolicy"] = policy;
    return g;
  }
  json Member(const std::string& name, const std::string& group, int priority, int second) {
    return PodObject("ns", name)
        .Limit("tessera.dev/gpu", "1")
        .Priority(priority)
        .PodGroup(group)
        .Created(StrCat("2026-12-01T00:00:0", second, "Z"))
        .Json();
  }
  json Share(const std::string& name, int priority, const std::string& queue = "") {
    PodObject p("ns", name);
    p.Limit("tessera.dev/gpu-memory", "20Gi").Priority(priority);
    if (!queue.empty()) p.Annotation("tessera.dev/queue", queue);
    return p.Json();
  }
  // Queues that deserve whole GPUs, by name, made known to the scheduler.
  void QueuesDeserving(const std::vector<std::pair<std::string, int64_t>>& gpus) {
    std::vector<core::QueueSpec> specs;
    for (const auto& [name, n] : gpus) {
      core::QueueSpec q;
      q.name = name;
      q.deserved[core::kQueueGpu] = n * 1000;
      specs.push_back(q);
    }
    core_->SetQueues(specs, true);
  }
  json Whole(const std::string& name, int priority, const std::string& queue = "", int n = 1) {
    PodObject p("ns", name);
    p.Limit("tessera.dev/gpu", std::to_string(n)).Priority(priority);
    if (!queue.empty()) p.Annotation("tessera.dev/queue", queue);
    return p.Json();
  }

  // The watch shows the pod running and ready (as its kubelet reports), with `labels`.
  void RunningReady(const std::string& key, const std::map<std::string, std::string>& labels = {}) {
    json pod = objects_.at(key);
    pod["status"]["phase"] = "Running";
    pod["status"]["conditions"] = json::array({{{"type", "Ready"}, {"status", "True"}}});
    for (const auto& [k, v] : labels) pod["metadata"]["labels"][k] = v;
    Pod(pod, Change::kUpdated);
  }
  // A PodDisruptionBudget over pods labelled app=`app`, as the disruption controller left it.
  void Budget(const std::string& app, int64_t allowed, std::vector<std::string> disrupted = {},
              Change change = Change::kAdded) {
    json b = {{"metadata", {{"namespace", "ns"}, {"name", app}, {"generation", 1}}},
              {"spec", {{"selector", {{"matchLabels", {{"app", app}}}}}}},
              {"status", {{"observedGeneration", 1}, {"disruptionsAllowed", allowed}}}};
    for (const std::string& d : disrupted) {
      b["status"]["disruptedPods"][d] = "2026-12-01T00:00:00Z";
    }
    core_->OnBudget(change, DecodeBudget(b));
  }
};

TEST_F(PreemptionTest, FourSharesAreEvictedForOneWholeGpuThenItLandsThere) {
  Node(NodeObject("n1").Gpus(1).Json());
  core_->SetSynced(true, true);
  for (int i = 0; i < 4; ++i) Pod(Share(StrCat("s", i), 0));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 4u);

  Pod(Whole("urgent", 100));
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/s0", "ns/s1", "ns/s2", "ns/s3"));
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/urgent->n1"));
  EXPECT_THAT(rec_.failures["ns/urgent"], HasSubstr("nominated to node n1: waiting for 4 pod(s)"));
  EXPECT_THAT(Recorder::Texts(rec_.warnings)[0],
              HasSubstr("Preempted: evicted by tessera to make room on node n1 "
                        "for pod ns/urgent (priority 100, queue default)"));
  EXPECT_EQ(core_->StageOf("ns/urgent"), Stage::kUnschedulable);
  EXPECT_EQ(metrics_.preemptions.load(), 1);
  EXPECT_EQ(metrics_.preemption_victims.load(), 4);
  EXPECT_EQ(metrics_.defrag_moves.load(), 0);

  // The victims terminate; retried meanwhile, nobody is evicted twice.
  for (int i = 0; i < 4; ++i) Terminating(StrCat("ns/s", i));
  Advance(30'000);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 4u);
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/urgent->n1"));  // not written again
  EXPECT_EQ(metrics_.preemptions.load(), 1);  // awaiting the victims is no second preemption
  EXPECT_EQ(metrics_.preemption_victims.load(), 4);
  // Gone: the pod lands on the room made for it.
  for (int i = 0; i < 4; ++i) Gone(StrCat("ns/s", i));
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/urgent"), "n1");
  EXPECT_EQ(core_->preemption().nominations(), 0u);
  const std::string text = metrics_.Render();
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_preemptions_total 1\n"));
  EXPECT_THAT(text, HasSubstr("tessera_scheduler_preemption_victims_total 4\n"));
}

TEST_F(PreemptionTest, NobodyIsEvictedWhenItWouldNotHelp) {
  Node(NodeObject("n1").Gpus(2).Json());
  core_->SetSynced(true, true);
  Pod(Whole("high", 50));
  Pod(Share("low", 0));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 2u);
  Pod(Whole("two", 10, "", 2));
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_THAT(rec_.nominated, IsEmpty());
  EXPECT_THAT(rec_.failures["ns/two"], HasSubstr("preemption would not help"));
}

TEST_F(PreemptionTest, TheNominatedRoomIsKeptAndARestartNeitherEvictsTwiceNorLosesIt) {
  Node(NodeObject("n1").Gpus(1).Json());
  Node(NodeObject("n2").Gpus(1).Json());
  core_->SetSynced(true, true);
  Pod(Whole("a", 0));
  Pod(Whole("b", 5));
  ScheduleAndBind();
  Pod(Whole("urgent", 100));
  core_->ScheduleSome();
  ASSERT_THAT(rec_.evicted, ElementsAre("ns/a"));  // the lower priority of the two
  const std::string node = BoundTo("ns/a");

  // A restart: a new core reads everything back from the API server, the victim terminating
  // and the preemptor nominated.
  Terminating("ns/a");
  json urgent = objects_.at("ns/urgent");
  urgent["status"]["nominatedNodeName"] = node;
  objects_["ns/urgent"] = urgent;
  rec_.evicted.clear();
  rec_.nominated.clear();
  Make();
  Node(NodeObject("n1").Gpus(1).Json());
  Node(NodeObject("n2").Gpus(1).Json());
  for (const auto& [key, pod] : objects_) core_->OnPod(Change::kAdded, DecodePod(pod));
  core_->SetSynced(true, true);
  ASSERT_NE(core_->preemption().NominatedNode("ns/urgent"), nullptr);
  EXPECT_EQ(*core_->preemption().NominatedNode("ns/urgent"), node);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());    // a is awaited, not evicted again
  EXPECT_THAT(rec_.nominated, IsEmpty());  // already nominated there

  // The victim is gone. A pod of lower priority tried first (the nominated pod was tried under
  // a second ago) does not take the room; then the nominated pod lands on it.
  Gone("ns/a");
  Pod(Whole("late", 1));
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/late"), "");
  EXPECT_THAT(rec_.failures["ns/late"], HasSubstr("is kept for pod ns/urgent"));
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/urgent"), node);
  EXPECT_EQ(BoundTo("ns/late"), "");
}

TEST_F(PreemptionTest, AQueueOverItsShareGivesBackToOneUnder) {
  Node(NodeObject("n1").Gpus(4).Json());
  core_->SetSynced(true, true);
  QueuesDeserving({{"train", 2}, {"infer", 2}});
  for (int i = 0; i < 4; ++i) Pod(Whole(StrCat("t", i), 100, "train"));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 4u);
  // infer holds nothing and deserves two: it takes back one GPU per pod, up to two.
  Pod(Whole("i0", 0, "infer"));
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 1u);
  for (const std::string& v : rec_.evicted) Gone(v);
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/i0"), "n1");
  Pod(Whole("i1", 0, "infer"));
  Advance(1'000);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 2u);
  for (size_t i = 1; i < rec_.evicted.size(); ++i) Gone(rec_.evicted[i]);
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/i1"), "n1");
  // A third would take infer beyond its share, and train below its own: nobody goes.
  Pod(Whole("i2", 0, "infer"));
  Advance(1'000);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 2u);
  EXPECT_THAT(rec_.failures["ns/i2"], HasSubstr("preemption would not help"));
}

TEST_F(PreemptionTest, ARefusedEvictionTurnsThePlanElsewhere) {
  Node(NodeObject("n1").Gpus(1).Json());
  Node(NodeObject("n2").Gpus(1).Json());
  core_->SetSynced(true, true);
  Pod(Whole("a", 0));
  Pod(Whole("b", 1));
  ScheduleAndBind();
  Pod(Whole("urgent", 100));
  core_->ScheduleSome();
  ASSERT_THAT(rec_.evicted, ElementsAre("ns/a"));
  // A disruption budget refuses: the next try evicts the other pod instead.
  rec_.refusals.push_back(
      {"ns/a", "Cannot evict pod as it would violate the pod's disruption budget."});
  Advance(1'000);
  Advance(30'000);  // the retry period
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/a", "ns/b"));
}

// A pending gang evicts for all of its members at once: a running gang is evicted whole (the
// cheaper victims: two pods of priority 0, against two singles of priority 50), every member is
// nominated to its node in the one rack the gang asks, and the gang lands there once they are
// gone.
TEST_F(PreemptionTest, AGangEvictsAWholeGangAndEveryMemberIsNominated) {
  Node(NodeObject("n1").Gpus(2).Label(std::string(records::kRackLabel), "r1").Json());
  Node(NodeObject("n2").Gpus(2).Label(std::string(records::kRackLabel), "r2").Json());
  core_->SetSynced(true, true);
  auto member = [](const std::string& name, const std::string& gang, int priority) {
    return PodObject("ns", name)
        .Limit("tessera.dev/gpu", "1")
        .Priority(priority)
        .Gang(gang, 2, "rack")
        .Json();
  };
  Pod(member("o0", "old", 0));
  Pod(member("o1", "old", 0));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 2u);
  const std::string old_node = BoundTo("ns/o0");
  ASSERT_EQ(BoundTo("ns/o1"), old_node);
  Pod(Whole("s0", 50));
  Pod(Whole("s1", 50));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 4u);

  Pod(member("g0", "new", 100));
  Pod(member("g1", "new", 100));
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/o0", "ns/o1"));
  EXPECT_THAT(rec_.nominated, UnorderedElementsAre("ns/g0->" + old_node, "ns/g1->" + old_node));
  EXPECT_THAT(rec_.failures["ns/g0"], HasSubstr("gang ns/new nominated to node(s) " + old_node));
  EXPECT_THAT(rec_.failures["ns/g1"], HasSubstr("2 evicted now for this gang"));
  EXPECT_THAT(Recorder::Texts(rec_.warnings)[0],
              HasSubstr("for gang ns/new (2 pods, priority 100"));

  // Retried while the victims terminate: nobody more is evicted, nothing nominated again.
  Terminating("ns/o0");
  Terminating("ns/o1");
  Advance(30'000);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 2u);
  EXPECT_EQ(rec_.nominated.size(), 2u);
  Gone("ns/o0");
  Gone("ns/o1");
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/g0"), old_node);
  EXPECT_EQ(BoundTo("ns/g1"), old_node);
}

// A pending elastic gang (size 4, min 2) evicts for its min only: 2 of the 4 low-priority pods,
// its two oldest members nominated; the others are told they join as room frees up. Once it runs
// at its min it evicts nobody to grow: its third member lands only when a pod ends by itself.
TEST_F(PreemptionTest, AnElasticGangEvictsForItsMinOnlyAndNobodyToGrow) {
  Node(NodeObject("n1").Gpus(4).NvSwitch().Json());
  core_->SetSynced(true, true);
  for (int i = 0; i < 4; ++i) Pod(Whole(StrCat("low", i), 0));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    Pod(PodObject("ns", StrCat("e", i))
            .Limit("tessera.dev/gpu", "1")
            .Priority(100)
            .Gang("e", 4, "nvlink-domain")
            .Annotation("tessera.dev/gang-min", "2")
            .Created(StrCat("2026-12-01T00:00:0", i, "Z"))
            .Json());
  }
  core_->ScheduleSome();
  ASSERT_EQ(rec_.evicted.size(), 2u);
  EXPECT_THAT(rec_.nominated, UnorderedElementsAre("ns/e0->n1", "ns/e1->n1"));
  EXPECT_THAT(rec_.failures["ns/e0"], HasSubstr("gang ns/e nominated to node(s) n1"));
  EXPECT_THAT(rec_.failures["ns/e3"],
              HasSubstr("gang ns/e: 2 of its members nominated to node(s) n1, the 2 it needs to "
                        "reach its min of 2"));
  EXPECT_THAT(rec_.failures["ns/e3"], HasSubstr("joins when room frees up"));
  ASSERT_EQ(rec_.warnings.size(), 2u);
  EXPECT_THAT(Recorder::Texts(rec_.warnings)[0], HasSubstr("for gang ns/e (2 pods, priority 100"));

  const std::vector<std::string> victims = rec_.evicted;
  for (const std::string& v : victims) Terminating(v);
  for (const std::string& v : victims) Gone(v);
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/e0"), "n1");
  EXPECT_EQ(BoundTo("ns/e1"), "n1");
  EXPECT_EQ(BoundTo("ns/e2"), "");
  // Running at its min: retried, it evicts nobody more.
  Advance(30'000);
  ScheduleAndBind();
  EXPECT_EQ(rec_.evicted.size(), 2u);
  EXPECT_EQ(rec_.nominated.size(), 2u);
  EXPECT_THAT(rec_.failures["ns/e2"], HasSubstr("gang e: 2 of 4 members run in one nvlink-domain"));
  EXPECT_THAT(rec_.failures["ns/e2"], ::testing::Not(HasSubstr("preemption")));
  // A low-priority pod ends by itself: the gang grows into its GPU.
  std::string left;
  for (int i = 0; i < 4 && left.empty(); ++i) {
    const std::string key = StrCat("ns/low", i);
    if (std::find(victims.begin(), victims.end(), key) == victims.end()) left = key;
  }
  Gone(left);
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/e2"), "n1");
  EXPECT_EQ(BoundTo("ns/e3"), "");
}

// A gang whose members could only fit by evicting pods of higher priority evicts nobody.
TEST_F(PreemptionTest, AGangEvictsNobodyWhenItWouldNotHelp) {
  Node(NodeObject("n1").Gpus(2).Json());
  core_->SetSynced(true, true);
  Pod(Whole("high", 500));
  Pod(Whole("low", 0));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    Pod(PodObject("ns", StrCat("g", i))
            .Limit("tessera.dev/gpu", "1")
            .Priority(100)
            .Gang("g", 2)
            .Json());
  }
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_THAT(rec_.nominated, IsEmpty());
  EXPECT_THAT(rec_.failures["ns/g0"], HasSubstr("preemption would not help"));
}

// A budget that allows no eviction is read before planning: the planner goes around the pod it
// protects (the lower priority one) and evicts the other, and the Eviction API never has to
// refuse anything. When the budget allows one again, its pod is a candidate again.
TEST_F(PreemptionTest, APlanGoesAroundAPodItsBudgetProtects) {
  Node(NodeObject("n1").Gpus(1).Json());
  Node(NodeObject("n2").Gpus(1).Json());
  core_->SetSynced(true, true);
  Pod(Whole("keep", 0));
  Pod(Whole("other", 5));
  ScheduleAndBind();
  RunningReady("ns/keep", {{"app", "keep"}});
  RunningReady("ns/other");
  Budget("keep", 0);
  Pod(Whole("urgent", 100));
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/other"));
  const std::string other_node = BoundTo("ns/other");
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/urgent->" + other_node));
  Terminating("ns/other");
  Gone("ns/other");
  Advance(1'000);
  ScheduleAndBind();
  ASSERT_EQ(BoundTo("ns/urgent"), other_node);

  // Another urgent pod: the protected pod is all that is left, and its budget allows nothing.
  Pod(Whole("urgent-2", 100));
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 1u);
  EXPECT_THAT(rec_.failures["ns/urgent-2"],
              HasSubstr("disruption budget ns/keep, which allows no eviction now"));
  // The budget allows one now: a change, so the pod is retried and evicts it.
  Budget("keep", 1, {}, Change::kUpdated);
  Advance(1'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/other", "ns/keep"));
}

// One plan's victims and the evictions of earlier plans that the budget's status does not show
// yet both count against it: a budget allowing one eviction gives one, however many pods want
// its room, until its status says it allows more.
TEST_F(PreemptionTest, OurEvictionsCountAgainstABudgetUntilItsStatusShowsThem) {
  Node(NodeObject("n1").Gpus(1).Label("at", "n1").Json());
  Node(NodeObject("n2").Gpus(1).Label("at", "n2").Json());
  core_->SetSynced(true, true);
  Pod(Whole("w0", 0));
  Pod(Whole("w1", 0));
  ScheduleAndBind();
  RunningReady("ns/w0", {{"app", "web"}});
  RunningReady("ns/w1", {{"app", "web"}});
  Budget("web", 1);
  Pod(Whole("u0", 100));
  core_->ScheduleSome();
  ASSERT_EQ(rec_.evicted.size(), 1u);
  const std::string first = rec_.evicted[0];
  const std::string other = BoundTo(first) == "n1" ? "n2" : "n1";
  // Pods that may only use the other node: before the budget's status shows the first
  // eviction, it allows no other.
  auto there = [&](const std::string& name) {
    json p = Whole(name, 100);
    p["spec"]["nodeSelector"] = {{"at", other}};
    return p;
  };
  Pod(there("u1"));
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 1u);
  EXPECT_THAT(rec_.failures["ns/u1"], HasSubstr("disruption budget ns/web"));
  // The API server took the eviction: the budget now allows none and lists the pod.
  Budget("web", 0, {first.substr(3)}, Change::kUpdated);
  Pod(there("u2"));
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 1u);
  // The controller saw the pod go and another come up healthy: one more is allowed.
  Terminating(first);
  Budget("web", 1, {}, Change::kUpdated);
  Advance(1'000);
  core_->ScheduleSome();
  ASSERT_EQ(rec_.evicted.size(), 2u);
  EXPECT_EQ(BoundTo(rec_.evicted[1]), other);
}

// A pod under two budgets is refused by the Eviction API whatever they allow: no candidate.
// Before the budgets are listed, no plan is made at all.
TEST_F(PreemptionTest, APodUnderTwoBudgetsIsNoVictimAndNoPlanBeforeTheBudgetsAreKnown) {
  Node(NodeObject("n1").Gpus(1).Json());
  core_->SetSynced(true, true);
  Pod(Whole("both", 0));
  ScheduleAndBind();
  RunningReady("ns/both", {{"app", "web"}});
  json other = {{"metadata", {{"namespace", "ns"}, {"name", "all"}, {"generation", 1}}},
                {"spec", {{"selector", json::object()}}},
                {"status", {{"observedGeneration", 1}, {"disruptionsAllowed", 5}}}};
  core_->OnBudget(Change::kAdded, DecodeBudget(other));
  Budget("web", 5);
  core_->SetBudgetsKnown(false);
  Pod(Whole("urgent", 100));
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_THAT(rec_.failures["ns/urgent"], HasSubstr("PodDisruptionBudgets are not listed yet"));
  core_->SetBudgetsKnown(true);
  Advance(30'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_THAT(rec_.failures["ns/urgent"], HasSubstr("disruption budget ns/all+ns/web"));
}

// A gang's members nominated to a node keep the room being made there, as one: from a single
// pod that would fit beside either member alone, and from another gang, also after a restart
// (the nominations read back from the API server), until the gang lands.
TEST_F(PreemptionTest, AGangsNominatedRoomIsKeptFromPodsAndGangsAcrossARestart) {
  Node(NodeObject("n1").Gpus(2).Json());
  core_->SetSynced(true, true);
  auto member = [](const std::string& name, const std::string& gang, int priority) {
    return PodObject("ns", name)
        .Limit("tessera.dev/gpu", "1")
        .Priority(priority)
        .Gang(gang, 2)
        .Json();
  };
  Pod(member("o0", "old", 0));
  Pod(member("o1", "old", 0));
  ScheduleAndBind();
  Pod(member("g0", "new", 100));
  Pod(member("g1", "new", 100));
  core_->ScheduleSome();
  ASSERT_THAT(rec_.evicted, UnorderedElementsAre("ns/o0", "ns/o1"));
  ASSERT_THAT(rec_.nominated, UnorderedElementsAre("ns/g0->n1", "ns/g1->n1"));

  // A restart while the victims terminate: the nominations come back from the API server, and
  // nobody is evicted or nominated again.
  Terminating("ns/o0");
  Terminating("ns/o1");
  for (const char* g : {"ns/g0", "ns/g1"}) objects_[g]["status"]["nominatedNodeName"] = "n1";
  rec_.evicted.clear();
  rec_.nominated.clear();
  Make();
  Node(NodeObject("n1").Gpus(2).Json());
  for (const auto& [key, pod] : objects_) core_->OnPod(Change::kAdded, DecodePod(pod));
  core_->SetSynced(true, true);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_THAT(rec_.nominated, IsEmpty());

  // The victims are gone. Tried before the gang (tried under a second ago), a single pod and a
  // gang of lower priority would each take room the gang needs: neither is placed.
  Gone("ns/o0");
  Gone("ns/o1");
  Pod(Whole("single", 1));
  Pod(member("l0", "late", 1));
  Pod(member("l1", "late", 1));
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/single"), "");
  EXPECT_EQ(BoundTo("ns/l0"), "");
  EXPECT_THAT(rec_.failures["ns/single"], HasSubstr("is kept for gang ns/new (priority 100)"));
  EXPECT_THAT(rec_.failures["ns/l0"], HasSubstr("is kept for gang ns/new (priority 100)"));
  EXPECT_THAT(rec_.evicted, IsEmpty());
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/g0"), "n1");
  EXPECT_EQ(BoundTo("ns/g1"), "n1");
  EXPECT_EQ(core_->preemption().nominations(), 0u);
}

// A pod that no longer finds a plan gives its nomination up (status.nominatedNodeName cleared),
// so that no room is held for nothing.
// Issue 35: queue tb is owed 4 GPUs and ta holds all 8 of the one node. Five tb pods wait: the
// four tb is owed are planned in one cycle, each seeing the earlier plans' victims as decided
// (4 victims evicted at once, 4 nominations); the fifth would take tb beyond its share and ta
// below its own: nobody more is evicted, then or on the next cycles; all four land once the
// victims are gone. Before: one victim per cycle ("the room being made on node n1 is claimed by
// pod ns/b0"), one graceful termination after another.
TEST_F(PreemptionTest, FourPodsOfAQueueReclaimTheirShareInOneCycle) {
  Node(NodeObject("n1").Gpus(8).Json());
  core_->SetSynced(true, true);
  QueuesDeserving({{"ta", 4}, {"tb", 4}});
  for (int i = 0; i < 8; ++i) Pod(Whole(StrCat("a", i), 0, "ta"));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 8u);
  for (int i = 0; i < 5; ++i) Pod(Whole(StrCat("b", i), 0, "tb"));
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 4u);
  EXPECT_EQ(rec_.nominated.size(), 4u);
  EXPECT_EQ(core_->preemption().nominations(), 4u);
  int told = 0;
  for (int i = 0; i < 5; ++i) {
    const std::string key = StrCat("ns/b", i);
    if (core_->preemption().NominatedNode(key) != nullptr) {
      EXPECT_THAT(rec_.failures[key], HasSubstr("1 evicted now for this pod")) << key;
    } else {
      EXPECT_THAT(rec_.failures[key], HasSubstr("preemption would not help")) << key;
      ++told;
    }
  }
  EXPECT_EQ(told, 1);
  // The victims terminate; retried meanwhile, nobody more is evicted and nothing is withdrawn.
  for (const std::string& v : rec_.evicted) Terminating(v);
  Advance(30'000);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 4u);
  EXPECT_EQ(rec_.nominated.size(), 4u);
  for (const std::string& v : std::vector<std::string>(rec_.evicted)) Gone(v);
  Advance(1'000);
  ScheduleAndBind();
  int bound = 0;
  for (int i = 0; i < 5; ++i) bound += BoundTo(StrCat("ns/b", i)) == "n1" ? 1 : 0;
  EXPECT_EQ(bound, 4);
  EXPECT_EQ(rec_.evicted.size(), 4u);
}

// Two gangs of two in tb (owed 4) against ta's 8 pods on one node: both gangs get their victims
// and nominations in the same cycle, each whole.
TEST_F(PreemptionTest, TwoGangsOfAQueueReclaimInOneCycleEachWhole) {
  Node(NodeObject("n1").Gpus(8).Json());
  core_->SetSynced(true, true);
  QueuesDeserving({{"ta", 4}, {"tb", 4}});
  for (int i = 0; i < 8; ++i) Pod(Whole(StrCat("a", i), 0, "ta"));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 8u);
  for (const std::string gang : {"g", "h"}) {
    for (int i = 0; i < 2; ++i) {
      Pod(PodObject("ns", StrCat(gang, i))
              .Limit("tessera.dev/gpu", "1")
              .Annotation("tessera.dev/queue", "tb")
              .Gang(gang, 2)
              .Json());
    }
  }
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 4u);
  EXPECT_THAT(rec_.nominated,
              UnorderedElementsAre("ns/g0->n1", "ns/g1->n1", "ns/h0->n1", "ns/h1->n1"));
  for (const std::string& v : std::vector<std::string>(rec_.evicted)) Gone(v);
  Advance(1'000);
  ScheduleAndBind();
  for (const char* k : {"ns/g0", "ns/g1", "ns/h0", "ns/h1"}) EXPECT_EQ(BoundTo(k), "n1") << k;
  EXPECT_EQ(rec_.evicted.size(), 4u);
}

// A budget refuses the victim of one of two nominated pods: in the next cycle that pod's plan is
// made again (another victim, evicted at once) and the other keeps its nomination; both land.
TEST_F(PreemptionTest, APlanBrokenByARefusalIsMadeAgainInTheNextCycle) {
  Node(NodeObject("n1").Gpus(3).Json());
  core_->SetSynced(true, true);
  for (int i = 0; i < 3; ++i) Pod(Whole(StrCat("low", i), 0));
  ScheduleAndBind();
  Pod(Whole("h0", 100));
  Pod(Whole("h1", 100));
  core_->ScheduleSome();
  ASSERT_EQ(rec_.evicted.size(), 2u);
  ASSERT_EQ(core_->preemption().nominations(), 2u);
  const std::string refused = rec_.evicted[0];
  rec_.refusals.push_back({refused, "Cannot evict pod as it would violate the pod's budget."});
  Advance(1'000);
  core_->ScheduleSome();
  ASSERT_EQ(rec_.evicted.size(), 3u);
  EXPECT_NE(rec_.evicted[2], refused);
  EXPECT_EQ(core_->preemption().nominations(), 2u);
  for (size_t i = 1; i < rec_.evicted.size(); ++i) Gone(rec_.evicted[i]);
  Advance(1'000);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/h0"), "n1");
  EXPECT_EQ(BoundTo("ns/h1"), "n1");
}

TEST_F(PreemptionTest, ANominationWithoutAPlanIsWithdrawn) {
  Node(NodeObject("n1").Gpus(1).Json());
  core_->SetSynced(true, true);
  Pod(Whole("high", 500));
  ScheduleAndBind();
  json urgent = Whole("urgent", 100);
  urgent["status"]["nominatedNodeName"] = "n1";  // from an earlier plan
  Pod(urgent);
  ASSERT_NE(core_->preemption().NominatedNode("ns/urgent"), nullptr);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/urgent->"));
  EXPECT_EQ(core_->preemption().NominatedNode("ns/urgent"), nullptr);
  // The old value read back before the watch shows it cleared does not bring it back.
  Pod(urgent, Change::kUpdated);
  EXPECT_EQ(core_->preemption().NominatedNode("ns/urgent"), nullptr);
  Advance(30'000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/urgent->"));  // not written again
}

// Workload-aware preemption (PodGroup spec.disruptionMode): a running gang PodGroup of min 2 with
// 3 members on a 4-GPU node beside a pod that outranks the newcomer. In mode single (the API
// server's default) the member above the min goes alone; in mode all the group is one victim.
class PodGroupVictimTest : public PreemptionTest, public ::testing::WithParamInterface<bool> {};

TEST_P(PodGroupVictimTest, AGroupIsEvictedAsOneUnitOnlyInModeAll) {
  const bool all = GetParam();
  Node(NodeObject("n1").Gpus(4).NvSwitch().Json());
  Group(GroupJson("low", 2, all ? "all" : "single"));
  core_->SetSynced(true, true);
  for (int i = 0; i < 3; ++i) Pod(Member(StrCat("low-", i), "low", 0, i));
  Pod(Whole("keep", 200));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 4u);
  Pod(Whole("urgent", 100));
  core_->ScheduleSome();
  if (all) {
    EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/low-0", "ns/low-1", "ns/low-2"));
  } else {
    EXPECT_THAT(rec_.evicted, ElementsAre("ns/low-2"));  // the newest, above the min
  }
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/urgent->n1"));
}

INSTANTIATE_TEST_SUITE_P(DisruptionMode, PodGroupVictimTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "All" : "Single";
                         });

// A PodGroup preempts with its own spec.priority (its pods say 0): its gang evicts two pods of
// priority 50 as one plan, each member nominated.
TEST_F(PreemptionTest, APodGroupPreemptsWithTheGroupsPriority) {
  Node(NodeObject("n1").Gpus(2).Json());
  Group(GroupJson("high", 2, "", 100));
  core_->SetSynced(true, true);
  Pod(Whole("a", 50));
  Pod(Whole("b", 50));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 2u);
  for (int i = 0; i < 2; ++i) Pod(Member(StrCat("high-", i), "high", 0, i));
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/a", "ns/b"));
  EXPECT_THAT(rec_.nominated, UnorderedElementsAre("ns/high-0->n1", "ns/high-1->n1"));
  EXPECT_THAT(Recorder::Texts(rec_.warnings)[0],
              HasSubstr("for gang ns/high (2 pods, priority 100"));
}

// preemptionPolicy Never, the PodGroup's or the pod's own: it waits for room and evicts nobody.
TEST_F(PreemptionTest, PreemptionPolicyNeverEvictsNobody) {
  Node(NodeObject("n1").Gpus(2).Json());
  Group(GroupJson("polite", 2, "", 100, "Never"));
  core_->SetSynced(true, true);
  Pod(Whole("a", 50));
  Pod(Whole("b", 50));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 2u);
  for (int i = 0; i < 2; ++i) Pod(Member(StrCat("polite-", i), "polite", 0, i));
  json own = Whole("own", 100);
  own["spec"]["preemptionPolicy"] = "Never";
  Pod(own);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_THAT(rec_.nominated, IsEmpty());
  EXPECT_THAT(rec_.failures["ns/polite-0"],
              HasSubstr("it evicts nobody (preemptionPolicy Never of the pod or its PodGroup)"));
  EXPECT_THAT(rec_.failures["ns/own"], HasSubstr("it evicts nobody (preemptionPolicy Never)"));
}

}  // namespace
}  // namespace tessera::k8s
