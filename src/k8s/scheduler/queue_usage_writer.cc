#include "k8s/scheduler/queue_usage_writer.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::k8s {

HttpRequest QueueUsageRequest(const records::QueueUsageStatus& usage) {
  return HttpRequest{"PATCH", StrCat(records::kQueuesPath, "/", usage.queue, "/status"),
                     records::QueueUsagePatch(usage).dump(),
                     std::string(ContentTypeOf(PatchType::kMerge))};
}

QueueUsageWriter::QueueUsageWriter(Sink sink, int64_t interval_ms)
    : sink_(std::move(sink)), interval_ms_(std::max<int64_t>(1, interval_ms)) {}

int QueueUsageWriter::MaybeWrite(
    int64_t now_ms, const std::function<std::vector<records::QueueUsageStatus>()>& usage,
    const std::function<bool(std::string_view queue)>& is_object) {
  // Writes that finished: the ones that succeeded are what the objects now say.
  absl::flat_hash_map<std::string, bool> in_flight;
  std::erase_if(pending_, [&](const Pending& p) {
    const int state = p.state->load();
    if (state == 0) {
      in_flight[p.usage.queue] = true;
      return false;
    }
    if (state == 1) written_[p.usage.queue] = p.usage;
    return true;
  });
  if (last_round_ms_ != INT64_MIN && now_ms - last_round_ms_ < interval_ms_) return 0;
  last_round_ms_ = now_ms;
  int started = 0;
  for (const records::QueueUsageStatus& u : usage()) {
    if (!is_object(u.queue) || in_flight.contains(u.queue)) continue;
    auto it = written_.find(u.queue);
    if (it != written_.end() && it->second.usage == u.usage &&
        it->second.half_life_seconds == u.half_life_seconds) {
      continue;
    }
    auto state = std::make_shared<std::atomic<int>>(0);
    pending_.push_back(Pending{u, state});
    sink_(u, [state](bool ok) { state->store(ok ? 1 : 2); });
    ++started;
  }
  return started;
}

}  // namespace tessera::k8s
