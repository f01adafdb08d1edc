#include "agent/pods/memory_backstop.h"

#include <set>

#include "absl/strings/str_cat.h"

namespace tessera::agent {

const char* BackstopActionName(BackstopAction a) {
  switch (a) {
    case BackstopAction::kReport:
      return "report";
    case BackstopAction::kKill:
      return "kill";
    case BackstopAction::kEvict:
      return "evict";
  }
  return "?";
}

absl::StatusOr<BackstopAction> ParseBackstopAction(const std::string& name) {
  for (BackstopAction a :
       {BackstopAction::kReport, BackstopAction::kKill, BackstopAction::kEvict}) {
    if (name == BackstopActionName(a)) return a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", name, "\" is not a backstop action (report, kill, evict)"));
}

uint64_t MemoryBackstop::Allowed(uint64_t cap_bytes, uint32_t processes) const {
  const uint64_t tolerance = cap_bytes / 1000 * options_.tolerance_permille +
                             cap_bytes % 1000 * options_.tolerance_permille / 1000;
  return cap_bytes + tolerance + uint64_t{processes} * options_.per_process_bytes;
}

std::vector<BackstopVerdict> MemoryBackstop::Step(const std::vector<BackstopShare>& shares,
                                                  GpuProcessSampler& sampler,
                                                  HostProcesses& processes,
                                                  std::chrono::steady_clock::time_point now,
                                                  std::map<std::string, std::string>* errors) {
  std::vector<BackstopVerdict> out;
  std::map<std::pair<std::string, std::string>, DriverUse> use;
  std::map<std::pair<std::string, std::string>, std::vector<uint32_t>> pids;
  std::set<std::string> gpus;
  for (const BackstopShare& s : shares) gpus.insert(s.gpu_uuid);
  std::set<std::string> sampled;
  for (const std::string& gpu : gpus) {
    absl::StatusOr<std::vector<GpuProcessMemory>> procs = sampler.Memory(gpu);
    if (!procs.ok()) {
      if (errors != nullptr) (*errors)[gpu] = std::string(procs.status().message());
      continue;
    }
    sampled.insert(gpu);
    for (const GpuProcessMemory& p : *procs) {
      std::optional<ProcessOwner> owner = processes.OwnerOf(p.pid);
      if (!owner) continue;  // a host process, the MPS server: no pod's share
      DriverUse& u = use[{owner->pod_uid, gpu}];
      u.used_bytes += p.used_bytes;
      ++u.processes;
      pids[{owner->pod_uid, gpu}].push_back(p.pid);
    }
  }
  std::map<std::pair<std::string, std::string>, std::chrono::steady_clock::time_point> over;
  for (const BackstopShare& s : shares) {
    const auto key = std::make_pair(s.pod_uid, s.gpu_uuid);
    if (s.cap_bytes == 0 || !sampled.contains(s.gpu_uuid)) continue;
    const DriverUse u = use.contains(key) ? use[key] : DriverUse{};
    const uint64_t allowed = Allowed(s.cap_bytes, u.processes);
    if (u.used_bytes <= allowed) continue;
    auto since = over_since_.find(key);
    const auto first = since == over_since_.end() ? now : since->second;
    over[key] = first;
    BackstopVerdict v;
    v.pod_uid = s.pod_uid;
    v.gpu_uuid = s.gpu_uuid;
    v.used_bytes = u.used_bytes;
    v.allowed_bytes = allowed;
    v.cap_bytes = s.cap_bytes;
    v.pids = pids[key];
    v.over_for = std::chrono::duration_cast<std::chrono::seconds>(now - first);
    if (since == over_since_.end()) {
      v.kind = BackstopVerdict::kOver;
      out.push_back(v);
    }
    if (now - first >= options_.grace) {
      v.kind = BackstopVerdict::kAct;
      out.push_back(v);
    }
  }
  over_since_ = std::move(over);
  use_ = std::move(use);
  sampled_ = std::move(sampled);
  return out;
}

}  // namespace tessera::agent
