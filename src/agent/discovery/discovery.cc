#include "agent/discovery/discovery.h"

#include "common/strings.h"
#include "core/model/mig.h"

namespace tessera::agent {

int FindMigInstance(const DiscoveredGpu& gpu, const std::string& profile, int start) {
  const core::MigModel* model = core::FindMigModel(gpu.spec.model);
  if (model == nullptr) return -1;
  const int p = model->Find(profile);
  if (p < 0) return -1;
  for (size_t i = 0; i < gpu.spec.mig_layout.size(); ++i) {
    const core::MigPlacement& m = gpu.spec.mig_layout[i];
    if (m.profile == p && m.start == start) return static_cast<int>(i);
  }
  return -1;
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
