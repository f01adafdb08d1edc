// What a pod asks for. Quantities are integers in tessera's units (see DESIGN.md "Units").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::core {

// Interconnect level a multi-GPU pod asks its GPUs to share, best first.
enum class GpuTopology : uint8_t {
  kAny,         // no preference
  kNvLink,      // every pair joined by NVLink
  kPcieSwitch,  // every pair behind one PCIe switch (PIX) or NVLink
  kNuma,        // every GPU on one NUMA node
  kNode,        // every GPU on one node: what any single multi-GPU pod gets anyway
};

// "nvlink", "pcie-switch", "numa", "node", "any": the tessera.dev/topology annotation values.
inline std::string_view GpuTopologyName(GpuTopology t) {
  switch (t) {
    case GpuTopology::kAny:
      return "any";
    case GpuTopology::kNvLink:
      return "nvlink";
    case GpuTopology::kPcieSwitch:
      return "pcie-switch";
    case GpuTopology::kNuma:
      return "numa";
    case GpuTopology::kNode:
      return "node";
  }
  return "?";
}
inline std::optional<GpuTopology> ParseGpuTopology(std::string_view name) {
  for (GpuTopology t : {GpuTopology::kAny, GpuTopology::kNvLink, GpuTopology::kPcieSwitch,
                        GpuTopology::kNuma, GpuTopology::kNode}) {
    if (GpuTopologyName(t) == name) return t;
  }
  return std::nullopt;
}

// How a share of a GPU is enforced on the node: the CUDA shim in each container, or NVIDIA's MPS
// daemon for the GPU. The two cannot serve one GPU at once (MPS wants the GPU in exclusive-process
// mode), so the mode is part of the fit: a GPU's shares all use one mode.
enum class ShareMode : uint8_t { kShim = 0, kMps = 1 };

struct GpuAsk {
  enum class Kind : uint8_t {
    kNone,      // CPU-only pod
    kWhole,     // `count` whole GPUs, exclusive
    kShare,     // a share of one GPU: memory_mib and/or compute_milli (0 = best effort)
    kFraction,  // trace style: fraction_milli/1000 of one GPU's compute and memory
    kMig,       // one MIG instance of profile `mig_profile` ("1g.10gb") on a MIG-enabled GPU
  };
  Kind kind = Kind::kNone;
  int32_t count = 0;                         // kWhole
  int64_t memory_mib = 0;                    // kShare
  int32_t compute_milli = 0;                 // kShare; 0 = best-effort time sharing
  int32_t fraction_milli = 0;                // kFraction, 1..999
  GpuTopology topology = GpuTopology::kAny;  // kWhole with count > 1
  bool topology_required = false;            // refuse sets below `topology`
  std::string mig_profile;                   // kMig: a profile name of model/mig.h
  ShareMode mode = ShareMode::kShim;         // kShare, kFraction: how the share is enforced

  static GpuAsk None() { return {}; }
  static GpuAsk Whole(int32_t n) {
    GpuAsk a;
    a.kind = Kind::kWhole;
    a.count = n;
    return a;
  }
  static GpuAsk Share(int64_t memory_mib, int32_t compute_milli) {
    GpuAsk a;
    a.kind = Kind::kShare;
    a.memory_mib = memory_mib;
    a.compute_milli = compute_milli;
    return a;
  }
  static GpuAsk Fraction(int32_t milli) {
    GpuAsk a;
    a.kind = Kind::kFraction;
    a.fraction_milli = milli;
    return a;
  }
  static GpuAsk Mig(std::string profile) {
    GpuAsk a;
    a.kind = Kind::kMig;
    a.mig_profile = std::move(profile);
    return a;
  }

  // Two asks are equal when they ask for the same thing; every field counts (one list, here).
  bool operator==(const GpuAsk&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const GpuAsk& a) {
    return H::combine(std::move(h), a.kind, a.count, a.memory_mib, a.compute_milli,
                      a.fraction_milli, a.topology, a.topology_required, a.mig_profile, a.mode);
  }

  // GPUs this ask touches (0, 1 or count).
  int32_t gpu_count() const { return kind == Kind::kNone ? 0 : kind == Kind::kWhole ? count : 1; }
  // Compute in milli-GPU it reserves in total (whole GPUs count 1000 each).
  int64_t compute_milli_total() const {
    switch (kind) {
      case Kind::kNone:
        return 0;
      case Kind::kWhole:
        return 1000LL * count;
      case Kind::kShare:
        return compute_milli;
      case Kind::kFraction:
        return fraction_milli;
      case Kind::kMig:
        return 0;  // depends on the GPU model's profile table
    }
    return 0;
  }
};

// Membership in a gang: all `size` members are placed together or none is. An elastic gang
// (0 < min < size) starts once `min` members fit together and grows to `size` as room appears
// (Engine::PlaceElasticGang); under preemption it keeps at least `min` (core/preemption).
struct GangAsk {
  std::string name;
  int32_t size = 0;
  std::string level;      // topology level ("nvlink-domain", "rack", ...); empty = anywhere
  bool required = false;  // required: inside one domain of `level` or not at all
  int32_t min = 0;        // elastic: the fewest members it runs with; 0 = size (all or nothing)
  // The fewest members the gang runs with (size when not elastic).
  int32_t min_members() const { return min > 0 && min < size ? min : size; }
  bool elastic() const { return min > 0 && min < size; }
  bool operator==(const GangAsk&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const GangAsk& g) {
    return H::combine(std::move(h), g.name, g.size, g.min, g.level, g.required);
  }
};

// A pod's ask. Equality and hashing cover every field, so that whoever asks "did this pod's
// request change?" or keys a cache by requests uses this one definition (a field added here is
// compared everywhere).
struct PodRequest {
  std::string name;
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  GpuAsk gpu;
  std::vector<std::string> gpu_models;  // allowed GPU models; empty = any
  int32_t priority = 0;
  std::optional<GangAsk> gang;

  bool operator==(const PodRequest&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const PodRequest& r) {
    return H::combine(std::move(h), r.name, r.cpu_milli, r.memory_mib, r.gpu, r.gpu_models,
                      r.priority, r.gang);
  }
};

// Memory a share or fraction reserves on a GPU with `gpu_memory_mib` of memory. Fractions round
// down, so that fractions summing to at most one whole GPU always fit its memory too.
inline int64_t ShareMemoryOn(const GpuAsk& ask, int64_t gpu_memory_mib) {
  if (ask.kind == GpuAsk::Kind::kShare) return ask.memory_mib;
  if (ask.kind == GpuAsk::Kind::kFraction) {
    return gpu_memory_mib * ask.fraction_milli / 1000;
  }
  return gpu_memory_mib;
}
inline int32_t ShareComputeOn(const GpuAsk& ask) {
  if (ask.kind == GpuAsk::Kind::kShare) return ask.compute_milli;
  if (ask.kind == GpuAsk::Kind::kFraction) return ask.fraction_milli;
  return 1000;
}

}  // namespace tessera::core
