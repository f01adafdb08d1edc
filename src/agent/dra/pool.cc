#include "agent/dra/pool.h"

#include <algorithm>
#include <cctype>
#include <numeric>

#include "common/hash.h"
#include "common/strings.h"
#include "records/dra_names.h"

namespace tessera::agent::dra {
namespace {

using nlohmann::json;
namespace names = records::dra;

constexpr size_t kMaxDevicesPerSlice = 128;         // ResourceSliceMaxDevices
constexpr size_t kMaxAdvancedDevicesPerSlice = 64;  // ...WithAdvancedFeatures
constexpr size_t kMaxCounterSetsPerSlice = 8;       // ResourceSliceMaxCounterSets
constexpr size_t kMaxAttributeLength = 64;          // DeviceAttributeMaxValueLength

// A string attribute value of at most 64 characters: longer ones keep their start and a hash.
std::string FitAttribute(const std::string& value) {
  if (value.size() <= kMaxAttributeLength) return value;
  return StrCat(value.substr(0, kMaxAttributeLength - 17), "-",
                fmt::format("{:016x}", Fnv1a(value, kFnv1aDraSeed)));
}

json StringAttr(std::string_view v) { return {{"string", std::string(v)}}; }
json IntAttr(int64_t v) { return {{"int", v}}; }
json BoolAttr(bool v) { return {{"bool", v}}; }
json VersionAttr(std::string_view v) { return {{"version", std::string(v)}}; }

std::string MemorySliceCounter(int slice) { return StrCat("memory-slice-", slice); }
constexpr char kMediaEngineCounter[] = "media-engine";

bool HasMediaProfiles(const core::MigModel& model) {
  return std::any_of(model.profiles.begin(), model.profiles.end(),
                     [](const core::MigProfile& p) { return p.media_extensions; });
}

// Attributes every device of a GPU carries (the GPU's identity and place on the node).
void GpuAttributes(const DiscoveredGpu& g, const NodeGpus& gpus, const std::string& nvlink_domain,
                   const PoolOptions& options, json* attrs) {
  json& a = *attrs;
  a[std::string(names::kAttrModel)] = StringAttr(FitAttribute(g.spec.model));
  if (!g.product_name.empty()) {
    a[std::string(names::kAttrProductName)] = StringAttr(FitAttribute(g.product_name));
  }
  if (g.spec.numa_node >= 0) a[std::string(names::kAttrNumaNode)] = IntAttr(g.spec.numa_node);
  if (!g.spec.pci_bus_id.empty()) {
    a[std::string(names::kAttrPciBusId)] = StringAttr(g.spec.pci_bus_id);
    if (std::string std_id = StandardPciBusId(g.spec.pci_bus_id); !std_id.empty()) {
      a[std::string(names::kStdAttrPciBusId)] = StringAttr(std_id);
    }
    auto root = options.pcie_roots.find(g.spec.pci_bus_id);
    if (root != options.pcie_roots.end() && !root->second.empty()) {
      a[std::string(names::kStdAttrPcieRoot)] = StringAttr(FitAttribute(root->second));
    }
  }
  if (!nvlink_domain.empty()) a[std::string(names::kAttrNvlinkDomain)] = StringAttr(nvlink_domain);
  if (std::string v = DriverSemver(gpus.driver_version); !v.empty()) {
    a[std::string(names::kAttrDriverVersion)] = VersionAttr(v);
  }
}

json UnhealthyTaint(const DiscoveredGpu& g, const PoolOptions& options) {
  const bool execute = options.no_execute_on_failure && g.fault == FaultEffect::kFail;
  json taint = {{"key", std::string(names::kTaintUnhealthy)},
                {"effect", execute ? "NoExecute" : "NoSchedule"}};
  if (!g.health.xids.empty()) {
    taint["value"] = StrCat("xid-", g.health.xids.front());
  } else if (!g.conditions.empty()) {
    taint["value"] = std::string(ClassifyCondition(g.conditions.front().condition).name);
  }
  return taint;
}

}  // namespace

const PoolDevice* Pool::Find(std::string_view device) const {
  for (const PoolDevice& d : devices) {
    if (d.name == device) return &d;
  }
  return nullptr;
}

std::string MibQuantity(int64_t mib) {
  if (mib != 0 && mib % (1024 * 1024) == 0) return StrCat(mib / (1024 * 1024), "Ti");
  if (mib != 0 && mib % 1024 == 0) return StrCat(mib / 1024, "Gi");
  return StrCat(mib, "Mi");
}

std::string DriverSemver(std::string_view version) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : version) {
    if (c == '.') {
      parts.push_back(cur);
      cur.clear();
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      cur.push_back(c);
    } else {
      return "";
    }
  }
  parts.push_back(cur);
  if (parts.empty() || parts.size() > 3) return "";
  for (std::string& p : parts) {
    if (p.empty() || p.size() > 9) return "";
    p.erase(0, std::min(p.find_first_not_of('0'), p.size() - 1));  // "05" -> "5", "0" stays
  }
  while (parts.size() < 3) parts.push_back("0");
  return StrJoin(parts, ".");
}

