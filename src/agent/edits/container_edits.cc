#include "agent/edits/container_edits.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "common/strings.h"
#include "shim/contract.h"
#include "shim/segments.h"

namespace tessera::agent {
namespace {

namespace contract = shim::contract;

// The driver's nodes every CUDA process opens besides its GPUs', when the host has them.
constexpr const char* kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};

// What an operator can do when a share cannot get the shim.
constexpr char kShimHint[] =
    " (install the shim with the agent's DaemonSet, check --shim-dir and --driver-lib-dir, or, in "
    "DRA mode, run the agent with --share-enforcement=none)";

void SetEnv(ContainerEdits* e, std::string key, std::string value) {
  for (auto& [k, v] : e->env) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  e->env.emplace_back(std::move(key), std::move(value));
}

// The node /dev/<name> as the agent finds it under dev_dir, named by its host path.
absl::StatusOr<DeviceNode> Node(const EditsOptions& o, const std::string& name) {
  const std::string seen = StrCat(o.dev_dir, "/", name);
  absl::StatusOr<DeviceNumber> number = o.lookup(seen);
  if (!number.ok()) return number.status();
  std::string host = seen;
  if (!o.host_root.empty() && host.starts_with(o.host_root + "/")) {
    host = host.substr(o.host_root.size());
  }
  return DeviceNode{StrCat("/dev/", name), number->type, number->major, number->minor, host};
}

// The shim and the driver behind it, for a share the shim enforces: found when the agent started
// (pods/driver_files.h), and still there now.
absl::Status CheckShimFiles(const ContainerGrant& grant, const EditsOptions& o) {
  const DriverLibraries& d = o.driver;
  std::vector<std::string> missing;
  if (d.cuda.host_path.empty()) missing.push_back("the driver's libcuda.so.1");
  if (d.nvml.host_path.empty()) missing.push_back("the driver's libnvidia-ml.so.1");
  if (d.shim_cuda.empty()) missing.push_back(contract::kShimCudaLibrary);
  if (d.shim_nvml.empty()) missing.push_back(contract::kShimNvmlLibrary);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        StrCat(grant.owner,
               " has a share of a GPU, enforced by the CUDA shim, but the agent cannot put the "
               "shim into its containers: ",
               StrJoin(missing, ", "), " not found", kShimHint));
  }
  for (const auto& [path, what] :
       {std::pair{&d.shim_cuda, "the CUDA shim"}, std::pair{&d.shim_nvml, "the NVML shim"},
        std::pair{&d.cuda.host_path, "the driver's CUDA library"},
        std::pair{&d.nvml.host_path, "the driver's NVML library"}}) {
    if (!o.file_exists(o.host_root + *path)) {
      return absl::FailedPreconditionError(StrCat(
          what, " ", *path, " is missing on this node: the share cannot be enforced", kShimHint));
    }
  }
  if (grant.segments_dir.empty()) {
    return absl::InternalError(
        StrCat(grant.owner, " holds a share but no folder for the shim's segments"));
  }
  return absl::OkStatus();
}

}  // namespace

const char* SharingName(Sharing s) {
  switch (s) {
    case Sharing::kNone:
      return "none";
    case Sharing::kShim:
      return "shim";
    case Sharing::kMps:
      return "mps";
    case Sharing::kUnenforced:
      return "unenforced";
  }
  return "?";
}

absl::StatusOr<DeviceNumber> StatDevice(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(StrCat(path, ": ", std::strerror(errno)));
  }
  if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) {
    return absl::FailedPreconditionError(StrCat(path, " is not a device node"));
  }
  return DeviceNumber{S_ISCHR(st.st_mode) ? 'c' : 'b', static_cast<int64_t>(major(st.st_rdev)),
                      static_cast<int64_t>(minor(st.st_rdev))};
}

bool FileExists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<SegmentFile> SegmentFiles(const std::string& segment_dir, const std::string& uuid) {
  const shim::SegmentPaths host = shim::PathsFor(segment_dir, uuid);
  return {{host.limits, StrCat(contract::kLimitsDir, "/", uuid, contract::kLimitsSuffix), true},
          {host.ledger, StrCat(contract::kLedgerDir, "/", uuid, contract::kLedgerSuffix), false}};
}

