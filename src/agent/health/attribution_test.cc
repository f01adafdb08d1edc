#include "agent/health/attribution.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

constexpr char kGpu[] = "GPU-00000000-0000-4000-8000-000000000002";
constexpr char kOther[] = "GPU-00000000-0000-4000-8000-000000000003";

std::vector<std::string> Names(const Culprits& c) {
  std::vector<std::string> out;
  for (const GpuPod& p : c.pods) out.push_back(p.name);
  return out;
}

TEST(Attribution, TheOnlyPodOnTheGpu) {
  const Culprits c = AttributeXid(XidEvent(2, kGpu, 31), {{"ns", "a", "uid-a", kGpu, "", -1},
                                                          {"ns", "b", "uid-b", kOther, "", 3}});
  EXPECT_THAT(Names(c), ::testing::ElementsAre("a"));
  EXPECT_TRUE(c.certain);
}

TEST(Attribution, TheMigInstanceTheEventNames) {
  const Culprits c = AttributeXid(
      XidEvent(2, kGpu, 13, "1g.10gb@1"),
      {{"ns", "a", "uid-a", kGpu, "1g.10gb@0", -1}, {"ns", "b", "uid-b", kGpu, "1g.10gb@1", -1}});
  EXPECT_THAT(Names(c), ::testing::ElementsAre("b"));
  EXPECT_TRUE(c.certain);
}

TEST(Attribution, AmongSharesThePodsWithProcessesInTheLedger) {
  const Culprits one = AttributeXid(XidEvent(2, kGpu, 31), {{"ns", "a", "uid-a", kGpu, "", 2},
                                                            {"ns", "b", "uid-b", kGpu, "", 0}});
  EXPECT_THAT(Names(one), ::testing::ElementsAre("a"));
  EXPECT_TRUE(one.certain);
  const Culprits two = AttributeXid(XidEvent(2, kGpu, 31), {{"ns", "a", "uid-a", kGpu, "", 2},
                                                            {"ns", "b", "uid-b", kGpu, "", 1}});
  EXPECT_THAT(Names(two), ::testing::ElementsAre("a", "b"));
  EXPECT_FALSE(two.certain);
}

TEST(Attribution, NothingKnownOfProcessesTellsEveryPodOnTheGpu) {
  const Culprits c = AttributeXid(XidEvent(2, kGpu, 31), {{"ns", "a", "uid-a", kGpu, "", -1},
                                                          {"ns", "b", "uid-b", kGpu, "", -1}});
  EXPECT_THAT(Names(c), ::testing::ElementsAre("a", "b"));
  EXPECT_FALSE(c.certain);
}

TEST(Attribution, OnePodFromTwoSourcesCountsOnceWithWhatEachKnows) {
  // The API server's record (no process count) and the ledger's (two processes) of pod a.
  const Culprits c = AttributeXid(XidEvent(2, kGpu, 31), {{"ns", "a", "uid-a", kGpu, "", -1},
                                                          {"ns", "a", "uid-a", kGpu, "", 2},
                                                          {"ns", "b", "uid-b", kGpu, "", 0}});
  EXPECT_THAT(Names(c), ::testing::ElementsAre("a"));
  EXPECT_TRUE(c.certain);
}

TEST(Attribution, NoPodOnTheGpu) {
  EXPECT_TRUE(
      AttributeXid(XidEvent(2, kGpu, 31), {{"ns", "b", "uid-b", kOther, "", 1}}).pods.empty());
}

}  // namespace
}  // namespace tessera::agent
