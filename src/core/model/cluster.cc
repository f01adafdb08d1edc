#include "core/model/cluster.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::core {

absl::Status Cluster::SetSlot(int index, NodeSpec n) {
  if (n.name.empty()) {
    return absl::InvalidArgumentError(StrCat("node #", index + 1, " has no name"));
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
  const NodeId named = FindNode(n.name);
  if (named.valid() && named.value() != index) {
    return absl::InvalidArgumentError(StrCat("duplicate node name \"", n.name, "\""));
  }
  Slot slot;
  std::vector<std::string> models = models_;
  for (const GpuSpec& g : n.gpus) {
    auto it = std::find(models.begin(), models.end(), g.model);
    if (it == models.end()) {
      if (models.size() >= kMaxGpuModels) {
        return absl::InvalidArgumentError(
            StrCat("more than ", kMaxGpuModels, " distinct GPU models"));
      }
      models.push_back(g.model);
      it = models.end() - 1;
    }
    slot.gpu_models.push_back(static_cast<uint8_t>(it - models.begin()));
  }
  int16_t uniform = slot.gpu_models.empty() ? -1 : slot.gpu_models[0];
  for (uint8_t id : slot.gpu_models) {
    if (id != uniform) uniform = -1;
  }
  // One selector per distinct topology: links, NUMA nodes and NVLink generation decide it.
  std::string key =
      StrCat(n.gpu_count(), ":",
             n.gpus.empty() ? 0 : static_cast<int>(NvLinkGenerationForModel(n.gpus[0].model)), ":");
  for (const GpuSpec& g : n.gpus) StrAppend(&key, g.numa_node, ",");
  for (int i = 0; i < n.gpu_count(); ++i) {
    for (int j = i + 1; j < n.gpu_count(); ++j) {
      Link l = n.links.at(i, j);
      key.push_back(static_cast<char>(l.kind));
      key.push_back(static_cast<char>(l.nvlink_lanes));
    }
  }
  // Valid: commit the slot.
  models_ = std::move(models);
  auto [sel, inserted] =
      selector_by_topology_.emplace(key, static_cast<int32_t>(selectors_.size()));
  if (inserted) selectors_.push_back(std::make_shared<const GpuSetSelector>(n));
  slot.uniform_model = uniform;
  slot.mig_mask = mig;
  slot.mig_models = std::move(mig_models);
  slot.selector = sel->second;
  slot.spec = std::move(n);
  if (index == node_count()) {
    slots_.Append(std::move(slot));
    removed_.push_back(0);
  } else {
    slots_.Mutable(static_cast<size_t>(index)) = std::move(slot);
  }
  if (named != NodeId(index)) IndexName(node(NodeId(index)).name, NodeId(index));
  return absl::OkStatus();
}

void Cluster::IndexName(const std::string& name, NodeId id) {
  if (names_.use_count() == 1) {
    (*names_)[name] = id;
    return;
  }
  added_names_[name] = id;
  // A copy that has added many names (a long-lived one) gets a map of its own.
  if (added_names_.size() > 64 + names_->size() / 8) {
    auto own = std::make_shared<NameIndex>(*names_);
    for (auto& [n, i] : added_names_) (*own)[n] = i;
    names_ = std::move(own);
    added_names_.clear();
  }
}

void Cluster::RecountGpus() {
  total_gpus_ = 0;
  max_gpus_per_node_ = 0;
  for (const NodeSpec& n : nodes()) {
    total_gpus_ += n.gpu_count();
    max_gpus_per_node_ = std::max(max_gpus_per_node_, n.gpu_count());
  }
}

absl::StatusOr<Cluster> Cluster::Create(std::vector<NodeSpec> nodes) {
  Cluster c;
  for (size_t i = 0; i < nodes.size(); ++i) {
    absl::Status st = c.SetSlot(static_cast<int>(i), std::move(nodes[i]));
    if (!st.ok()) return st;
  }
  c.RecountGpus();
  return c;
}

absl::StatusOr<NodeId> Cluster::AddNode(NodeSpec spec) {
  if (FindNode(spec.name).valid()) {
    return absl::AlreadyExistsError(StrCat("duplicate node name \"", spec.name, "\""));
  }
  const int index = node_count();
  absl::Status st = SetSlot(index, std::move(spec));
  if (!st.ok()) return st;
  total_gpus_ += node(NodeId(index)).gpu_count();
  max_gpus_per_node_ = std::max(max_gpus_per_node_, node(NodeId(index)).gpu_count());
  return NodeId(index);
}

absl::Status Cluster::UpdateNode(NodeId id, NodeSpec spec) {
  if (!live(id) || spec.name != node(id).name) {
    return absl::InvalidArgumentError(
        StrCat("node ", spec.name, " is not the live node #", id.value()));
  }
  const int gpus_before = node(id).gpu_count();
  absl::Status st = SetSlot(id.value(), std::move(spec));
  if (st.ok() && node(id).gpu_count() != gpus_before) RecountGpus();
  return st;
}

void Cluster::RemoveNode(NodeId id) {
  if (!live(id)) return;
  const int i = id.value();
  if (names_.use_count() == 1) names_->erase(node(id).name);
  added_names_.erase(node(id).name);
  slots_.Mutable(static_cast<size_t>(i)) = Slot{};  // no name, no capacity, no GPUs
  removed_[i] = 1;
  ++removed_count_;
  RecountGpus();
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
  const Slot& s = slot(id.value());
  if (s.uniform_model >= 0) return allowed.test(s.uniform_model) ? s.spec.all_gpus_mask() : 0;
  uint64_t mask = 0;
  for (size_t g = 0; g < s.gpu_models.size(); ++g) {
    if (allowed.test(s.gpu_models[g])) mask |= 1ULL << g;
  }
  return mask;
}

NodeId Cluster::FindNode(std::string_view name) const {
  // The entry found must still name a live node of that name (one removed leaves its entry in
  // the names shared with other copies).
  auto current = [&](NodeId id) {
    return id.value() < node_count() && live(id) && node(id).name == name ? id : NodeId();
  };
  if (!added_names_.empty()) {
    auto it = added_names_.find(ToAbsl(name));
    if (it != added_names_.end()) return current(it->second);
  }
  auto it = names_->find(ToAbsl(name));
  return it == names_->end() ? NodeId() : current(it->second);
}

}  // namespace tessera::core
