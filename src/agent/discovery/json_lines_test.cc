#include "agent/discovery/json_lines.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;

TEST(JsonWithLines, EveryValueHasItsLine) {
  const std::string text =
      "{\n"
      "  \"a\": 1,\n"
      "  \"b/c\": [\n"
      "    true,\n"
      "    {\"d\": \"x\"}\n"
      "  ],\n"
      "  \"e\": 12345\n"
      "}\n";
  absl::StatusOr<JsonWithLines> doc = ParseJsonWithLines(text, "t");
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->value["b/c"][1]["d"], "x");
  EXPECT_EQ(doc->LineOf(""), 1);
  EXPECT_EQ(doc->LineOf("/a"), 2);
  EXPECT_EQ(doc->LineOf("/b~1c"), 3);
  EXPECT_EQ(doc->LineOf("/b~1c/0"), 4);
  EXPECT_EQ(doc->LineOf("/b~1c/1"), 5);
  EXPECT_EQ(doc->LineOf("/b~1c/1/d"), 5);
  EXPECT_EQ(doc->LineOf("/e"), 7);        // a number ends at the newline the parser looks ahead to
  EXPECT_EQ(doc->LineOf("/missing"), 1);  // falls back to the enclosing value
  EXPECT_EQ(doc->LineOf("/b~1c/1/nope"), 5);
}

TEST(JsonWithLines, SyntaxErrorsNameLineAndColumn) {
  absl::StatusOr<JsonWithLines> doc = ParseJsonWithLines("{\n  \"a\": tru\n}", "f.json");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("f.json:2:"));
  doc = ParseJsonWithLines("[1, 2", "f.json");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("f.json:1:"));
  doc = ParseJsonWithLines("{} x", "f.json");
  ASSERT_FALSE(doc.ok());
  EXPECT_THAT(doc.status().message(), HasSubstr("f.json:1:4: not valid JSON"));
}

}  // namespace
}  // namespace tessera::agent
