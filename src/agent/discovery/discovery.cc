#include "agent/discovery/discovery.h"

#include "common/strings.h"

namespace tessera::agent {

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
