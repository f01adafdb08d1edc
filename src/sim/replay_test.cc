// The FGD protocol and timeline replays on small synthetic traces, and their reports.
#include <filesystem>
#include <fstream>

#include "core/model/cluster.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sim/fgd_replay.h"
#include "sim/replay_queue.h"
#include "sim/testing/trace_testing.h"
#include "sim/timeline.h"
#include "sim/trace/alibaba.h"
#include "sim/trace_report.h"
#include "sim/trace_runs.h"

namespace tessera::sim {
namespace {

using ::testing::HasSubstr;

using testing::Nodes;
using testing::Pods;

constexpr char kHeader[] = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n";

TEST(FgdSequence, ShufflesAndTunesUpToTheTarget) {
  std::string csv = kHeader;
  for (int i = 0; i < 50; ++i)
    csv += "p" + std::to_string(100 + i) + ",1000,100,1," + (i % 2 ? "500\n" : "1000\n");
  PodTrace t = Pods(csv);  // demand 37.5 GPUs
  FgdSequence a = BuildFgdSequence(t, 40000, 1.3, 42);
  FgdSequence b = BuildFgdSequence(t, 40000, 1.3, 42);
  FgdSequence c = BuildFgdSequence(t, 40000, 1.3, 43);
  EXPECT_EQ(a.pods, b.pods);
  EXPECT_NE(a.pods, c.pods);
  // Every original pod once, first; then tuned clones; the demand reaches the target without
  // passing it by more than the last pod's per-GPU ask.
  std::vector<int> seen(50, 0);
  for (size_t i = 0; i < a.pods.size(); ++i) {
    if (a.clone_number[i] < 0) {
      ++seen[a.pods[i]];
      EXPECT_LT(i, 50u);
    }
  }
  for (int s : seen) EXPECT_EQ(s, 1);
  EXPECT_LE(a.demand_milli, 52000);
  EXPECT_GT(a.demand_milli, 52000 - 1000);
  int64_t sum = 0;
  for (int32_t p : a.pods) sum += t.pods[p].total_gpu_milli();
  EXPECT_EQ(sum, a.demand_milli);
  // Above the target: random pods are dropped until it holds.
  FgdSequence down = BuildFgdSequence(t, 10000, 1.0, 42);
  EXPECT_LE(down.demand_milli, 10000);
  EXPECT_LT(down.pods.size(), 50u);
}

TEST(FgdProtocol, CurveAndFailuresOnASmallCluster) {
  core::Cluster c = Nodes(
      "sn,cpu_milli,memory_mib,gpu,model\na,8000,65536,2,T4\nb,8000,65536,2,T4\n"
      "c,8000,65536,2,T4\nd,8000,65536,2,T4\n");
  std::string csv = kHeader;
  for (int i = 0; i < 6; ++i) csv += "w" + std::to_string(i) + ",1000,1024,1,1000\n";
  csv += "huge,1000,1024,3,1000\n";  // more GPUs than any node: a counted failure, never a crash
  PodTrace t = Pods(csv);
  for (uint64_t seed : {1, 2, 3, 4}) {
    FgdRunOptions o;
    o.policy = "fgd";
    o.seed = seed;
    o.typical_tasks = TraceTypicalTasks(t, c);
    absl::StatusOr<FgdRunResult> r = RunFgdProtocol(c, t, o);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_LE(r->allocated_milli, 8000);
    EXPECT_GE(r->never_fits, 1);
    // Every placed pod is one whole GPU; everything else failed.
    EXPECT_EQ(r->failed_pods, r->pods - r->allocated_milli / 1000);
    EXPECT_GE(r->arrived_milli, 10400 - 1000);
    ASSERT_FALSE(r->curve.empty());
    EXPECT_EQ(r->curve.front().first, 0);
    EXPECT_DOUBLE_EQ(r->final_allocation, r->curve.back().second);
    for (size_t i = 1; i < r->curve.size(); ++i) {
      EXPECT_GE(r->curve[i].second, r->curve[i - 1].second - 1e-9);
    }
  }
}

TEST(FgdProtocol, UnknownPolicyIsAnError) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\na,8000,65536,2,T4\n");
  FgdRunOptions o;
  o.policy = "nope";
  EXPECT_FALSE(RunFgdProtocol(c, Pods(std::string(kHeader) + "p,1,1,1,1000\n"), o).ok());
}

TEST(RoundLikePython, HalfToEven) {
  EXPECT_EQ(RoundLikePython(0.5, 0), 0);
  EXPECT_EQ(RoundLikePython(1.5, 0), 2);
  EXPECT_EQ(RoundLikePython(129.5, 0), 130);
  EXPECT_NEAR(RoundLikePython(95.384, 2), 95.38, 1e-12);
}

constexpr char kTimedHeader[] =
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
    "deletion_time,scheduled_time\n";

TEST(Timeline, HeaderExample) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\nn,8000,65536,1,T4\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "a,1000,1024,1,1000,,LS,Running,0,10,0\n"
                    "b,1000,1024,1,1000,,LS,Running,2,20,2\n"
                    "big,1000,1024,2,1000,,LS,Running,3,5,\n");
  TimelineOptions o;
  o.policy = "tessera";
  absl::StatusOr<TimelineResult> r = RunTimeline(c, t, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->started, 2);
  EXPECT_EQ(r->waited, 1);
  EXPECT_EQ(r->never_fits, 1);
  EXPECT_EQ(r->still_waiting, 0);
  EXPECT_DOUBLE_EQ(r->pending_max, 8);
  EXPECT_DOUBLE_EQ(r->peak_allocation, 100);
  // Busy the whole arrival window [0, 3].
  EXPECT_NEAR(r->mean_allocation, 100, 1e-9);
  // b waited 8 s for 1 GPU; the offered demand (big never fits: no demand) is 2 GPUs on 1 from 2
  // to 10, so every policy waits at least that long.
  EXPECT_DOUBLE_EQ(r->wait_gpu_hours, 8.0 / 3600);
  EXPECT_DOUBLE_EQ(r->wait_gpu_hours_bound, 8.0 / 3600);
  EXPECT_DOUBLE_EQ(r->peak_demand, 200);
  EXPECT_EQ(r->whole_gpu.waited, 1);
  EXPECT_DOUBLE_EQ(r->whole_gpu.max, 8);
  EXPECT_EQ(r->multi_gpu.started, 0);
}

