#include "k8s/eviction/evictor.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ApiEvictor, RequestIsAnEvictionWithTheUidAsPrecondition) {
  HttpRequest r = ApiEvictor::EvictionRequest({"team", "train-0", "u-1", std::nullopt});
  EXPECT_EQ(r.method, "POST");
  EXPECT_EQ(r.path, "/api/v1/namespaces/team/pods/train-0/eviction");
  json body = json::parse(r.body);
  EXPECT_EQ(body["apiVersion"], "policy/v1");
  EXPECT_EQ(body["kind"], "Eviction");
  EXPECT_EQ(body["metadata"]["name"], "train-0");
  EXPECT_EQ(body["metadata"]["namespace"], "team");
  EXPECT_EQ(body["deleteOptions"]["preconditions"]["uid"], "u-1");
  // The pod's own grace period unless one is given.
  EXPECT_FALSE(body["deleteOptions"].contains("gracePeriodSeconds"));
  json quick = json::parse(ApiEvictor::EvictionRequest({"team", "p", "", 5}).body);
  EXPECT_EQ(quick["deleteOptions"]["gracePeriodSeconds"], 5);
  EXPECT_FALSE(quick["deleteOptions"].contains("preconditions"));
}

TEST(ApiEvictor, AnswersAreClassified) {
  HttpRequest req = ApiEvictor::EvictionRequest({"ns", "p", "u", std::nullopt});
  auto outcome = [&](long status, std::string body = "") {
    HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    return ApiEvictor::Classify(req, r);
  };
  EXPECT_EQ(outcome(201).outcome, EvictionOutcome::kEvicted);
  EXPECT_EQ(outcome(200).outcome, EvictionOutcome::kEvicted);
  EvictionResult budget = outcome(
      429,
      R"({"kind":"Status","reason":"TooManyRequests","message":"Cannot evict pod as it would violate the pod's disruption budget."})");
  EXPECT_EQ(budget.outcome, EvictionOutcome::kBudget);
  EXPECT_THAT(budget.message, HasSubstr("disruption budget"));
  EXPECT_EQ(outcome(404).outcome, EvictionOutcome::kGone);
  EXPECT_EQ(outcome(409).outcome, EvictionOutcome::kGone);
  EvictionResult denied = outcome(403, R"({"reason":"Forbidden","message":"no"})");
  EXPECT_EQ(denied.outcome, EvictionOutcome::kFailed);
  EXPECT_THAT(denied.message, HasSubstr("HTTP 403"));
  EXPECT_EQ(outcome(0).outcome, EvictionOutcome::kFailed);
}

}  // namespace
}  // namespace tessera::k8s
