// Builders that make tests readable:
//   Cluster c = ClusterBuilder().Node("a").Cpu(64).Gpus(8, "A100-80GB").NvSwitch().Build();
//   Engine e(c, MakePolicy("tessera"));
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "core/model/cluster.h"
#include "core/model/profiles.h"
#include "core/model/request.h"
#include "core/policy/policy.h"

namespace tessera::core::testing {

class ClusterBuilder {
 public:
  ClusterBuilder& Node(std::string name) {
    nodes_.emplace_back();
    nodes_.back().name = std::move(name);
    nodes_.back().cpu_milli = 64'000;
    nodes_.back().memory_mib = 512 * 1024;
    return *this;
  }
  ClusterBuilder& Cpu(int64_t cores) {
    nodes_.back().cpu_milli = cores * 1000;
    return *this;
  }
  ClusterBuilder& MemoryGi(int64_t gi) {
    nodes_.back().memory_mib = gi * 1024;
    return *this;
  }
  ClusterBuilder& Label(std::string key, std::string value) {
    nodes_.back().labels[std::move(key)] = std::move(value);
    return *this;
  }
  // `n` GPUs of `model` with `memory_mib` each (default: the model's known memory or 80Gi), PCIe
  // links two per switch.
  ClusterBuilder& Gpus(int n, std::string model, int64_t memory_mib = 0) {
    NodeSpec& node = nodes_.back();
    if (memory_mib == 0) memory_mib = KnownGpuMemoryMiB(model);
    if (memory_mib == 0) memory_mib = 81920;
    node.gpus.clear();
    for (int i = 0; i < n; ++i) {
      GpuSpec g;
      g.index = i;
      g.model = model;
      g.memory_mib = memory_mib;
      g.numa_node = i < (n + 1) / 2 ? 0 : 1;
      node.gpus.push_back(g);
    }
    node.links = LinkMatrix::Pcie(n, 2, 2);
    return *this;
  }
  ClusterBuilder& NvSwitch(int lanes = 12) {
    nodes_.back().links = LinkMatrix::AllNvLink(nodes_.back().gpu_count(), lanes);
    return *this;
  }
  // Puts every GPU of the node in MIG mode, each with the given configured instances
  // ({profile name, start}; all idle).
  ClusterBuilder& Mig(const std::vector<std::pair<std::string, int>>& layout = {}) {
    for (GpuSpec& g : nodes_.back().gpus) {
      g.mig_enabled = true;
      g.mig_layout.clear();
      const MigModel* model = FindMigModel(g.model);
      TESSERA_CHECK_MSG(model != nullptr, "no MIG table for this model");
      for (const auto& [profile, start] : layout) {
        int p = model->Find(profile);
        TESSERA_CHECK_MSG(p >= 0, "unknown MIG profile");
        g.mig_layout.push_back(MigPlacement{static_cast<int8_t>(p), static_cast<int8_t>(start)});
      }
    }
    return *this;
  }
  ClusterBuilder& Links(LinkMatrix m) {
    nodes_.back().links = std::move(m);
    return *this;
  }
  ClusterBuilder& Profile(const std::string& name) {
    absl::StatusOr<core::Profile> p = FindProfile(name);
    TESSERA_CHECK(p.ok());
    NodeSpec& node = nodes_.back();
    node.gpus = p->gpus;
    node.links = p->links;
    node.cpu_milli = p->cpu_milli;
    node.memory_mib = p->memory_mib;
    return *this;
  }
  Cluster Build() {
    absl::StatusOr<Cluster> c = Cluster::Create(nodes_);
    TESSERA_CHECK_MSG(c.ok(), std::string(c.status().message()).c_str());
    return *std::move(c);
  }

 private:
  std::vector<NodeSpec> nodes_;
};

// A built-in policy by name (CreatePolicy); a name it does not know stops the test binary.
inline std::unique_ptr<Policy> MakePolicy(std::string_view name, PolicyOptions options = {}) {
  absl::StatusOr<std::unique_ptr<Policy>> p = CreatePolicy(name, options);
  TESSERA_CHECK_MSG(p.ok(), "no such policy in the test");
  return *std::move(p);
}

inline PodRequest Pod(std::string name, GpuAsk gpu, int64_t cpu_milli = 1000,
                      int64_t memory_mib = 1024) {
  PodRequest r;
  r.name = std::move(name);
  r.cpu_milli = cpu_milli;
  r.memory_mib = memory_mib;
  r.gpu = gpu;
  return r;
}

// The reality check's cluster: an 8-GPU NVSwitch server and a 2-GPU PCIe server, 80Gi GPUs.
inline Cluster RealityCheckCluster() {
  return ClusterBuilder()
      .Node("nvswitch-0")
      .Cpu(128)
      .MemoryGi(1024)
      .Gpus(8, "A100-80GB")
      .NvSwitch(12)
      .Node("pcie-0")
      .Cpu(32)
      .MemoryGi(256)
      .Gpus(2, "A100-80GB")
      .Build();
}

// Two 8-GPU A100-80GB NVSwitch servers, "a" and "b" (each one NVLink domain), with the builder's
// default CPU and memory: the gang, elastic-gang, preemption and defrag tests' common world.
inline Cluster TwoNvSwitchServers() {
  return ClusterBuilder()
      .Node("a")
      .Gpus(8, "A100-80GB")
      .NvSwitch()
      .Node("b")
      .Gpus(8, "A100-80GB")
      .NvSwitch()
      .Build();
}

}  // namespace tessera::core::testing
