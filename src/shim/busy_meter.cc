#include "shim/busy_meter.h"

#include <algorithm>
#include <utility>

#include "shim/compute_gate.h"

namespace tessera::shim {

uint64_t BusyMeter::Sync(int64_t call_ns, int64_t done_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (launches_ == 0) return 0;
  if (done_ns - call_ns <= ComputeGate::kIdleSyncNs) return CloseIdleLocked(call_ns);
  // Busy: they ran from the first of them until the sync returned.
  const int64_t took = std::max<int64_t>(done_ns - first_ns_, 0);
  cost_ns_ = std::max<int64_t>(took / std::exchange(launches_, 0), 1);
  return static_cast<uint64_t>(took);
}

uint64_t BusyMeter::CloseIdleLocked(int64_t call_ns) {
  // Done before the call; at most call - first, estimated at the learnt cost.
  const int64_t launches = std::exchange(launches_, 0);
  const int64_t most = std::max<int64_t>(call_ns - first_ns_, 0);
  if (cost_ns_ == 0) return 0;
  return static_cast<uint64_t>(launches > most / cost_ns_ ? most : launches * cost_ns_);
}

int64_t BusyMeter::cost_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cost_ns_;
}

}  // namespace tessera::shim
