// Gangs and GPU faults in SchedulerCore (gang_restarts.h), step by step with the recording fakes:
// a gang with tessera.dev/gang-restart: all (or a PodGroup with disruptionMode all) that loses a
// member to a GPU fault is evicted whole and its new members go together once the old are gone;
// without it, or when the member left for another reason, only the lost member is replaced.
#include "k8s/scheduler/gang_restarts.h"

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
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::NodeObject;
using testing::PodObject;
using testing::Recorder;
using ::testing::UnorderedElementsAre;

class GangRestartTest : public testing::CoreFixture {
 protected:
  void SetUp() override {
    SchedulerCoreOptions o;
    o.retry_min_interval = std::chrono::milliseconds(1000);
    o.gang_restart_retry = std::chrono::milliseconds(5000);
    CreateCore(o);
    core_->OnNode(Change::kAdded, DecodeNode(N1().Json()));
    core_->SetSynced(true, true);
  }
  static NodeObject N1() { return NodeObject("n1").Gpus(8).NvSwitch(); }
  // The GPU the bind of `key` granted (its last bind).
  int GpuOf(const std::string& key) {
    int gpu = -1;
    for (const Recorder::BindCall& b : rec_.binds) {
      if (b.key == key) gpu = b.assignment.gpus.at(0).grant.gpu;
    }
    return gpu;
  }
  // The agent marks GPU `gpu` of n1 unhealthy (an XID 79: fallen off the bus).
  void GpuFails(int gpu) {
    core_->OnNode(
        Change::kUpdated,
        DecodeNode(N1().Unhealthy(gpu, {79}, "XID 79: GPU has fallen off the bus").Json()));
  }
  // A one-GPU member of gang `gang` of 3; `restart`: its tessera.dev/gang-restart ("": none).
  json Member(const std::string& name, const std::string& restart, const std::string& gang = "g") {
    PodObject p("ns", name);
    p.Limit("tessera.dev/gpu", "1").Gang(gang, 3);
    if (!restart.empty()) p.Annotation("tessera.dev/gang-restart", restart);
    return p.Json();
  }
  // Places and binds gang g of 3 (w0..w2).
  void StartGang(const std::string& restart) {
    for (int i = 0; i < 3; ++i) Pod(Member(StrCat("w", i), restart));
    ScheduleAndBind();
    ASSERT_EQ(rec_.binds.size(), 3u) << rec_.LastFailure("ns/w0");
  }
  size_t BindsOf(const std::vector<std::string>& keys) {
    size_t n = 0;
    for (const Recorder::BindCall& b : rec_.binds) {
      n += std::find(keys.begin(), keys.end(), b.key) != keys.end() ? 1 : 0;
    }
    return n;
  }
};

// GPU of w1 fails and the agent evicts w1: w0 and w2 are evicted too (GangRestart Events naming
// the fault), once. The Job's new members n0..n2 wait, saying for what, while any old member is
// left (an eviction a budget held back is tried again after gang_restart_retry), then go
// together.
TEST_F(GangRestartTest, AGangThatDeclaresAllIsEvictedWholeAndPlacedAgainTogether) {
  StartGang("all");
  GpuFails(GpuOf("ns/w1"));
  Terminating("ns/w1");
  EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/w0", "ns/w2"));
  ASSERT_EQ(rec_.warnings.size(), 2u);
  EXPECT_EQ(rec_.warnings[0].reason, "GangRestart");
  EXPECT_THAT(rec_.warnings[0].message,
              HasSubstr(StrCat("gang ns/g restarts whole (tessera.dev/gang-restart: all): member "
                               "ns/w1 was lost to a GPU fault (GPU ",
                               GpuOf("ns/w1"), " of node n1 is unhealthy)")));
  EXPECT_EQ(metrics_.gang_restarts.load(), 1);
  Gone("ns/w1");
  // The old members' own departures restart nothing more.
  Terminating("ns/w0");
  EXPECT_EQ(rec_.evicted.size(), 2u);

  for (int i = 0; i < 3; ++i) Pod(Member(StrCat("n", i), "all"));
  const std::vector<std::string> fresh = {"ns/n0", "ns/n1", "ns/n2"};
  ScheduleAndBind();
  EXPECT_EQ(BindsOf(fresh), 0u);
  EXPECT_THAT(rec_.LastFailure("ns/n0"),
              HasSubstr("gang ns/g restarts whole (tessera.dev/gang-restart: all): waiting for 2 "
                        "old member(s) to go"));
  // w2's eviction was refused (a budget): it is still running; tried again after the retry.
  Advance(5000);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/w0", "ns/w2", "ns/w2"));
  Gone("ns/w0");
  Advance(1000);
  ScheduleAndBind();
  EXPECT_EQ(BindsOf(fresh), 0u);
  Terminating("ns/w2");
  Gone("ns/w2");
  Advance(1000);
  ScheduleAndBind();
  EXPECT_EQ(BindsOf(fresh), 3u) << rec_.LastFailure("ns/n0");
  EXPECT_EQ(metrics_.gang_restarts.load(), 1);
}

