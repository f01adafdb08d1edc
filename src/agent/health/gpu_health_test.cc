#include "agent/health/gpu_health.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = HealthChange::Kind;
using Clock = GpuHealthTracker::Clock;

// Two H100s joined by NV18.
NodeGpus TwoGpus() {
  NodeGpus n;
  for (int i = 0; i < 2; ++i) {
    DiscoveredGpu g;
    g.spec.index = i;
    g.spec.uuid = i == 0 ? "GPU-00000000-0000-4000-8000-000000000000"
                         : "GPU-00000000-0000-4000-8000-000000000001";
    g.spec.model = "H100-80GB";
    g.spec.memory_mib = 81559;
    n.gpus.push_back(g);
  }
  n.links = core::LinkMatrix(2);
  n.links.Set(0, 1, core::Link{core::LinkKind::kNvLink, 18});
  return n;
}

std::vector<Kind> Kinds(const std::vector<HealthChange>& changes) {
  std::vector<Kind> out;
  for (const HealthChange& c : changes) out.push_back(c.kind);
  return out;
}

class TrackerTest : public ::testing::Test {
 protected:
  GpuHealthTracker tracker_{HealthTrackerOptions{.quiet_period = seconds(5)}};
  Clock::time_point t0_ = Clock::time_point{} + seconds(1000);
};

TEST_F(TrackerTest, AHardwareXidTakesTheGpuOutUntilItsResetHasBeenQuiet) {
  NodeGpus found = TwoGpus();
  tracker_.Observe(found, t0_);
  EXPECT_TRUE(tracker_.TakeChanges().empty());
  EXPECT_TRUE(tracker_.Published().gpus[1].health.healthy);

  // XID 48, then the driver's recovery action says "reset" (as XID 154 would make it read).
  tracker_.OnXid(XidEvent(1, found.gpus[1].spec.uuid, 48), t0_);
  std::vector<HealthChange> out = tracker_.TakeChanges();
  ASSERT_THAT(Kinds(out), ElementsAre(Kind::kOutOfService));
  EXPECT_EQ(out[0].gpu, 1);
  EXPECT_EQ(out[0].effect, FaultEffect::kFail);
  EXPECT_THAT(out[0].reason, HasSubstr("XID 48: double bit ECC error"));
  EXPECT_THAT(tracker_.FailedGpus(), ElementsAre(1));
  found.gpus[1].conditions = {Condition(HealthCondition::kRecoveryReset, "")};
  tracker_.Observe(found, t0_ + milliseconds(200));
  EXPECT_TRUE(tracker_.TakeChanges().empty()) << "already out of service";
  const records::GpuHealth& h = tracker_.Published().gpus[1].health;
  EXPECT_FALSE(h.healthy);
  EXPECT_EQ(h.xids, std::vector<int32_t>{48});
  EXPECT_THAT(h.reason, HasSubstr("needs a reset"));
  EXPECT_TRUE(tracker_.Published().gpus[0].health.healthy);

  // Not reset yet: however long, the condition holds it.
  tracker_.Observe(found, t0_ + seconds(60));
  tracker_.Tick(t0_ + seconds(60));
  EXPECT_FALSE(tracker_.Published().gpus[1].health.healthy);

  // Reset at t=61: the recovery action reads none. Back after 5 s without a fault.
  found.gpus[1].conditions.clear();
  tracker_.Observe(found, t0_ + seconds(61));
  EXPECT_FALSE(tracker_.Published().gpus[1].health.healthy);
  EXPECT_THAT(tracker_.Published().gpus[1].health.reason, HasSubstr("cleared"));
  EXPECT_EQ(tracker_.NextRelease(), t0_ + seconds(65)) << "last seen at the observation of t=60";
  tracker_.Tick(t0_ + seconds(64));
  EXPECT_TRUE(tracker_.TakeChanges().empty());
  tracker_.Tick(t0_ + seconds(65));
  out = tracker_.TakeChanges();
  ASSERT_THAT(Kinds(out), ElementsAre(Kind::kBackInService));
  EXPECT_EQ(out[0].since, t0_);
  EXPECT_TRUE(tracker_.Published().gpus[1].health.healthy);
  EXPECT_EQ(tracker_.Published().gpus[1].fault, FaultEffect::kNone);
  EXPECT_TRUE(tracker_.FailedGpus().empty());
  EXPECT_EQ(tracker_.NextRelease(), Clock::time_point::max());
}

TEST_F(TrackerTest, ApplicationAndInformationalXidsChangeNothing) {
  NodeGpus found = TwoGpus();
  tracker_.Observe(found, t0_);
  for (int32_t xid : {13, 31, 43, 45, 94, 63, 92, 154}) {
    tracker_.OnXid(XidEvent(0, found.gpus[0].spec.uuid, xid), t0_);
  }
  EXPECT_TRUE(tracker_.TakeChanges().empty());
  EXPECT_TRUE(tracker_.Published().gpus[0].health.healthy);
}

TEST_F(TrackerTest, AnXidAloneIsLetGoAfterTheQuietPeriodAndARepeatStartsItAgain) {
  NodeGpus found = TwoGpus();
  tracker_.Observe(found, t0_);
  tracker_.OnXid(XidEvent(0, found.gpus[0].spec.uuid, 119), t0_);
  tracker_.OnXid(XidEvent(0, found.gpus[0].spec.uuid, 119), t0_ + seconds(4));
  tracker_.Tick(t0_ + seconds(8));
  EXPECT_FALSE(tracker_.Published().gpus[0].health.healthy) << "the repeat at t=4 counts";
  tracker_.Tick(t0_ + seconds(9));
  EXPECT_TRUE(tracker_.Published().gpus[0].health.healthy);
  EXPECT_THAT(Kinds(tracker_.TakeChanges()),
              ElementsAre(Kind::kOutOfService, Kind::kBackInService));
}

