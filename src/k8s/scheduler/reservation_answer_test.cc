// Reservations with backfill through SchedulerCore (reservation_answer.h), with the recording
// fakes and an injected clock: a big pod that waited gets room reserved (Event Reserved), a pod
// that declares a short run time backfills it (Event Backfilled), one that declares none waits,
// preemption does not plan on held room, declared run times are enforced, and a restarted
// scheduler rebuilds the reservation from the bound pods. The same against the real API server:
// test/k8s/reservations_e2e_test.cc.
#include <chrono>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/scheduler_core.h"
#include "k8s/scheduler/testing/core_fixture.h"
#include "k8s/scheduler/testing/recorder.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "records/reservation.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::NodeObject;
using testing::PodObject;
using testing::Recorder;
using Stage = SchedulerCore::Stage;

// The wall clock now, as the API server writes times.
std::string WallNow() {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
}

class ReservationTest : public testing::CoreFixture {
 protected:
  void SetUp() override { Make(); }
  void Make() {
    SchedulerCoreOptions o;
    o.retry_min_interval = std::chrono::milliseconds(1000);
    o.policy = "binpack";
    o.reservations.max_reservations = 1;
    o.reservations.after_s = 30;
    o.reservations.unknown_runtime_s = 3600;
    o.max_runtime_grace = std::chrono::seconds(30);
    CreateCore(o);
  }
  void Node(const json& node) { core_->OnNode(Change::kAdded, DecodeNode(node)); }
  void AdvanceSeconds(int s) { Advance(s * 1000); }
  // The pods start as their binds land (the reservations count from status.startTime).
  void Landed(json& pod) override {
    pod["status"]["startTime"] = WallNow();
    pod["status"]["phase"] = "Running";
  }
  static json Gpus(const std::string& name, int gpus, int priority = 0,
                   const std::string& runtime = "") {
    PodObject p("ns", name);
    p.Limit("tessera.dev/gpu", std::to_string(gpus)).Priority(priority);
    if (!runtime.empty()) p.Annotation("tessera.dev/max-runtime", runtime);
    return p.Json();
  }
  std::vector<std::string> Reasons(const std::vector<Recorder::ReportCall>& calls,
                                   const std::string& key) {
    std::vector<std::string> out;
    for (const Recorder::ReportCall& c : calls) {
      if (c.key == key) out.push_back(c.reason);
    }
    return out;
  }
  // n1 with 4 GPUs, 3 of them taken by pods of priority 10 that declare no run time; a pod asking
  // 4 GPUs (priority 10: it preempts none of them) waits past `after`, and its room is reserved
  // on n1.
  void ReservedOnN1() {
    Node(NodeObject("n1").Gpus(4).Json());
    for (const char* r : {"r1", "r2", "r3"}) Pod(Gpus(r, 1, 10));
    core_->SetSynced(true, true);
    ScheduleAndBind();
    ASSERT_EQ(BoundTo("ns/r3"), "n1");
    Pod(Gpus("big", 4, 10));
    ScheduleAndBind();
    EXPECT_EQ(core_->StageOf("ns/big"), Stage::kUnschedulable);
    EXPECT_TRUE(core_->reservations().empty());  // not before it waited 30 s
    AdvanceSeconds(31);
    core_->ScheduleSome();
    ASSERT_EQ(core_->reservations().size(), 1u);
    EXPECT_EQ(core_->reservations()[0].owner, "ns/big");
  }
};

TEST_F(ReservationTest, ABigPodThatWaitedGetsRoomReservedWithAnEvent) {
  ReservedOnN1();
  const core::Reservation& r = core_->reservations()[0];
  EXPECT_EQ(r.gpus[0].gpu_mask, 0b1111u);
  EXPECT_EQ(metrics_.reservations_held.load(), 1);
  EXPECT_EQ(metrics_.reservations_made.load(), 1);
  ASSERT_THAT(Reasons(rec_.normals, "ns/big"), ElementsAre("Reserved"));
  EXPECT_THAT(rec_.normals[0].message, HasSubstr("node n1 GPUs 0,1,2,3"));
  EXPECT_THAT(rec_.normals[0].message, HasSubstr("expected free in about 59m"));
  // Kept at the next cycles: not said again.
  AdvanceSeconds(5);
  core_->ScheduleSome();
  EXPECT_EQ(Reasons(rec_.normals, "ns/big").size(), 1u);
}

