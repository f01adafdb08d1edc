#include "k8s/doctor/findings.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

TEST(Findings, TextPutsProblemsFirstWithTheirFixAndJsonKeepsEveryField) {
  DoctorReport r;
  r.scope = "cluster";
  r.target = "https://k:6443";
  r.findings = {{"a", Severity::kOk, "", "fine", "", ""},
                {"b", Severity::kWarning, "node/x", "odd", "may hurt", "do y"},
                {"c", Severity::kError, "", "broken", "hurts", "do z"}};
  EXPECT_EQ(r.errors(), 1);
  EXPECT_EQ(r.warnings(), 1);
  const std::string text = RenderDoctorText(r);
  EXPECT_LT(text.find("ERROR c: broken"), text.find("WARN  b (node/x): odd"));
  EXPECT_LT(text.find("WARN  b"), text.find("ok    a: fine"));
  EXPECT_THAT(text, HasSubstr("      fix: do z\n"));
  EXPECT_THAT(text, HasSubstr("1 error, 1 warning (3 checks)"));
  nlohmann::json j = DoctorToJson(r);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["errors"], 1);
  EXPECT_EQ(j["findings"][1]["severity"], "warning");
  EXPECT_EQ(j["findings"][2]["fix"], "do z");
  r.findings.resize(1);
  EXPECT_THAT(RenderDoctorText(r), HasSubstr("all checks passed"));
}

}  // namespace
}  // namespace tessera::k8s
