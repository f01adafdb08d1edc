// What can be checked without a server; the election itself runs against the real API server in
// client_e2e_test.cc (LeaderElection.*) and test/k8s/scheduler_e2e_test.cc (two replicas).
#include "k8s/client/leader_election.h"

#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

TEST(LeaderElection, ValidatesDurationsAsClientGoDoes) {
  LeaderElectionConfig l;
  l.identity = "x";
  EXPECT_TRUE(ValidateLeaderElection(l).ok());  // 15 s / 10 s / 2 s
  l.renew_deadline = l.lease_duration;
  EXPECT_FALSE(ValidateLeaderElection(l).ok());
  l.renew_deadline = std::chrono::milliseconds(2'400);
  l.retry_period = std::chrono::milliseconds(2'000);
  EXPECT_FALSE(ValidateLeaderElection(l).ok());  // not more than 1.2 x retry
  l.renew_deadline = std::chrono::milliseconds(2'401);
  EXPECT_TRUE(ValidateLeaderElection(l).ok());
  l.lease_duration = std::chrono::milliseconds(3'500);
  EXPECT_FALSE(ValidateLeaderElection(l).ok());  // the Lease holds whole seconds
  l.lease_duration = std::chrono::milliseconds(3'000);
  l.identity.clear();
  EXPECT_FALSE(ValidateLeaderElection(l).ok());
}

TEST(LeaderElection, MicroTimeFormat) {
  EXPECT_EQ(FormatMicroTime(std::chrono::system_clock::time_point(
                std::chrono::microseconds(1'700'000'000'123'456LL))),
            "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(FormatTime(std::chrono::system_clock::time_point(std::chrono::seconds(1'700'000'000))),
            "2023-11-14T22:13:20Z");
  std::string id = DefaultIdentity();
  EXPECT_NE(id.find('_'), std::string::npos);
  EXPECT_NE(DefaultIdentity(), id);
}

// Whoever may write the Lease may write anything into it: a field of the wrong type is an error
// naming it, not an exception (nlohmann's value() threw type_error, which ended the scheduler).
TEST(LeaderElection, ALeaseOfAnyShapeIsReadWithoutThrowing) {
  auto r = LeaseRecordFromJson(nlohmann::json::parse(
      R"({"metadata":{"resourceVersion":"7"},"spec":{"holderIdentity":"a","leaseDurationSeconds":15,
          "acquireTime":"t0","renewTime":"t1","leaseTransitions":3,"newField":[1]}})"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, (LeaseRecord{"a", 15, "t0", "t1", 3, "7"}));
  EXPECT_EQ(*LeaseRecordFromJson(nlohmann::json::parse(R"({"spec":null})")), LeaseRecord{});
  for (const char* bad :
       {R"([])", R"({"spec":"x"})", R"({"metadata":5})", R"({"spec":{"holderIdentity":5}})",
        R"({"spec":{"leaseDurationSeconds":"15"}})", R"({"spec":{"leaseTransitions":1.5}})",
        R"({"metadata":{"resourceVersion":{}}})"}) {
    absl::StatusOr<LeaseRecord> got = LeaseRecordFromJson(nlohmann::json::parse(bad));
    EXPECT_FALSE(got.ok()) << bad;
  }
  EXPECT_NE(LeaseRecordFromJson(nlohmann::json::parse(R"({"spec":{"holderIdentity":5}})"))
                .status()
                .message()
                .find("spec.holderIdentity"),
            std::string::npos);
}

}  // namespace
}  // namespace tessera::k8s
