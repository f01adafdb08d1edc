// Writes each queue's decayed usage (fair share that remembers, core/queues/usage_history.h) into
// its Queue object's status (records/queue.h: status.usage), so that a restarted scheduler orders
// queues as the one before it did (it reads the usage back, QueueBook::RestoreUsage), and
// `tessera status` shows it.
//
// The rate is bounded: at most one round per `interval` (queues.usageWriteInterval, default 60 s),
// and in a round only queues that exist as Queue objects (implicit queues have no object to write
// to) and whose figures changed since they were last written. With n Queue objects that is at
// most n patches per interval. What a round could not write (the API server refused) is written
// again in the next round; a scheduler that stops between rounds loses at most one interval of
// history, which the next one counts as the queue holding what it holds when it starts.
//
// Not thread-safe: the scheduler thread calls MaybeWrite; the sink hands the patch to the
// asynchronous writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "k8s/client/http.h"
#include "records/queue.h"

namespace tessera::k8s {

// The merge patch of Queue `usage.queue`'s status subresource that writes it.
HttpRequest QueueUsageRequest(const records::QueueUsageStatus& usage);

class QueueUsageWriter {
 public:
  // Writes one queue's status.usage; `done` is called with whether the write succeeded.
  using Sink = std::function<void(const records::QueueUsageStatus& usage,
                                  std::function<void(bool ok)> done)>;
  QueueUsageWriter(Sink sink, int64_t interval_ms);

  // A round, if `interval` has passed since the last one (the first call starts one): each of
  // `usage()` (asked only then) whose queue is an object (`is_object`) and whose figures differ
  // from the last write that succeeded is written. Returns how many writes were started.
  int MaybeWrite(int64_t now_ms,
                 const std::function<std::vector<records::QueueUsageStatus>()>& usage,
                 const std::function<bool(std::string_view queue)>& is_object);

 private:
  Sink sink_;
  int64_t interval_ms_;
  int64_t last_round_ms_ = INT64_MIN;
  // A write started and not yet harvested; `state` is set by the sink's callback, which may run
  // on another thread: 0 in flight, 1 written, 2 failed.
  struct Pending {
    records::QueueUsageStatus usage;
    std::shared_ptr<std::atomic<int>> state;
  };
  std::vector<Pending> pending_;
  // What was last written for each queue (usage and half-life; the time is not compared).
  absl::flat_hash_map<std::string, records::QueueUsageStatus> written_;
};

}  // namespace tessera::k8s