// The scheduler's queue on a replay's clock (replay_queue.h's example): a pod that did not fit is
// not tried again before pods leave, however long it waits; then at once.
TEST(ReplayQueue, TriesAgainAtOnceAfterAChangeAndNeverWithout) {
  ReplayQueue q(5, 0);
  q.Push(3, 0, "", {10, 3});
  q.Push(1, 0, "", {10, 1});
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), 3);
  q.Unschedulable(3);  // tried at 10
  q.Flush(20);
  EXPECT_EQ(q.Pop(), std::nullopt);
  q.Flush(int64_t{3600} * 24 * 365);  // no period
  EXPECT_EQ(q.Pop(), std::nullopt);
  EXPECT_TRUE(q.Contains(3));
  q.NoteChange();
  q.Flush(int64_t{3600} * 24 * 365);  // seen at once
  EXPECT_EQ(q.Pop(), 3);
  EXPECT_TRUE(q.empty());
}

// Waiting pods are tried again in the scheduler's order (arrival here), not grouped by request
// shape: at 10, when `a` leaves, x (1 GPU, waiting since 1) starts, then y (half a GPU, since 2)
// on the other GPU, and x2 (1 GPU, since 3) finds no whole GPU and waits for x and y to leave at
// 110. (Pods of x's shape first would start x and x2 and keep y waiting until x2 left at 15.)
TEST(Timeline, RetriesInTheSchedulersOrder) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\na,32000,262144,2,V100M16\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "a,1000,1024,2,1000,,LS,Running,0,10,0\n"
                    "x,1000,1024,1,1000,,LS,Running,1,101,1\n"
                    "y,1000,1024,1,500,,LS,Running,2,102,2\n"
                    "x2,1000,1024,1,1000,,LS,Running,3,8,3\n");
  TimelineOptions o;
  o.policy = "tessera";
  absl::StatusOr<TimelineResult> r = RunTimeline(c, t, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->started, 4);
  EXPECT_EQ(r->waited, 3);
  EXPECT_DOUBLE_EQ(r->pending_max, 107);    // x2: 3 to 110
  EXPECT_DOUBLE_EQ(r->whole_gpu.max, 107);  // x 9, x2 107
  EXPECT_EQ(r->still_waiting, 0);
}

