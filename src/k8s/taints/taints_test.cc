#include "k8s/taints/taints.h"

#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

TEST(Taints, KeyAndValueMustMatchForEqual) {
  const Taint taint{"gpu", "broken", "NoSchedule"};
  EXPECT_TRUE(Tolerates({"gpu", "Equal", "broken", ""}, taint));
  EXPECT_FALSE(Tolerates({"gpu", "Equal", "fine", ""}, taint));
  EXPECT_FALSE(Tolerates({"other", "Equal", "broken", ""}, taint));
}

TEST(Taints, ExistsIgnoresTheValueAndAnEmptyKeyTakesEveryKey) {
  const Taint taint{"gpu", "broken", "NoExecute"};
  EXPECT_TRUE(Tolerates({"gpu", "Exists", "", ""}, taint));
  EXPECT_TRUE(Tolerates({"", "Exists", "", ""}, taint));
  EXPECT_FALSE(Tolerates({"other", "Exists", "", ""}, taint));
  EXPECT_FALSE(Tolerates({"", "Equal", "", ""}, Taint{"", "", "NoExecute"}));
}

TEST(Taints, AnEffectToleratesOnlyThatEffect) {
  EXPECT_TRUE(Tolerates({"", "Exists", "", "NoExecute"}, {"gpu", "x", "NoExecute"}));
  EXPECT_FALSE(Tolerates({"", "Exists", "", "NoExecute"}, {"gpu", "x", "NoSchedule"}));
}

TEST(Taints, DecodesATolerationAsTheApiWritesIt) {
  EXPECT_EQ(DecodeToleration(nlohmann::json::parse(R"({"key":"gpu","value":"x","future":1})")),
            (Toleration{"gpu", "Equal", "x", ""}));
  EXPECT_EQ(
      DecodeToleration(nlohmann::json::parse(R"({"operator":"Exists","effect":"NoExecute"})")),
      (Toleration{"", "Exists", "", "NoExecute"}));
}

TEST(Taints, EveryTaintNeedsOneToleration) {
  const std::vector<Taint> taints = {{"a", "1", "NoSchedule"}, {"b", "2", "NoExecute"}};
  EXPECT_FALSE(ToleratesAll({{"a", "Exists", "", ""}}, taints));
  EXPECT_TRUE(ToleratesAll({{"a", "Exists", "", ""}, {"b", "Equal", "2", ""}}, taints));
  EXPECT_TRUE(ToleratesAll({}, {}));
}

}  // namespace
}  // namespace tessera::k8s
