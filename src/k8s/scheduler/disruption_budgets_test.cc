#include "k8s/scheduler/disruption_budgets.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/testing/objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::PodObject;

json Budget(const std::string& name, json selector, int64_t allowed, int64_t generation = 1,
            int64_t observed = 1) {
  json b = {{"apiVersion", "policy/v1"},
            {"kind", "PodDisruptionBudget"},
            {"metadata", {{"namespace", "ns"}, {"name", name}, {"generation", generation}}},
            {"spec", {{"minAvailable", 1}}},
            {"status", {{"observedGeneration", observed}, {"disruptionsAllowed", allowed}}}};
  if (!selector.is_null()) b["spec"]["selector"] = std::move(selector);
  return b;
}

// A running pod with `labels`, ready or not.
std::shared_ptr<const PodInfo> Running(const std::string& name,
                                       const std::map<std::string, std::string>& labels,
                                       bool ready = true, const std::string& ns = "ns") {
  json p = PodObject(ns, name).Node("n1").Phase("Running").Json();
  for (const auto& [k, v] : labels) p["metadata"]["labels"][k] = v;
  p["status"]["conditions"] =
      json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}});
  return DecodePod(p);
}

TEST(DisruptionBudgets, SelectorsAsTheEvictionApiReadsThem) {
  DisruptionBudgets budgets;
  budgets.Apply(Change::kAdded,
                DecodeBudget(Budget("web", {{"matchLabels", {{"app", "web"}}}}, 1)));
  budgets.Apply(
      Change::kAdded,
      DecodeBudget(Budget(
          "tier",
          {{"matchExpressions",
            json::array({{{"key", "tier"}, {"operator", "In"}, {"values", {"gold", "silver"}}},
                         {{"key", "canary"}, {"operator", "DoesNotExist"}}})}},
          2)));
  budgets.Apply(Change::kAdded, DecodeBudget(Budget("none", nullptr, 5)));  // selects nothing
  EXPECT_EQ(budgets.Covering(*Running("a", {{"app", "web"}})), "ns/web");
  EXPECT_EQ(budgets.Covering(*Running("b", {{"tier", "gold"}})), "ns/tier");
  EXPECT_EQ(budgets.Covering(*Running("c", {{"tier", "gold"}, {"canary", "1"}})), "");
  EXPECT_EQ(budgets.Covering(*Running("d", {{"tier", "bronze"}})), "");
  EXPECT_EQ(budgets.Covering(*Running("e", {{"app", "web"}}, true, "other")), "");
  // Under two budgets: the Eviction API refuses it, so it is covered by a key allowing nothing.
  const std::string both = budgets.Covering(*Running("f", {{"app", "web"}, {"tier", "silver"}}));
  EXPECT_EQ(both, "ns/tier+ns/web");
  EXPECT_EQ(budgets.Allowed(both), 0);
  EXPECT_EQ(budgets.Allowed("ns/web"), 1);
  EXPECT_EQ(budgets.Allowed("ns/tier"), 2);

  // An empty selector (policy/v1) selects every pod of its namespace.
  budgets.Apply(Change::kDeleted, DecodeBudget(Budget("tier", nullptr, 0)));
  budgets.Apply(Change::kAdded, DecodeBudget(Budget("all", json::object(), 3)));
  EXPECT_EQ(budgets.Covering(*Running("g", {})), "ns/all");
  EXPECT_EQ(budgets.Covering(*Running("h", {{"tier", "gold"}})), "ns/all");
}

TEST(DisruptionBudgets, PodsTheEvictionApiDoesNotCheck) {
  DisruptionBudgets budgets;
  budgets.Apply(Change::kAdded,
                DecodeBudget(Budget("web", {{"matchLabels", {{"app", "web"}}}}, 0)));
  json pending = PodObject("ns", "p").Node("n1").Phase("Pending").Json();
  pending["metadata"]["labels"]["app"] = "web";
  EXPECT_EQ(budgets.Covering(*DecodePod(pending)), "");
  json deleting = PodObject("ns", "q").Node("n1").Phase("Running").Json();
  deleting["metadata"]["labels"]["app"] = "web";
  deleting["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
  EXPECT_EQ(budgets.Covering(*DecodePod(deleting)), "");
  // Unready: counted under IfHealthyBudget (the default), free under AlwaysAllow.
  EXPECT_EQ(budgets.Covering(*Running("r", {{"app", "web"}}, false)), "ns/web");
  json always = Budget("web", {{"matchLabels", {{"app", "web"}}}}, 0);
  always["spec"]["unhealthyPodEvictionPolicy"] = "AlwaysAllow";
  budgets.Apply(Change::kUpdated, DecodeBudget(always));
  EXPECT_EQ(budgets.Covering(*Running("r", {{"app", "web"}}, false)), "");
  EXPECT_EQ(budgets.Covering(*Running("s", {{"app", "web"}}, true)), "ns/web");
}

TEST(DisruptionBudgets, AllowedIsNoneWhileTheStatusIsStaleOrNegative) {
  DisruptionBudgets budgets;
  const json selector = {{"matchLabels", {{"app", "web"}}}};
  budgets.Apply(Change::kAdded, DecodeBudget(Budget("web", selector, 2, 3, 2)));
  EXPECT_EQ(budgets.Allowed("ns/web"), 0);  // spec changed, status not recomputed yet: 429
  budgets.Apply(Change::kUpdated, DecodeBudget(Budget("web", selector, 2, 3, 3)));
  EXPECT_EQ(budgets.Allowed("ns/web"), 2);
  budgets.Apply(Change::kUpdated, DecodeBudget(Budget("web", selector, -1, 3, 3)));
  EXPECT_EQ(budgets.Allowed("ns/web"), 0);
  EXPECT_EQ(budgets.Allowed("ns/unknown"), 0);
  json counted = Budget("web", selector, 1, 3, 3);
  counted["status"]["disruptedPods"] = {{"a", "2026-12-01T00:00:00Z"}};
  budgets.Apply(Change::kUpdated, DecodeBudget(counted));
  EXPECT_TRUE(budgets.Counted("ns/web", "a"));
  EXPECT_FALSE(budgets.Counted("ns/web", "b"));
  budgets.Apply(Change::kDeleted, DecodeBudget(counted));
  EXPECT_EQ(budgets.size(), 0u);
  EXPECT_EQ(budgets.Covering(*Running("a", {{"app", "web"}})), "");
}

TEST(DisruptionBudgets, ASelectorThatCannotBeReadSelectsNothing) {
  std::shared_ptr<const BudgetInfo> b = DecodeBudget(Budget(
      "bad", {{"matchExpressions", json::array({{{"key", "a"}, {"operator", "Near"}}})}}, 1));
  EXPECT_THAT(b->selector_error, ::testing::HasSubstr("matchExpressions[0]: unknown operator"));
  EXPECT_FALSE(b->Selects({{"a", "x"}}));
  EXPECT_FALSE(DecodeBudget(json::array())->Selects({}));  // not even an object: harmless
}

}  // namespace
}  // namespace tessera::k8s