// Defragmentation in the replay: spread leaves a half-GPU share on every GPU; when the small pod
// leaves, the 2-GPU pod still fits nowhere, and a plan moves two shares beside the others.
TEST(Timeline, DefragmentationStartsABigPodSooner) {
  core::Cluster c = Nodes(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "a,32000,262144,2,V100M16\nb,32000,262144,2,V100M16\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "s1,1000,1024,1,500,,LS,Running,0,100,0\n"
                    "s2,1000,1024,1,500,,LS,Running,0,100,0\n"
                    "s3,1000,1024,1,500,,LS,Running,0,100,0\n"
                    "s4,1000,1024,1,500,,LS,Running,0,100,0\n"
                    "x,1000,1024,1,100,,LS,Running,1,5,1\n"
                    "big,1000,1024,2,1000,,LS,Running,2,50,2\n");
  TimelineOptions o;
  o.policy = "spread";
  absl::StatusOr<TimelineResult> plain = RunTimeline(c, t, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->multi_gpu.started, 1);
  EXPECT_DOUBLE_EQ(plain->multi_gpu.max, 98);  // until the shares leave at 100
  EXPECT_EQ(plain->defrag_plans, 0);

  o.defrag_max_moves = 2;
  o.defrag_after_s = 1;
  absl::StatusOr<TimelineResult> defrag = RunTimeline(c, t, o);
  ASSERT_TRUE(defrag.ok()) << defrag.status();
  EXPECT_EQ(defrag->multi_gpu.started, 1);
  EXPECT_DOUBLE_EQ(defrag->multi_gpu.max, 3);  // starts when x leaves at 5
  EXPECT_EQ(defrag->defrag_searches, 1);
  EXPECT_EQ(defrag->defrag_plans, 1);
  EXPECT_EQ(defrag->defrag_moves, 2);
  EXPECT_EQ(defrag->defrag_whole_gpus_moved, 0);
  EXPECT_EQ(defrag->started, 6);

  o.defrag_max_moves = 1;  // two moves are needed
  absl::StatusOr<TimelineResult> small = RunTimeline(c, t, o);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->defrag_searches, 1);
  EXPECT_EQ(small->defrag_plans, 0);
  EXPECT_DOUBLE_EQ(small->multi_gpu.max, 98);

  o.defrag_max_moves = 2;
  o.defrag_after_s = 4;  // waited 3 s at the departure: too soon
  absl::StatusOr<TimelineResult> later = RunTimeline(c, t, o);
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->defrag_searches, 0);
}

