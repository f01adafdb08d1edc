#include "agent/pods/idle_reclaim.h"

#include <optional>

#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using json = nlohmann::json;

json Pod(const std::string& uid, std::optional<int32_t> priority) {
  json pod = {{"metadata", {{"namespace", "team"}, {"name", "p"}, {"uid", uid}}},
              {"spec", json::object()},
              {"status", {{"phase", "Running"}}}};
  if (priority) pod["spec"]["priority"] = *priority;
  return pod;
}

TEST(IdleReclaimTest, APodBelowTheBoundIsEvicted) {
  const IdleReclaimDecision d = DecideIdleReclaim(Pod("u1", -10), "u1", 1);
  EXPECT_TRUE(d.evict);
  EXPECT_EQ(d.priority, -10);
  EXPECT_EQ(d.why, "its priority -10 is below 1");
}

TEST(IdleReclaimTest, APodWithoutAPriorityHasZero) {
  EXPECT_TRUE(DecideIdleReclaim(Pod("u1", std::nullopt), "u1", 1).evict);
  const IdleReclaimDecision d = DecideIdleReclaim(Pod("u1", std::nullopt), "u1", 0);
  EXPECT_FALSE(d.evict);
  EXPECT_EQ(d.why, "its priority 0 is not below 0");
}

TEST(IdleReclaimTest, APodAtOrAboveTheBoundStays) {
  EXPECT_FALSE(DecideIdleReclaim(Pod("u1", 1), "u1", 1).evict);
  const IdleReclaimDecision d = DecideIdleReclaim(Pod("u1", 1000), "u1", 1);
  EXPECT_FALSE(d.evict);
  EXPECT_EQ(d.priority, 1000);
  EXPECT_EQ(d.why, "its priority 1000 is not below 1");
}

TEST(IdleReclaimTest, AnotherPodUnderTheSameNameOrNoneIsNeverEvicted) {
  EXPECT_EQ(DecideIdleReclaim(Pod("u2", 0), "u1", 1).why,
            "the pod of that name is another pod now");
  EXPECT_FALSE(DecideIdleReclaim(Pod("u2", 0), "u1", 1).evict);
  EXPECT_EQ(DecideIdleReclaim(json(), "u1", 1).why, "the pod is gone");
  EXPECT_FALSE(DecideIdleReclaim(json(), "u1", 1).evict);
}

TEST(IdleReclaimTest, PodsLeavingOrEndedAreLeftAlone) {
  json leaving = Pod("u1", 0);
  leaving["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z";
  EXPECT_FALSE(DecideIdleReclaim(leaving, "u1", 1).evict);
  json done = Pod("u1", 0);
  done["status"]["phase"] = "Succeeded";
  EXPECT_EQ(DecideIdleReclaim(done, "u1", 1).why, "the pod has ended (Succeeded)");
}

// Pods that would come back at once in the same place are not evicted: it would only churn.
TEST(IdleReclaimTest, StaticAndDaemonSetPodsAreLeftAlone) {
  json mirror = Pod("u1", 0);
  mirror["metadata"]["annotations"] = {{"kubernetes.io/config.mirror", "abc"}};
  EXPECT_FALSE(DecideIdleReclaim(mirror, "u1", 1).evict);
  json daemon = Pod("u1", 0);
  daemon["metadata"]["ownerReferences"] = json::array(
      {{{"apiVersion", "apps/v1"}, {"kind", "DaemonSet"}, {"name", "d"}, {"controller", true}}});
  EXPECT_EQ(DecideIdleReclaim(daemon, "u1", 1).why,
            "a DaemonSet's pod (it would come back on this node)");
  // A Job's pod is evicted (its controller decides whether to run it again, elsewhere or later).
  json job = Pod("u1", 0);
  job["metadata"]["ownerReferences"] = json::array(
      {{{"apiVersion", "batch/v1"}, {"kind", "Job"}, {"name", "j"}, {"controller", true}}});
  EXPECT_TRUE(DecideIdleReclaim(job, "u1", 1).evict);
}

// What the pod says about itself does not matter: only its priority (its PriorityClass).
TEST(IdleReclaimTest, ThePodsOwnAnnotationsDoNotExemptIt) {
  json pod = Pod("u1", 0);
  pod["metadata"]["annotations"] = {{"tessera.dev/idle-reclaim", "never"},
                                    {"tessera.dev/queue", "vip"}};
  EXPECT_TRUE(DecideIdleReclaim(pod, "u1", 1).evict);
}

}  // namespace
}  // namespace tessera::agent