absl::StatusOr<ContainerEdits> ContainerEditsFor(const ContainerGrant& grant,
                                                 const EditsOptions& options,
                                                 const mps::ContainerEdits* mps) {
  ContainerEdits e;
  if (grant.gpus.empty()) return e;  // a grant without GPUs: nothing to deliver
  std::vector<std::string> visible;  // what NVIDIA_VISIBLE_DEVICES names, each once
  for (const ContainerGrant::Gpu& g : grant.gpus) {
    if (g.mig() && g.mig_uuid.empty()) {
      return absl::FailedPreconditionError(
          StrCat(grant.owner, " is assigned MIG instance ", g.mig_profile, "@", g.mig_start,
                 " of GPU ", g.index, " (", g.uuid,
                 "), whose identity (MIG-...) the agent does not know on this node"));
    }
    const std::string& id = g.mig() ? g.mig_uuid : g.uuid;
    if (std::find(visible.begin(), visible.end(), id) == visible.end()) visible.push_back(id);
  }

  // The devices.
  const bool cdi = !options.cdi_kind.empty();
  if (cdi) {
    for (const ContainerGrant::Gpu& g : grant.gpus) {
      e.cdi_devices.push_back(StrCat(options.cdi_kind, "=", g.mig() ? g.mig_uuid : g.uuid));
      e.gpu_nodes.push_back(-1);
    }
  } else {
    std::map<int32_t, int> node_of_minor;  // MIG instances of one GPU share its node
    for (const ContainerGrant::Gpu& g : grant.gpus) {
      auto [it, added] = node_of_minor.emplace(g.minor, static_cast<int>(e.devices.size()));
      e.gpu_nodes.push_back(it->second);
      if (!added) continue;
      absl::StatusOr<DeviceNode> node = Node(options, StrCat("nvidia", g.minor));
      if (!node.ok()) {
        return absl::FailedPreconditionError(StrCat("the device node of GPU ", g.index, " (",
                                                    g.uuid,
                                                    ") is missing: ", node.status().message()));
      }
      e.devices.push_back(std::move(*node));
    }
    for (const char* control : kControlNodes) {
      absl::StatusOr<DeviceNode> node = Node(options, control);
      if (!node.ok()) continue;  // nvidia-uvm is loaded on demand; not every node has them all
      e.devices.push_back(std::move(*node));
    }
  }

  // The environment.
  SetEnv(&e, kEnvVisibleDevices, StrJoin(visible, ","));
  if (grant.sharing != Sharing::kNone) {
    SetEnv(&e, contract::kEnvSharing, SharingName(grant.sharing));
    // The limits of the grant's share, for people and programs in its containers, when its
    // shares are on one GPU (two shares of one GPU count together).
    std::map<std::string, std::pair<int64_t, int32_t>> shares;  // GPU UUID -> memory, compute
    for (const ContainerGrant::Gpu& g : grant.gpus) {
      if (!g.share()) continue;
      shares[g.uuid].first += g.memory_mib;
      shares[g.uuid].second += g.compute_milli;
    }
    if (shares.size() == 1) {
      const auto& [memory_mib, compute_milli] = shares.begin()->second;
      if (memory_mib > 0) SetEnv(&e, contract::kEnvMemoryLimitMib, StrCat(memory_mib));
      if (compute_milli > 0 && compute_milli < 1000) {
        SetEnv(&e, contract::kEnvComputePercent, StrCat(compute_milli / 10));
        SetEnv(&e, contract::kEnvComputeMode,
               grant.work_conserving ? "work-conserving" : "hard-cap");
      }
    }
  }

  // The record.
  if (!grant.record_file.empty()) {
    e.mounts.push_back(BindMount{grant.record_file, kAssignmentInContainer, true});
  }

  // The driver's libraries, and for a shim share the shim in front of them.
  const DriverLibraries& d = options.driver;
  const std::string& libdir = d.container_lib_dir;
  // With a CDI spec the runtime puts the driver in (libcuda.so.<version>, its soname linked to
  // it); the shim then stands at the file the soname resolves to.
  auto soname_target = [&](const std::string& base, const std::string& soname) {
    return cdi && !options.driver_version.empty()
               ? StrCat(libdir, "/", base, ".so.", options.driver_version)
               : StrCat(libdir, "/", soname);
  };
  if (grant.sharing == Sharing::kShim) {
    if (absl::Status ok = CheckShimFiles(grant, options); !ok.ok()) return ok;
    // The segment files of each shared GPU one by one, never their folders (SegmentFiles).
    std::vector<std::string> shared;  // GPU UUIDs, each once (two shares of a GPU: one segment)
    for (const ContainerGrant::Gpu& g : grant.gpus) {
      if (g.share() && std::find(shared.begin(), shared.end(), g.uuid) == shared.end()) {
        shared.push_back(g.uuid);
      }
    }
    for (const std::string& uuid : shared) {
      for (const SegmentFile& f : SegmentFiles(grant.segments_dir, uuid)) {
        e.mounts.push_back(BindMount{f.host_path, f.container_path, f.read_only});
      }
    }
    e.mounts.push_back(BindMount{
        d.cuda.host_path, StrCat(contract::kLibraryDir, "/", contract::kRealCudaLibrary), true});
    e.mounts.push_back(BindMount{
        d.nvml.host_path, StrCat(contract::kLibraryDir, "/", contract::kRealNvmlLibrary), true});
    e.mounts.push_back(BindMount{d.shim_cuda, soname_target("libcuda", "libcuda.so.1"), true});
    e.mounts.push_back(
        BindMount{d.shim_nvml, soname_target("libnvidia-ml", "libnvidia-ml.so.1"), true});
  } else if (!cdi) {
    if (!d.cuda.host_path.empty()) {
      e.mounts.push_back(BindMount{d.cuda.host_path, StrCat(libdir, "/", d.cuda.soname), true});
    }
    if (!d.nvml.host_path.empty()) {
      e.mounts.push_back(BindMount{d.nvml.host_path, StrCat(libdir, "/", d.nvml.soname), true});
    }
  }
  if (!cdi) {
    for (const LibraryFile& f : d.others) {
      e.mounts.push_back(BindMount{f.host_path, StrCat(libdir, "/", f.soname), true});
    }
  }

  // MPS: the client's side of the GPU's daemon.
  if (grant.sharing == Sharing::kMps) {
    if (mps == nullptr) {
      return absl::InternalError(StrCat(grant.owner, ": no MPS daemon edits for an MPS share"));
    }
    for (const auto& [k, v] : mps->env) SetEnv(&e, k, v);
    for (const mps::Mount& m : mps->mounts) {
      e.mounts.push_back(BindMount{m.host_path, m.container_path, m.read_only});
    }
  }
  return e;
}

}  // namespace tessera::agent