// Reservations in the replay: a 2-GPU pod waits for `a` (ending at 10); without reservations the
// long one-GPU pod s1 takes the free GPU and the big pod waits until 102. With them the free GPU
// is held from 2 on (expected start 10: every pod declares its run time here); s1 waits; b,
// declared to end at 8, backfills.
TEST(Timeline, ReservationsHoldRoomAndLetShortPodsBackfill) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\na,32000,262144,2,V100M16\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "a,1000,1024,1,1000,,LS,Running,0,10,0\n"
                    "big,1000,1024,2,1000,,LS,Running,1,51,1\n"
                    "s1,1000,1024,1,1000,,LS,Running,2,102,2\n"
                    "b,1000,1024,1,1000,,LS,Running,3,8,3\n");
  TimelineOptions o;
  o.policy = "tessera";
  o.declare_percent = 100;
  o.declare_bucket_s = 1;
  absl::StatusOr<TimelineResult> plain = RunTimeline(c, t, o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_DOUBLE_EQ(plain->multi_gpu.max, 101);
  EXPECT_EQ(plain->declared, 4);
  EXPECT_EQ(plain->reservations_made, 0);
  EXPECT_EQ(plain->backfilled, 0);

  o.reservations.max_reservations = 1;
  o.reservations.after_s = 0;
  absl::StatusOr<TimelineResult> held = RunTimeline(c, t, o);
  ASSERT_TRUE(held.ok()) << held.status();
  EXPECT_EQ(held->started, 4);
  EXPECT_DOUBLE_EQ(held->multi_gpu.max, 9);    // starts when a leaves at 10
  EXPECT_DOUBLE_EQ(held->single_gpu.max, 58);  // s1: from 2 until big leaves at 60
  EXPECT_EQ(held->reservations_made, 1);
  EXPECT_EQ(held->backfilled, 1);

  // Without declared run times nobody backfills: b waits too.
  o.declare_percent = 0;
  absl::StatusOr<TimelineResult> undeclared = RunTimeline(c, t, o);
  ASSERT_TRUE(undeclared.ok()) << undeclared.status();
  EXPECT_DOUBLE_EQ(undeclared->multi_gpu.max, 9);
  EXPECT_EQ(undeclared->backfilled, 0);

  o.defrag_max_moves = 1;
  EXPECT_EQ(RunTimeline(c, t, o).status().code(), absl::StatusCode::kInvalidArgument);
}

// The example of timeline.h: an 8-GPU pod of 100 s arrives when its node has 4 GPUs free, and the
// other 4 free up 20 s later.
TEST(Timeline, ElasticGangStartsAtItsMinAndGrows) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\nn,96000,262144,8,V100M32\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "small,8000,1024,4,1000,,LS,Running,0,20,0\n"
                    "big,16000,8192,8,1000,,LS,Running,0,100,0\n");
  TimelineOptions o;
  o.policy = "tessera";
  o.gang_min_gpus = 8;
  o.gang_min_percent = 50;
  absl::StatusOr<TimelineResult> elastic = RunTimeline(c, t, o);
  ASSERT_TRUE(elastic.ok()) << elastic.status();
  EXPECT_EQ(elastic->gangs.gangs, 1);
  EXPECT_EQ(elastic->gangs.started, 1);
  EXPECT_EQ(elastic->gangs.full, 1);
  EXPECT_EQ(elastic->started, 2);
  EXPECT_EQ(elastic->waited, 0);  // it started with 4 members on arrival
  EXPECT_DOUBLE_EQ(elastic->gangs.start_p50, 0);
  EXPECT_DOUBLE_EQ(elastic->gangs.full_p50, 20);
  EXPECT_DOUBLE_EQ(elastic->gangs.member_wait_gpu_hours, 80.0 / 3600);
  EXPECT_DOUBLE_EQ(elastic->gangs.stretch, 1.1);  // ended at 110
  EXPECT_EQ(elastic->still_waiting, 0);

  // At 100% it is the pod itself: it waits for all 8 GPUs and runs its 100 s.
  o.gang_min_percent = 100;
  absl::StatusOr<TimelineResult> rigid = RunTimeline(c, t, o);
  ASSERT_TRUE(rigid.ok()) << rigid.status();
  EXPECT_EQ(rigid->waited, 1);
  EXPECT_DOUBLE_EQ(rigid->gangs.start_p50, 20);
  EXPECT_DOUBLE_EQ(rigid->gangs.full_p50, 20);
  EXPECT_DOUBLE_EQ(rigid->gangs.member_wait_gpu_hours, 0);
  EXPECT_DOUBLE_EQ(rigid->gangs.stretch, 1.0);
  o.gang_min_gpus = 0;  // the pod as a pod: the same waits
  absl::StatusOr<TimelineResult> pod = RunTimeline(c, t, o);
  ASSERT_TRUE(pod.ok()) << pod.status();
  EXPECT_EQ(pod->gangs.gangs, 0);
  EXPECT_DOUBLE_EQ(pod->multi_gpu.max, rigid->multi_gpu.max);
  EXPECT_DOUBLE_EQ(pod->wait_gpu_hours, rigid->wait_gpu_hours);
}

