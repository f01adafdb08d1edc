#include "agent/pods/container_edits.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "common/strings.h"
#include "shim/contract.h"
#include "shim/segments.h"

namespace tessera::agent {
namespace {

namespace contract = shim::contract;

// The driver's nodes every CUDA process opens besides its GPUs', when the host has them.
constexpr const char* kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};

void SetEnv(ContainerEdits* e, std::string key, std::string value) {
  for (auto& [k, v] : e->env) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  e->env.emplace_back(std::move(key), std::move(value));
}

}  // namespace

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

std::string PodDir(const std::string& pods_dir, const std::string& uid) {
  return StrCat(pods_dir, "/", uid);
}

std::string AssignmentFile(const std::string& pods_dir, const std::string& uid) {
  return StrCat(PodDir(pods_dir, uid), "/assignment.json");
}

std::vector<SegmentFile> SegmentFiles(const std::string& segment_dir, const std::string& uuid) {
  const shim::SegmentPaths host = shim::PathsFor(segment_dir, uuid);
  return {{host.limits, StrCat(contract::kLimitsDir, "/", uuid, contract::kLimitsSuffix), true},
          {host.ledger, StrCat(contract::kLedgerDir, "/", uuid, contract::kLedgerSuffix), false}};
}

absl::StatusOr<ContainerEdits> ContainerEditsFor(const PodGrant& grant, const EditsOptions& options,
                                                 const mps::ContainerEdits* mps) {
  ContainerEdits e;
  if (grant.gpus.empty()) return e;  // a record without GPUs: nothing to deliver
  const std::string pod = grant.pod.Name();
  std::vector<std::string> visible;
  for (const GrantedGpu& g : grant.gpus) {
    if (g.mig() && g.mig_uuid.empty()) {
      return absl::FailedPreconditionError(
          StrCat("pod ", pod, " is assigned MIG instance ", g.assigned.mig_profile, "@",
                 g.assigned.mig_start, " of GPU ", g.gpu.spec.uuid,
                 ", whose identity (MIG-...) the agent does not know on this node"));
    }
    visible.push_back(g.mig() ? g.mig_uuid : g.gpu.spec.uuid);
  }

  // The devices.
  if (!options.cdi_kind.empty()) {
    for (const std::string& id : visible)
      e.cdi_devices.push_back(StrCat(options.cdi_kind, "=", id));
  } else {
    std::set<int32_t> minors;
    for (const GrantedGpu& g : grant.gpus) {
      if (!minors.insert(g.gpu.minor).second) continue;  // two MIG instances of one GPU
      const std::string name = StrCat("nvidia", g.gpu.minor);
      absl::StatusOr<DeviceNumber> number = options.lookup(StrCat(options.dev_dir, "/", name));
      if (!number.ok()) {
        return absl::FailedPreconditionError(StrCat("the device node of GPU ", g.gpu.spec.index,
                                                    " (", g.gpu.spec.uuid,
                                                    ") is missing: ", number.status().message()));
      }
      e.devices.push_back(
          DeviceNode{StrCat("/dev/", name), number->type, number->major, number->minor});
    }
    for (const char* control : kControlNodes) {
      absl::StatusOr<DeviceNumber> number = options.lookup(StrCat(options.dev_dir, "/", control));
      if (!number.ok()) continue;  // nvidia-uvm is loaded on demand; not every node has them all
      e.devices.push_back(
          DeviceNode{StrCat("/dev/", control), number->type, number->major, number->minor});
    }
  }

  // The environment.
  SetEnv(&e, kEnvVisibleDevices, StrJoin(visible, ","));
  if (grant.sharing != Sharing::kNone) {
    SetEnv(&e, contract::kEnvSharing, SharingName(grant.sharing));
    // The limits of a share of one GPU, for people and programs in the pod.
    const GrantedGpu* share = nullptr;
    for (const GrantedGpu& g : grant.gpus) {
      if (g.share()) share = &g;
    }
    if (grant.gpus.size() == 1 && share != nullptr) {
      const core::GpuGrant& gg = share->assigned.grant;
      if (gg.memory_mib > 0) SetEnv(&e, contract::kEnvMemoryLimitMib, StrCat(gg.memory_mib));
      if (gg.compute_milli > 0 && gg.compute_milli < 1000) {
        SetEnv(&e, contract::kEnvComputePercent, StrCat(gg.compute_milli / 10));
        SetEnv(&e, contract::kEnvComputeMode,
               grant.work_conserving ? "work-conserving" : "hard-cap");
      }
    }
  }

  // The record.
  e.mounts.push_back(
      BindMount{AssignmentFile(options.pods_dir, grant.pod.uid), kAssignmentInContainer, true});

  // The driver's libraries, and for a shim share the shim in front of them.
  const DriverLibraries& d = options.driver;
  const std::string libdir = d.container_lib_dir;
  // With a CDI spec the runtime puts the driver in (libcuda.so.<version>, its soname linked to
  // it); the shim then stands at the file the soname resolves to.
  const bool cdi = !options.cdi_kind.empty();
  auto soname_target = [&](const std::string& base, const std::string& soname) {
    return cdi && !options.driver_version.empty()
               ? StrCat(libdir, "/", base, ".so.", options.driver_version)
               : StrCat(libdir, "/", soname);
  };
  if (grant.sharing == Sharing::kShim) {
    std::vector<std::string> missing;
    if (d.cuda.host_path.empty()) missing.push_back("the driver's libcuda.so.1");
    if (d.nvml.host_path.empty()) missing.push_back("the driver's libnvidia-ml.so.1");
    if (d.shim_cuda.empty()) missing.push_back(contract::kShimCudaLibrary);
    if (d.shim_nvml.empty()) missing.push_back(contract::kShimNvmlLibrary);
    if (!missing.empty()) {
      return absl::FailedPreconditionError(
          StrCat("pod ", pod,
                 " has a share of a GPU, enforced by the CUDA shim, but the agent "
                 "cannot put the shim into its containers: ",
                 StrJoin(missing, ", "),
                 " not found (see tessera agent --help: --driver-lib-dir, --shim-dir)"));
    }
    // The segment files one by one, never their folders: a container can then write only into
    // its ledger (fixed names, nothing to create, no symlink to plant; README "What a container
    // can write").
    const std::string pod_dir = PodDir(options.pods_dir, grant.pod.uid);
    for (const GrantedGpu& g : grant.gpus) {
      if (!g.share()) continue;
      for (const SegmentFile& f : SegmentFiles(pod_dir, g.gpu.spec.uuid)) {
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
      return absl::InternalError(StrCat("pod ", pod, ": no MPS daemon edits for an MPS share"));
    }
    for (const auto& [k, v] : mps->env) SetEnv(&e, k, v);
    for (const mps::Mount& m : mps->mounts) {
      e.mounts.push_back(BindMount{m.host_path, m.container_path, m.read_only});
    }
  }
  return e;
}

}  // namespace tessera::agent
