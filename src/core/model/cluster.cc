#include "core/model/cluster.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::core {

absl::StatusOr<Cluster> Cluster::Create(std::vector<NodeSpec> nodes) {
  Cluster c;
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeSpec& n = nodes[i];
    if (n.name.empty()) {
      return absl::InvalidArgumentError(StrCat("node #", i + 1, " has no name"));
    }
    if (n.cpu_milli < 0 || n.memory_mib < 0) {
      return absl::InvalidArgumentError(
          StrCat("node ", n.name, ": cpu and memory must not be negative"));
    }
    if (n.gpu_count() > kMaxGpusPerNode) {
      return absl::InvalidArgumentError(StrCat("node ", n.name, " has ", n.gpu_count(),
                                               " GPUs; at most ", kMaxGpusPerNode,
                                               " per node are supported"));
    }
    if (n.links.size() == 0 && n.gpu_count() > 0) n.links = LinkMatrix(n.gpu_count());
    if (n.links.size() != n.gpu_count()) {
      return absl::InvalidArgumentError(StrCat("node ", n.name, ": link matrix is ", n.links.size(),
                                               "x", n.links.size(), " but the node has ",
                                               n.gpu_count(), " GPUs"));
    }
    for (int g = 0; g < n.gpu_count(); ++g) {
      if (n.gpus[g].index != g) {
        return absl::InvalidArgumentError(
            StrCat("node ", n.name, ": GPU at position ", g, " has index ", n.gpus[g].index));
      }
      if (n.gpus[g].memory_mib <= 0) {
        return absl::InvalidArgumentError(StrCat("node ", n.name, ": GPU ", g, " has no memory"));
      }
    }
    uint64_t mig = 0;
    std::vector<const MigModel*> mig_models(n.gpu_count(), nullptr);
    for (int g = 0; g < n.gpu_count(); ++g) {
      const GpuSpec& gpu = n.gpus[g];
      const std::string where = StrCat("node ", n.name, " GPU ", g);
      if (!gpu.mig_enabled) {
        if (!gpu.mig_layout.empty()) {
          return absl::InvalidArgumentError(
              StrCat(where, ": has MIG instances but MIG is not enabled"));
        }
        continue;
      }
      const MigModel* model = FindMigModel(gpu.model);
      if (!model) {
        return absl::InvalidArgumentError(
            StrCat(where, ": MIG is enabled but tessera has no MIG profiles for ", gpu.model,
                   " (it has: ", StrJoin(MigModelNames(), ", "), ")"));
      }
      absl::Status layout = ValidateMigInstances(*model, gpu.mig_layout, where);
      if (!layout.ok()) return layout;
      mig |= 1ULL << g;
      mig_models[g] = model;
    }
    c.mig_masks_.push_back(mig);
    c.mig_models_.push_back(std::move(mig_models));
    if (!c.by_name_.emplace(n.name, NodeId(static_cast<int32_t>(i))).second) {
      return absl::InvalidArgumentError(StrCat("duplicate node name \"", n.name, "\""));
    }
    std::vector<uint8_t> ids;
    for (const GpuSpec& g : n.gpus) {
      auto it = std::find(c.models_.begin(), c.models_.end(), g.model);
      if (it == c.models_.end()) {
        if (c.models_.size() >= kMaxGpuModels) {
          return absl::InvalidArgumentError(
              StrCat("more than ", kMaxGpuModels, " distinct GPU models"));
        }
        c.models_.push_back(g.model);
        it = c.models_.end() - 1;
      }
      ids.push_back(static_cast<uint8_t>(it - c.models_.begin()));
    }
    int16_t uniform = ids.empty() ? -1 : ids[0];
    for (uint8_t id : ids) {
      if (id != uniform) uniform = -1;
    }
    c.uniform_model_.push_back(uniform);
    c.gpu_models_.push_back(std::move(ids));
    c.total_gpus_ += n.gpu_count();
    c.max_gpus_per_node_ = std::max(c.max_gpus_per_node_, n.gpu_count());
  }
  c.nodes_ = std::move(nodes);
  // One selector per distinct topology: links, NUMA nodes and NVLink generation decide it.
  absl::flat_hash_map<std::string, int32_t> by_topology;
  for (const NodeSpec& n : c.nodes_) {
    std::string key = StrCat(
        n.gpu_count(), ":",
        n.gpus.empty() ? 0 : static_cast<int>(NvLinkGenerationForModel(n.gpus[0].model)), ":");
    for (const GpuSpec& g : n.gpus) StrAppend(&key, g.numa_node, ",");
    for (int i = 0; i < n.gpu_count(); ++i) {
      for (int j = i + 1; j < n.gpu_count(); ++j) {
        Link l = n.links.at(i, j);
        key.push_back(static_cast<char>(l.kind));
        key.push_back(static_cast<char>(l.nvlink_lanes));
      }
    }
    auto [it, inserted] = by_topology.emplace(key, static_cast<int32_t>(c.selectors_.size()));
    if (inserted) c.selectors_.push_back(std::make_shared<const GpuSetSelector>(n));
    c.selector_of_.push_back(it->second);
  }
  return c;
}

ModelSet Cluster::ResolveModels(const std::vector<std::string>& names) const {
  ModelSet set;
  if (names.empty()) {
    set.set();
    return set;
  }
  for (const std::string& name : names) {
    for (size_t i = 0; i < models_.size(); ++i) {
      if (models_[i] == name) set.set(i);
    }
  }
  return set;
}

uint64_t Cluster::ModelMask(NodeId id, const ModelSet& allowed) const {
  const NodeSpec& n = nodes_[id.value()];
  int16_t uniform = uniform_model_[id.value()];
  if (uniform >= 0) return allowed.test(uniform) ? n.all_gpus_mask() : 0;
  uint64_t mask = 0;
  const std::vector<uint8_t>& ids = gpu_models_[id.value()];
  for (size_t g = 0; g < ids.size(); ++g) {
    if (allowed.test(ids[g])) mask |= 1ULL << g;
  }
  return mask;
}

NodeId Cluster::FindNode(std::string_view name) const {
  auto it = by_name_.find(ToAbsl(name));
  return it == by_name_.end() ? NodeId() : it->second;
}

}  // namespace tessera::core
