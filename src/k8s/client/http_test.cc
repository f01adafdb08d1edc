// What can be checked of the HTTP layer without the API server: how answers become statuses,
// escaping, request bodies, and the AsyncClient's order of requests against a small local HTTP
// server. Real exchanges are in client_e2e_test.cc against the real API server.
#include "k8s/client/http.h"

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

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

// A chain's next step (Lane::kNext) starts before first steps that were waiting longer.
TEST(AsyncClient, NextLaneStartsBeforeWaitingFirstRequests) {
  httplib::Server server;
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::vector<std::string> order;
  server.Get("/gate", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return open; });
    res.set_content("{}", "application/json");
  });
  server.Get(R"(/step/(\w+))", [&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu);
    order.push_back(req.matches[1]);
    res.set_content("{}", "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  {
    ClientConfig config;
    config.server = StrCat("http://127.0.0.1:", port);
    absl::StatusOr<std::shared_ptr<Transport>> transport = Transport::Create(config, "test");
    ASSERT_TRUE(transport.ok()) << transport.status();
    AsyncClientOptions options;
    options.max_in_flight = 1;  // one at a time: the order is the client's
    options.http2 = false;
    AsyncClient client(*transport, options);
    std::atomic<int> done{0};
    auto count = [&](const HttpResponse& r) {
      EXPECT_TRUE(r.ok()) << r.status << " " << r.error;
      ++done;
    };
    client.Submit(HttpRequest{"GET", "/gate", "", ""}, count);
    // Queued behind the gate, in this order.
    client.Submit(HttpRequest{"GET", "/step/first1", "", ""}, count);
    client.Submit(HttpRequest{"GET", "/step/first2", "", ""}, count);
    client.Submit(HttpRequest{"GET", "/step/next1", "", ""}, count, AsyncClient::Lane::kNext);
    client.Submit(HttpRequest{"GET", "/step/first3", "", ""}, count);
    client.Submit(HttpRequest{"GET", "/step/next2", "", ""}, count, AsyncClient::Lane::kNext);
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
    EXPECT_TRUE(client.Drain(std::chrono::seconds(10)));
    EXPECT_EQ(done.load(), 6);
  }
  server.stop();
  serving.join();
  EXPECT_EQ(order, (std::vector<std::string>{"next1", "next2", "first1", "first2", "first3"}));
}

// Every attempt through a transport is counted by verb and answer, retries included, from the
// synchronous client and the asynchronous one alike; a request nobody answers counts as "none".
TEST(RequestCounts, CountsEveryAttemptByVerbAndCode) {
  httplib::Server server;
  std::atomic<int> flaky{0};
  server.Get("/ok", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("{}", "application/json");
  });
  server.Get("/missing", [](const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content("{}", "application/json");
  });
  server.Patch("/flaky", [&](const httplib::Request&, httplib::Response& res) {
    res.status = ++flaky < 3 ? 503 : 200;
    res.set_content("{}", "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  ClientConfig config;
  config.server = StrCat("http://127.0.0.1:", port);
  ApiClientOptions options;
  options.backoff.initial = std::chrono::milliseconds(1);
  absl::StatusOr<std::unique_ptr<ApiClient>> client = ApiClient::Create(config, options);
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_TRUE((*client)->Get("/ok").ok());
  EXPECT_FALSE((*client)->Get("/missing").ok());
  EXPECT_TRUE((*client)->Patch("/flaky", PatchType::kMerge, nlohmann::json::object()).ok());
  {
    AsyncClientOptions ao;
    ao.http2 = false;
    AsyncClient async((*client)->transport(), ao);
    async.Submit(HttpRequest{"GET", "/ok", "", ""}, [](const HttpResponse&) {});
    EXPECT_TRUE(async.Drain(std::chrono::seconds(10)));
  }
  server.stop();
  serving.join();
  ClientConfig nobody;
  nobody.server = StrCat("http://127.0.0.1:", port);
  ApiClientOptions once;
  once.max_attempts = 1;
  absl::StatusOr<std::unique_ptr<ApiClient>> unanswered = ApiClient::Create(nobody, once);
  ASSERT_TRUE(unanswered.ok());
  EXPECT_FALSE((*unanswered)->Delete("/gone").ok());

  const RequestCounts& counts = (*client)->transport()->requests();
  EXPECT_EQ(counts.Get("GET", 200), 2);
  EXPECT_EQ(counts.Get("GET", 404), 1);
  EXPECT_EQ(counts.Get("PATCH", 503), 2);
  EXPECT_EQ(counts.Get("PATCH", 200), 1);
  prometheus::Exposition out;
  (*unanswered)->transport()->requests().Write(out, "tessera_test_api_requests_total");
  EXPECT_THAT(out.text(),
              HasSubstr("tessera_test_api_requests_total{verb=\"DELETE\",code=\"none\"} 1\n"));
}

}  // namespace
}  // namespace tessera::k8s
