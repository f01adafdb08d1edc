#include "k8s/scheduler/queue_book.h"

#include <algorithm>
#include <chrono>

namespace tessera::k8s {

QueueBook::QueueBook()
    : clock_([] {
        return static_cast<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
      }) {}

void QueueBook::Tick() {
  if (set_.half_life_ms() > 0) set_.AdvanceTo(clock_());
}

bool QueueBook::RestoreUsage(const records::QueueUsageStatus& usage) {
  Tick();
  return set_.RestoreUsage(usage.queue, usage.usage, usage.time_ms);
}

std::vector<records::QueueUsageStatus> QueueBook::UsageNow() {
  Tick();
  std::vector<records::QueueUsageStatus> out;
  for (const core::QueueSet::UsageRecord& r : set_.UsageRecords()) {
    out.push_back(records::QueueUsageStatus{r.queue, r.usage, set_.half_life_ms() / 1000, r.at_ms});
  }
  return out;
}

void QueueBook::SetSpecs(std::vector<core::QueueSpec> specs, bool known) {
  set_.set_implicit(!known || specs.empty());
  set_.SetSpecs(std::move(specs));
}

void QueueBook::SetCluster(const core::Cluster& cluster) {
  set_.SetCapacity(core::CapacityOf(cluster));
  int64_t largest = 0;
  for (int n = 0; n < cluster.node_count(); ++n) {
    if (!cluster.live(core::NodeId(n))) continue;
    for (const core::GpuSpec& g : cluster.node(core::NodeId(n)).gpus) {
      largest = std::max(largest, g.memory_mib);
    }
  }
  largest_gpu_mib_ = largest;
}

core::QueueResources QueueBook::DemandOf(const core::PodRequest& request) const {
  return core::DemandOf(request, largest_gpu_mib_ > 0 ? largest_gpu_mib_ : 1);
}

void QueueBook::Held(const std::string& key, const std::string& queue,
                     const core::QueueResources& usage) {
  auto it = held_.find(key);
  if (it != held_.end()) {
    if (it->second.queue == queue && it->second.amount == usage) return;
  }
  Tick();  // what was held until now counts before the change
  const std::string ns(key.substr(0, key.find('/')));
  if (it != held_.end()) {
    if (!it->second.amount.zero()) {
      set_.SubAllocated(it->second.queue, it->second.amount);
      if (auto n = by_namespace_.find(ns); n != by_namespace_.end()) {
        n->second -= it->second.amount;
        if (n->second.zero()) by_namespace_.erase(n);
      }
    }
    held_.erase(it);
  }
  if (queue.empty()) return;
  if (!usage.zero()) {
    set_.AddAllocated(queue, usage);
    by_namespace_[ns] += usage;
  }
  held_.emplace(key, Counted{queue, usage});
}

std::vector<NamespaceGauges> QueueBook::Namespaces() const {
  std::vector<NamespaceGauges> out;
  out.reserve(by_namespace_.size());
  for (const auto& [name, allocated] : by_namespace_) out.push_back({name, allocated});
  std::sort(out.begin(), out.end(),
            [](const NamespaceGauges& a, const NamespaceGauges& b) { return a.name < b.name; });
  return out;
}

void QueueBook::Waiting(const std::string& key, const std::string& queue,
                        const core::PodRequest* request) {
  auto it = waiting_.find(key);
  if (request != nullptr && it != waiting_.end() && it->second.queue == queue &&
      it->second.amount == DemandOf(*request)) {
    return;
  }
  if (it != waiting_.end()) {
    set_.SubPending(it->second.queue, it->second.amount, 1);
    waiting_.erase(it);
  }
  if (request == nullptr || queue.empty()) return;
  const core::QueueResources demand = DemandOf(*request);
  set_.AddPending(queue, demand, 1);
  waiting_.emplace(key, Counted{queue, demand});
}

void QueueBook::Forget(const std::string& key) {
  Held(key, "", {});
  Waiting(key, "", nullptr);
}

std::vector<std::string> QueueBook::HeldKeys() const {
  std::vector<std::string> out;
  out.reserve(held_.size());
  for (const auto& [key, c] : held_) out.push_back(key);
  return out;
}

std::vector<QueueGauges> QueueBook::Gauges() {
  std::vector<QueueGauges> out;
  Tick();
  for (const core::QueueSet::Report& r : set_.Snapshot()) {
    QueueGauges g;
    g.queue = r.name;
    g.parent = r.parent;
    g.usable = r.invalid.empty();
    g.deserved = r.deserved;
    g.fair_share = r.fair_share;
    g.allocated = r.allocated;
    g.borrowed = r.borrowed;
    g.pending = r.pending;
    g.usage = r.usage;
    g.pending_pods = r.pending_pods;
    out.push_back(std::move(g));
  }
  return out;
}

std::string QueueBook::Refusal(std::span<const PodInfo* const> pods) {
  if (pods.empty()) return "";
  const std::string& queue = pods[0]->queue;
  std::string why;
  if (!set_.Usable(queue, &why)) return why;
  for (const PodInfo* p : pods) {
    if (!set_.Admits(queue, p->ns, &why)) return why;
  }
  core::QueueResources demand;
  for (const PodInfo* p : pods) demand += DemandOf(p->request);
  return set_.OverLimit(queue, demand);
}

}  // namespace tessera::k8s
