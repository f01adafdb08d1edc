#include "k8s/scheduler/pod_tracker.h"

#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using testing::PodObject;

// Every stage change goes through SetStage, so the counts and the pending gauges always agree
// with the pods' stages, also when pods go away.
TEST(PodTracker, StageCountsAndGaugesFollowEveryChange) {
  SchedulerMetrics metrics;
  PodTracker t(&metrics);
  const auto now = PodTracker::TimePoint() + std::chrono::hours(1);
  for (const char* name : {"a", "b", "c", "d"}) {
    PodTracker::Pod& p = t.Upsert(std::string("ns/") + name, now);
    p.info = DecodePod(PodObject("ns", name).Json());
  }
  EXPECT_EQ(t.count(Stage::kNew), 4);
  t.SetStage(t.Get("ns/a"), Stage::kQueued);
  t.SetStage(t.Get("ns/b"), Stage::kQueued);
  t.SetStage(t.Get("ns/c"), Stage::kBinding);
  t.SetStage(t.Get("ns/d"), Stage::kGangWaiting);
  EXPECT_EQ(metrics.pending_active.load(), 2);
  EXPECT_EQ(metrics.binding_in_flight.load(), 1);
  EXPECT_EQ(metrics.pending_gang_waiting.load(), 1);
  t.SetStage(t.Get("ns/b"), Stage::kUnschedulable);
  t.SetStage(t.Get("ns/c"), Stage::kBound);
  t.SetStage(t.Get("ns/a"), Stage::kBackoff);
  EXPECT_EQ(metrics.pending_active.load(), 0);
  EXPECT_EQ(metrics.pending_backoff.load(), 1);
  EXPECT_EQ(metrics.pending_unschedulable.load(), 1);
  EXPECT_EQ(metrics.binding_in_flight.load(), 0);
  t.Erase("ns/b");
  t.Erase("ns/d");
  EXPECT_EQ(metrics.pending_unschedulable.load(), 0);
  EXPECT_EQ(metrics.pending_gang_waiting.load(), 0);
  EXPECT_EQ(t.count(Stage::kBound), 1);
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.Find("ns/b"), nullptr);
  EXPECT_EQ(t.Upsert("ns/a", now + std::chrono::hours(1)).first_seen, now);  // kept
}

// The oldest waiting pod (for tessera_scheduler_oldest_pending_pod_age_seconds): the earliest
// first sight among pods not yet bound, whatever stage they wait in; none once all are bound.
TEST(PodTracker, OldestWaitingPod) {
  SchedulerMetrics metrics;
  PodTracker t(&metrics);
  const auto t0 = PodTracker::TimePoint() + std::chrono::hours(1);
  t.Upsert("ns/old", t0).info = DecodePod(PodObject("ns", "old").Json());
  t.Upsert("ns/young", t0 + std::chrono::minutes(5)).info =
      DecodePod(PodObject("ns", "young").Json());
  EXPECT_EQ(t.oldest_waiting(), std::nullopt) << "new pods are not waiting yet";
  t.SetStage(t.Get("ns/young"), Stage::kQueued);
  EXPECT_EQ(t.oldest_waiting(), t0 + std::chrono::minutes(5));
  t.SetStage(t.Get("ns/old"), Stage::kUnschedulable);
  EXPECT_EQ(t.oldest_waiting(), t0);
  EXPECT_EQ(metrics.oldest_waiting_since_ns.load(),
            t0.time_since_epoch() / std::chrono::nanoseconds(1));
  t.SetStage(t.Get("ns/old"), Stage::kBinding);
  EXPECT_EQ(t.oldest_waiting(), t0) << "still not bound";
  t.SetStage(t.Get("ns/old"), Stage::kBound);
  EXPECT_EQ(t.oldest_waiting(), t0 + std::chrono::minutes(5));
  t.Erase("ns/young");
  EXPECT_EQ(t.oldest_waiting(), std::nullopt);
  EXPECT_EQ(metrics.oldest_waiting_since_ns.load(), 0);
}

}  // namespace
}  // namespace tessera::k8s
