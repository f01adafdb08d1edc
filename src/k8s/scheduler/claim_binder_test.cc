#include "k8s/scheduler/claim_binder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <thread>

#include "common/strings.h"
#include "httplib.h"
#include "k8s/dra/planner.h"
#include "k8s/testing/dra_objects.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using testing::ClaimObject;
using ::testing::HasSubstr;

PodInfo Pod() {
  PodInfo p;
  p.ns = "ns";
  p.name = "p";
  p.uid = "uid-p";
  p.key = "ns/p";
  return p;
}

TEST(ClaimBinder, TheFinalizerGoesOnceWithTheResourceVersion) {
  auto claim = dra::DecodeClaim(
      ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").ResourceVersion("41").Json());
  std::optional<HttpRequest> r = ClaimBinder::FinalizerRequest(*claim);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->method, "PATCH");
  EXPECT_EQ(r->path, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c");
  json body = json::parse(r->body);
  EXPECT_EQ(body["metadata"]["resourceVersion"], "41");
  EXPECT_EQ(body["metadata"]["finalizers"],
            json::array({"resource.kubernetes.io/delete-protection"}));
  json with = ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").Json();
  with["metadata"]["finalizers"] = {"resource.kubernetes.io/delete-protection"};
  EXPECT_FALSE(ClaimBinder::FinalizerRequest(*dra::DecodeClaim(with)));
}

TEST(ClaimBinder, AnAllocationIsWrittenWithItsReservationUnderTheResourceVersion) {
  auto claim = dra::DecodeClaim(ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").Json());
  json allocation = {{"devices", {{"results", json::array()}}},
                     {"nodeSelector", dra::NodeSelectorFor("n1")}};
  HttpRequest r = ClaimBinder::StatusRequest(*claim, "42", Pod(), ClaimWrite{claim, allocation});
  EXPECT_EQ(r.path, "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c/status");
  EXPECT_EQ(r.content_type, ContentTypeOf(PatchType::kMerge));
  json body = json::parse(r.body);
  EXPECT_EQ(body["metadata"]["resourceVersion"], "42");
  EXPECT_EQ(body["status"]["allocation"], allocation);
  EXPECT_EQ(body["status"]["reservedFor"],
            json::array({{{"resource", "pods"}, {"name", "p"}, {"uid", "uid-p"}}}));
}

TEST(ClaimBinder, ASharedClaimIsReservedByAppendingAfterTestingItsAllocation) {
  auto claim =
      dra::DecodeClaim(ClaimObject("ns", "c")
                           .Request("gpu", "gpu.tessera.dev")
                           .Uid("uid-c")
                           .Allocated("n1", json::array({testing::Result("gpu", "n1", "gpu-0")}))
                           .ReservedFor("other", "uid-o")
                           .Json());
  HttpRequest r = ClaimBinder::StatusRequest(*claim, "43", Pod(), ClaimWrite{claim, nullptr});
  EXPECT_EQ(r.content_type, ContentTypeOf(PatchType::kJson));
  json ops = json::parse(r.body);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0], (json{{"op", "test"}, {"path", "/metadata/uid"}, {"value", "uid-c"}}));
  EXPECT_EQ(ops[1]["path"], "/status/allocation/nodeSelector");
  EXPECT_EQ(ops[1]["value"], dra::NodeSelectorFor("n1"));
  EXPECT_EQ(ops[2]["op"], "add");
  EXPECT_EQ(ops[2]["path"], "/status/reservedFor/-");
  EXPECT_EQ(ops[2]["value"]["uid"], "uid-p");
}

TEST(ClaimBinder, TheExtendedResourceClaimIsNamedInThePodsStatus) {
  auto claim = dra::DecodeClaim(ClaimObject("ns", "p-extended-resources-x2b4z").Json());
  json mappings = json::array({{{"containerName", "main"},
                                {"resourceName", "tessera.dev/gpu"},
                                {"requestName", "container-0-request-0"}}});
  HttpRequest r = ClaimBinder::PodStatusRequest(Pod(), *claim, mappings);
  EXPECT_EQ(r.method, "PATCH");
  EXPECT_EQ(r.path, "/api/v1/namespaces/ns/pods/p/status");
  EXPECT_EQ(r.content_type, ContentTypeOf(PatchType::kMerge));
  json body = json::parse(r.body);
  EXPECT_EQ(body["status"]["extendedResourceClaimStatus"]["resourceClaimName"],
            "p-extended-resources-x2b4z");
  EXPECT_EQ(body["status"]["extendedResourceClaimStatus"]["requestMappings"], mappings);
}