// A gang keeps to one node, as the pod did: it does not take GPUs free on another node to grow,
// and a gang larger than any node never fits.
TEST(Timeline, ElasticGangKeepsToOneNode) {
  core::Cluster c = Nodes(
      "sn,cpu_milli,memory_mib,gpu,model\n"
      "a,32000,262144,4,V100M16\nb,32000,262144,4,V100M16\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "x,1000,1024,2,1000,,LS,Running,0,50,0\n"
                    "y,1000,1024,2,1000,,LS,Running,0,50,0\n"
                    "g,1000,1024,4,1000,,LS,Running,1,10,1\n"
                    "huge,1000,1024,8,1000,,LS,Running,2,10,2\n");
  TimelineOptions o;
  o.policy = "spread";  // x and y on different nodes: 2 GPUs free on each
  o.gang_min_gpus = 4;
  o.gang_min_percent = 50;
  absl::StatusOr<TimelineResult> r = RunTimeline(c, t, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->gangs.gangs, 2);
  EXPECT_EQ(r->never_fits, 1);  // huge
  EXPECT_EQ(r->gangs.started, 1);
  EXPECT_DOUBLE_EQ(r->gangs.start_p50, 0);
  // It starts at 1 with the 2 GPUs of one node, never takes the other node's 2, and does its 4 x
  // 9 member-seconds with 2 members by 19, before x and y leave: never full, twice as long.
  EXPECT_EQ(r->gangs.full, 0);
  EXPECT_DOUBLE_EQ(r->gangs.stretch, 2.0);
  EXPECT_DOUBLE_EQ(r->gangs.member_wait_gpu_hours, 2 * 18 / 3600.0);
  EXPECT_EQ(r->still_waiting, 0);
}

TEST(Timeline, PodsThatNeverStartAreCounted) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\nn,8000,65536,1,T4\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "forever,1000,1024,1,1000,,LS,Running,0,,0\n"
                    "late,1000,1024,1,500,,LS,Running,5,9,5\n");
  TimelineOptions o;
  o.policy = "bestfit";
  absl::StatusOr<TimelineResult> r = RunTimeline(c, t, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->started, 1);
  EXPECT_EQ(r->still_waiting, 1);
  // `late` (half a GPU) waits from 5 until the replay ends at 9: 2 GPU-seconds, all forced.
  EXPECT_DOUBLE_EQ(r->wait_gpu_hours, 2.0 / 3600);
  EXPECT_DOUBLE_EQ(r->wait_gpu_hours_bound, 2.0 / 3600);
}

