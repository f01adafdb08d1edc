#include "records/queue.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::records {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(QueueRecord, ReadsEveryField) {
  absl::StatusOr<core::QueueSpec> q = QueueFromObject(json::parse(R"({
    "apiVersion": "tessera.dev/v1alpha1", "kind": "Queue",
    "metadata": {"name": "train", "resourceVersion": "7"},
    "spec": {"parent": "research", "weight": 3,
             "deserved": {"gpu": "2.5", "gpuMemory": "200Gi", "gpuCompute": 250},
             "limit": {"gpu": 8}},
    "status": {"anything": true}})"));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->name, "train");
  EXPECT_EQ(q->parent, "research");
  EXPECT_EQ(q->weight, 3);
  EXPECT_EQ(q->deserved[core::kQueueGpu], 2500);
  EXPECT_EQ(q->deserved[core::kQueueGpuMemory], 200 * 1024);
  EXPECT_EQ(q->deserved[core::kQueueGpuCompute], 2500);
  EXPECT_EQ(q->limit[core::kQueueGpu], 8000);
  EXPECT_FALSE(q->limit[core::kQueueGpuMemory].has_value());
  EXPECT_FALSE(q->limit[core::kQueueGpuCompute].has_value());
}

// spec.namespaces: which namespaces' pods may use the queue; each a namespace name.
TEST(QueueRecord, NamespacesThatMayUseTheQueue) {
  absl::StatusOr<core::QueueSpec> q = QueueFromObject(json::parse(
      R"({"metadata": {"name": "train"}, "spec": {"namespaces": ["team-a", "team-b"]}})"));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->namespaces, (std::vector<std::string>{"team-a", "team-b"}));
  auto open = QueueFromObject(json::parse(R"({"metadata": {"name": "q"}, "spec": {}})"));
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_TRUE(open->namespaces.empty());  // any namespace
  for (const char* bad : {R"("team-a")", R"([1])", R"(["Team"])", R"(["-a"])", R"([""])"}) {
    auto r = QueueFromObject(json::parse(
        std::string(R"({"metadata": {"name": "q"}, "spec": {"namespaces": )") + bad + "}}"));
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.status().message(), HasSubstr("Queue q.spec.namespaces")) << r.status();
  }
}

TEST(QueueRecord, DefaultsAndMilliGpus) {
  absl::StatusOr<core::QueueSpec> q = QueueFromObject(
      json::parse(R"({"metadata": {"name": "q"}, "spec": {"deserved": {"gpu": "500m"}}})"));
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->weight, 1);
  EXPECT_EQ(q->parent, "");
  EXPECT_EQ(q->deserved[core::kQueueGpu], 500);
  // No spec at all: a queue that deserves nothing and has no limit.
  absl::StatusOr<core::QueueSpec> bare =
      QueueFromObject(json::parse(R"({"metadata": {"name": "b"}})"));
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_FALSE(bare->deserved[core::kQueueGpu].has_value());
}

TEST(QueueRecord, ErrorsNameTheField) {
  auto error = [](const char* spec) {
    absl::StatusOr<core::QueueSpec> q = QueueSpecFromJson(json::parse(spec), "q", "queues[0].spec");
    EXPECT_FALSE(q.ok()) << spec;
    return std::string(q.status().message());
  };
  EXPECT_THAT(error(R"({"deserved": {"gpu": "six"}})"), HasSubstr("queues[0].spec.deserved.gpu"));
  EXPECT_THAT(error(R"({"deserved": {"gpus": 1}})"), HasSubstr("gpus"));
  EXPECT_THAT(error(R"({"limit": {"gpuMemory": -1}})"),
              HasSubstr("queues[0].spec.limit.gpuMemory: must not be negative"));
  EXPECT_THAT(error(R"({"weight": -2})"), HasSubstr("queues[0].spec.weight: must not be negative"));
  EXPECT_THAT(error(R"({"deserved": {"gpuCompute": "12.5"}})"), HasSubstr("gpuCompute"));
  EXPECT_THAT(error(R"({"parent": "q"})"), HasSubstr("cannot be its own parent"));
  EXPECT_THAT(error(R"({"deserved": {"gpu": [1]}})"), HasSubstr("expected a quantity"));
}

