// Builders of DRA API objects (resource.k8s.io/v1 JSON, as the API server sends them) for the
// scheduler's unit and e2e tests and the DRA benchmark. The devices follow the driver contract
// (src/records/dra_names.h, src/agent/dra/README.md), spelled out here as the API server sends
// them so that the tests check the contract rather than share its constants: one device
// `gpu-<index>` per GPU, with attributes uuid, index, model, productName, numaNode, pciBusID,
// pcieRoot, nvlinkDomain, migCapable, driverVersion, and consumable capacities memory (1Mi steps)
// and compute (percent, default 0), allowMultipleAllocations.
//   json slice = SliceObject("gpu-1").Gpus(8, "H100-80GB", "80Gi").NvlinkDomain("gpu-1").Json();
//   json claim = ClaimObject("ns", "c").Request("gpu", "gpu.tessera.dev").Capacity("memory", "4Gi")
//                    .Json();
//   json pod = WithClaims(PodObject("ns", "p").Json(), {{"gpu", "c"}});
#pragma once

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "core/model/mig.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s::testing {

inline constexpr char kDraDriver[] = "gpu.tessera.dev";

class SliceObject {
 public:
  explicit SliceObject(std::string node, std::string driver = kDraDriver)
      : node_(std::move(node)), driver_(std::move(driver)) {}
  // `n` GPUs of `model` with `memory` each, shareable by capacity.
  SliceObject& Gpus(int n, std::string model = "H100-80GB", std::string memory = "80Gi") {
    count_ = n;
    model_ = std::move(model);
    memory_ = std::move(memory);
    return *this;
  }
  // Every device's nvlinkDomain (default: the node's name, its own NVLink island).
  SliceObject& NvlinkDomain(std::string domain) {
    nvlink_domain_ = std::move(domain);
    return *this;
  }
  SliceObject& Shareable(bool on) {
    shareable_ = on;
    return *this;
  }
  SliceObject& Generation(int64_t g) {
    generation_ = g;
    return *this;
  }
  SliceObject& Name(std::string name) {
    name_ = std::move(name);
    return *this;
  }
  // An extra attribute on device `index` (JSON value: {"string": ..} or {"int": ..}).
  SliceObject& Attribute(int index, std::string name, nlohmann::json value) {
    extra_[index][std::move(name)] = std::move(value);
    return *this;
  }
  // GPU `index` in MIG mode: its MIG partitions as the driver publishes them (every placement of
  // every profile of the model, `gpu-<i>-mig-<profile>-<start>`, attributes type "mig",
  // profile, migStart, parentIndex besides the GPU's) in place of the GPU's own device.
  SliceObject& MigMode(int index) {
    mig_.push_back(index);
    return *this;
  }
  // Leaves device `index` out (a GPU the driver does not publish).
  SliceObject& Without(int index) {
    without_.push_back(index);
    return *this;
  }

  nlohmann::json Device(int i) const {
    nlohmann::json attrs = {
        {"type", {{"string", "gpu"}}},
        {"uuid", {{"string", StrCat("GPU-", node_, "-", i)}}},
        {"index", {{"int", i}}},
        {"model", {{"string", model_}}},
        {"productName", {{"string", StrCat("NVIDIA ", model_)}}},
        {"numaNode", {{"int", i < (count_ + 1) / 2 ? 0 : 1}}},
        {"pciBusID", {{"string", fmt::format("00000000:{:02x}:00.0", 0x10 + i)}}},
        {"resource.kubernetes.io/pcieRoot", {{"string", fmt::format("pci0000:{:02x}", i / 2)}}},
        {"nvlinkDomain", {{"string", nvlink_domain_.empty() ? node_ : nvlink_domain_}}},
        {"migCapable", {{"bool", false}}},
        {"driverVersion", {{"version", "570.86.15"}}},
    };
    if (auto it = extra_.find(i); it != extra_.end()) {
      for (const auto& [k, v] : it->second) attrs[k] = v;
    }
    nlohmann::json capacity = {{"memory", {{"value", memory_}}}, {"compute", {{"value", "100"}}}};
    nlohmann::json d = {{"name", StrCat("gpu-", i)}, {"attributes", attrs}};
    if (shareable_) {
      // The API requires a default with a validRange: the whole memory, so that a request
      // without a capacity request takes the GPU whole (as the driver contract says).
      capacity["memory"]["requestPolicy"] = {{"default", memory_},
                                             {"validRange", {{"min", "1Mi"}, {"step", "1Mi"}}}};
      capacity["compute"]["requestPolicy"] = {
          {"default", "0"}, {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}};
      d["allowMultipleAllocations"] = true;
    }
    d["capacity"] = capacity;
    return d;
  }

