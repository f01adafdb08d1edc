#include "records/move.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::records {
namespace {

using ::testing::HasSubstr;

TEST(MoveRecord, RoundTripsThroughItsMessage) {
  const MoveRecord r{"pod team-a/big", "gpu-1", {3, 5}, 1'796'000'000};
  const std::string message = MovingMessage(r);
  EXPECT_EQ(message,
            "moved for pod team-a/big; to node gpu-1 GPUs 3,5; held until "
            "2026-11-30T00:53:20Z");
  absl::StatusOr<MoveRecord> back = ParseMovingMessage(message);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, r);
  const MoveRecord none{"gang team-a/train", "cpu-1", {}, 1'796'000'000};
  back = ParseMovingMessage(MovingMessage(none));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, none);
}

TEST(MoveRecord, BadMessagesSayWhichPart) {
  auto err = [](std::string_view m) {
    absl::StatusOr<MoveRecord> r = ParseMovingMessage(m);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_EQ(err("evicted"),
            "condition tessera.dev/Moving message: \"evicted\": does not start \"moved for \"");
  EXPECT_THAT(err("moved for pod a/b"), HasSubstr("no destination"));
  EXPECT_THAT(err("moved for pod a/b; to node n GPUs 2,1; held until 2026-11-29T23:33:20Z"),
              HasSubstr("ascending"));
  EXPECT_THAT(err("moved for pod a/b; to node n GPUs 1; held until soon"),
              HasSubstr("is not RFC 3339 UTC"));
  EXPECT_THAT(err("moved for pod a/b; to node n GPUs 1"), HasSubstr("no \"; held until\""));
}

}  // namespace
}  // namespace tessera::records