// ClaimBinder::Bind against a small local HTTP server that answers as the API server does (the
// real one: test/k8s/dra_e2e_test.cc): the DRA allocation counter goes up for each allocation
// written, not for a reservation of a claim allocated already nor for a write refused.
class ClaimBinderServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string claims = "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/([a-z0-9-]+)";
    server_.Patch(claims, [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"metadata": {"resourceVersion": "50"}})", "application/json");
    });
    server_.Patch(claims + "/status", [this](const httplib::Request& req, httplib::Response& res) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        status_patches_.push_back(StrCat(std::string(req.matches[1]), " ", req.body));
      }
      res.status = req.matches[1] == "refused" ? 409 : 200;
      res.set_content(R"({"metadata": {"resourceVersion": "60"}})", "application/json");
    });
    server_.Post("/api/v1/namespaces/ns/pods/p/binding",
                 [](const httplib::Request&, httplib::Response& res) {
                   res.status = 201;
                   res.set_content("{}", "application/json");
                 });
    const int port = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port, 0);
    serving_ = std::thread([this] { server_.listen_after_bind(); });
    ClientConfig config;
    config.server = StrCat("http://127.0.0.1:", port);
    absl::StatusOr<std::shared_ptr<Transport>> transport = Transport::Create(config, "test");
    ASSERT_TRUE(transport.ok()) << transport.status();
    AsyncClientOptions options;
    options.http2 = false;
    options.max_attempts = 1;
    client_ = std::make_unique<AsyncClient>(*transport, options);
    binder_ = std::make_unique<ClaimBinder>(
        *client_,
        [this](const std::string&, uint64_t, absl::Status status) {
          done_.set_value(std::move(status));
        },
        &metrics_);
  }
  void TearDown() override {
    binder_.reset();
    client_.reset();
    server_.stop();
    serving_.join();
  }
  // Binds pod ns/p with `writes` and waits for the outcome.
  absl::Status Bind(ClaimWrite write) { return Bind(std::vector<ClaimWrite>{std::move(write)}); }
  absl::Status Bind(std::vector<ClaimWrite> writes, bool release_on_failure = false) {
    done_ = std::promise<absl::Status>();
    std::future<absl::Status> outcome = done_.get_future();
    binder_->Bind(Pod(), "n1", std::move(writes), 1, release_on_failure);
    if (outcome.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
      return absl::DeadlineExceededError("no answer");
    }
    return outcome.get();
  }

  // "<claim> <body>" of every status patch, in order.
  std::vector<std::string> StatusPatches() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_patches_;
  }

  std::mutex mu_;
  std::vector<std::string> status_patches_;
  httplib::Server server_;
  std::thread serving_;
  SchedulerMetrics metrics_;
  std::unique_ptr<AsyncClient> client_;
  std::unique_ptr<ClaimBinder> binder_;
  std::promise<absl::Status> done_;
};

TEST_F(ClaimBinderServerTest, CountsEachAllocationWritten) {
  const json allocation = {{"devices", {{"results", json::array()}}},
                           {"nodeSelector", dra::NodeSelectorFor("n1")}};
  auto fresh = dra::DecodeClaim(
      ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").ResourceVersion("41").Json());
  EXPECT_TRUE(Bind(ClaimWrite{fresh, allocation}).ok());
  EXPECT_EQ(metrics_.dra_allocations.load(), 1);

  // A claim allocated already (shared): only reserved, no allocation written.
  auto shared =
      dra::DecodeClaim(ClaimObject("ns", "shared")
                           .Request("gpu", "gpu.tessera.dev")
                           .Uid("uid-s")
                           .Allocated("n1", json::array({testing::Result("gpu", "n1", "gpu-0")}))
                           .Json());
  EXPECT_TRUE(Bind(ClaimWrite{shared, nullptr}).ok());
  EXPECT_EQ(metrics_.dra_allocations.load(), 1);

  // The API server refuses the allocation (the claim changed meanwhile): nothing written.
  auto refused = dra::DecodeClaim(
      ClaimObject("ns", "refused").Request("gpu", "gpu.tessera.dev").ResourceVersion("7").Json());
  absl::Status st = Bind(ClaimWrite{refused, allocation});
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(metrics_.dra_allocations.load(), 1);

  // A gang member's attempt that fails at its second claim takes back the first's allocation
  // (under the resourceVersion its write returned), so that the gang is allocated again together;
  // a lone pod's keeps it (its retry only binds).
  for (bool gang : {true, false}) {
    SCOPED_TRACE(gang);
    const size_t before = StatusPatches().size();
    auto first = dra::DecodeClaim(
        ClaimObject("ns", "first").Request("gpu", "gpu.tessera.dev").ResourceVersion("3").Json());
    st = Bind({ClaimWrite{first, allocation}, ClaimWrite{refused, allocation}}, gang);
    EXPECT_FALSE(st.ok());
    const std::string release =
        R"(first {"metadata":{"resourceVersion":"60"},"status":{"allocation":null,"reservedFor":null}})";
    std::vector<std::string> patches;
    for (int i = 0; i < 100; ++i) {  // the release is sent after the outcome
      patches = StatusPatches();
      patches.erase(patches.begin(), patches.begin() + static_cast<ptrdiff_t>(before));
      if (!gang || patches.size() >= 3) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_GE(patches.size(), 2u);
    EXPECT_TRUE(patches[0].starts_with("first ")) << patches[0];
    EXPECT_TRUE(patches[1].starts_with("refused ")) << patches[1];
    if (gang) {
      ASSERT_EQ(patches.size(), 3u);
      EXPECT_EQ(patches[2], release);
    } else {
      EXPECT_EQ(patches.size(), 2u);
    }
  }

  // The counter as /metrics renders it.
  EXPECT_THAT(metrics_.Render(), HasSubstr("tessera_scheduler_dra_allocations_total 3\n"));
}

}  // namespace
}  // namespace tessera::k8s
