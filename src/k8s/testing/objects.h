// Builders of Node and Pod API objects (JSON, as the API server sends them) for the scheduler's
// unit and e2e tests:
//   json node = NodeObject("gpu-1").Gpus(8, "A100-80GB").NvSwitch().Json();
//   json pod = PodObject("ns", "p").Limit("tessera.dev/gpu-memory", "4Gi").Json();
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/strings.h"
#include "core/model/node.h"
#include "nlohmann/json.hpp"
#include "records/assignment.h"
#include "records/inventory.h"
#include "records/names.h"

namespace tessera::k8s::testing {

class NodeObject {
 public:
  explicit NodeObject(std::string name) : name_(std::move(name)) {}
  NodeObject& Gpus(int n, std::string model = "A100-80GB", int64_t memory_mib = 81920) {
    inventory_.gpus.clear();
    for (int i = 0; i < n; ++i) {
      core::GpuSpec g;
      g.index = i;
      g.uuid = StrCat("GPU-", name_, "-", i);
      g.model = model;
      g.memory_mib = memory_mib;
      g.numa_node = i < (n + 1) / 2 ? 0 : 1;
      inventory_.gpus.push_back(g);
    }
    inventory_.links = core::LinkMatrix::Pcie(n, 2, 2);
    has_inventory_ = true;
    return *this;
  }
  NodeObject& NvSwitch(int lanes = 12) {
    inventory_.links = core::LinkMatrix::AllNvLink(static_cast<int>(inventory_.gpus.size()), lanes);
    return *this;
  }
  // Every GPU in MIG mode, no instance configured yet (the model must have a MIG table).
  NodeObject& Mig() {
    for (core::GpuSpec& g : inventory_.gpus) g.mig_enabled = true;
    return *this;
  }
  // GPU `index` in MIG mode, no instance configured yet.
  NodeObject& Mig(int index) {
    inventory_.gpus[static_cast<size_t>(index)].mig_enabled = true;
    return *this;
  }
  NodeObject& Cpu(std::string cpu) {
    cpu_ = std::move(cpu);
    return *this;
  }
  NodeObject& Memory(std::string memory) {
    memory_ = std::move(memory);
    return *this;
  }
  NodeObject& Label(std::string k, std::string v) {
    labels_[std::move(k)] = std::move(v);
    return *this;
  }
  NodeObject& Cordoned() {
    unschedulable_ = true;
    return *this;
  }
  // A Ready condition with this status (none by default).
  NodeObject& Ready(bool ready = true) {
    ready_ = ready;
    return *this;
  }
  // Marks GPU `index` unhealthy in the inventory (the agent's `health` field).
  NodeObject& Unhealthy(int index, std::vector<int32_t> xids, std::string reason) {
    inventory_.health.resize(inventory_.gpus.size());
    inventory_.health[static_cast<size_t>(index)] =
        records::GpuHealth{false, std::move(xids), std::move(reason)};
    return *this;
  }
  // Replaces the inventory annotation with any text (for bad input).
  NodeObject& RawInventory(std::string text) {
    raw_inventory_ = std::move(text);
    return *this;
  }
  std::string InventoryJson() const { return records::InventoryToJson(inventory_); }

  nlohmann::json Json() const {
    nlohmann::json meta = {{"name", name_}};
    if (!labels_.empty()) meta["labels"] = labels_;
    if (raw_inventory_) {
      meta["annotations"] = {{std::string(records::kInventoryAnnotation), *raw_inventory_}};
    } else if (has_inventory_) {
      meta["annotations"] = {{std::string(records::kInventoryAnnotation), InventoryJson()}};
    }
    nlohmann::json resources = {{"cpu", cpu_}, {"memory", memory_}, {"pods", "110"}};
    if (has_inventory_) {
      resources[std::string(records::kGpuResource)] = std::to_string(inventory_.gpus.size());
    }
    nlohmann::json status = {{"capacity", resources}, {"allocatable", resources}};
    if (ready_) {
      status["conditions"] = {{{"type", "Ready"}, {"status", *ready_ ? "True" : "False"}}};
    }
    nlohmann::json node = {
        {"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", meta}, {"status", status}};
    if (unschedulable_) node["spec"] = {{"unschedulable", true}};
    return node;
  }

