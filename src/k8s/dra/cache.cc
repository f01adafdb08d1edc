#include "k8s/dra/cache.h"

#include "common/strings.h"
#include "records/dra_names.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s::dra {

int GpuIndexOf(const Device& device, std::string_view driver, bool* whole) {
  if (whole != nullptr) *whole = false;
  const std::optional<records::dra::DeviceNameParts> parts =
      records::dra::ParseDeviceName(device.name);
  if (!parts) return -1;
  if (parts->whole) {
    if (const AttributeValue* a =
            device.Attribute(StrCat(driver, "/", records::dra::kAttrIndex), driver);
        a != nullptr && (a->kind != AttributeValue::Kind::kInt || a->i != parts->gpu_index)) {
      return -1;  // the name and the index attribute disagree: not a device we understand
    }
    if (whole != nullptr) *whole = true;
  }
  return parts->gpu_index;
}

bool MigPlacementOf(const Device& device, std::string_view driver, std::string* profile,
                    int* start) {
  const AttributeValue* p =
      device.Attribute(StrCat(driver, "/", records::dra::kAttrMigProfile), driver);
  const AttributeValue* s =
      device.Attribute(StrCat(driver, "/", records::dra::kAttrMigStart), driver);
  if (p == nullptr || s == nullptr || p->kind != AttributeValue::Kind::kString ||
      s->kind != AttributeValue::Kind::kInt) {
    return false;
  }
  *profile = p->s;
  *start = static_cast<int>(s->i);
  return true;
}

std::vector<std::string> DraCache::OnSlice(bool deleted, std::shared_ptr<const SliceInfo> slice) {
  std::vector<std::string> changed;
  const std::string name = slice->name;
  auto old = slices_.find(name);
  std::string old_pool;
  if (old != slices_.end()) {
    if (old->second->driver == driver_) old_pool = old->second->pool;
    slices_.erase(old);
  }
  if (!old_pool.empty()) pool_slices_[old_pool].erase(name);
  if (!deleted && slice->driver == driver_) {
    if (!slice->error.empty()) {
      spdlog::warn("resource slice {} of pool {}: {}; its devices are not used", name, slice->pool,
                   slice->error);
    }
    pool_slices_[slice->pool].insert(name);
    slices_[name] = slice;
  } else if (!deleted) {
    slices_[name] = slice;  // another driver's: kept only so that a deletion is recognised
  }
  std::set<std::string> pools;
  if (!old_pool.empty()) pools.insert(old_pool);
  if (!deleted && slice->driver == driver_) pools.insert(slice->pool);
  for (const std::string& pool : pools) {
    for (std::string& n : RebuildPool(pool)) changed.push_back(std::move(n));
  }
  if (!pools.empty()) ++generation_;
  return changed;
}

std::vector<std::string> DraCache::RebuildPool(const std::string& pool) {
  std::set<std::string> touched;
  if (auto it = pool_node_.find(pool); it != pool_node_.end()) {
    touched.insert(it->second);
    node_pools_[it->second].erase(pool);
    pool_node_.erase(it);
  }
  pool_problems_.erase(pool);
  auto names = pool_slices_.find(pool);
  if (names != pool_slices_.end() && !names->second.empty()) {
    int64_t generation = INT64_MIN;
    for (const std::string& n : names->second) {
      generation = std::max(generation, slices_.at(n)->generation);
    }
    int64_t count = 0, want = 0;
    std::string node, problem;
    for (const std::string& n : names->second) {
      const SliceInfo& s = *slices_.at(n);
      if (s.generation != generation) continue;
      ++count;
      want = s.slice_count;
      if (!s.error.empty()) problem = StrCat("slice ", s.name, ": ", s.error);
      if (s.node_name.empty()) {
        problem = StrCat("slice ", s.name, " is not bound to one node (spec.nodeName)");
      } else if (!node.empty() && node != s.node_name) {
        problem =
            StrCat("slices of generation ", generation, " name nodes ", node, " and ", s.node_name);
      }
      node = s.node_name;
    }
    if (problem.empty() && count < want) {
      problem = StrCat(count, " of ", want, " slices of generation ", generation, " published");
    }
    if (problem.empty()) {
      pool_node_[pool] = node;
      node_pools_[node].insert(pool);
      touched.insert(node);
    } else {
      pool_problems_[pool] = problem;
      spdlog::info("DRA pool {} of driver {} not used yet: {}", pool, driver_, problem);
    }
  } else if (names != pool_slices_.end()) {
    pool_slices_.erase(names);
  }
  for (const std::string& n : touched) RebuildNode(n);
  return {touched.begin(), touched.end()};
}