  // The MIG partitions of GPU `i`.
  std::vector<nlohmann::json> MigDevices(int i) const {
    std::vector<nlohmann::json> out;
    const core::MigModel* model = core::FindMigModel(model_);
    if (model == nullptr) return out;
    const nlohmann::json gpu = Device(i);
    for (const core::MigProfile& p : model->profiles) {
      for (int start = 0; start < core::kMigSlots; ++start) {
        if (!p.may_start_at(start)) continue;
        std::string dns(p.name);
        std::replace(dns.begin(), dns.end(), '.', '-');
        std::replace(dns.begin(), dns.end(), '+', '-');
        nlohmann::json attrs = gpu["attributes"];
        attrs.erase("index");
        attrs.erase("uuid");
        attrs["type"] = {{"string", "mig"}};
        attrs["profile"] = {{"string", std::string(p.name)}};
        attrs["migStart"] = {{"int", start}};
        attrs["parentIndex"] = {{"int", i}};
        nlohmann::json counters = nlohmann::json::object();
        for (int s = 0; s < core::kMigSlots; ++s) {
          if ((p.slots(start) >> s) & 1) counters[StrCat("memory-slice-", s)] = {{"value", "1"}};
        }
        if (p.media_extensions) counters["media-engine"] = {{"value", "1"}};
        out.push_back(
            {{"name", StrCat("gpu-", i, "-mig-", dns, "-", start)},
             {"attributes", attrs},
             {"capacity",
              {{"memory", {{"value", StrCat(p.memory_mib, "Mi")}}},
               {"compute", {{"value", StrCat(p.compute_milli() / 10)}}}}},
             {"consumesCounters", {{{"counterSet", StrCat("gpu-", i)}, {"counters", counters}}}}});
      }
    }
    return out;
  }

  nlohmann::json Json() const {
    nlohmann::json devices = nlohmann::json::array();
    for (int i = 0; i < count_; ++i) {
      if (std::find(without_.begin(), without_.end(), i) != without_.end()) continue;
      if (std::find(mig_.begin(), mig_.end(), i) != mig_.end()) {
        for (nlohmann::json& d : MigDevices(i)) devices.push_back(std::move(d));
        continue;
      }
      devices.push_back(Device(i));
    }
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceSlice"},
            {"metadata", {{"name", name_.empty() ? StrCat(node_, "-", driver_) : name_}}},
            {"spec",
             {{"driver", driver_},
              {"nodeName", node_},
              {"pool",
               {{"name", node_},
                {"generation", generation_},
                {"resourceSliceCount", mig_.empty() ? 1 : 2}}},
              {"devices", devices}}}};
  }
  // With GPUs in MIG mode the pool has a second slice: the counter sets `gpu-<i>` (one counter
  // per memory slice, and the media engine) that the partitions consume. Named
  // "<slice name>-counters".
  nlohmann::json CountersJson() const {
    nlohmann::json sets = nlohmann::json::array();
    for (int i : mig_) {
      nlohmann::json counters = nlohmann::json::object();
      for (int s = 0; s < core::kMigSlots; ++s)
        counters[StrCat("memory-slice-", s)] = {{"value", "1"}};
      counters["media-engine"] = {{"value", "1"}};
      sets.push_back({{"name", StrCat("gpu-", i)}, {"counters", counters}});
    }
    nlohmann::json slice = Json();
    slice["metadata"]["name"] = StrCat(slice["metadata"]["name"].get<std::string>(), "-counters");
    slice["spec"].erase("devices");
    slice["spec"]["sharedCounters"] = sets;
    return slice;
  }

 private:
  std::string node_, driver_, name_;
  int count_ = 0;
  std::string model_ = "H100-80GB", memory_ = "80Gi", nvlink_domain_;
  bool shareable_ = true;
  int64_t generation_ = 1;
  std::map<int, std::map<std::string, nlohmann::json>> extra_;
  std::vector<int> without_;
  std::vector<int> mig_;
};