 private:
  std::string name_;
  std::string cpu_ = "64";
  std::string memory_ = "512Gi";
  std::map<std::string, std::string> labels_;
  records::Inventory inventory_;
  bool has_inventory_ = false;
  std::optional<std::string> raw_inventory_;
  bool unschedulable_ = false;
  std::optional<bool> ready_;
};

// An assignment of GPUs `gpus` of a node that NodeObject made (their UUIDs are
// "GPU-<node>-<gpu>"), each the same grant: a share of `memory_mib` and `compute_milli`, or,
// `exclusive`, the whole GPU.
inline records::Assignment GpuAssignment(const std::string& node, const std::vector<int>& gpus,
                                         int64_t memory_mib, int32_t compute_milli = 0,
                                         bool exclusive = false) {
  records::Assignment a;
  a.node = node;
  for (int gpu : gpus) {
    records::AssignedGpu g;
    g.grant.gpu = gpu;
    g.grant.memory_mib = memory_mib;
    g.grant.compute_milli = compute_milli;
    g.grant.exclusive = exclusive;
    g.uuid = StrCat("GPU-", node, "-", gpu);
    a.gpus.push_back(g);
  }
  return a;
}

// The same for one GPU.
inline records::Assignment OneGpuAssignment(const std::string& node, int gpu, int64_t memory_mib,
                                            int32_t compute_milli = 0, bool exclusive = false) {
  return GpuAssignment(node, {gpu}, memory_mib, compute_milli, exclusive);
}

class PodObject {
 public:
  PodObject(std::string ns, std::string name) : ns_(std::move(ns)), name_(std::move(name)) {}
  PodObject& Limit(const std::string& resource, const std::string& value) {
    limits_[resource] = value;
    return *this;
  }
  PodObject& Request(const std::string& resource, const std::string& value) {
    requests_[resource] = value;
    return *this;
  }
  PodObject& Annotation(const std::string& k, const std::string& v) {
    annotations_[k] = v;
    return *this;
  }
  PodObject& Gang(const std::string& name, int size, const std::string& topology = "") {
    Annotation(std::string(records::kGangAnnotation), name);
    Annotation(std::string(records::kGangSizeAnnotation), std::to_string(size));
    if (!topology.empty()) Annotation(std::string(records::kGangTopologyAnnotation), topology);
    return *this;
  }
  PodObject& Label(const std::string& k, const std::string& v) {
    labels_[k] = v;
    return *this;
  }
  // In the upstream PodGroup of this name (spec.schedulingGroup.podGroupName).
  PodObject& PodGroup(std::string name) {
    pod_group_ = std::move(name);
    return *this;
  }
  PodObject& Scheduler(std::string name) {
    scheduler_ = std::move(name);
    return *this;
  }
  PodObject& Priority(int p) {
    priority_ = p;
    return *this;
  }
  PodObject& Node(std::string node) {
    node_ = std::move(node);
    return *this;
  }
  PodObject& Phase(std::string phase) {
    phase_ = std::move(phase);
    return *this;
  }
  PodObject& Uid(std::string uid) {
    uid_ = std::move(uid);
    return *this;
  }
  // Bound with this assignment (spec.nodeName and the tessera.dev/assignment annotation).
  PodObject& Assigned(const records::Assignment& a) {
    node_ = a.node;
    Annotation(std::string(records::kAssignmentAnnotation), records::AssignmentToJson(a));
    return *this;
  }
  // A PodScheduled=False condition with this message, as the scheduler writes it.
  PodObject& Unschedulable(std::string message) {
    unschedulable_ = std::move(message);
    return *this;
  }
  PodObject& Created(std::string t) {
    created_ = std::move(t);
    return *this;
  }
  // Owned by a controller (ownerReferences, controller: true), as a ReplicaSet's pods are.
  PodObject& Controller(std::string kind, std::string name) {
    controller_ = {std::move(kind), std::move(name)};
    return *this;
  }

  nlohmann::json Json() const {
    nlohmann::json container = {{"name", "main"}, {"image", "registry.invalid/app:1"}};
    nlohmann::json resources = nlohmann::json::object();
    if (!limits_.empty()) resources["limits"] = limits_;
    if (!requests_.empty()) resources["requests"] = requests_;
    container["resources"] = resources;
    nlohmann::json spec = {{"schedulerName", scheduler_},
                           {"containers", nlohmann::json::array({container})}};
    if (priority_) spec["priority"] = *priority_;
    if (!node_.empty()) spec["nodeName"] = node_;
    if (!pod_group_.empty()) spec["schedulingGroup"] = {{"podGroupName", pod_group_}};
    nlohmann::json meta = {{"name", name_}, {"namespace", ns_}};
    if (!labels_.empty()) meta["labels"] = labels_;
    if (!uid_.empty()) meta["uid"] = uid_;
    if (!created_.empty()) meta["creationTimestamp"] = created_;
    if (!annotations_.empty()) meta["annotations"] = annotations_;
    if (controller_) {
      meta["ownerReferences"] = {{{"apiVersion", "apps/v1"},
                                  {"kind", controller_->first},
                                  {"name", controller_->second},
                                  {"uid", StrCat("uid-", controller_->second)},
                                  {"controller", true}}};
    }
    nlohmann::json pod = {
        {"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
    if (!phase_.empty()) pod["status"] = {{"phase", phase_}};
    if (!unschedulable_.empty()) {
      pod["status"]["conditions"] = {{{"type", "PodScheduled"},
                                      {"status", "False"},
                                      {"reason", "Unschedulable"},
                                      {"message", unschedulable_}}};
    }
    return pod;
  }

 private:
  std::string ns_, name_;
  std::map<std::string, std::string> limits_, requests_, annotations_, labels_;
  std::string pod_group_;
  std::string scheduler_ = "tessera";
  std::optional<int> priority_;
  std::string node_;
  std::string phase_ = "Pending";
  std::string uid_;
  std::string created_;
  std::string unschedulable_;
  std::optional<std::pair<std::string, std::string>> controller_;
};

// An upstream PodGroup (scheduling.k8s.io/v1beta1): gang with minCount, or basic (min_count 0).
inline nlohmann::json PodGroupJson(const std::string& ns, const std::string& name, int min_count,
                                   const std::string& topology_key = "") {
  nlohmann::json policy = min_count > 0 ? nlohmann::json{{"gang", {{"minCount", min_count}}}}
                                        : nlohmann::json{{"basic", nlohmann::json::object()}};
  nlohmann::json spec = {{"schedulingPolicy", policy}};
  if (!topology_key.empty()) {
    spec["schedulingConstraints"] = {{"topology", {{{"key", topology_key}}}}};
  }
  return {{"apiVersion", "scheduling.k8s.io/v1beta1"},
          {"kind", "PodGroup"},
          {"metadata", {{"name", name}, {"namespace", ns}, {"uid", StrCat("uid-", name)}}},
          {"spec", spec}};
}

}  // namespace tessera::k8s::testing
