#include "k8s/scheduler/queue_status.h"

#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

QueueStatusWriter::QueueStatusWriter(AsyncClient& client, QueueStatusOptions options)
    : client_(client), options_(options) {}

std::optional<records::QueueStatus> QueueStatusWriter::StatusOf(const QueueInfo& queue,
                                                                const QueueGauges* row) {
  records::QueueStatus st;
  if (!queue.error.empty()) {
    st.message = StrCat("the scheduler cannot use this Queue: ", queue.error);
    return st;
  }
  if (row == nullptr) return std::nullopt;
  st.allocated = row->allocated;
  st.fair_share = row->fair_share;
  st.borrowed = row->borrowed;
  st.pending = row->pending;
  st.pending_pods = row->pending_pods;
  return st;
}

HttpRequest QueueStatusWriter::Request(const std::string& queue,
                                       const records::QueueStatus& status) {
  const nlohmann::json patch = {{"status", records::QueueStatusJson(status)}};
  return HttpRequest{"PATCH", StrCat(records::kQueuesPath, "/", queue, "/status"), patch.dump(),
                     std::string(ContentTypeOf(PatchType::kMerge))};
}

void QueueStatusWriter::Update(const std::vector<std::shared_ptr<const QueueInfo>>& queues,
                               const std::vector<QueueGauges>& rows, TimePoint now) {
  {
    std::lock_guard<std::mutex> lock(inbox_->mu);
    for (const auto& [name, ok] : inbox_->done) {
      auto it = written_.find(name);
      if (it == written_.end()) continue;
      it->second.in_flight = false;
      it->second.failed = !ok;
    }
    inbox_->done.clear();
  }
  absl::flat_hash_map<std::string, const QueueGauges*> by_name;
  for (const QueueGauges& r : rows) by_name[r.queue] = &r;
  absl::flat_hash_map<std::string, Written> kept;
  for (const std::shared_ptr<const QueueInfo>& q : queues) {
    const std::string& name = q->spec.name;
    auto row = by_name.find(name);
    std::optional<records::QueueStatus> st =
        StatusOf(*q, row == by_name.end() ? nullptr : row->second);
    auto was = written_.find(name);
    if (was != written_.end()) kept[name] = was->second;
    if (!st) continue;
    if (was != written_.end() &&
        (was->second.in_flight || (!was->second.failed && was->second.status == *st) ||
         now - was->second.at < options_.min_interval)) {
      continue;
    }
    Written& w = kept[name];
    w.status = *st;
    w.at = now;
    w.in_flight = true;
    w.failed = false;
    HttpRequest req = Request(name, *st);
    client_.Submit(req, [inbox = inbox_, name, req](const HttpResponse& r) {
      // 404: the Queue was deleted meanwhile (the informer will say so).
      const bool ok = r.ok() || r.status == 404;
      if (!ok) {
        spdlog::warn("writing the status of queue {}: {}", name,
                     FromAbsl(StatusFromResponse(req, r).message()));
      }
      std::lock_guard<std::mutex> lock(inbox->mu);
      inbox->done.emplace_back(name, ok);
    });
  }
  written_ = std::move(kept);  // queues deleted are forgotten
}

}  // namespace tessera::k8s