// The pod's condition tessera.dev/Reserved says who, where and when, in the record `tessera
// status` reads, with the time the room was reserved; it is written once while nothing changes.
TEST_F(ReservationTest, TheReservationIsWrittenInThePodsCondition) {
  ReservedOnN1();
  const core::Reservation& r = core_->reservations()[0];
  ASSERT_EQ(rec_.reservations.size(), 1u);
  EXPECT_EQ(rec_.reservations[0].key, "ns/big");
  EXPECT_EQ(rec_.reservations[0].reason, "RoomReserved");
  absl::StatusOr<records::ReservationRecord> record =
      records::ParseReservationMessage(rec_.reservations[0].message);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_FALSE(record->gang);
  EXPECT_EQ(record->owner, "ns/big");
  ASSERT_EQ(record->sites.size(), 1u);
  EXPECT_EQ(record->sites[0].node, "n1");
  EXPECT_THAT(record->sites[0].gpus, ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(record->expected_start_unix, r.expected_start);
  EXPECT_EQ(rec_.reservation_since["ns/big"], r.since);
  AdvanceSeconds(5);
  core_->ScheduleSome();
  AdvanceSeconds(5);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.reservations.size(), 1u);
}

// A restarted scheduler reads what the pods' conditions say: the same room is not rewritten, and
// a True condition for room it does not hold (yet) is released.
TEST_F(ReservationTest, ARestartedSchedulerRewritesOnlyTheConditionsThatChanged) {
  ReservedOnN1();
  ASSERT_EQ(rec_.reservations.size(), 1u);
  const std::string message = rec_.reservations[0].message;
  auto with_condition = [&](json pod, const std::string& text) {
    pod["status"]["conditions"] = json::array({{{"type", "tessera.dev/Reserved"},
                                                {"status", "True"},
                                                {"reason", "RoomReserved"},
                                                {"message", text},
                                                {"lastTransitionTime", "2026-01-01T00:00:00Z"}}});
    return pod;
  };
  // The same room: nothing written.
  Make();
  Node(NodeObject("n1").Gpus(4).Json());
  for (auto& [key, pod] : objects_) {
    json p = pod;
    if (key == "ns/big") {
      p = with_condition(p, message);
      p["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z";
    }
    core_->OnPod(Change::kAdded, DecodePod(p));
  }
  core_->SetSynced(true, true);
  core_->ScheduleSome();
  ASSERT_EQ(core_->reservations().size(), 1u);
  EXPECT_EQ(rec_.reservations.size(), 1u);
  // A pod that has not waited long enough, whose condition says room elsewhere: released, once;
  // once it has waited, its room is written.
  Make();
  Node(NodeObject("n1").Gpus(4).Json());
  for (auto& [key, pod] : objects_) {
    json p = pod;
    if (key == "ns/big") {
      p = with_condition(p,
                         "room reserved for pod ns/big: node n9 GPUs 0,1,2,3; expected start "
                         "2026-01-01T01:00:00Z");
      p["metadata"]["creationTimestamp"] = WallNow();
    }
    core_->OnPod(Change::kAdded, DecodePod(p));
  }
  core_->SetSynced(true, true);
  core_->ScheduleSome();
  EXPECT_TRUE(core_->reservations().empty());
  ASSERT_EQ(rec_.reservations.size(), 2u);
  EXPECT_EQ(rec_.reservations[1].key, "ns/big");
  EXPECT_EQ(rec_.reservations[1].reason, "Released");
  AdvanceSeconds(2);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.reservations.size(), 2u);
  AdvanceSeconds(31);
  core_->ScheduleSome();
  ASSERT_EQ(core_->reservations().size(), 1u);
  ASSERT_EQ(rec_.reservations.size(), 3u);
  EXPECT_EQ(rec_.reservations[2].reason, "RoomReserved");
  EXPECT_THAT(rec_.reservations[2].message, HasSubstr("node n1 GPUs 0,1,2,3"));
}

TEST_F(ReservationTest, OnlyAPodThatEndsInTimeTakesReservedRoom) {
  ReservedOnN1();
  // No run time declared: n1's free GPU is held, and there is nowhere else.
  Pod(Gpus("nodecl", 1));
  // A run time ending after the expected start (in about an hour) is no better.
  Pod(Gpus("long", 1, 0, "2h"));
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/nodecl"), "");
  EXPECT_EQ(BoundTo("ns/long"), "");
  EXPECT_EQ(core_->StageOf("ns/nodecl"), Stage::kUnschedulable);
  ASSERT_FALSE(rec_.reports.empty());
  EXPECT_THAT(rec_.reports.back().message, HasSubstr("reservation"));
  // A short declared run time backfills.
  Pod(Gpus("short", 1, 0, "10m"));
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/short"), "n1");
  EXPECT_THAT(Reasons(rec_.normals, "ns/short"), ElementsAre("Backfilled"));
  EXPECT_EQ(metrics_.backfilled_pods.load(), 1);
  // A higher priority than the owner's takes held room too (priorities still win).
  core_->OnPod(Change::kDeleted, DecodePod(objects_.at("ns/short")));
  Pod(Gpus("urgent", 1, 20));
  AdvanceSeconds(2);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/urgent"), "n1");
  EXPECT_EQ(BoundTo("ns/nodecl"), "");
  EXPECT_EQ(metrics_.backfilled_pods.load(), 1);
}

