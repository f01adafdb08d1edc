// The timeline protocol's load: the clock, the offered demand, tuning to a load level and the
// waiting bound, on small traces; and the bound against every policy on a generated one.
#include "sim/timeline_load.h"

#include "common/random.h"
#include "core/model/cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/testing/trace_testing.h"
#include "sim/timeline.h"

namespace tessera::sim {
namespace {

using ::testing::HasSubstr;
using testing::Nodes;
using testing::Pods;

constexpr char kTimedHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

std::vector<int32_t> All(const PodTrace& t) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < t.pods.size(); ++i) out.push_back(static_cast<int32_t>(i));
  return out;
}

TEST(TimelineClock, CompressesArrivalsAndKeepsRunTimes) {
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "a,1,1,1,1000,,LS,Running,100,200,150\n"   // scheduled at 150: runs 50
                    "b,1,1,1,1000,,LS,Pending,1100,1300,\n"    // never scheduled: runs 200
                    "c,1,1,1,1000,,LS,Running,2100,,2100\n");  // no deletion: runs to the end
  absl::StatusOr<TimelineClock> clock = TimelineClock::Create(t, 10);
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(clock->first(), 100);
  EXPECT_EQ(clock->window_end(), 300);
  EXPECT_EQ(clock->Arrival(t.pods[1]), 200);
  EXPECT_EQ(TimelineClock::RunTime(t.pods[0]), 50);
  EXPECT_EQ(TimelineClock::RunTime(t.pods[1]), 200);
  EXPECT_EQ(TimelineClock::RunTime(t.pods[2]), std::nullopt);
  EXPECT_FALSE(TimelineClock::Create(t, 0).ok());
  EXPECT_FALSE(TimelineClock::Create(Pods("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                          "p,1,1,1,1000\n"),
                                     1)
                   .ok());
}

// The header's example: C = 2 GPUs; 1-GPU pods arrive at 0, 0 and 1 and run 10 s each.
TEST(OfferedDemand, HeaderExample) {
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "a,1,1,1,1000,,LS,Running,0,10,0\n"
                    "b,1,1,1,1000,,LS,Running,0,10,0\n"
                    "c,1,1,1,1000,,LS,Running,1,11,1\n"
                    "cpu,1,1,0,0,,LS,Running,0,5,0\n");
  TimelineClock clock = *TimelineClock::Create(t, 1);
  const DemandSteps d = OfferedDemand(t, clock, All(t));
  EXPECT_EQ(d, (DemandSteps{{0, 2000}, {1, 3000}, {10, 1000}, {11, 0}}));
  EXPECT_EQ(PeakOf(d), 3000);
  EXPECT_DOUBLE_EQ(ExcessOver(d, 2000, 100), 9 * 1000);
  EXPECT_DOUBLE_EQ(ExcessOver(d, 2000, 5), 4 * 1000);  // only up to `until`
  // Pods that do not count are no demand; a pod listed twice counts twice.
  const std::vector<bool> counts = {true, false, true, true};
  EXPECT_EQ(PeakOf(OfferedDemand(t, clock, All(t), &counts)), 2000);
  EXPECT_EQ(PeakOf(OfferedDemand(t, clock, {0, 0, 0})), 3000);
  // The floor: with two GPUs of one model, the plain excess; with one GPU of each of two models
  // and the three pods bound to the first, 1 GPU waits on [0, 1) and 2 on [1, 10).
  core::Cluster one = Nodes("sn,cpu_milli,memory_mib,gpu,model\na,8000,65536,2,T4\n");
  EXPECT_DOUBLE_EQ(WaitingFloor(t, clock, All(t), nullptr, one, 100), 9 * 1000);
  core::Cluster two =
      Nodes("sn,cpu_milli,memory_mib,gpu,model\na,8000,65536,1,T4\nb,8000,65536,1,P100\n");
  PodTrace bound = t;
  for (TracePod& p : bound.pods) p.gpu_models = {"T4"};
  EXPECT_DOUBLE_EQ(WaitingFloor(bound, clock, All(bound), nullptr, two, 100), 19 * 1000);
  EXPECT_DOUBLE_EQ(WaitingFloor(t, clock, All(t), nullptr, two, 100), 9 * 1000);
}