// What the cluster offered the waiting pods (classify_waits, timeline.h), one case each.
TEST(Timeline, ClassifiesWaits) {
  struct Case {
    const char* nodes;
    const char* pods;
    const char* policy;
    double WaitSplit::*expected;
  };
  const Case cases[] = {
      // spread put the two halves on both GPUs: one GPU would hold both (a placement loss).
      {"a,32000,262144,2,V100M16\n",
       "s1,1000,1024,1,500,,LS,Running,0,100,0\ns2,1000,1024,1,500,,LS,Running,1,100,1\n"
       "w,1000,1024,1,1000,,LS,Running,2,100,2\n",
       "spread", &WaitSplit::repack},
      // 0.6 on each of two 1-GPU nodes: only a node without its share has a free GPU.
      {"a,32000,262144,1,V100M16\nb,32000,262144,1,V100M16\n",
       "s1,1000,1024,1,600,,LS,Running,0,100,0\ns2,1000,1024,1,600,,LS,Running,1,100,1\n"
       "w,1000,1024,1,1000,,LS,Running,2,100,2\n",
       "spread", &WaitSplit::cross_node},
      // A whole GPU held whole: no room, shares or not.
      {"a,32000,262144,1,V100M16\n",
       "w1,1000,1024,1,1000,,LS,Running,0,100,0\nw2,1000,1024,1,1000,,LS,Running,2,100,2\n",
       "tessera", &WaitSplit::capacity},
  };
  for (const Case& k : cases) {
    core::Cluster c = Nodes(std::string("sn,cpu_milli,memory_mib,gpu,model\n") + k.nodes);
    TimelineOptions o;
    o.policy = k.policy;
    o.classify_waits = true;
    absl::StatusOr<TimelineResult> r = RunTimeline(c, Pods(std::string(kTimedHeader) + k.pods), o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->waited, 1) << k.pods;
    EXPECT_GT(r->wait_gpu_hours, 0);
    EXPECT_DOUBLE_EQ(r->wait_split.*k.expected, r->wait_gpu_hours) << k.pods;
    EXPECT_DOUBLE_EQ(r->wait_split.repack + r->wait_split.cross_node + r->wait_split.capacity,
                     r->wait_gpu_hours);
  }
}

TEST(Timeline, SpeedupCompressesArrivals) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\nn,8000,65536,1,T4\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "a,1000,1024,1,1000,,LS,Running,0,100,0\n"
                    "b,1000,1024,1,1000,,LS,Running,1000,1100,1000\n");
  TimelineOptions o;
  o.policy = "fgd";
  absl::StatusOr<TimelineResult> slow = RunTimeline(c, t, o);
  o.speedup = 100;  // b arrives at 10, while a runs until 100
  absl::StatusOr<TimelineResult> fast = RunTimeline(c, t, o);
  ASSERT_TRUE(slow.ok() && fast.ok());
  EXPECT_EQ(slow->waited, 0);
  EXPECT_EQ(fast->waited, 1);
  EXPECT_DOUBLE_EQ(fast->pending_max, 90);
  EXPECT_GT(fast->offered_load, slow->offered_load);
}

TEST(Timeline, NeedsTimes) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\nn,8000,65536,1,T4\n");
  TimelineOptions o;
  o.policy = "tessera";
  absl::StatusOr<TimelineResult> r =
      RunTimeline(c, Pods(std::string(kHeader) + "p,1,1,1,1000\n"), o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("needs creation_time and deletion_time"));
}

TEST(TraceRuns, ParseSeeds) {
  EXPECT_EQ(*ParseSeeds("42-44"), (std::vector<uint64_t>{42, 43, 44}));
  EXPECT_EQ(*ParseSeeds("1-2,7"), (std::vector<uint64_t>{1, 2, 7}));
  EXPECT_EQ(*ParseSeeds("5"), (std::vector<uint64_t>{5}));
  for (const char* bad : {"", "x", "3-1", "1,,2", "1-", "-3"}) {
    EXPECT_FALSE(ParseSeeds(bad).ok()) << bad;
  }
}

