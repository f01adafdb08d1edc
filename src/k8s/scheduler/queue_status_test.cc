// The Queue status writer against a small local HTTP server that records the patches (the real
// API server and CRD: test/k8s/preemption_e2e_test.cc, QueuesStatus...).
#include "k8s/scheduler/queue_status.h"

#include <mutex>
#include <thread>

#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using std::chrono::seconds;

class QueueStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Patch(R"(/apis/tessera.dev/v1alpha1/queues/([a-z-]+)/status)",
                  [this](const httplib::Request& req, httplib::Response& res) {
                    std::lock_guard<std::mutex> lock(mu_);
                    patches_.emplace_back(req.matches[1], json::parse(req.body));
                    res.status = fail_ ? 500 : 200;
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
  }
  void TearDown() override {
    client_.reset();
    server_.stop();
    serving_.join();
  }
  // Drains the client, then returns and clears the patches received.
  std::vector<std::pair<std::string, json>> Patches() {
    EXPECT_TRUE(client_->Drain(std::chrono::seconds(10)));
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(patches_, {});
  }
  static std::shared_ptr<const QueueInfo> Queue(const std::string& name,
                                                const std::string& error = "") {
    auto q = std::make_shared<QueueInfo>();
    q->spec.name = name;
    q->error = error;
    return q;
  }
  static QueueGauges Row(const std::string& name, int64_t allocated_milli, int64_t pods) {
    QueueGauges g;
    g.queue = name;
    g.allocated = core::QueueResources::Of(allocated_milli, 0, 0);
    g.pending_pods = pods;
    return g;
  }

  httplib::Server server_;
  std::thread serving_;
  std::mutex mu_;
  bool fail_ = false;
  std::vector<std::pair<std::string, json>> patches_;
  std::unique_ptr<AsyncClient> client_;
};

// Queues with an object get their figures; implicit ones (no object) are not written; a row that
// has not changed is not written again; a changed one waits for min_interval.
TEST_F(QueueStatusTest, WritesChangesOfExistingQueuesAtMostEveryInterval) {
  QueueStatusWriter w(*client_, QueueStatusOptions{std::chrono::milliseconds(5000)});
  const auto t0 = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  w.Update({Queue("team-a")}, {Row("team-a", 1500, 1), Row("default", 500, 0)}, t0);
  auto patches = Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].first, "team-a");
  EXPECT_EQ(patches[0].second["status"]["allocated"]["gpu"], "1.5");
  EXPECT_EQ(patches[0].second["status"]["pendingPods"], 1);

  w.Update({Queue("team-a")}, {Row("team-a", 1500, 1)}, t0 + seconds(1));
  EXPECT_TRUE(Patches().empty()) << "unchanged";
  w.Update({Queue("team-a")}, {Row("team-a", 2500, 0)}, t0 + seconds(3));
  EXPECT_TRUE(Patches().empty()) << "changed, but within 5 s of the last write";
  w.Update({Queue("team-a")}, {Row("team-a", 2500, 0)}, t0 + seconds(6));
  patches = Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].second["status"]["allocated"]["gpu"], "2.5");
  EXPECT_EQ(patches[0].second["status"]["pendingPods"], 0);
}

// A Queue the scheduler cannot use says why; a failed write is made again.
TEST_F(QueueStatusTest, UnusableQueuesSayWhyAndFailedWritesAreRetried) {
  QueueStatusWriter w(*client_, QueueStatusOptions{std::chrono::milliseconds(0)});
  const auto t0 = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  fail_ = true;
  w.Update({Queue("broken", "spec.limit.gpu: below deserved")}, {}, t0);
  auto patches = Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_THAT(patches[0].second["status"]["message"].get<std::string>(),
              ::testing::HasSubstr("spec.limit.gpu: below deserved"));
  EXPECT_TRUE(patches[0].second["status"]["allocated"].is_null());
  fail_ = false;
  w.Update({Queue("broken", "spec.limit.gpu: below deserved")}, {}, t0 + seconds(1));
  EXPECT_EQ(Patches().size(), 1u) << "written again after the failure";
  w.Update({Queue("broken", "spec.limit.gpu: below deserved")}, {}, t0 + seconds(2));
  EXPECT_TRUE(Patches().empty()) << "written, unchanged";
}

}  // namespace
}  // namespace tessera::k8s
