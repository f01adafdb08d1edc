#include "k8s/scheduler/runtime_limits.h"

#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using testing::PodObject;

// A bound pod started at `start` (Unix seconds 1796446800 is 2026-12-05T05:00:00Z) declaring
// `runtime` (empty: none).
std::shared_ptr<const PodInfo> Running(const std::string& name, const std::string& start,
                                       const std::string& runtime, bool bound = true) {
  PodObject p("ns", name);
  if (!runtime.empty()) p.Annotation("tessera.dev/max-runtime", runtime);
  if (bound) p.Node("n1");
  nlohmann::json j = p.Json();
  if (!start.empty()) j["status"]["startTime"] = start;
  return DecodePod(j);
}

constexpr int64_t kFive = 1796446800;  // 05:00:00Z

TEST(RuntimeLimits, DueAtStartPlusRuntimePlusGraceThenEveryRetry) {
  RuntimeLimits limits(/*grace_s=*/30, /*retry_s=*/60);
  limits.OnPod(Running("short", "2026-12-05T05:00:00Z", "10m"));
  limits.OnPod(Running("undeclared", "2026-12-05T05:00:00Z", ""));
  limits.OnPod(Running("unstarted", "", "1m"));
  limits.OnPod(Running("pending", "2026-12-05T05:00:00Z", "1m", /*bound=*/false));
  EXPECT_EQ(limits.size(), 1u);
  ASSERT_TRUE(limits.Next().has_value());
  EXPECT_EQ(*limits.Next(), kFive + 600 + 30);
  EXPECT_TRUE(limits.Due(kFive + 629).empty());
  auto due = limits.Due(kFive + 630);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0]->key, "ns/short");
  // Asked once; again after the retry if it is still there.
  EXPECT_TRUE(limits.Due(kFive + 689).empty());
  EXPECT_EQ(limits.Due(kFive + 690).size(), 1u);
  // Gone: nothing more.
  limits.Forget("ns/short");
  EXPECT_TRUE(limits.Due(kFive + 10'000).empty());
  EXPECT_FALSE(limits.Next().has_value());
}

TEST(RuntimeLimits, APodThatFinishesOrLosesItsDeclarationIsNoLongerTracked) {
  RuntimeLimits limits(0, 60);
  limits.OnPod(Running("a", "2026-12-05T05:00:00Z", "1m"));
  EXPECT_EQ(limits.size(), 1u);
  nlohmann::json j = PodObject("ns", "a").Node("n1").Phase("Succeeded").Json();
  j["status"]["startTime"] = "2026-12-05T05:00:00Z";
  j["metadata"]["annotations"]["tessera.dev/max-runtime"] = "1m";
  limits.OnPod(DecodePod(j));
  EXPECT_EQ(limits.size(), 0u);
  // activeDeadlineSeconds counts as a declaration too.
  nlohmann::json d = PodObject("ns", "d").Node("n1").Json();
  d["status"]["startTime"] = "2026-12-05T05:00:00Z";
  d["spec"]["activeDeadlineSeconds"] = 120;
  limits.OnPod(DecodePod(d));
  ASSERT_TRUE(limits.Next().has_value());
  EXPECT_EQ(*limits.Next(), kFive + 120);
}

}  // namespace
}  // namespace tessera::k8s
