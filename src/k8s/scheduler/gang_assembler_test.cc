#include "k8s/scheduler/gang_assembler.h"

#include "common/strings.h"
#include "gtest/gtest.h"
#include "k8s/scheduler/pod_groups.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using testing::PodObject;

class GangTest : public ::testing::Test {
 protected:
  PodTracker::Pod& Member(const std::string& name, int size, Stage stage,
                          const std::string& created = "2026-01-01T00:00:00Z") {
    const std::string key = StrCat("ns/", name);
    PodTracker::Pod& p = pods_.Upsert(key, {});
    p.info = DecodePod(PodObject("ns", name)
                           .Limit("tessera.dev/gpu", "1")
                           .Gang("g", size)
                           .Created(created)
                           .Json());
    pods_.SetStage(p, stage);
    gangs_.Join(key, p);
    return p;
  }
  PodTracker pods_{nullptr};
  GangAssembler gangs_;
};

// The class comment's example: a gang of 4 with one member bound and two pending is not ready;
// the fourth member makes it ready, the three pending oldest first.
TEST_F(GangTest, ReadyWhenPendingAndPlacedMembersReachTheSize) {
  Member("a", 4, Stage::kBound);
  Member("c", 4, Stage::kQueued, "2026-01-01T00:00:03Z");
  Member("b", 4, Stage::kGangWaiting, "2026-01-01T00:00:02Z");
  GangAssembler::Round r = gangs_.Assemble("ns/g", pods_);
  EXPECT_FALSE(r.ready);
  EXPECT_EQ(r.placed, 1);
  EXPECT_EQ(r.pending.size(), 2u);
  Member("d", 4, Stage::kQueued, "2026-01-01T00:00:01Z");
  r = gangs_.Assemble("ns/g", pods_);
  ASSERT_TRUE(r.ready);
  EXPECT_EQ(r.pending, (std::vector<std::string>{"ns/d", "ns/b", "ns/c"}));
  EXPECT_TRUE(r.extra.empty());
  // A fifth member is beyond the size; one with another size is bad input.
  Member("e", 4, Stage::kQueued, "2026-01-01T00:00:09Z");
  Member("x", 3, Stage::kQueued);
  r = gangs_.Assemble("ns/g", pods_);
  EXPECT_EQ(r.extra, (std::vector<std::string>{"ns/e"}));
  EXPECT_EQ(r.wrong_size, (std::vector<std::string>{"ns/x"}));
}

// An elastic gang (size 8, min 4) is ready as soon as 4 of its members exist, before the other 4
// have been created: all 4 pending go, none is "extra" (found by the e2e test: the round once
// took the size, not the members present, as the count to keep).
TEST_F(GangTest, AnElasticGangIsReadyWithFewerMembersThanItsSize) {
  for (const char* name : {"w-0", "w-1", "w-2", "w-3"}) {
    const std::string key = StrCat("ns/", name);
    PodTracker::Pod& p = pods_.Upsert(key, {});
    p.info = DecodePod(PodObject("ns", name)
                           .Limit("tessera.dev/gpu", "1")
                           .Gang("g", 8)
                           .Annotation("tessera.dev/gang-min", "4")
                           .Json());
    pods_.SetStage(p, Stage::kQueued);
    gangs_.Join(key, p);
  }
  GangAssembler::Round r = gangs_.Assemble("ns/g", pods_);
  ASSERT_TRUE(r.ready);
  EXPECT_EQ(r.min, 4);
  EXPECT_EQ(r.pending.size(), 4u);
  EXPECT_TRUE(r.extra.empty());
}

TEST_F(GangTest, ShortagesAreReportedOnceUntilTheGangIsAssembledAgain) {
  Member("a", 3, Stage::kGangWaiting);
  Member("b", 3, Stage::kGangWaiting);
  std::vector<GangAssembler::Shortage> s = gangs_.TakeShortages(pods_);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].gang, "ns/g");
  EXPECT_EQ(s[0].present, 2);
  EXPECT_EQ(s[0].size, 3);
  EXPECT_TRUE(gangs_.TakeShortages(pods_).empty());
  gangs_.Assembled("ns/g");
  EXPECT_EQ(gangs_.TakeShortages(pods_).size(), 1u);
  // Members leave: the gang is gone with the last.
  gangs_.Leave("ns/a", pods_.Get("ns/a"));
  gangs_.Leave("ns/b", pods_.Get("ns/b"));
  EXPECT_TRUE(gangs_.empty());
}

// One home for gangs: pods of a PodGroup (resolved by PodGroups) and pods annotated
// tessera.dev/gang with the same name join one gang; a PodGroup gang with minCount 2 is ready
// with 2 members and takes every pending member (it has no fixed size).
TEST_F(GangTest, APodGroupGangIsTheSameGangAsTheAnnotationsOne) {
  PodGroups groups(core::DefaultTopologyLevels());
  groups.OnGroup(Change::kAdded, DecodePodGroup(testing::PodGroupJson("ns", "pg", 2)));
  auto join = [&](const std::string& name, const std::string& created) {
    const std::string key = StrCat("ns/", name);
    PodTracker::Pod& p = pods_.Upsert(key, {});
    p.info = groups
                 .Resolve(DecodePod(PodObject("ns", name)
                                        .Limit("tessera.dev/gpu", "1")
                                        .PodGroup("pg")
                                        .Created(created)
                                        .Json()))
                 .pod;
    pods_.SetStage(p, Stage::kQueued);
    gangs_.Join(key, p);
    return p.gang;
  };
  EXPECT_EQ(join("a", "2026-01-01T00:00:02Z"), "ns/pg");
  EXPECT_FALSE(gangs_.Assemble("ns/pg", pods_).ready);
  join("b", "2026-01-01T00:00:03Z");
  join("c", "2026-01-01T00:00:01Z");
  GangAssembler::Round r = gangs_.Assemble("ns/pg", pods_);
  EXPECT_TRUE(r.ready);
  EXPECT_EQ(r.min, 2);
  EXPECT_EQ(r.pending, (std::vector<std::string>{"ns/c", "ns/a", "ns/b"}));
  EXPECT_TRUE(r.extra.empty());
  // A pod annotated tessera.dev/gang: pg is in the same gang (one name in a namespace), and must
  // agree with it: a fixed size of 2 is not the PodGroup's gang.
  PodTracker::Pod& d = pods_.Upsert("ns/d", {});
  d.info = DecodePod(PodObject("ns", "d").Limit("tessera.dev/gpu", "1").Gang("pg", 2).Json());
  pods_.SetStage(d, Stage::kQueued);
  gangs_.Join("ns/d", d);
  EXPECT_EQ(d.gang, "ns/pg");
  EXPECT_EQ(gangs_.Assemble("ns/pg", pods_).wrong_size, std::vector<std::string>{"ns/d"});
}

}  // namespace
}  // namespace tessera::k8s
