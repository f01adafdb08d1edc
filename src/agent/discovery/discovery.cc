#include "agent/discovery/discovery.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::agent {

GpuCondition Condition(HealthCondition c, std::string detail, std::vector<int32_t> xids) {
  GpuCondition out;
  out.condition = c;
  out.effect = ClassifyCondition(c).effect;
  out.detail = std::move(detail);
  out.xids = std::move(xids);
  return out;
}

FaultEffect StrongestEffect(const std::vector<GpuCondition>& conditions) {
  FaultEffect e = FaultEffect::kNone;
  for (const GpuCondition& c : conditions) e = std::max(e, c.effect);
  return e;
}

records::GpuHealth HealthFromConditions(const std::vector<GpuCondition>& conditions) {
  records::GpuHealth h;
  std::vector<std::string> texts;
  for (const GpuCondition& c : conditions) {
    if (c.effect < FaultEffect::kDrain) continue;
    h.healthy = false;
    for (int32_t x : c.xids) {
      if (std::find(h.xids.begin(), h.xids.end(), x) == h.xids.end()) h.xids.push_back(x);
    }
    texts.push_back(c.detail.empty() ? std::string(ClassifyCondition(c.condition).text) : c.detail);
  }
  h.reason = StrJoin(texts, "; ");
  return h;
}

HealthEvent XidEvent(int32_t index, std::string uuid, int32_t xid, std::string mig) {
  HealthEvent e;
  e.gpu_index = index;
  e.uuid = std::move(uuid);
  e.xid = xid;
  e.mig = std::move(mig);
  e.klass = ClassifyXid(xid);
  e.text = XidText(xid);
  return e;
}

std::string NodeGpus::NvLinkDomain() const {
  if (gpus.empty() || !gpus.front().has_fabric) return "";
  for (const DiscoveredGpu& g : gpus) {
    if (!g.has_fabric || !(g.fabric == gpus.front().fabric)) return "";
  }
  const FabricInfo& f = gpus.front().fabric;
  return StrCat(f.cluster_uuid, ".", f.clique_id);
}

records::Inventory NodeGpus::ToInventory() const {
  records::Inventory inv;
  bool any_unhealthy = false;
  for (const DiscoveredGpu& g : gpus) {
    inv.gpus.push_back(g.spec);
    any_unhealthy = any_unhealthy || !g.health.healthy;
  }
  if (any_unhealthy) {
    for (const DiscoveredGpu& g : gpus) inv.health.push_back(g.health);
  }
  inv.links = links;
  return inv;
}

}  // namespace tessera::agent
