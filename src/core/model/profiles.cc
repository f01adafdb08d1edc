#include "core/model/profiles.h"

#include "common/strings.h"

namespace tessera::core {
namespace {

struct ModelFacts {
  std::string_view model;
  int64_t memory_mib;
  int32_t sm_count;
  int nvswitch_lanes;
};

// Memory as nvidia-smi reports it; SM counts from NVIDIA's data sheets.
constexpr ModelFacts kModels[] = {
    {"A100-40GB", 40960, 108, 12},
    {"A100-80GB", 81920, 108, 12},
    {"A100-PCIE-80GB", 81920, 108, 12},
    {"H100-80GB", 81559, 132, 18},
    {"H200-141GB", 143771, 132, 18},
    {"GB200", 189471, 148, 18},
    {"B200", 183359, 148, 18},
    {"L40S-48GB", 46068, 142, 0},
    {"L4", 23034, 58, 0},
    {"T4", 15360, 40, 0},
    {"V100-16GB", 16384, 80, 6},
    {"V100-32GB", 32768, 80, 6},
};

const ModelFacts* Facts(std::string_view model) {
  for (const ModelFacts& f : kModels) {
    if (f.model == model) return &f;
  }
  return nullptr;
}

std::vector<GpuSpec> Gpus(std::string_view model, const std::vector<int>& numa,
                          const std::vector<std::string>& cpu_affinity) {
  const ModelFacts* f = Facts(model);
  std::vector<GpuSpec> gpus;
  for (size_t i = 0; i < numa.size(); ++i) {
    GpuSpec g;
    g.index = static_cast<int32_t>(i);
    g.model = std::string(model);
    g.memory_mib = f ? f->memory_mib : 0;
    g.sm_count = f ? f->sm_count : 0;
    g.numa_node = numa[i];
    g.cpu_affinity = cpu_affinity[i];
    gpus.push_back(std::move(g));
  }
  return gpus;
}

// A NIC with its relation to each GPU, given as nvidia-smi names.
NicSpec Nic(std::string name, std::string device, const std::vector<std::string_view>& links) {
  NicSpec nic{std::move(name), std::move(device), {}};
  for (std::string_view l : links) nic.gpu_links.push_back(*ParseLinkName(l));
  return nic;
}

std::vector<Profile> BuildProfiles() {
  std::vector<Profile> out;
  {
    // DGX A100 (testdata/dgx_a100.txt): 6 NVSwitches, 12 NVLink3 per GPU, NV12 for every pair;
    // 2 x EPYC 7742 (64 cores, SMT) in NPS4: GPU pairs on NUMA 3, 1, 7, 5. Each GPU pair shares a
    // PCIe switch with two ConnectX-6 compute NICs (PXB); two storage NICs hang off NUMA 1's
    // root and are SYS to every GPU. 2 TiB of host memory.
    Profile p;
    p.name = "dgx-a100";
    p.description = "NVIDIA DGX A100: 8 x A100-80GB, NVSwitch (NV12 all pairs), 2 x EPYC 7742 NPS4";
    p.cpu_milli = 256'000;
    p.memory_mib = 2 * 1024 * 1024;
    const std::string a = "48-63,176-191", b = "16-31,144-159", c = "112-127,240-255",
                      d = "80-95,208-223";
    p.gpus = Gpus("A100-80GB", {3, 3, 1, 1, 7, 7, 5, 5}, {a, a, b, b, c, c, d, d});
    p.links = LinkMatrix::AllNvLink(8, 12);
    for (int n = 0; n < 10; ++n) {
      std::vector<std::string_view> links(8, "SYS");
      if (n < 8) links[(n / 2) * 2] = links[(n / 2) * 2 + 1] = "PXB";
      p.nics.push_back(Nic(StrCat("NIC", n), StrCat("mlx5_", n), links));
    }
    out.push_back(std::move(p));
  }
  {
    // HGX H100 (testdata/hgx_h100.txt; NVIDIA/nccl#1264): 4 NVSwitches, 18 NVLink4 per GPU, NV18
    // all pairs; GPUs 0-3 on NUMA 0, 4-7 on NUMA 1; one 400G NIC per GPU behind its PCIe switch
    // (PIX), NODE to the other GPUs of its socket, SYS across. 2 x Xeon 8480C (56 cores, SMT)
    // and 2 TiB as in DGX H100.
    Profile p;
    p.name = "hgx-h100";
    p.description = "NVIDIA HGX H100: 8 x H100-80GB, NVSwitch (NV18 all pairs), 2 sockets, 8 NICs";
    p.cpu_milli = 224'000;
    p.memory_mib = 2 * 1024 * 1024;
    const std::string s0 = "0-55,112-167", s1 = "56-111,168-223";
    p.gpus = Gpus("H100-80GB", {0, 0, 0, 0, 1, 1, 1, 1}, {s0, s0, s0, s0, s1, s1, s1, s1});
    p.links = LinkMatrix::AllNvLink(8, 18);
    for (int n = 0; n < 8; ++n) {
      std::vector<std::string_view> links;
      for (int g = 0; g < 8; ++g) links.push_back(g == n ? "PIX" : g / 4 == n / 4 ? "NODE" : "SYS");
      p.nics.push_back(Nic(StrCat("NIC", n), StrCat("mlx5_", n), links));
    }
    out.push_back(std::move(p));
  }
  {
    // A generic two-socket PCIe server: 8 GPUs, two per PCIe switch (PIX), two switches per
    // socket on separate root ports (NODE), SYS across; a NIC behind the first switch of each
    // socket. 2 x 32 cores with SMT, 1 TiB.
    Profile p;
    p.name = "pcie-8gpu";
    p.description = "8 x A100-PCIE-80GB, two per PCIe switch, four switches, two sockets";
    p.cpu_milli = 128'000;
    p.memory_mib = 1024 * 1024;
    const std::string s0 = "0-31,64-95", s1 = "32-63,96-127";
    p.gpus = Gpus("A100-PCIE-80GB", {0, 0, 0, 0, 1, 1, 1, 1}, {s0, s0, s0, s0, s1, s1, s1, s1});
    p.links = LinkMatrix::Pcie(8, 2, 2);
    p.nics.push_back(
        Nic("NIC0", "mlx5_0", {"PIX", "PIX", "NODE", "NODE", "SYS", "SYS", "SYS", "SYS"}));
    p.nics.push_back(
        Nic("NIC1", "mlx5_1", {"SYS", "SYS", "SYS", "SYS", "PIX", "PIX", "NODE", "NODE"}));
    out.push_back(std::move(p));
  }
  {
    // 4 x L40S on PCIe (testdata/l40s_4gpu.txt): two per socket on separate root ports (NODE),
    // SYS across; two NICs on socket 1. 2 x 96 cores with SMT, 768 GiB.
    Profile p;
    p.name = "l40s-4gpu";
    p.description = "4 x L40S-48GB PCIe, two per socket, no NVLink";
    p.cpu_milli = 384'000;
    p.memory_mib = 768 * 1024;
    const std::string s0 = "0-95,192-287", s1 = "96-191,288-383";
    p.gpus = Gpus("L40S-48GB", {0, 0, 1, 1}, {s0, s0, s1, s1});
    p.links = LinkMatrix::Pcie(4, 1, 2);
    p.nics.push_back(Nic("NIC0", "mlx5_0", {"SYS", "SYS", "NODE", "NODE"}));
    p.nics.push_back(Nic("NIC1", "mlx5_1", {"SYS", "SYS", "NODE", "NODE"}));
    out.push_back(std::move(p));
  }
  {
    // One compute tray of a GB200 NVL72 rack: 2 superchips, each a 72-core Grace (no SMT) with
    // two Blackwell GPUs; NV18 (NVLink5) within the tray; Grace 0 has GPUs 0-1 (NUMA 0, cores
    // 0-71), Grace 1 GPUs 2-3 (NUMA 1, cores 72-143); 2 x 480 GB LPDDR5X. All 18 trays of a rack
    // share one NVLink domain through the NVLink switch trays: the cluster loader labels them.
    Profile p;
    p.name = "gb200-nvl72-tray";
    p.description = "GB200 NVL72 compute tray: 4 x GB200, NV18; trays of a rack share a domain";
    p.cpu_milli = 144'000;
    p.memory_mib = 960 * 1024;
    p.gpus = Gpus("GB200", {0, 0, 1, 1}, {"0-71", "0-71", "72-143", "72-143"});
    p.links = LinkMatrix::AllNvLink(4, 18);
    p.shared_nvlink_domain = true;
    out.push_back(std::move(p));
  }
  return out;
}

const std::vector<Profile>& Profiles() {
  static const std::vector<Profile> kProfiles = BuildProfiles();
  return kProfiles;
}

}  // namespace

std::vector<std::string> ProfileNames() {
  std::vector<std::string> names;
  for (const Profile& p : Profiles()) names.push_back(p.name);
  return names;
}

absl::StatusOr<Profile> FindProfile(std::string_view name) {
  for (const Profile& p : Profiles()) {
    if (p.name == name) return p;
  }
  return absl::NotFoundError(
      StrCat("unknown profile \"", name, "\"; built-in profiles: ", StrJoin(ProfileNames(), ", ")));
}

NodeSpec NodeOfProfile(const Profile& profile, std::string name) {
  NodeSpec node;
  node.name = std::move(name);
  node.gpus = profile.gpus;
  node.links = profile.links;
  node.nics = profile.nics;
  node.cpu_milli = profile.cpu_milli;
  node.memory_mib = profile.memory_mib;
  return node;
}

std::vector<std::string> KnownGpuModels() {
  std::vector<std::string> out;
  for (const ModelFacts& f : kModels) out.emplace_back(f.model);
  return out;
}

int64_t KnownGpuMemoryMiB(std::string_view model) {
  const ModelFacts* f = Facts(model);
  return f ? f->memory_mib : 0;
}

int32_t KnownSmCount(std::string_view model) {
  const ModelFacts* f = Facts(model);
  return f ? f->sm_count : 0;
}

int KnownNvSwitchLanes(std::string_view model) {
  const ModelFacts* f = Facts(model);
  return f && f->nvswitch_lanes > 0 ? f->nvswitch_lanes : 12;
}

}  // namespace tessera::core