// The scheduler restarts while a gang restarts whole: w1 (lost) is gone, w0 terminates and w2's
// eviction was refused. Each old member was marked (condition tessera.dev/GangRestart) before its
// eviction; the new scheduler reads the marks from the pods, so the new members wait for w0 and w2
// (not placed beside them as survivors), and w2 is evicted again.
TEST_F(GangRestartTest, ARestartedSchedulerResumesARestartUnderWay) {
  StartGang("all");
  GpuFails(GpuOf("ns/w1"));
  Terminating("ns/w1");
  ASSERT_THAT(rec_.evicted, UnorderedElementsAre("ns/w0", "ns/w2"));
  std::vector<std::string> marked;
  for (const Recorder::ReportCall& c : rec_.gang_restart_marks) {
    marked.push_back(c.key);
    EXPECT_THAT(c.message, HasSubstr("member ns/w1 was lost to a GPU fault"));
  }
  EXPECT_THAT(marked, UnorderedElementsAre("ns/w0", "ns/w2"));
  const int failed = GpuOf("ns/w1");

  // A new scheduler: the node (GPU still unhealthy) and the pods as the API server has them.
  auto mark = [&](const std::string& key) {
    for (const Recorder::ReportCall& c : rec_.gang_restart_marks) {
      if (c.key != key) continue;
      objects_[key]["status"]["conditions"] = json::array(
          {{{"type", "tessera.dev/GangRestart"}, {"status", "True"}, {"message", c.message}}});
    }
  };
  mark("ns/w0");
  mark("ns/w2");
  objects_["ns/w0"]["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
  objects_.erase("ns/w1");
  std::map<std::string, json> pods = objects_;
  rec_ = Recorder();
  SchedulerCoreOptions o;
  o.gang_restart_retry = std::chrono::milliseconds(5000);
  CreateCore(o);
  core_->OnNode(
      Change::kAdded,
      DecodeNode(N1().Unhealthy(failed, {79}, "XID 79: GPU has fallen off the bus").Json()));
  for (const auto& [key, pod] : pods) Pod(pod);
  core_->SetSynced(true, true);
  for (int i = 0; i < 3; ++i) Pod(Member(StrCat("n", i), "all"));
  const std::vector<std::string> fresh = {"ns/n0", "ns/n1", "ns/n2"};
  ScheduleAndBind();
  EXPECT_EQ(BindsOf(fresh), 0u);
  EXPECT_THAT(rec_.LastFailure("ns/n0"), HasSubstr("waiting for 2 old member(s) to go"));
  EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/w2"));  // w0 terminates already
  Gone("ns/w0");
  Terminating("ns/w2");
  Gone("ns/w2");
  Advance(1000);
  ScheduleAndBind();
  EXPECT_EQ(BindsOf(fresh), 3u) << rec_.LastFailure("ns/n0");
}

// Without gang-restart all (or with "member"), a member lost to a fault is only replaced: nothing
// else is evicted, and the replacement goes beside the survivors.
TEST_F(GangRestartTest, WithoutAllOnlyTheLostMemberIsReplaced) {
  for (const std::string restart : {"", "member"}) {
    SCOPED_TRACE(restart);
    SetUp();
    rec_ = Recorder();
    objects_.clear();
    StartGang(restart);
    GpuFails(GpuOf("ns/w1"));
    Terminating("ns/w1");
    Gone("ns/w1");
    EXPECT_THAT(rec_.evicted, IsEmpty());
    Pod(Member("w1-again", restart));
    Advance(1000);
    ScheduleAndBind();
    EXPECT_EQ(BindsOf({"ns/w1-again"}), 1u) << rec_.LastFailure("ns/w1-again");
    EXPECT_EQ(metrics_.gang_restarts.load(), 0);
  }
}

// A member that leaves while its GPUs are healthy (finished, deleted by its owner) restarts
// nothing, even with all.
TEST_F(GangRestartTest, AMemberLeavingWithoutAFaultRestartsNothing) {
  StartGang("all");
  Terminating("ns/w1");
  Gone("ns/w1");
  EXPECT_THAT(rec_.evicted, IsEmpty());
  EXPECT_EQ(metrics_.gang_restarts.load(), 0);
}

// A member whose node is gone counts as lost to a fault.
TEST_F(GangRestartTest, AMemberWhoseNodeIsGoneIsLostToAFault) {
  StartGang("all");
  core_->OnNode(Change::kDeleted, DecodeNode(N1().Json()));
  Gone("ns/w0");
  EXPECT_THAT(rec_.evicted, UnorderedElementsAre("ns/w1", "ns/w2"));
}

// The annotation is checked: all or member, and only on a gang member.
TEST(GangRestartDecode, TheAnnotationIsAllOrMemberOnAGangMember) {
  auto decode = [](const std::string& value, bool gang) {
    PodObject p("ns", "p");
    p.Limit("tessera.dev/gpu", "1").Annotation("tessera.dev/gang-restart", value);
    if (gang) p.Gang("g", 2);
    return DecodePod(p.Json());
  };
  EXPECT_TRUE(decode("all", true)->gang_restart_all);
  EXPECT_FALSE(decode("member", true)->gang_restart_all);
  EXPECT_EQ(decode("member", true)->input_error, "");
  EXPECT_EQ(decode("everything", true)->input_error,
            "metadata.annotations[tessera.dev/gang-restart]: \"everything\" must be all or member");
  EXPECT_THAT(decode("all", false)->input_error,
              HasSubstr("needs tessera.dev/gang or spec.schedulingGroup.podGroupName"));
}

// A PodGroup's spec.disruptionMode {all: {}} is the upstream way to say it (a union in
// scheduling.k8s.io/v1beta1: all or single): its members restart whole.
TEST(GangRestartDecode, APodGroupWithDisruptionModeAllRestartsWhole) {
  for (const auto& [mode, all] :
       std::vector<std::pair<std::string, bool>>{{"all", true}, {"single", false}, {"", false}}) {
    json group = testing::PodGroupJson("ns", "train", 2);
    if (!mode.empty()) group["spec"]["disruptionMode"] = {{mode, json::object()}};
    PodGroups groups(core::DefaultTopologyLevels());
    (void)groups.OnGroup(Change::kAdded, DecodePodGroup(group));
    PodGroups::Resolved r = groups.Resolve(
        DecodePod(PodObject("ns", "w0").Limit("tessera.dev/gpu", "1").PodGroup("train").Json()));
    EXPECT_EQ(r.pod->gang_restart_all, all) << mode;
  }
}

// The restart's bookkeeping: one per gang; it ends when its last old member is gone.
TEST(GangRestarts, OnePerGangEndingWithItsLastOldMember) {
  GangRestarts r(std::chrono::seconds(5));
  const auto t0 = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  EXPECT_THAT(r.Start("ns/g", "ns/a", {"ns/a", "ns/b", "ns/c"}, t0),
              UnorderedElementsAre("ns/b", "ns/c"));
  EXPECT_THAT(r.Start("ns/g", "ns/b", {"ns/b", "ns/c"}, t0), IsEmpty());
  EXPECT_EQ(r.Leaving("ns/g"), 3);
  EXPECT_EQ(r.GangOf("ns/c"), "ns/g");
  auto none_deleting = [](const std::string&) { return false; };
  EXPECT_THAT(r.DueAgain(t0 + std::chrono::seconds(4), none_deleting), IsEmpty());
  EXPECT_THAT(r.DueAgain(t0 + std::chrono::seconds(5), none_deleting),
              UnorderedElementsAre("ns/a", "ns/b", "ns/c"));
  EXPECT_FALSE(r.Gone("ns/a"));
  EXPECT_FALSE(r.Gone("ns/x"));
  EXPECT_FALSE(r.Gone("ns/b"));
  EXPECT_TRUE(r.Gone("ns/c"));
  EXPECT_EQ(r.Leaving("ns/g"), 0);
  EXPECT_TRUE(r.empty());
}

// Hot spares (spareGpusPerDomain 1) on a 4-GPU NVSwitch node: GPU 3 is kept and published on
// the node; a gang of 3 fills GPUs 0-2; a pod of no gang waits, told that only spares are left.
// GPU of w1 fails and w1 is lost: its replacement takes the spare, beside w0 and w2; the lone
// pod still waits; the node has no spare left to show.
class SpareTest : public testing::CoreFixture {
 protected:
  void SetUp() override {
    SchedulerCoreOptions o;
    o.spare_gpus_per_domain = 1;
    CreateCore(o);
    core_->OnNode(Change::kAdded, DecodeNode(Dgx().Json()));
    core_->SetSynced(true, true);
  }
  static NodeObject Dgx() { return NodeObject("dgx").Gpus(4).NvSwitch(); }
  static json Member(const std::string& name) {
    return PodObject("ns", name).Limit("tessera.dev/gpu", "1").Gang("g", 3).Json();
  }
};

// The spare is no grant: the node's allocated GPU memory and compute leave it out (the engine
// holds it as a whole GPU of no pod), its capacity counts it.
TEST_F(SpareTest, TheSpareIsNotCountedAsAllocated) {
  core_->ScheduleSome();
  ASSERT_THAT(rec_.spares, ::testing::ElementsAre("dgx=3"));
  Pod(Member("w0"));
  Pod(Member("w1"));
  Pod(Member("w2"));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 3u) << rec_.LastFailure("ns/w0");
  core_->PublishMetrics();
  const std::string text = metrics_.Render();
  const int64_t gpu = int64_t{81920} * 1024 * 1024;  // NodeObject's GPUs: 80Gi
  EXPECT_THAT(text, HasSubstr(StrCat("tessera_scheduler_gpu_memory_allocated_bytes{node=\"dgx\"} ",
                                     3 * gpu, "\n")));
  EXPECT_THAT(text, HasSubstr(StrCat("tessera_scheduler_gpu_memory_capacity_bytes{node=\"dgx\"} ",
                                     4 * gpu, "\n")));
}

