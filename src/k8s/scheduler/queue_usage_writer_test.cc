#include "k8s/scheduler/queue_usage_writer.h"

#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

records::QueueUsageStatus Usage(std::string queue, int64_t gpu_milli, int64_t at_ms) {
  return records::QueueUsageStatus{std::move(queue), core::QueueResources::Of(gpu_milli, 0, 0),
                                   3600, at_ms};
}

std::function<std::vector<records::QueueUsageStatus>()> Of(
    const std::vector<records::QueueUsageStatus>& usage) {
  return [&usage] { return usage; };
}

struct Sink {
  std::vector<records::QueueUsageStatus> writes;
  std::vector<std::function<void(bool)>> done;
  QueueUsageWriter::Sink Get() {
    return [this](const records::QueueUsageStatus& u, std::function<void(bool)> d) {
      writes.push_back(u);
      done.push_back(std::move(d));
    };
  }
};

TEST(QueueUsageWriterTest, AtMostOneRoundPerIntervalOnlyObjectsOnlyChanges) {
  Sink sink;
  QueueUsageWriter w(sink.Get(), 60'000);
  auto objects = [](std::string_view q) { return q != "implicit"; };
  std::vector<records::QueueUsageStatus> now = {Usage("a", 1500, 0), Usage("b", 0, 0),
                                                Usage("implicit", 700, 0)};
  EXPECT_EQ(w.MaybeWrite(0, Of(now), objects), 2);  // a and b; implicit has no object
  for (auto& d : sink.done) d(true);
  now[0].time_ms = now[1].time_ms = 30'000;
  now[0].usage[core::kQueueGpu] = 1600;
  EXPECT_EQ(w.MaybeWrite(30'000, Of(now), objects), 0);  // within the interval
  EXPECT_EQ(w.MaybeWrite(60'000, Of(now), objects), 1);  // a changed, b did not
  EXPECT_EQ(sink.writes.back().queue, "a");
  EXPECT_EQ(sink.writes.back().usage[core::kQueueGpu], 1600);
}

TEST(QueueUsageWriterTest, AFailedWriteIsRetriedAndOneInFlightIsNotDoubled) {
  Sink sink;
  QueueUsageWriter w(sink.Get(), 1000);
  auto objects = [](std::string_view) { return true; };
  std::vector<records::QueueUsageStatus> now = {Usage("a", 1500, 0)};
  EXPECT_EQ(w.MaybeWrite(0, Of(now), objects), 1);
  EXPECT_EQ(w.MaybeWrite(1000, Of(now), objects), 0);  // still in flight
  sink.done[0](false);
  EXPECT_EQ(w.MaybeWrite(2000, Of(now), objects), 1);  // failed: written again
  sink.done[1](true);
  EXPECT_EQ(w.MaybeWrite(3000, Of(now), objects), 0);  // written, unchanged
}

TEST(QueueUsageWriterTest, TheRequestPatchesTheStatusSubresource) {
  const HttpRequest req = QueueUsageRequest(Usage("train", 1500, 1'796'157'125'000));
  EXPECT_EQ(req.method, "PATCH");
  EXPECT_EQ(req.path, "/apis/tessera.dev/v1alpha1/queues/train/status");
  EXPECT_EQ(req.content_type, "application/merge-patch+json");
  EXPECT_EQ(nlohmann::json::parse(req.body)["status"]["usage"]["gpuMilli"], 1500);
}

}  // namespace
}  // namespace tessera::k8s