inline nlohmann::json ClassObject(const std::string& name, std::vector<std::string> selectors,
                                  const std::string& extended_resource = "") {
  nlohmann::json sel = nlohmann::json::array();
  for (const std::string& s : selectors) sel.push_back({{"cel", {{"expression", s}}}});
  nlohmann::json spec = {{"selectors", sel}};
  if (!extended_resource.empty()) spec["extendedResourceName"] = extended_resource;
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", name}}},
          {"spec", spec}};
}

// The driver's classes (deploy/ ships them): whole GPUs and shares by capacity.
inline nlohmann::json GpuClass() {
  return ClassObject("gpu.tessera.dev", {"device.driver == \"gpu.tessera.dev\""});
}
inline nlohmann::json ShareClass() {
  return ClassObject("gpu-share.tessera.dev",
                     {"device.driver == \"gpu.tessera.dev\" && device.allowMultipleAllocations"});
}

class ClaimObject {
 public:
  ClaimObject(std::string ns, std::string name) : ns_(std::move(ns)), name_(std::move(name)) {}
  // A request (spec.devices.requests[].exactly); later calls refine the last one.
  ClaimObject& Request(std::string name, std::string device_class, int64_t count = 1) {
    requests_.push_back({{"name", std::move(name)},
                         {"exactly",
                          {{"deviceClassName", std::move(device_class)},
                           {"allocationMode", "ExactCount"},
                           {"count", count}}}});
    return *this;
  }
  ClaimObject& Capacity(const std::string& name, const std::string& quantity) {
    requests_.back()["exactly"]["capacity"]["requests"][name] = quantity;
    return *this;
  }
  ClaimObject& Selector(const std::string& expression) {
    requests_.back()["exactly"]["selectors"].push_back({{"cel", {{"expression", expression}}}});
    return *this;
  }
  ClaimObject& AllocationMode(const std::string& mode) {
    requests_.back()["exactly"]["allocationMode"] = mode;
    requests_.back()["exactly"].erase("count");
    return *this;
  }
  ClaimObject& MatchAttribute(const std::string& attribute,
                              std::vector<std::string> requests = {}) {
    nlohmann::json c = {{"matchAttribute", attribute}};
    if (!requests.empty()) c["requests"] = requests;
    constraints_.push_back(std::move(c));
    return *this;
  }
  ClaimObject& DistinctAttribute(const std::string& attribute) {
    constraints_.push_back({{"distinctAttribute", attribute}});
    return *this;
  }
  ClaimObject& Uid(std::string uid) {
    uid_ = std::move(uid);
    return *this;
  }
  // Status, for decoding tests: an allocation on `node` and pods it is reserved for.
  ClaimObject& Allocated(const std::string& node, nlohmann::json results) {
    allocation_ = {
        {"devices", {{"results", std::move(results)}}},
        {"nodeSelector",
         {{"nodeSelectorTerms",
           {{{"matchFields",
              {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {node}}}}}}}}}}};
    return *this;
  }
  ClaimObject& ReservedFor(const std::string& pod, const std::string& uid) {
    reserved_.push_back({{"resource", "pods"}, {"name", pod}, {"uid", uid}});
    return *this;
  }
  ClaimObject& ResourceVersion(std::string rv) {
    rv_ = std::move(rv);
    return *this;
  }
  ClaimObject& OwnedBy(const std::string& pod, const std::string& uid) {
    owner_ = {{"apiVersion", "v1"}, {"kind", "Pod"},      {"name", pod},
              {"uid", uid},         {"controller", true}, {"blockOwnerDeletion", true}};
    return *this;
  }

  nlohmann::json Json() const {
    nlohmann::json meta = {{"name", name_}, {"namespace", ns_}};
    if (!uid_.empty()) meta["uid"] = uid_;
    if (!rv_.empty()) meta["resourceVersion"] = rv_;
    if (!owner_.is_null()) meta["ownerReferences"] = nlohmann::json::array({owner_});
    nlohmann::json devices = {{"requests", requests_}};
    if (!constraints_.empty()) devices["constraints"] = constraints_;
    nlohmann::json claim = {{"apiVersion", "resource.k8s.io/v1"},
                            {"kind", "ResourceClaim"},
                            {"metadata", meta},
                            {"spec", {{"devices", devices}}}};
    if (!allocation_.is_null() || !reserved_.empty()) {
      claim["status"] = nlohmann::json::object();
      if (!allocation_.is_null()) claim["status"]["allocation"] = allocation_;
      if (!reserved_.empty()) claim["status"]["reservedFor"] = reserved_;
    }
    return claim;
  }
  // The same claim's spec as a ResourceClaimTemplate named `name`.
  nlohmann::json TemplateJson() const {
    nlohmann::json c = Json();
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceClaimTemplate"},
            {"metadata", {{"name", name_}, {"namespace", ns_}}},
            {"spec", {{"spec", c["spec"]}}}};
  }

 private:
  std::string ns_, name_, uid_, rv_;
  nlohmann::json requests_ = nlohmann::json::array();
  nlohmann::json constraints_ = nlohmann::json::array();
  nlohmann::json allocation_;
  nlohmann::json reserved_ = nlohmann::json::array();
  nlohmann::json owner_;
};

