// Writes each Queue's status (queues.tessera.dev/v1alpha1, .status through the status
// subresource) from what the scheduler accounts: allocated, fair share, borrowed, pending and
// pending pods (records/queue.h has the format), so that `kubectl get queues` answers without
// Prometheus. The leader writes; the others never do.
//
// What is written: for each Queue object that exists (implicit queues such as `default` without
// an object have nowhere to be written), its figures from the queue book (QueueGauges, the same
// rows /metrics serves), or, for a Queue the scheduler cannot use, why. A queue is written when
// its status differs from what this writer last wrote for it, and at most once per
// `min_interval`; a failed write is tried again at the next Update after `min_interval`. A
// merge patch of /status: fields added by others (or by a newer scheduler) are left as they are.
//
// Worked example: a Queue `team-a` whose two pods hold 1.5 GPUs and whose third waits for one:
//   status: {allocated: {gpu: "1.5", ...}, pending: {gpu: "1", ...}, pendingPods: 1, ...}
// The third pod binds: allocated.gpu "2.5", pending.gpu "0", pendingPods 0, written at the next
// Update at least min_interval after the first write.
//
// Not thread-safe: the scheduler thread calls Update; write results come back on the client's
// thread into a guarded inbox.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "k8s/client/http.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/preemption.h"
#include "records/queue.h"

namespace tessera::k8s {

struct QueueStatusOptions {
  std::chrono::milliseconds min_interval{5'000};
};

class QueueStatusWriter {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  QueueStatusWriter(AsyncClient& client, QueueStatusOptions options = {});

  // The Queue objects as the informer has them, and the book's rows (SchedulerMetrics::queues()).
  void Update(const std::vector<std::shared_ptr<const QueueInfo>>& queues,
              const std::vector<QueueGauges>& rows, TimePoint now);

  // The status a queue gets from its object and row (nullopt: nothing to write yet).
  static std::optional<records::QueueStatus> StatusOf(const QueueInfo& queue,
                                                      const QueueGauges* row);
  static HttpRequest Request(const std::string& queue, const records::QueueStatus& status);

 private:
  struct Written {
    records::QueueStatus status;
    TimePoint at;
    bool in_flight = false;
    bool failed = false;  // the last write failed: write again
  };
  struct Inbox {
    std::mutex mu;
    std::vector<std::pair<std::string, bool>> done;  // queue, written
  };

  AsyncClient& client_;
  QueueStatusOptions options_;
  absl::flat_hash_map<std::string, Written> written_;
  std::shared_ptr<Inbox> inbox_ = std::make_shared<Inbox>();
};

}  // namespace tessera::k8s