TEST(TraceRuns, ThreadsGiveTheSameAnswers) {
  core::Cluster c = Nodes(
      "sn,cpu_milli,memory_mib,gpu,model\na,32000,65536,4,T4\nb,32000,65536,4,T4\n"
      "c,64000,65536,8,G2\n");
  std::string csv = kHeader;
  for (int i = 0; i < 40; ++i) {
    csv += "p" + std::to_string(i) + ",2000,1024,1," + std::to_string(200 + 100 * (i % 9)) + "\n";
  }
  PodTrace t = Pods(csv);
  const std::vector<std::string> policies = {"random", "fgd", "tessera"};
  int calls = 0;
  auto one = RunFgdSeeds(c, t, policies, {1, 2, 3}, 1.3, 1, [&](const RunProgress&) { ++calls; });
  auto four = RunFgdSeeds(c, t, policies, {1, 2, 3}, 1.3, 4, nullptr);
  ASSERT_TRUE(one.ok() && four.ok());
  EXPECT_EQ(calls, 9);
  for (size_t p = 0; p < policies.size(); ++p) {
    ASSERT_EQ((*one)[p].runs.size(), 3u);
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_EQ((*one)[p].runs[s].curve, (*four)[p].runs[s].curve);
      EXPECT_EQ((*one)[p].runs[s].seed, s + 1);
    }
    EXPECT_DOUBLE_EQ((*one)[p].mean.final_allocation, (*four)[p].mean.final_allocation);
  }
  // The JSON document the CLI prints, in the shape.
  TraceRunInfo info;
  info.seeds = {1, 2, 3};
  nlohmann::json j = FgdJson(info, *one);
  ASSERT_EQ(j["results"].size(), 3u);
  for (const auto& r : j["results"]) {
    for (const char* key : {"policy", "final_allocation_ratio", "curve", "fragmentation_rate",
                            "failed_pods", "seconds"}) {
      EXPECT_TRUE(r.contains(key)) << key;
    }
    EXPECT_EQ(r["curve"].back()[0], 130);
  }
}

TEST(TraceReport, WritesCsvAndCharts) {
  core::Cluster c = Nodes("sn,cpu_milli,memory_mib,gpu,model\na,32000,65536,4,T4\n");
  PodTrace t = Pods(std::string(kTimedHeader) +
                    "a,1000,1024,1,1000,,LS,Running,0,10,0\n"
                    "b,1000,1024,1,500,,LS,Running,2,20,2\n");
  TraceRunInfo info;
  info.trace_file = "pods.csv";
  info.seeds = {1};
  info.capacity_gpus = 4;
  auto fgd = RunFgdSeeds(c, t, {"bestfit", "tessera"}, {1}, 1.3, 1, nullptr);
  auto timeline =
      RunTimelineSeeds(c, t, {"bestfit", "tessera"}, {1}, TimelineOptions{}, 1, nullptr);
  ASSERT_TRUE(fgd.ok() && timeline.ok());
  const std::string dir = ::testing::TempDir() + "/trace_report";
  absl::Status f = WriteFgdReport(dir + "/fgd", info, *fgd);
  absl::Status l = WriteTimelineReport(dir + "/timeline", info, *timeline);
  for (const char* file :
       {"fgd/allocation_curve.csv", "fgd/summary.csv", "fgd/runs.csv", "fgd/allocation.gp",
        "timeline/allocation_over_time.csv", "timeline/summary.csv", "timeline/pending_time.gp"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + file)) << file;
  }
  std::ifstream curve(dir + "/fgd/allocation_curve.csv");
  std::string header;
  std::getline(curve, header);
  EXPECT_EQ(header, "arrived_pct,bestfit,tessera");
  if (f.ok()) {  // gnuplot present (scripts/setup.sh installs it)
    EXPECT_TRUE(std::filesystem::exists(dir + "/fgd/allocation.png"));
    EXPECT_TRUE(l.ok()) << l;
    EXPECT_TRUE(std::filesystem::exists(dir + "/timeline/pending_time.png"));
  } else {
    EXPECT_THAT(std::string(f.message()), HasSubstr("gnuplot"));
  }
}

}  // namespace
}  // namespace tessera::sim