TEST_F(ReservationTest, TheOwnerTakesItsRoomAndTheReservationEnds) {
  ReservedOnN1();
  for (const char* r : {"ns/r1", "ns/r2", "ns/r3"}) {
    core_->OnPod(Change::kDeleted, DecodePod(objects_.at(r)));
  }
  Pod(Gpus("nodecl", 1));  // arrives before the big pod is tried again: may not take its room
  AdvanceSeconds(2);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/big"), "n1");
  EXPECT_EQ(BoundTo("ns/nodecl"), "");
  EXPECT_TRUE(core_->reservations().empty());
  EXPECT_EQ(metrics_.reservations_held.load(), 0);
}

TEST_F(ReservationTest, PreemptionDoesNotMakeRoomOnHeldGpusForAPodThatMayNotTakeThem) {
  ReservedOnN1();
  Node(NodeObject("n2").Gpus(1).Json());
  Pod(Gpus("z", 1));  // n2's GPU, priority 0 (n1's free GPU is held from it)
  AdvanceSeconds(2);
  ScheduleAndBind();
  ASSERT_EQ(BoundTo("ns/z"), "n2");
  // Priority 5: outranks z, not the owner (10). Room on n1 is held from it: preemption makes room
  // on n2 (evicts z), never on the held GPU.
  Pod(Gpus("mid", 1, 5));
  AdvanceSeconds(2);
  ScheduleAndBind();
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/z"));
  EXPECT_THAT(rec_.nominated, ElementsAre("ns/mid->n2"));
}

TEST_F(ReservationTest, APodPastItsDeclaredRunTimeIsEvictedWithAnEvent) {
  ReservedOnN1();
  Pod(Gpus("short", 1, 0, "10m"));
  ScheduleAndBind();
  ASSERT_EQ(BoundTo("ns/short"), "n1");
  ASSERT_TRUE(core_->NextWakeup().has_value());
  AdvanceSeconds(500);
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, IsEmpty());
  AdvanceSeconds(135);  // 600 s declared + 30 s grace since it started
  core_->ScheduleSome();
  EXPECT_THAT(rec_.evicted, ElementsAre("ns/short"));
  EXPECT_THAT(Reasons(rec_.warnings, "ns/short"), ElementsAre("MaxRuntimeExceeded"));
  EXPECT_EQ(metrics_.max_runtime_evictions.load(), 1);
  // Not asked again at once (retried after a minute if it is still there).
  AdvanceSeconds(1);
  core_->ScheduleSome();
  EXPECT_EQ(rec_.evicted.size(), 1u);
}

TEST_F(ReservationTest, ABadMaxRuntimeIsSaidAndTakenAsNoDeclaration) {
  ReservedOnN1();
  Pod(Gpus("bad", 1, 0, "ten minutes"));
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/bad"), "");  // no backfill without a run time
  ASSERT_THAT(Reasons(rec_.warnings, "ns/bad"), ElementsAre("InvalidMaxRuntime"));
  EXPECT_THAT(rec_.warnings[0].message, HasSubstr("tessera.dev/max-runtime"));
}

