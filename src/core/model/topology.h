// The pairwise GPU link matrix of one node, as `nvidia-smi topo -m` reports it, and the bandwidth
// model tessera ranks links by. Plain data: the engine never probes hardware.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::core {

// Ordered from the best to the worst connection, as nvidia-smi's legend describes them.
enum class LinkKind : uint8_t {
  kSelf,    // X: the same GPU
  kNvLink,  // NV#: a bonded set of # NVLinks (directly or through NVSwitch)
  kPix,     // at most one PCIe bridge (same PCIe switch)
  kPxb,     // several PCIe bridges, not the host bridge
  kPhb,     // through a PCIe host bridge (same CPU)
  kNode,    // between PCIe host bridges within one NUMA node
  kSys,     // across the inter-socket (SMP) link
};

struct Link {
  LinkKind kind = LinkKind::kSys;
  uint8_t nvlink_lanes = 0;  // only for kNvLink
  bool operator==(const Link&) const = default;
};

// "X", "NV12", "PIX", ... as nvidia-smi prints it.
std::string LinkName(Link link);
// Parses "X", "NV#", "PIX", "PXB", "PHB", "NODE", "SYS".
[[nodiscard]] absl::StatusOr<Link> ParseLinkName(std::string_view text);

// NVLink generation, which sets the per-lane rate. Derived from the GPU model name.
enum class NvLinkGeneration : uint8_t { kNv2 = 2, kNv3 = 3, kNv4 = 4, kNv5 = 5 };
NvLinkGeneration NvLinkGenerationForModel(std::string_view gpu_model);

// The bandwidth model, bidirectional GB/s between two GPUs. One table, documented in
// docs/topology.md:
//   NVLink     lanes x per-lane rate: NVLink2/3/4 50 GB/s per lane, NVLink5 100 GB/s per lane
//              (A100 NV12 = 600, H100 NV18 = 900, B200/GB200 NV18 = 1800)
//   PIX  64    one PCIe Gen4 x16 switch hop, both directions
//   PXB  48    several bridges share the uplink
//   PHB  40    through the host bridge
//   NODE 32    across host bridges of one socket
//   SYS  20    across the inter-socket link
int32_t LinkBandwidthGBps(Link link, NvLinkGeneration generation);

// Symmetric n x n matrix; the diagonal is kSelf.
class LinkMatrix {
 public:
  LinkMatrix() = default;
  explicit LinkMatrix(int n, Link fill = Link{LinkKind::kSys, 0});

  int size() const { return n_; }
  Link at(int i, int j) const { return links_[static_cast<size_t>(i) * n_ + j]; }
  void Set(int i, int j, Link link);  // sets both (i, j) and (j, i)

  // Every pair joined by `lanes` NVLinks (an NVSwitch server).
  static LinkMatrix AllNvLink(int n, int lanes);
  // PCIe only: GPUs grouped `per_switch` behind a PCIe switch (PIX), switches grouped
  // `switches_per_socket` under one socket (NODE within, SYS across).
  static LinkMatrix Pcie(int n, int per_switch, int switches_per_socket);

  bool operator==(const LinkMatrix&) const = default;

 private:
  int n_ = 0;
  std::vector<Link> links_;
};

}  // namespace tessera::core