// One allocation result, for ClaimObject::Allocated.
inline nlohmann::json Result(const std::string& request, const std::string& pool,
                             const std::string& device,
                             std::map<std::string, std::string> consumed = {},
                             const std::string& share_id = "") {
  nlohmann::json r = {
      {"request", request}, {"driver", kDraDriver}, {"pool", pool}, {"device", device}};
  if (!consumed.empty()) r["consumedCapacity"] = consumed;
  if (!share_id.empty()) r["shareID"] = share_id;
  return r;
}

// `pod` with spec.resourceClaims: (name in the pod, claim name) pairs, every container using all.
inline nlohmann::json WithClaims(nlohmann::json pod,
                                 const std::vector<std::pair<std::string, std::string>>& claims) {
  for (const auto& [name, claim] : claims) {
    pod["spec"]["resourceClaims"].push_back({{"name", name}, {"resourceClaimName", claim}});
    for (nlohmann::json& c : pod["spec"]["containers"]) {
      c["resources"]["claims"].push_back({{"name", name}});
    }
  }
  return pod;
}
// `pod` with one claim made from template `tmpl`; `generated` (optional) is the name the
// resourceclaim controller recorded in status.
inline nlohmann::json WithClaimTemplate(nlohmann::json pod, const std::string& name,
                                        const std::string& tmpl,
                                        const std::string& generated = "") {
  pod["spec"]["resourceClaims"].push_back({{"name", name}, {"resourceClaimTemplateName", tmpl}});
  for (nlohmann::json& c : pod["spec"]["containers"]) {
    c["resources"]["claims"].push_back({{"name", name}});
  }
  if (!generated.empty()) {
    pod["status"]["resourceClaimStatuses"].push_back(
        {{"name", name}, {"resourceClaimName", generated}});
  }
  return pod;
}

}  // namespace tessera::k8s::testing
