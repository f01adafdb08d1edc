// What can be checked of the HTTP layer without a server: how answers become statuses, escaping,
// request bodies. Real exchanges are in client_e2e_test.cc against the real API server.
#include "k8s/client/http.h"

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

TEST(StatusFromResponse, MapsHttpStatusAndKeepsTheServersReasonAndMessage) {
  HttpRequest req{"POST", "/api/v1/namespaces/a/pods/p/binding"};
  HttpResponse conflict{409, R"({"kind":"Status","status":"Failure","message":"pod p is already
 assigned to node \"n1\"","reason":"Conflict","code":409})"};
  conflict.body.erase(std::remove(conflict.body.begin(), conflict.body.end(), '\n'),
                      conflict.body.end());
  absl::Status s = StatusFromResponse(req, conflict);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(HttpStatusOf(s), 409);
  EXPECT_EQ(ReasonOf(s), "Conflict");
  EXPECT_THAT(std::string(FromAbsl(s.message())),
              HasSubstr("POST /api/v1/namespaces/a/pods/p/binding: HTTP 409 Conflict: pod p is "
                        "already assigned"));

  HttpResponse exists{409, R"({"kind":"Status","reason":"AlreadyExists","code":409})"};
  EXPECT_EQ(StatusFromResponse(req, exists).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(StatusFromResponse(req, HttpResponse{404, "{}"}).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(StatusFromResponse(req, HttpResponse{410, "{}"}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(StatusFromResponse(req, HttpResponse{403, "{}"}).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromResponse(req, HttpResponse{503, "not json"}).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(StatusFromResponse(req, HttpResponse{201, ""}).ok());
  HttpResponse down;
  down.error = "Connection refused";
  absl::Status d = StatusFromResponse(req, down);
  EXPECT_EQ(d.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(HttpStatusOf(d), 0);
  EXPECT_THAT(std::string(FromAbsl(d.message())), HasSubstr("Connection refused"));
}

TEST(IsTransient, RetriesOnlyWhatMaySucceedLater) {
  EXPECT_TRUE(IsTransient(HttpResponse{0, ""}));
  for (long code : {429, 500, 502, 503, 504}) EXPECT_TRUE(IsTransient(HttpResponse{code, ""}));
  for (long code : {200, 201, 400, 403, 404, 409, 410, 422}) {
    EXPECT_FALSE(IsTransient(HttpResponse{code, ""})) << code;
  }
}

TEST(QueryEscape, EscapesSelectors) {
  EXPECT_EQ(QueryEscape("spec.nodeName="), "spec.nodeName%3D");
  EXPECT_EQ(QueryEscape("a=b,c!=d"), "a%3Db%2Cc%21%3Dd");
  EXPECT_EQ(QueryEscape("tessera.dev/gpu"), "tessera.dev%2Fgpu");
}

TEST(BindingBody, CarriesTheAnnotationsTheApiServerCopiesOntoThePod) {
  nlohmann::json b =
      BindingBody("ns", "p", "uid-1", "node-a", {{"tessera.dev/assignment", "{\"version\":1}"}});
  EXPECT_EQ(b["kind"], "Binding");
  EXPECT_EQ(b["metadata"]["name"], "p");
  EXPECT_EQ(b["metadata"]["uid"], "uid-1");
  EXPECT_EQ(b["metadata"]["annotations"]["tessera.dev/assignment"], "{\"version\":1}");
  EXPECT_EQ(b["target"]["kind"], "Node");
  EXPECT_EQ(b["target"]["name"], "node-a");
  EXPECT_FALSE(BindingBody("ns", "p", "", "n", nullptr)["metadata"].contains("annotations"));
  EXPECT_FALSE(BindingBody("ns", "p", "", "n", nullptr)["metadata"].contains("uid"));
}

TEST(PatchTypes, ContentTypes) {
  EXPECT_EQ(ContentTypeOf(PatchType::kMerge), "application/merge-patch+json");
  EXPECT_EQ(ContentTypeOf(PatchType::kStrategic), "application/strategic-merge-patch+json");
  EXPECT_EQ(ContentTypeOf(PatchType::kJson), "application/json-patch+json");
}

}  // namespace
}  // namespace tessera::k8s