void DraCache::RebuildNode(const std::string& node) {
  auto pools = node_pools_.find(node);
  if (pools == node_pools_.end() || pools->second.empty()) {
    nodes_.erase(node);
    if (pools != node_pools_.end()) node_pools_.erase(pools);
    return;
  }
  NodeDevices d;
  for (const std::string& pool : pools->second) {
    int64_t generation = INT64_MIN;
    for (const std::string& n : pool_slices_.at(pool)) {
      generation = std::max(generation, slices_.at(n)->generation);
    }
    for (const std::string& n : pool_slices_.at(pool)) {
      std::shared_ptr<const SliceInfo> s = slices_.at(n);
      if (s->generation != generation) continue;
      d.slices.push_back(s);
      for (const Device& dev : s->devices) {
        d.by_name[{pool, dev.name}] = &dev;
        bool whole = false;
        const int index = GpuIndexOf(dev, driver_, &whole);
        if (index < 0) continue;
        if (static_cast<int>(d.gpus.size()) <= index) d.gpus.resize(index + 1);
        if (!whole) {
          NodeDevices::Mig m{&dev, pool};
          if (MigPlacementOf(dev, driver_, &m.profile, &m.start)) {
            d.gpus[index].mig.push_back(std::move(m));
          }
          continue;
        }
        if (d.gpus[index].device != nullptr) {
          spdlog::warn(
              "node {}: two devices of driver {} stand for GPU {} ({}/{} and {}/{}); "
              "using the first",
              node, driver_, index, d.gpus[index].pool, d.gpus[index].device->name, pool, dev.name);
          continue;
        }
        d.gpus[index].device = &dev;
        d.gpus[index].pool = pool;
      }
    }
  }
  nodes_[node] = std::move(d);
}

bool DraCache::OnClass(bool deleted, std::shared_ptr<const ClassInfo> device_class) {
  if (deleted) {
    classes_.erase(device_class->name);
  } else {
    auto it = classes_.find(device_class->name);
    if (it != classes_.end() && it->second->selectors == device_class->selectors &&
        it->second->config == device_class->config &&
        it->second->extended_resource_name == device_class->extended_resource_name) {
      it->second = std::move(device_class);
      return false;
    }
    classes_[device_class->name] = std::move(device_class);
  }
  ++generation_;
  return true;
}

std::shared_ptr<const ClaimInfo> DraCache::OnClaim(bool deleted,
                                                   std::shared_ptr<const ClaimInfo> claim) {
  std::shared_ptr<const ClaimInfo> old;
  auto it = claims_.find(claim->key);
  if (it != claims_.end()) old = it->second;
  if (old && old->extended_resource && !old->owner_pod_uid.empty()) {
    extended_claims_.erase(old->owner_pod_uid);
  }
  if (deleted) {
    if (it != claims_.end()) claims_.erase(it);
  } else {
    if (claim->extended_resource && !claim->owner_pod_uid.empty()) {
      extended_claims_[claim->owner_pod_uid] = claim->key;
    }
    claims_[claim->key] = std::move(claim);
  }
  return old;
}

std::shared_ptr<const ClaimInfo> DraCache::ExtendedClaimOf(const std::string& pod_uid) const {
  auto it = extended_claims_.find(pod_uid);
  return it == extended_claims_.end() ? nullptr : Claim(it->second);
}

std::shared_ptr<const ClassInfo> DraCache::ClassForExtendedResource(std::string_view name) const {
  std::shared_ptr<const ClassInfo> found;
  for (const auto& [class_name, c] : classes_) {
    if (c->extended_resource_name == name && (!found || c->name < found->name)) found = c;
  }
  if (found) return found;
  if (name.starts_with(kImplicitExtendedPrefix)) {
    return Class(std::string(name.substr(kImplicitExtendedPrefix.size())));
  }
  return nullptr;
}

std::shared_ptr<const ClaimInfo> DraCache::Claim(const std::string& key) const {
  auto it = claims_.find(key);
  return it == claims_.end() ? nullptr : it->second;
}

std::shared_ptr<const ClassInfo> DraCache::Class(const std::string& name) const {
  auto it = classes_.find(name);
  return it == classes_.end() ? nullptr : it->second;
}

const NodeDevices* DraCache::Devices(const std::string& node) const {
  auto it = nodes_.find(node);
  return it == nodes_.end() ? nullptr : &it->second;
}

}  // namespace tessera::k8s::dra