TEST(TuneTimelineLoad, ClonesUpToTheLevelAndRemovesDownToIt) {
  std::string csv = kTimedHeader;
  for (int i = 0; i < 40; ++i) {
    csv += "p" + std::to_string(i) + ",1,1,1," + (i % 2 ? "500" : "1000") + ",,LS,Running," +
           std::to_string(i) + "," + std::to_string(i + 100) + "," + std::to_string(i) + "\n";
  }
  PodTrace t = Pods(csv);  // all 40 overlap from 39 to 100: the peak is 30 GPUs
  TimelineClock clock = *TimelineClock::Create(t, 1);
  EXPECT_EQ(WholeTrace(t, clock).peak_milli, 30000);
  // 10 GPUs of capacity: 400% needs 10 more GPUs of pods at the peak.
  absl::StatusOr<TimelineLoad> up = TuneTimelineLoad(t, clock, 10000, 400, 42);
  ASSERT_TRUE(up.ok()) << up.status();
  EXPECT_GE(up->peak_milli, 40000);
  EXPECT_LT(up->peak_milli, 41000);  // the fewest clones: one fewer would stay below
  EXPECT_GT(up->clones, 0);
  EXPECT_EQ(up->removed, 0);
  EXPECT_EQ(static_cast<int64_t>(up->pods.size()), 40 + up->clones);
  EXPECT_EQ(PeakOf(OfferedDemand(t, clock, up->pods)), up->peak_milli);
  // The draws are the seed's.
  EXPECT_EQ(TuneTimelineLoad(t, clock, 10000, 400, 42)->pods, up->pods);
  EXPECT_NE(TuneTimelineLoad(t, clock, 10000, 400, 43)->pods, up->pods);
  // Down to 200%: the fewest removals.
  absl::StatusOr<TimelineLoad> down = TuneTimelineLoad(t, clock, 10000, 200, 42);
  ASSERT_TRUE(down.ok());
  EXPECT_LE(down->peak_milli, 20000);
  EXPECT_GT(down->peak_milli, 19000);
  EXPECT_EQ(down->clones, 0);
  EXPECT_EQ(static_cast<int64_t>(down->pods.size()), 40 - down->removed);
}

TEST(TuneTimelineLoad, ErrorsForLevelsItCannotReach) {
  PodTrace cpu = Pods(std::string(kTimedHeader) + "c,1000,1,0,0,,LS,Running,0,10,0\n");
  TimelineClock clock = *TimelineClock::Create(cpu, 1);
  absl::StatusOr<TimelineLoad> r = TuneTimelineLoad(cpu, clock, 1000, 100, 1);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("cannot be brought to peak at 100%"));
  EXPECT_FALSE(TuneTimelineLoad(cpu, clock, 1000, 0, 1).ok());
}

// The bound is a floor for every policy: on a generated trace that overloads a small cluster,
// no policy waits fewer GPU-hours than it says, and the load level is met.
TEST(TimelineBound, NoPolicyWaitsLess) {
  core::Cluster c = Nodes(
      "sn,cpu_milli,memory_mib,gpu,model\na,32000,262144,4,V100M16\nb,32000,262144,4,V100M16\n"
      "c,16000,131072,2,T4\nd,8000,65536,1,P100\n");
  Random rng(3);
  std::string csv = kTimedHeader;
  for (int i = 0; i < 300; ++i) {
    const int kind = static_cast<int>(rng.Uniform(4));
    const std::string gpu = kind == 0   ? "0,0"
                            : kind == 1 ? "1,1000"
                            : kind == 2 ? "2,1000"
                                        : "1," + std::to_string(100 * (1 + rng.Uniform(9)));
    const int64_t at = static_cast<int64_t>(rng.Uniform(3000));
    csv += "p" + std::to_string(i) + "," + std::to_string(1000 * (1 + rng.Uniform(6))) + ",1024," +
           gpu + ",,LS,Running," + std::to_string(at) + "," +
           std::to_string(at + 50 + static_cast<int64_t>(rng.Uniform(400))) + "," +
           std::to_string(at) + "\n";
  }
  PodTrace t = Pods(csv);
  for (const char* policy : {"tessera", "fgd", "bestfit", "random", "spread", "whole-gpu"}) {
    TimelineOptions o;
    o.policy = policy;
    o.speedup = 1;
    o.load = 1500;  // above the trace's own peak: clones are added
    absl::StatusOr<TimelineResult> r = RunTimeline(c, t, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_GT(r->clones, 0) << policy;
    EXPECT_GE(r->peak_demand, 1500) << policy;
    EXPECT_LT(r->peak_demand, 1500 + 100.0 * 2 / 11) << policy;  // within one pod's ask
    EXPECT_GT(r->wait_gpu_hours_bound, 0) << policy;
    EXPECT_GE(r->wait_gpu_hours, r->wait_gpu_hours_bound - 1e-9) << policy;
  }
}

}  // namespace
}  // namespace tessera::sim