TEST_F(ReservationTest, ARestartedSchedulerRebuildsTheReservationFromTheBoundPods) {
  ReservedOnN1();
  const core::Reservation before = core_->reservations()[0];
  // A new scheduler sees the same pods: r1..r3 bound (and started), big waiting since long ago.
  Make();
  Node(NodeObject("n1").Gpus(4).Json());
  for (auto& [key, pod] : objects_) {
    json p = pod;
    if (key == "ns/big") p["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z";
    core_->OnPod(Change::kAdded, DecodePod(p));
  }
  core_->SetSynced(true, true);
  core_->ScheduleSome();
  ASSERT_EQ(core_->reservations().size(), 1u);
  EXPECT_EQ(core_->reservations()[0].owner, "ns/big");
  ASSERT_EQ(core_->reservations()[0].gpus.size(), 1u);
  EXPECT_EQ(core_->reservations()[0].gpus[0].node, before.gpus[0].node);
  EXPECT_EQ(core_->reservations()[0].gpus[0].gpu_mask, before.gpus[0].gpu_mask);
  // Running pods' starts come from status.startTime: the same expected start (within a second).
  EXPECT_NEAR(core_->reservations()[0].expected_start, before.expected_start, 1);
}

// A gang, like a pod, runs off room held for another where it fits there: binpack would take
// n1's free GPU (held for ns/big), so before gangs were decided under the reservations the gang
// waited; it runs on n2. An elastic gang's members keep off the held GPU too.
TEST_F(ReservationTest, AGangRunsAroundRoomHeldForAnother) {
  ReservedOnN1();
  Node(NodeObject("n2").Gpus(2).Json());
  Pod(PodObject("ns", "x-0").Limit("tessera.dev/gpu", "1").Gang("x", 1).Json());
  AdvanceSeconds(2);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/x-0"), "n2") << rec_.LastFailure("ns/x-0");
  // An elastic gang of 3 (starts with 1): one more member fits on n2, none on the held GPU.
  for (const char* m : {"e-0", "e-1", "e-2"}) {
    Pod(PodObject("ns", m)
            .Limit("tessera.dev/gpu", "1")
            .Gang("e", 3)
            .Annotation("tessera.dev/gang-min", "1")
            .Json());
  }
  AdvanceSeconds(2);
  ScheduleAndBind();
  int on_n2 = 0, on_n1 = 0;
  for (const char* m : {"ns/e-0", "ns/e-1", "ns/e-2"}) {
    on_n2 += BoundTo(m) == "n2" ? 1 : 0;
    on_n1 += BoundTo(m) == "n1" ? 1 : 0;
  }
  EXPECT_EQ(on_n2, 1);
  EXPECT_EQ(on_n1, 0);
  ASSERT_EQ(core_->reservations().size(), 1u);
  EXPECT_EQ(core_->reservations()[0].owner, "ns/big");
}

TEST_F(ReservationTest, AGangReservesAndItsMembersAreOneOwner) {
  Node(NodeObject("n1").Gpus(4).Json());
  for (const char* r : {"r1", "r2", "r3"}) Pod(Gpus(r, 1));
  core_->SetSynced(true, true);
  ScheduleAndBind();
  ASSERT_EQ(BoundTo("ns/r3"), "n1");
  for (const char* m : {"g-0", "g-1"}) {
    Pod(PodObject("ns", m).Limit("tessera.dev/gpu", "1").Gang("g", 2).Json());
  }
  ScheduleAndBind();
  AdvanceSeconds(31);
  core_->ScheduleSome();
  ASSERT_EQ(core_->reservations().size(), 1u);
  EXPECT_EQ(core_->reservations()[0].owner, "ns/g");
  EXPECT_EQ(__builtin_popcountll(core_->reservations()[0].gpus[0].gpu_mask), 2);
  EXPECT_EQ(Reasons(rec_.normals, "ns/g-0"), std::vector<std::string>{"Reserved"});
  EXPECT_EQ(Reasons(rec_.normals, "ns/g-1"), std::vector<std::string>{"Reserved"});
  EXPECT_THAT(rec_.normals[0].message, HasSubstr("gang ns/g"));
  ASSERT_THAT(Reasons(rec_.reservations, "ns/g-0"), ElementsAre("RoomReserved"));
  ASSERT_THAT(Reasons(rec_.reservations, "ns/g-1"), ElementsAre("RoomReserved"));
  EXPECT_THAT(rec_.reservations[0].message, HasSubstr("room reserved for gang ns/g: node n1"));
  // A pod of another namespace naming a gang "g" is not its owner: it waits.
  Pod(PodObject("other", "x").Limit("tessera.dev/gpu", "1").Gang("g", 1).Json());
  AdvanceSeconds(2);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("other/x"), "");
  // r1 ends: the gang takes its room.
  core_->OnPod(Change::kDeleted, DecodePod(objects_.at("ns/r1")));
  AdvanceSeconds(2);
  ScheduleAndBind();
  EXPECT_EQ(BoundTo("ns/g-0"), "n1");
  EXPECT_EQ(BoundTo("ns/g-1"), "n1");
  EXPECT_EQ(BoundTo("other/x"), "");
  AdvanceSeconds(2);
  core_->ScheduleSome();
  EXPECT_TRUE(core_->reservations().empty());
}

}  // namespace
}  // namespace tessera::k8s
