#include "agent/health/attribution.h"

#include <map>

namespace tessera::agent {

Culprits AttributeXid(const HealthEvent& event, const std::vector<GpuPod>& pods) {
  // The pods on the event's GPU, one entry per pod (the best known: a MIG name and a process
  // count win over an entry without them).
  std::map<std::string, GpuPod> on_gpu;
  for (const GpuPod& p : pods) {
    if (p.gpu_uuid != event.uuid || p.uid.empty()) continue;
    auto [it, fresh] = on_gpu.try_emplace(p.uid, p);
    if (fresh) continue;
    if (it->second.mig.empty()) it->second.mig = p.mig;
    if (it->second.processes < 0) it->second.processes = p.processes;
  }
  Culprits out;
  if (on_gpu.empty()) return out;
  if (!event.mig.empty()) {
    for (const auto& [uid, p] : on_gpu) {
      if (p.mig == event.mig) out.pods.push_back(p);
    }
    out.certain = out.pods.size() == 1;
    return out;
  }
  if (on_gpu.size() == 1) {
    out.pods.push_back(on_gpu.begin()->second);
    out.certain = true;
    return out;
  }
  for (const auto& [uid, p] : on_gpu) {
    if (p.processes > 0) out.pods.push_back(p);
  }
  if (out.pods.size() == 1) {
    out.certain = true;
    return out;
  }
  if (out.pods.empty()) {
    for (const auto& [uid, p] : on_gpu) out.pods.push_back(p);
  }
  return out;
}

}  // namespace tessera::agent