// The status is written in the spec's units: what `kubectl get queues` shows compares directly
// with deserved and limit, and reads back as the spec reads quantities.
TEST(QueueStatus, InTheSpecsUnits) {
  records::QueueStatus st;
  st.allocated = core::QueueResources::Of(2500, 200 * 1024, 2500);
  st.fair_share = core::QueueResources::Of(3000, 1536, 142);
  st.pending_pods = 4;
  const nlohmann::json j = QueueStatusJson(st);
  EXPECT_EQ(j["allocated"],
            (nlohmann::json{{"gpu", "2.5"}, {"gpuMemory", "200Gi"}, {"gpuCompute", "250"}}));
  EXPECT_EQ(j["fairShare"],
            (nlohmann::json{{"gpu", "3"}, {"gpuMemory", "1536Mi"}, {"gpuCompute", "14.2"}}));
  EXPECT_EQ(j["pending"]["gpu"], "0");
  EXPECT_EQ(j["pending"]["gpuMemory"], "0");
  EXPECT_EQ(j["pendingPods"], 4);
  EXPECT_TRUE(j.contains("message") && j["message"].is_null()) << "a past message is cleared";
  // Read back as a spec reads them.
  absl::StatusOr<core::QueueSpec> back =
      QueueSpecFromJson({{"deserved",
                          {{"gpu", j["allocated"]["gpu"]},
                           {"gpuMemory", j["allocated"]["gpuMemory"]},
                           {"gpuCompute", j["allocated"]["gpuCompute"]}}}},
                        "q", "status");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->deserved[core::kQueueGpu], 2500);
  EXPECT_EQ(back->deserved[core::kQueueGpuMemory], 200 * 1024);
  EXPECT_EQ(back->deserved[core::kQueueGpuCompute], 2500);
  EXPECT_EQ(QueueQuantity(core::kQueueGpu, 125), "0.125");
  EXPECT_EQ(QueueQuantity(core::kQueueGpu, -1500), "-1.5");

  records::QueueStatus bad;
  bad.message = "limit below deserved";
  const nlohmann::json b = QueueStatusJson(bad);
  EXPECT_EQ(b["message"], "limit below deserved");
  EXPECT_TRUE(b["allocated"].is_null());
}

TEST(QueueRecord, UsageRoundTripsThroughTheStatusPatch) {
  QueueUsageStatus u;
  u.queue = "train";
  u.usage = core::QueueResources::Of(3500, 286720, 3500);
  u.half_life_seconds = 3600;
  u.time_ms = 1'796'157'125'000;  // 2026-12-01T20:32:05Z
  const json patch = QueueUsagePatch(u);
  EXPECT_EQ(patch["status"]["usage"]["time"], "2026-12-01T20:32:05Z");
  json object = {{"metadata", {{"name", "train"}}}, {"spec", json::object()}};
  object["status"] = patch["status"];
  absl::StatusOr<std::optional<QueueUsageStatus>> read = QueueUsageFromObject(object);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  EXPECT_EQ(**read, u);
  // Milliseconds are dropped on the way out.
  u.time_ms += 999;
  EXPECT_EQ(QueueUsagePatch(u)["status"]["usage"]["time"], "2026-12-01T20:32:05Z");
}

TEST(QueueRecord, NoUsageOrUnreadableUsage) {
  absl::StatusOr<std::optional<QueueUsageStatus>> none =
      QueueUsageFromObject(json::parse(R"({"metadata": {"name": "q"}, "spec": {}})"));
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto error = [](const char* usage) {
    json o = {{"metadata", {{"name", "q"}}}, {"status", {{"usage", json::parse(usage)}}}};
    absl::StatusOr<std::optional<QueueUsageStatus>> u = QueueUsageFromObject(o);
    EXPECT_FALSE(u.ok()) << usage;
    return std::string(u.status().message());
  };
  EXPECT_THAT(error(R"({"gpuMilli": -1, "halfLifeSeconds": 60, "time": "2026-12-01T20:32:05Z"})"),
              HasSubstr("Queue q.status.usage.gpuMilli: must not be negative"));
  EXPECT_THAT(error(R"({"gpuMilli": 1, "halfLifeSeconds": 0, "time": "2026-12-01T20:32:05Z"})"),
              HasSubstr("halfLifeSeconds: must be positive"));
  EXPECT_THAT(error(R"({"gpuMilli": 1, "halfLifeSeconds": 60, "time": "yesterday"})"),
              HasSubstr("status.usage.time"));
  EXPECT_THAT(error(R"({"gpuMilli": 1, "time": "2026-12-01T20:32:05Z"})"),
              HasSubstr("halfLifeSeconds"));
}

}  // namespace
}  // namespace tessera::records
