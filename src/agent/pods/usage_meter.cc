#include "agent/pods/usage_meter.h"

#include <algorithm>

#include "absl/numeric/int128.h"

namespace tessera::agent {

void UsageMeter::Rebase(const std::string& gpu_uuid, const std::map<std::string, Report>& reports) {
  for (const auto& [uid, report] : reports) counters_[{uid, gpu_uuid}] = report.counter_ns;
}

std::map<std::string, uint64_t> UsageMeter::Increases(const std::string& gpu_uuid,
                                                      uint64_t elapsed_ns,
                                                      const std::map<std::string, Report>& reports,
                                                      Gpu& gpu,
                                                      std::vector<std::string>* rejected) {
  std::map<std::string, uint64_t> out;
  // Products of nanosecond figures and permille: in 128 bits, whatever the pod wrote.
  using Wide = absl::uint128;
  const Wide most = Wide{elapsed_ns} * (1000 + kReportSlackPermille) / 1000;
  for (const auto& [uid, report] : reports) {
    auto [it, first] = counters_.try_emplace({uid, gpu_uuid}, report.counter_ns);
    if (first) continue;  // a starting point
    const uint64_t before = std::exchange(it->second, report.counter_ns);
    if (report.counter_ns < before || report.counter_ns - before > most) {
      ++gpu.rejected_reports;
      rejected->push_back(uid);
      continue;
    }
    uint64_t r = std::min(report.counter_ns - before, elapsed_ns);
    if (report.hard_cap_permille > 0 && report.hard_cap_permille < 1000) {
      const Wide window =
          Wide{elapsed_ns} * (report.hard_cap_permille + kHardCapSlackPermille) / 1000;
      if (Wide{r} > window) r = absl::Uint128Low64(window);
    }
    out[uid] = r;
  }
  return out;
}

UsageMeter::Charge UsageMeter::Observe(const std::string& gpu_uuid, int64_t now_ns,
                                       uint32_t utilization_permille,
                                       const std::vector<std::string>& running_pods,
                                       const std::map<std::string, Report>& reports,
                                       uint64_t span_ns) {
  auto last = last_ns_.find(gpu_uuid);
  if (last == last_ns_.end() || now_ns <= last->second) {
    last_ns_[gpu_uuid] = now_ns;
    gpus_.try_emplace(gpu_uuid);
    carry_.erase(gpu_uuid);
    Rebase(gpu_uuid, reports);
    return {};
  }
  const uint64_t elapsed = static_cast<uint64_t>(now_ns - last->second);
  last->second = now_ns;
  const uint64_t busy =
      (span_ns > 0 ? span_ns : elapsed) * std::min<uint32_t>(utilization_permille, 1000) / 1000;
  Gpu& g = gpus_[gpu_uuid];
  g.sampled_ns += elapsed;
  g.busy_ns += busy;
  Charge charge{elapsed, busy, {}};
  const std::map<std::string, uint64_t> r =
      Increases(gpu_uuid, elapsed, reports, g, &charge.rejected);
  std::map<std::string, std::deque<uint64_t>>& carry = carry_[gpu_uuid];
  if (running_pods.size() == 1) {
    // Alone on the GPU: the device's figure is the pod's, whatever it reported.
    pods_[{running_pods.front(), gpu_uuid}] += busy;
    carry.clear();
    return charge;
  }
  // Several (or none): what each running pod reported, never more than B in all; then what
  // earlier intervals could not pay them, out of what is left.
  std::map<std::string, uint64_t> claims;
  for (const std::string& uid : running_pods) {
    if (auto it = r.find(uid); it != r.end()) claims[uid] = it->second;
  }
  const std::map<std::string, uint64_t> paid = PayOut(claims, busy);
  uint64_t charged = 0;
  for (const auto& [uid, ns] : paid) {
    pods_[{uid, gpu_uuid}] += ns;
    charged += ns;
  }
  // What earlier intervals could not pay the running pods, out of what is left.
  std::map<std::string, uint64_t> owed;
  for (const std::string& uid : running_pods) {
    if (auto it = carry.find(uid); it != carry.end()) {
      for (uint64_t ns : it->second) owed[uid] += ns;
    }
  }
  std::map<std::string, std::deque<uint64_t>> next;
  for (const auto& [uid, ns] : PayOut(owed, busy - charged)) {
    pods_[{uid, gpu_uuid}] += ns;
    charged += ns;
    std::deque<uint64_t> debts = std::move(carry[uid]);
    for (uint64_t pay = ns; pay > 0 && !debts.empty();) {  // the oldest debt first
      const uint64_t part = std::min(pay, debts.back());
      debts.back() -= part;
      pay -= part;
      if (debts.back() == 0) debts.pop_back();
    }
    next[uid] = std::move(debts);
  }
  for (const auto& [uid, ns] : claims) next.try_emplace(uid);
  carry.clear();
  for (auto& [uid, debts] : next) {
    // This interval's unpaid part (0 for a pod that reported nothing: its debts still age).
    auto claim = claims.find(uid);
    debts.push_front(claim == claims.end() ? 0 : claim->second - paid.at(uid));
    while (debts.size() > kOwedIntervals) debts.pop_back();
    while (!debts.empty() && debts.back() == 0) debts.pop_back();
    if (!debts.empty()) carry[uid] = std::move(debts);
  }
  g.unattributed_ns += busy - charged;
  return charge;
}

std::map<std::string, uint64_t> UsageMeter::PayOut(const std::map<std::string, uint64_t>& claims,
                                                   uint64_t budget) {
  absl::uint128 sum = 0;
  for (const auto& [uid, ns] : claims) sum += ns;
  std::map<std::string, uint64_t> paid;
  for (const auto& [uid, ns] : claims) {
    paid[uid] = sum <= budget ? ns : absl::Uint128Low64(absl::uint128{ns} * budget / sum);
  }
  return paid;
}

void UsageMeter::Skip(const std::string& gpu_uuid) {
  last_ns_.erase(gpu_uuid);
  carry_.erase(gpu_uuid);  // the next interval is not the one after it
}

void UsageMeter::Forget(const std::string& pod_uid) {
  for (auto it = pods_.begin(); it != pods_.end();) {
    it = it->first.first == pod_uid ? pods_.erase(it) : std::next(it);
  }
  for (auto it = counters_.begin(); it != counters_.end();) {
    it = it->first.first == pod_uid ? counters_.erase(it) : std::next(it);
  }
  for (auto& [gpu, owed] : carry_) owed.erase(pod_uid);
}

const UsageMeter::Gpu* UsageMeter::gpu(const std::string& gpu_uuid) const {
  auto it = gpus_.find(gpu_uuid);
  return it == gpus_.end() ? nullptr : &it->second;
}

std::optional<uint64_t> UsageMeter::pod_busy_ns(const std::string& pod_uid,
                                                const std::string& gpu_uuid) const {
  auto it = pods_.find({pod_uid, gpu_uuid});
  if (it == pods_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tessera::agent