std::string StandardPciBusId(std::string_view bus_id) {
  // "00000000:1B:00.0" (NVML) or "0000:1b:00.0" -> "0000:1b:00.0".
  const size_t colon = bus_id.find(':');
  if (colon == std::string_view::npos || colon < 4) return "";
  std::string out(bus_id.substr(colon - 4));
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // dddd:bb:dd.f
  if (out.size() != 12 || out[4] != ':' || out[7] != ':' || out[10] != '.') return "";
  for (size_t i : {0, 1, 2, 3, 5, 6, 8, 9, 11}) {
    if (!std::isxdigit(static_cast<unsigned char>(out[i]))) return "";
  }
  return out;
}

std::vector<std::string> NvlinkDomains(const NodeGpus& gpus, std::string_view node_name) {
  const int n = static_cast<int>(gpus.gpus.size());
  std::vector<std::string> out(n);
  if (std::string fabric = gpus.NvLinkDomain(); !fabric.empty()) {
    for (std::string& d : out) d = FitAttribute(fabric);
    return out;
  }
  // Islands: GPUs joined by NVLink, directly or through others.
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::vector<bool> linked(n, false);
  if (gpus.links.size() == n) {
    for (int i = 0; i < n; ++i) {
      for (int j = i + 1; j < n; ++j) {
        if (gpus.links.at(i, j).kind == core::LinkKind::kNvLink) {
          linked[i] = linked[j] = true;
          const int a = find(i), b = find(j);
          parent[std::max(a, b)] = std::min(a, b);
        }
      }
    }
  }
  std::vector<int> roots;
  for (int i = 0; i < n; ++i) {
    if (linked[i] && std::find(roots.begin(), roots.end(), find(i)) == roots.end()) {
      roots.push_back(find(i));
    }
  }
  for (int i = 0; i < n; ++i) {
    if (!linked[i]) continue;
    const std::string id = roots.size() == 1 ? std::string(node_name)
                                             : StrCat(node_name, ".", find(i));  // lowest index
    out[i] = FitAttribute(id);
  }
  return out;
}