TEST_F(TrackerTest, DrainingThenFailingThenBack) {
  NodeGpus found = TwoGpus();
  tracker_.Observe(found, t0_);
  found.gpus[0].conditions = {Condition(HealthCondition::kRowRemapPending, "")};
  tracker_.Observe(found, t0_ + seconds(1));
  std::vector<HealthChange> out = tracker_.TakeChanges();
  ASSERT_THAT(Kinds(out), ElementsAre(Kind::kDraining));
  EXPECT_EQ(out[0].effect, FaultEffect::kDrain);
  EXPECT_EQ(tracker_.Published().gpus[0].fault, FaultEffect::kDrain);
  EXPECT_TRUE(tracker_.FailedGpus().empty()) << "a drained GPU's pods stay";
  // The GPU falls off the bus: a failure now.
  found.gpus[0].conditions.push_back(Condition(HealthCondition::kGpuLost, "lost", {79}));
  tracker_.Observe(found, t0_ + seconds(2));
  ASSERT_THAT(Kinds(tracker_.TakeChanges()), ElementsAre(Kind::kOutOfService));
  EXPECT_EQ(tracker_.Published().gpus[0].health.xids, std::vector<int32_t>{79});
  found.gpus[0].conditions.clear();
  tracker_.Observe(found, t0_ + seconds(3));
  tracker_.Tick(t0_ + seconds(8));
  ASSERT_THAT(Kinds(tracker_.TakeChanges()), ElementsAre(Kind::kBackInService));
}

TEST_F(TrackerTest, ConditionsBelowDrainLeaveTheGpuInService) {
  NodeGpus found = TwoGpus();
  GpuCondition c = Condition(HealthCondition::kMarkedUnhealthy, "informational");
  c.effect = FaultEffect::kPodEvent;
  found.gpus[1].conditions = {c};
  found.gpus[1].health = HealthFromConditions(found.gpus[1].conditions);
  tracker_.Observe(found, t0_);
  EXPECT_TRUE(tracker_.Published().gpus[1].health.healthy);
  EXPECT_TRUE(tracker_.TakeChanges().empty());
}

TEST_F(TrackerTest, AnNvLinkDownDegradesTheMatrixUntilItHasBeenBackForTheQuietPeriod) {
  NodeGpus found = TwoGpus();
  tracker_.Observe(found, t0_);
  found.links.Set(0, 1, core::Link{core::LinkKind::kSys, 0});  // the NVLinks went down
  tracker_.Observe(found, t0_ + seconds(1));
  std::vector<HealthChange> out = tracker_.TakeChanges();
  ASSERT_THAT(Kinds(out), ElementsAre(Kind::kLinkDown));
  EXPECT_EQ(out[0].gpu, 0);
  EXPECT_EQ(out[0].peer, 1);
  EXPECT_THAT(out[0].reason, HasSubstr("SYS instead of NV18"));
  EXPECT_EQ(tracker_.Published().links.at(0, 1), (core::Link{core::LinkKind::kSys, 0}));
  EXPECT_THAT(tracker_.DownLinks(), ElementsAre(std::make_pair(0, 1)));
  EXPECT_TRUE(tracker_.Published().gpus[0].health.healthy) << "the GPUs stay in service";

  // Back at t=2 (the last observation down was at t=1): published degraded until t=6.
  found.links.Set(0, 1, core::Link{core::LinkKind::kNvLink, 18});
  tracker_.Observe(found, t0_ + seconds(2));
  EXPECT_EQ(tracker_.Published().links.at(0, 1), (core::Link{core::LinkKind::kSys, 0}));
  tracker_.Tick(t0_ + seconds(6));
  ASSERT_THAT(Kinds(tracker_.TakeChanges()), ElementsAre(Kind::kLinkUp));
  EXPECT_EQ(tracker_.Published().links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 18}));
  EXPECT_TRUE(tracker_.DownLinks().empty());
}

TEST_F(TrackerTest, FewerNvLinkLanesIsALinkDownToo) {
  NodeGpus found = TwoGpus();
  tracker_.Observe(found, t0_);
  found.links.Set(0, 1, core::Link{core::LinkKind::kNvLink, 12});
  tracker_.Observe(found, t0_ + seconds(1));
  EXPECT_THAT(Kinds(tracker_.TakeChanges()), ElementsAre(Kind::kLinkDown));
  EXPECT_EQ(tracker_.Published().links.at(0, 1), (core::Link{core::LinkKind::kNvLink, 12}));
}

TEST_F(TrackerTest, PcieRelationsAreNeverDown) {
  NodeGpus found = TwoGpus();
  found.links.Set(0, 1, core::Link{core::LinkKind::kPix, 0});
  tracker_.Observe(found, t0_);
  found.links.Set(0, 1, core::Link{core::LinkKind::kSys, 0});
  tracker_.Observe(found, t0_ + seconds(1));
  EXPECT_TRUE(tracker_.TakeChanges().empty());
  EXPECT_EQ(tracker_.Published().links.at(0, 1), (core::Link{core::LinkKind::kSys, 0}));
}

}  // namespace
}  // namespace tessera::agent
