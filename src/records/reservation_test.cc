#include "records/reservation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::records {
namespace {

using ::testing::HasSubstr;

// 2026-12-05T10:40:00Z
constexpr int64_t kAt = 1796467200;

TEST(ReservationMessage, AGangOnTwoNodesReadsBackAsWritten) {
  ReservationRecord r{.gang = true,
                      .owner = "ml/train",
                      .sites = {{"gpu-1", {0, 1, 2, 3}}, {"gpu-2", {0, 5}}},
                      .expected_start_unix = kAt};
  const std::string m = ReservationMessage(r);
  EXPECT_EQ(m,
            "room reserved for gang ml/train: node gpu-1 GPUs 0,1,2,3; node gpu-2 GPUs 0,5; "
            "expected start 2026-12-05T10:40:00Z");
  absl::StatusOr<ReservationRecord> back = ParseReservationMessage(m);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
}

TEST(ReservationMessage, APodReadsBack) {
  ReservationRecord r{.owner = "a/big", .sites = {{"n", {7}}}, .expected_start_unix = 0};
  absl::StatusOr<ReservationRecord> back = ParseReservationMessage(ReservationMessage(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  EXPECT_FALSE(back->gang);
}

TEST(ReservationMessage, PartsANewerSchedulerAddsAreIgnored) {
  absl::StatusOr<ReservationRecord> r = ParseReservationMessage(
      "room reserved for pod a/b: node n GPUs 1; priority 5; expected start "
      "2026-12-05T10:40:00Z; moved 2 times");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->sites.size(), 1u);
  EXPECT_EQ(r->expected_start_unix, kAt);
}

TEST(ReservationMessage, WhatCannotBeReadIsAnErrorNamingThePart) {
  auto error = [](std::string_view m) {
    absl::StatusOr<ReservationRecord> r = ParseReservationMessage(m);
    return r.ok() ? std::string("accepted") : std::string(r.status().message());
  };
  EXPECT_EQ(error("held for pod a/b"),
            "condition tessera.dev/Reserved message: \"held for pod a/b\": does not start "
            "\"room reserved for \"");
  EXPECT_THAT(error("room reserved for job a/b: node n GPUs 1; expected start "
                    "2026-12-05T10:40:00Z"),
              HasSubstr("neither"));
  EXPECT_THAT(error("room reserved for pod a/b: node n GPUs 1,1; expected start "
                    "2026-12-05T10:40:00Z"),
              HasSubstr("\"node n GPUs 1,1\": GPU indices must be ascending"));
  EXPECT_THAT(error("room reserved for pod a/b: node n GPUs 1,; expected start "
                    "2026-12-05T10:40:00Z"),
              HasSubstr("missing"));
  EXPECT_THAT(error("room reserved for pod a/b: node n GPUs 1; expected start soon"),
              HasSubstr("not RFC 3339"));
  EXPECT_THAT(error("room reserved for pod a/b: node n GPUs 1"), HasSubstr("no expected start"));
  EXPECT_THAT(error("room reserved for pod a/b: expected start 2026-12-05T10:40:00Z"),
              HasSubstr("names no node"));
  EXPECT_THAT(error("room reserved for pod : node n GPUs 1"), HasSubstr("namespace/name"));
  EXPECT_THAT(error("room reserved for pod a/b: node n GPUs 1; expected start "
                    "1969-12-31T00:00:00Z"),
              HasSubstr("between 1970 and 9999"));
}

}  // namespace
}  // namespace tessera::records