TEST_F(SpareTest, OnlyAGangsLostMemberTakesTheSpare) {
  core_->ScheduleSome();
  EXPECT_THAT(rec_.spares, ::testing::ElementsAre("dgx=3"));
  for (int i = 0; i < 3; ++i) Pod(Member(StrCat("w", i)));
  ScheduleAndBind();
  ASSERT_EQ(rec_.binds.size(), 3u) << rec_.LastFailure("ns/w0");
  std::map<int, std::string> on_gpu;
  for (const Recorder::BindCall& b : rec_.binds) on_gpu[b.assignment.gpus.at(0).grant.gpu] = b.key;
  ASSERT_EQ(on_gpu.size(), 3u);
  ASSERT_FALSE(on_gpu.contains(3));
  Pod(PodObject("ns", "alone").Limit("tessera.dev/gpu", "1").Json());
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/alone"), "");
  EXPECT_THAT(rec_.LastFailure("ns/alone"), HasSubstr("kept spare for gang replacements"));

  // The member on GPU 2 is lost to its GPU's fault.
  const std::string lost = on_gpu[2];
  // The node as the watch shows it: the agent's inventory, and the annotation written above.
  json dgx = Dgx().Unhealthy(2, {79}, "XID 79: GPU has fallen off the bus").Json();
  dgx["metadata"]["annotations"]["tessera.dev/spare-gpus"] = "3";
  core_->OnNode(Change::kUpdated, DecodeNode(dgx));
  Terminating(lost);
  Gone(lost);
  Pod(Member("again"));
  Advance(2000);
  ScheduleAndBind();
  ASSERT_NE(BoundTo("ns/again"), "") << rec_.LastFailure("ns/again");
  EXPECT_EQ(rec_.binds.back().assignment.gpus.at(0).grant.gpu, 3);
  EXPECT_EQ(BoundTo("ns/alone"), "");
  EXPECT_THAT(rec_.spares, ::testing::ElementsAre("dgx=3", "dgx="));

  // The member on GPU 0 ends: GPU 0 is the spare, not the unhealthy GPU 2 (held again as the
  // pod left, and never a spare).
  Terminating(on_gpu[0]);
  Gone(on_gpu[0]);
  ScheduleAndBind();
  EXPECT_THAT(rec_.spares, ::testing::ElementsAre("dgx=3", "dgx=", "dgx=0"));
  EXPECT_EQ(BoundTo("ns/alone"), "");
}

}  // namespace
}  // namespace tessera::k8s
