// Built-in GPU server profiles: realistic GPU models, memory, SM counts, link matrices, NUMA
// layouts, CPU affinities and NICs of common servers. Sources: the public `nvidia-smi topo -m`
// samples under core/topology/testdata/ (dgx-a100, hgx-h100 and l40s-4gpu reproduce them link for
// link; a test checks it) and NVIDIA's published DGX/HGX system specifications.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/node.h"

namespace tessera::core {

struct Profile {
  std::string name;
  std::string description;
  int64_t cpu_milli = 0;   // default node CPU
  int64_t memory_mib = 0;  // default node memory
  std::vector<GpuSpec> gpus;
  LinkMatrix links;
  std::vector<NicSpec> nics;  // the NICs `nvidia-smi topo -m` lists, with their GPU relations
  // Nodes of one cluster-file entry with this profile share an NVLink domain (NVL72 trays): the
  // loader labels them tessera.dev/nvlink-domain=<entry name> unless a label is given.
  bool shared_nvlink_domain = false;
};

std::vector<std::string> ProfileNames();
[[nodiscard]] absl::StatusOr<Profile> FindProfile(std::string_view name);
// A node of `profile` named `name`, with no labels: its GPUs, links, NICs, CPU and memory (what
// a cluster file's `profile:` and the scheduler's scale-up templates give).
NodeSpec NodeOfProfile(const Profile& profile, std::string name);

// GPU model names tessera knows the memory and SM count of.
std::vector<std::string> KnownGpuModels();
// Memory (MiB) nvidia-smi reports for a GPU model name, when tessera knows it (0 otherwise).
int64_t KnownGpuMemoryMiB(std::string_view model);
// SM count for a GPU model name, when known (0 otherwise).
int32_t KnownSmCount(std::string_view model);
// NVLink lanes between two GPUs of an NVSwitch server of this model (A100: 12, H100: 18, ...).
int KnownNvSwitchLanes(std::string_view model);

}  // namespace tessera::core