Pool BuildPool(const NodeGpus& gpus, const PoolOptions& options) {
  Pool pool;
  pool.name = options.node_name;
  const std::vector<std::string> domains = NvlinkDomains(gpus, options.node_name);
  std::vector<json> devices;
  std::vector<json> counter_sets;
  bool advanced = false;  // counters or taints: at most 64 devices per slice

  for (size_t gi = 0; gi < gpus.gpus.size(); ++gi) {
    const DiscoveredGpu& g = gpus.gpus[gi];
    const int index = g.spec.index;
    const core::MigModel* mig_model = core::FindMigModel(g.spec.model);
    const bool mig_capable = mig_model != nullptr;
    const bool with_mig =
        mig_capable && options.mig_devices && (g.spec.mig_enabled || options.mig_mode_switch);
    json common = json::object();
    GpuAttributes(g, gpus, domains[gi], options, &common);
    json taints = json::array();
    if (!g.health.healthy) {
      taints.push_back(UnhealthyTaint(g, options));
      advanced = true;
    }

    // The GPU's counters: one per memory slice, one for the media engines.
    json all_counters = json::object();
    if (with_mig) {
      for (int s = 0; s < core::kMigSlots; ++s)
        all_counters[MemorySliceCounter(s)] = {{"value", "1"}};
      if (HasMediaProfiles(*mig_model)) all_counters[kMediaEngineCounter] = {{"value", "1"}};
      counter_sets.push_back({{"name", names::CounterSetName(index)}, {"counters", all_counters}});
      advanced = true;
    }

    if (!g.spec.mig_enabled) {
      PoolDevice d;
      d.name = names::GpuDeviceName(index);
      d.gpu_index = static_cast<int>(gi);
      d.gpu_uuid = g.spec.uuid;
      d.memory_mib = g.spec.memory_mib;
      d.compute_percent = 100;
      d.shareable = true;
      d.healthy = g.health.healthy;
      d.health_reason = g.health.reason;
      json attrs = common;
      attrs[std::string(names::kAttrType)] = StringAttr(names::kTypeGpu);
      attrs[std::string(names::kAttrUuid)] = StringAttr(g.spec.uuid);
      attrs[std::string(names::kAttrIndex)] = IntAttr(index);
      attrs[std::string(names::kAttrMigCapable)] = BoolAttr(mig_capable);
      attrs[std::string(names::kAttrMigEnabled)] = BoolAttr(false);
      const std::string memory = MibQuantity(g.spec.memory_mib);
      json device = {
          {"name", d.name},
          {"attributes", attrs},
          {"capacity",
           {{std::string(names::kCapMemory),
             {{"value", memory},
              {"requestPolicy",
               {{"default", memory}, {"validRange", {{"min", "1Mi"}, {"step", "1Mi"}}}}}}},
            {std::string(names::kCapCompute),
             {{"value", "100"},
              {"requestPolicy",
               {{"default", "0"},
                {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}}}}},
          {"allowMultipleAllocations", true}};
      if (with_mig) {
        device["consumesCounters"] = {
            {{"counterSet", names::CounterSetName(index)}, {"counters", all_counters}}};
      }
      if (!taints.empty()) device["taints"] = taints;
      devices.push_back(std::move(device));
      pool.devices.push_back(std::move(d));
    }

    if (!with_mig) continue;
    for (const core::MigProfile& p : mig_model->profiles) {
      for (int start = 0; start < core::kMigSlots; ++start) {
        if (!p.may_start_at(start)) continue;
        PoolDevice d;
        d.name = names::MigDeviceName(index, p.name, start);
        d.gpu_index = static_cast<int>(gi);
        d.gpu_uuid = g.spec.uuid;
        d.mig = true;
        d.placement = core::MigPlacement{static_cast<int8_t>(mig_model->Find(p.name)),
                                         static_cast<int8_t>(start)};
        d.mig_profile = std::string(p.name);
        d.memory_mib = p.memory_mib;
        d.compute_percent = p.compute_milli() / 10;
        d.healthy = g.health.healthy;
        d.health_reason = g.health.reason;
        json attrs = common;
        attrs[std::string(names::kAttrType)] = StringAttr(names::kTypeMig);
        attrs[std::string(names::kAttrMigProfile)] = StringAttr(p.name);
        attrs[std::string(names::kAttrMigStart)] = IntAttr(start);
        attrs[std::string(names::kAttrParentUuid)] = StringAttr(g.spec.uuid);
        attrs[std::string(names::kAttrParentIndex)] = IntAttr(index);
        json counters = json::object();
        const uint8_t slots = p.slots(start);
        for (int s = 0; s < core::kMigSlots; ++s) {
          if ((slots >> s) & 1) counters[MemorySliceCounter(s)] = {{"value", "1"}};
        }
        if (p.media_extensions) counters[kMediaEngineCounter] = {{"value", "1"}};
        json device = {
            {"name", d.name},
            {"attributes", attrs},
            {"capacity",
             {{std::string(names::kCapMemory), {{"value", MibQuantity(p.memory_mib)}}},
              {std::string(names::kCapCompute), {{"value", StrCat(d.compute_percent)}}}}},
            {"consumesCounters",
             {{{"counterSet", names::CounterSetName(index)}, {"counters", counters}}}}};
        if (!taints.empty()) device["taints"] = taints;
        devices.push_back(std::move(device));
        pool.devices.push_back(std::move(d));
      }
    }
  }

  auto slice = [&](const char* key, json items) {
    return json{
        {"driver", std::string(names::kDriverName)},
        {"nodeName", options.node_name},
        {"pool", {{"name", options.node_name}, {"generation", 0}, {"resourceSliceCount", 0}}},
        {key, std::move(items)}};
  };
  for (size_t i = 0; i < counter_sets.size(); i += kMaxCounterSetsPerSlice) {
    const size_t end = std::min(counter_sets.size(), i + kMaxCounterSetsPerSlice);
    pool.slices.push_back(
        slice("sharedCounters",
              json(std::vector<json>(counter_sets.begin() + i, counter_sets.begin() + end))));
  }
  const size_t per_slice = advanced ? kMaxAdvancedDevicesPerSlice : kMaxDevicesPerSlice;
  for (size_t i = 0; i < devices.size(); i += per_slice) {
    const size_t end = std::min(devices.size(), i + per_slice);
    pool.slices.push_back(
        slice("devices", json(std::vector<json>(devices.begin() + i, devices.begin() + end))));
  }
  if (pool.slices.empty()) pool.slices.push_back(slice("devices", json::array()));
  for (json& s : pool.slices) s["pool"]["resourceSliceCount"] = pool.slices.size();
  return pool;
}

}  // namespace tessera::agent::dra
