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
    {"A100-40GB", 40960, 108, 12},  {"A100-80GB", 81920, 108, 12},
    {"A100-PCIE-80GB", 81920, 108, 12}, {"H100-80GB", 81559, 132, 18},
    {"H200-141GB", 143771, 132, 18}, {"GB200", 189471, 148, 18},
    {"B200", 183359, 148, 18},      {"L40S-48GB", 46068, 142, 0},
    {"L4", 23034, 58, 0},           {"T4", 15360, 40, 0},
    {"V100-16GB", 16384, 80, 6},    {"V100-32GB", 32768, 80, 6},
};

const ModelFacts* Facts(std::string_view model) {
  for (const ModelFacts& f : kModels) {
    if (f.model == model) return &f;
  }
  return nullptr;
}

std::vector<GpuSpec> Gpus(std::string_view model, int n, const std::vector<int>& numa) {
  const ModelFacts* f = Facts(model);
  std::vector<GpuSpec> gpus;
  for (int i = 0; i < n; ++i) {
    GpuSpec g;
    g.index = i;
    g.model = std::string(model);
    g.memory_mib = f ? f->memory_mib : 0;
    g.sm_count = f ? f->sm_count : 0;
    g.numa_node = numa.empty() ? -1 : numa[i];
    gpus.push_back(std::move(g));
  }
  return gpus;
}

std::vector<Profile> BuildProfiles() {
  std::vector<Profile> out;
  {
    // DGX A100: 6 NVSwitches, 12 NVLink3 per GPU, NV12 for every pair; NPS4 NUMA (3,3,1,1,7,7,5,5).
    Profile p;
    p.name = "dgx-a100";
    p.description = "NVIDIA DGX A100: 8 x A100-80GB, NVSwitch (NV12 all pairs), 2 x EPYC 7742";
    p.cpu_milli = 256'000;
    p.memory_mib = 2 * 1024 * 1024;
    p.gpus = Gpus("A100-80GB", 8, {3, 3, 1, 1, 7, 7, 5, 5});
    p.links = LinkMatrix::AllNvLink(8, 12);
    out.push_back(std::move(p));
  }
  {
    // HGX H100: 4 NVSwitches, 18 NVLink4 per GPU, NV18 all pairs; GPUs 0-3 NUMA 0, 4-7 NUMA 1.
    Profile p;
    p.name = "hgx-h100";
    p.description = "NVIDIA HGX H100: 8 x H100-80GB, NVSwitch (NV18 all pairs), 2 sockets";
    p.cpu_milli = 224'000;
    p.memory_mib = 2 * 1024 * 1024;
    p.gpus = Gpus("H100-80GB", 8, {0, 0, 0, 0, 1, 1, 1, 1});
    p.links = LinkMatrix::AllNvLink(8, 18);
    out.push_back(std::move(p));
  }
  {
    // 8 PCIe GPUs, two per PCIe switch (PIX), two switches per socket (NODE), SYS across.
    Profile p;
    p.name = "pcie-8gpu";
    p.description = "8 x A100-PCIE-80GB, two per PCIe switch, four switches, two sockets";
    p.cpu_milli = 128'000;
    p.memory_mib = 1024 * 1024;
    p.gpus = Gpus("A100-PCIE-80GB", 8, {0, 0, 0, 0, 1, 1, 1, 1});
    p.links = LinkMatrix::Pcie(8, 2, 2);
    out.push_back(std::move(p));
  }
  {
    // 4 x L40S on PCIe, two per socket, no NVLink.
    Profile p;
    p.name = "l40s-4gpu";
    p.description = "4 x L40S-48GB PCIe, two per socket";
    p.cpu_milli = 64'000;
    p.memory_mib = 512 * 1024;
    p.gpus = Gpus("L40S-48GB", 4, {0, 0, 1, 1});
    p.links = LinkMatrix::Pcie(4, 1, 2);
    out.push_back(std::move(p));
  }
  {
    // One compute tray of a GB200 NVL72 rack: 2 superchips, 4 Blackwell GPUs, NV18 within the
    // tray; all 18 trays of a rack share one NVLink domain through the NVLink switch trays.
    Profile p;
    p.name = "gb200-nvl72-tray";
    p.description = "GB200 NVL72 compute tray: 4 x GB200, NV18; trays of a rack share a domain";
    p.cpu_milli = 144'000;
    p.memory_mib = 960 * 1024;
    p.gpus = Gpus("GB200", 4, {0, 0, 1, 1});
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
  return absl::NotFoundError(StrCat("unknown profile \"", name,
                                    "\"; built-in profiles: ", StrJoin(ProfileNames(), ", ")));
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
