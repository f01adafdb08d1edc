#include "agent/discovery/nvml_mig.h"

#include <algorithm>
#include <vector>

#include "agent/discovery/nvml_library.h"
#include "common/status.h"
#include "common/strings.h"

namespace tessera::agent {

std::string NvmlMigTarget::Describe() const { return StrCat("GPU ", index, " (", uuid, ")"); }

namespace {

// "needs root" and friends: what the errors every MIG call may answer mean.
std::string Hint(nvml::Return r) {
  switch (r) {
    case nvml::kErrorNoPermission:
      return ": MIG changes need root with access to the driver's MIG capability nodes "
             "(/dev/nvidia-caps; the chart runs the agent privileged as root)";
    case nvml::kErrorGpuIsLost:
      return ": the GPU has fallen off the bus; it needs a reset or the node a reboot";
    case nvml::kErrorUninitialized:
    case nvml::kErrorDriverNotLoaded:
      return ": the NVIDIA driver is not loaded";
    default:
      return "";
  }
}

std::string Failed(const NvmlLibrary& l, const char* call, nvml::Return r) {
  return StrCat(call, ": ", l.Error(r), Hint(r));
}

absl::Status Need(const NvmlLibrary& l, std::initializer_list<const void*> fns) {
  for (const void* fn : fns) {
    if (fn == nullptr) {
      return absl::UnimplementedError(
          StrCat(l.path,
                 " lacks NVML's MIG calls (nvmlDeviceCreateGpuInstanceWithPlacement, ...): "
                 "the NVIDIA driver is too old to create MIG instances (R470 or newer is "
                 "needed); configure them with nvidia-smi mig or mig-parted instead"));
    }
  }
  return absl::OkStatus();
}

// The NVML profile info for a tessera profile (matched by its id, nvidia-smi mig -lgip's "ID").
absl::StatusOr<nvml::GpuInstanceProfileInfo> GpuInstanceProfile(const NvmlLibrary& l,
                                                                const NvmlMigTarget& gpu,
                                                                const core::MigProfile& profile) {
  std::vector<std::string> offered;
  for (unsigned p = 0; p < nvml::kGpuInstanceProfileIndexMax; ++p) {
    nvml::GpuInstanceProfileInfo info{};
    const nvml::Return r = l.gi_profile(gpu.device, p, &info);
    if (r == nvml::kErrorInvalidArgument) break;  // past the last profile this driver knows
    if (r == nvml::kErrorNoPermission || r == nvml::kErrorGpuIsLost) {
      return absl::FailedPreconditionError(
          StrCat(gpu.Describe(), ": ", Failed(l, "nvmlDeviceGetGpuInstanceProfileInfo", r)));
    }
    if (r != nvml::kSuccess) continue;
    if (info.id == static_cast<unsigned>(profile.id)) return info;
    offered.push_back(StrCat(info.id));
  }
  return absl::FailedPreconditionError(StrCat(
      gpu.Describe(), " offers no GPU instance profile with id ", profile.id, " (", profile.name,
      "); its driver lists ids ", offered.empty() ? "none" : StrJoin(offered, ", "),
      " (nvidia-smi mig -lgip): tessera's MIG table and this GPU disagree"));
}

// The GPU's instances of one profile (with their info).
struct Existing {
  nvml::GpuInstance handle{nullptr};
  nvml::GpuInstanceInfo info{};
};
absl::StatusOr<std::vector<Existing>> GpuInstances(const NvmlLibrary& l, const NvmlMigTarget& gpu,
                                                   const nvml::GpuInstanceProfileInfo& profile) {
  std::vector<nvml::GpuInstance> handles(std::max(profile.instanceCount, 8u),
                                         nvml::GpuInstance{nullptr});
  unsigned n = 0;
  if (nvml::Return r = l.gi_list(gpu.device, profile.id, handles.data(), &n); r != nvml::kSuccess) {
    return absl::InternalError(
        StrCat(gpu.Describe(), ": ", Failed(l, "nvmlDeviceGetGpuInstances", r)));
  }
  std::vector<Existing> out;
  for (unsigned k = 0; k < n && k < handles.size(); ++k) {
    Existing e;
    e.handle = handles[k];
    if (l.gi_info(e.handle, &e.info) == nvml::kSuccess) out.push_back(e);
  }
  return out;
}

// Every GPU instance of the GPU, as "<profile id>@<start>", for messages.
std::vector<std::string> AllGpuInstances(const NvmlLibrary& l, const NvmlMigTarget& gpu) {
  std::vector<std::string> out;
  for (unsigned p = 0; p < nvml::kGpuInstanceProfileIndexMax; ++p) {
    nvml::GpuInstanceProfileInfo info{};
    const nvml::Return r = l.gi_profile(gpu.device, p, &info);
    if (r == nvml::kErrorInvalidArgument) break;
    if (r != nvml::kSuccess || info.instanceCount == 0) continue;
    absl::StatusOr<std::vector<Existing>> list = GpuInstances(l, gpu, info);
    if (!list.ok()) continue;
    for (const Existing& e : *list) {
      out.push_back(StrCat("profile ", e.info.profileId, " at slice ", e.info.placement.start,
                           " (GPU instance ", e.info.id, ")"));
    }
  }
  return out;
}

// The compute instance profile that fills a GPU instance of `slices` compute slices (the default
// of `nvidia-smi mig -cci`): the largest one the GPU instance offers, the lowest index on a tie.
absl::StatusOr<nvml::ComputeInstanceProfileInfo> FullComputeProfile(const NvmlLibrary& l,
                                                                    nvml::GpuInstance gi,
                                                                    unsigned slices,
                                                                    const std::string& what) {
  bool found = false;
  nvml::ComputeInstanceProfileInfo best{};
  for (unsigned p = 0; p < nvml::kComputeInstanceProfileIndexMax; ++p) {
    nvml::ComputeInstanceProfileInfo info{};
    const nvml::Return r = l.ci_profile(gi, p, nvml::kComputeInstanceEngineProfileShared, &info);
    if (r == nvml::kErrorInvalidArgument) break;
    if (r != nvml::kSuccess || info.sliceCount > slices) continue;
    if (!found || info.sliceCount > best.sliceCount) {
      best = info;
      found = true;
    }
  }
  if (!found) {
    return absl::FailedPreconditionError(
        StrCat(what, ": NVML offers no compute instance profile for it"));
  }
  return best;
}

// Every compute instance of a GPU instance.
std::vector<nvml::ComputeInstance> ComputeInstances(const NvmlLibrary& l, nvml::GpuInstance gi) {
  std::vector<nvml::ComputeInstance> out;
  for (unsigned p = 0; p < nvml::kComputeInstanceProfileIndexMax; ++p) {
    nvml::ComputeInstanceProfileInfo info{};
    const nvml::Return r = l.ci_profile(gi, p, nvml::kComputeInstanceEngineProfileShared, &info);
    if (r == nvml::kErrorInvalidArgument) break;
    if (r != nvml::kSuccess) continue;
    std::vector<nvml::ComputeInstance> handles(std::max(info.instanceCount, 8u),
                                               nvml::ComputeInstance{nullptr});
    unsigned n = 0;
    if (l.ci_list(gi, info.id, handles.data(), &n) != nvml::kSuccess) continue;
    for (unsigned k = 0; k < n && k < handles.size(); ++k) out.push_back(handles[k]);
  }
  return out;
}

std::string InstanceName(const core::MigProfile& profile, int start) {
  return StrCat("MIG instance ", profile.name, "@", start);
}

}  // namespace

absl::Status NvmlSetMigMode(const NvmlLibrary& l, const NvmlMigTarget& gpu, bool enabled) {
  TESSERA_RETURN_IF_ERROR(Need(l, {reinterpret_cast<const void*>(l.mig_mode),
                                   reinterpret_cast<const void*>(l.set_mig_mode)}));
  const unsigned want = enabled ? nvml::kMigEnable : nvml::kMigDisable;
  const char* on_off = enabled ? "on" : "off";
  unsigned current = 0, pending = 0;
  if (nvml::Return r = l.mig_mode(gpu.device, &current, &pending); r != nvml::kSuccess) {
    if (r == nvml::kErrorNotSupported) {
      return absl::FailedPreconditionError(
          StrCat(gpu.Describe(), " does not support MIG (nvmlDeviceGetMigMode: ", l.Error(r), ")"));
    }
    return absl::InternalError(StrCat(gpu.Describe(), ": ", Failed(l, "nvmlDeviceGetMigMode", r)));
  }
  if (current == want && pending == want) return absl::OkStatus();
  if (!enabled && l.gi_profile && l.gi_list && l.gi_info) {
    const std::vector<std::string> left = AllGpuInstances(l, gpu);
    if (!left.empty()) {
      return absl::FailedPreconditionError(
          StrCat(gpu.Describe(), " still has GPU instances (", StrJoin(left, "; "),
                 "): MIG mode goes off only without them; destroy them first (nvidia-smi mig -i ",
                 gpu.index, " -dci, then -dgi)"));
    }
  }
  nvml::Return activation = nvml::kSuccess;
  if (nvml::Return r = l.set_mig_mode(gpu.device, want, &activation); r != nvml::kSuccess) {
    if (r == nvml::kErrorNotSupported) {
      return absl::FailedPreconditionError(StrCat(gpu.Describe(), " does not support MIG mode (",
                                                  "nvmlDeviceSetMigMode: ", l.Error(r), ")"));
    }
    return absl::FailedPreconditionError(StrCat("turning MIG mode ", on_off, " for ",
                                                gpu.Describe(), ": ",
                                                Failed(l, "nvmlDeviceSetMigMode", r)));
  }
  const std::string reset = StrCat("nvidia-smi -i ", gpu.index, " -r");
  switch (activation) {
    case nvml::kSuccess:
      break;
    case nvml::kErrorResetRequired:
      return absl::FailedPreconditionError(StrCat(
          "MIG mode of ", gpu.Describe(), " is set ", on_off,
          " but takes effect only after a GPU reset, which the driver cannot do here: reset it (",
          reset,
          " while nothing uses it) or reboot the node (in a virtual machine with the GPU "
          "passed through, reboot the VM); until then nothing is created on it"));
    case nvml::kErrorInUse:
      return absl::FailedPreconditionError(
          StrCat("MIG mode of ", gpu.Describe(), " cannot be turned ", on_off,
                 " now: the GPU is in use (a process, nvidia-persistenced, DCGM or another "
                 "monitoring agent holds it; nvidia-smi lists processes). Stop them, or reset it (",
                 reset, "); the next attempt turns it ", on_off));
    default:
      return absl::FailedPreconditionError(
          StrCat("MIG mode of ", gpu.Describe(), " is set ", on_off, " but was not activated: ",
                 l.Error(activation), "; reset the GPU (", reset, ") or reboot the node"));
  }
  if (nvml::Return r = l.mig_mode(gpu.device, &current, &pending); r != nvml::kSuccess) {
    return absl::InternalError(StrCat(gpu.Describe(), ": after nvmlDeviceSetMigMode, ",
                                      Failed(l, "nvmlDeviceGetMigMode", r)));
  }
  if (current != want) {
    return absl::FailedPreconditionError(StrCat(
        "MIG mode of ", gpu.Describe(), " is pending ", pending ? "on" : "off", " but still ",
        current ? "on" : "off", ": it takes effect after a GPU reset (", reset, ") or a reboot"));
  }
  return absl::OkStatus();
}

absl::Status NvmlCreateMigInstance(const NvmlLibrary& l, const NvmlMigTarget& gpu,
                                   const core::MigProfile& profile, int start) {
  TESSERA_RETURN_IF_ERROR(Need(
      l, {reinterpret_cast<const void*>(l.mig_mode), reinterpret_cast<const void*>(l.gi_profile),
          reinterpret_cast<const void*>(l.gi_list), reinterpret_cast<const void*>(l.gi_info),
          reinterpret_cast<const void*>(l.gi_create), reinterpret_cast<const void*>(l.gi_destroy),
          reinterpret_cast<const void*>(l.ci_profile), reinterpret_cast<const void*>(l.ci_create),
          reinterpret_cast<const void*>(l.ci_list)}));
  const std::string what = StrCat(InstanceName(profile, start), " on ", gpu.Describe());
  unsigned current = 0, pending = 0;
  if (nvml::Return r = l.mig_mode(gpu.device, &current, &pending); r != nvml::kSuccess) {
    return absl::FailedPreconditionError(StrCat(what, ": ", Failed(l, "nvmlDeviceGetMigMode", r)));
  }
  if (current != nvml::kMigEnable) {
    return absl::FailedPreconditionError(
        pending == nvml::kMigEnable
            ? StrCat(what, ": MIG mode is set on but waits for a GPU reset (nvidia-smi -i ",
                     gpu.index, " -r, or a reboot)")
            : StrCat(what, ": the GPU is not in MIG mode (nvidia-smi -i ", gpu.index, " -mig 1)"));
  }
  TESSERA_ASSIGN_OR_RETURN(nvml::GpuInstanceProfileInfo info, GpuInstanceProfile(l, gpu, profile));

  // The placement as NVML describes it (its size counts memory slices: 8 for a 7g).
  nvml::GpuInstancePlacement placement{static_cast<unsigned>(start),
                                       static_cast<unsigned>(profile.size)};
  if (l.gi_placements) {
    unsigned n = 0;
    nvml::Return r = l.gi_placements(gpu.device, info.id, nullptr, &n);
    std::vector<nvml::GpuInstancePlacement> possible(n);
    if (r == nvml::kSuccess && n > 0) r = l.gi_placements(gpu.device, info.id, possible.data(), &n);
    if (r == nvml::kSuccess) {
      possible.resize(std::min<size_t>(n, possible.size()));
      auto it =
          std::find_if(possible.begin(), possible.end(), [&](const nvml::GpuInstancePlacement& p) {
            return p.start == static_cast<unsigned>(start);
          });
      if (it == possible.end()) {
        std::vector<std::string> starts;
        for (const nvml::GpuInstancePlacement& p : possible) starts.push_back(StrCat(p.start));
        return absl::InvalidArgumentError(StrCat(what, ": the driver does not place ", profile.name,
                                                 " at slice ", start, " (its placements start at ",
                                                 starts.empty() ? "none" : StrJoin(starts, ", "),
                                                 "; nvidia-smi mig -lgipp)"));
      }
      placement = *it;
    }
  }

  // One there already at exactly this placement: an interrupted creation, or configured before.
  nvml::GpuInstance gi{nullptr};
  bool created = false;
  TESSERA_ASSIGN_OR_RETURN(std::vector<Existing> existing, GpuInstances(l, gpu, info));
  for (const Existing& e : existing) {
    if (e.info.placement.start == placement.start) gi = e.handle;
  }
  if (gi.handle == nullptr) {
    const nvml::Return r = l.gi_create(gpu.device, info.id, &placement, &gi);
    switch (r) {
      case nvml::kSuccess:
        created = true;
        break;
      case nvml::kErrorInsufficientResources: {
        const std::vector<std::string> there = AllGpuInstances(l, gpu);
        return absl::FailedPreconditionError(StrCat(
            what, ": the driver has no room for it (nvmlDeviceCreateGpuInstanceWithPlacement: ",
            l.Error(r), "): memory slices ", placement.start, "-",
            placement.start + placement.size - 1,
            " overlap another GPU instance, or the GPU holds ", "as many ", profile.name,
            " instances as it can. Its GPU instances now: ",
            there.empty() ? "none" : StrJoin(there, "; "),
            ". Destroy the one in the way (nvidia-smi mig -i ", gpu.index,
            " -dci -gi <id>, then "
            "-dgi -gi <id>)"));
      }
      case nvml::kErrorInvalidArgument:
        return absl::InvalidArgumentError(StrCat(
            what, ": the driver refuses this placement (start ", placement.start, ", size ",
            placement.size, "): ", l.Error(r), "; nvidia-smi mig -lgipp lists the valid ones"));
      case nvml::kErrorNotSupported:
        return absl::FailedPreconditionError(
            StrCat(what,
                   ": the driver cannot create GPU instances here (not in MIG mode, or a "
                   "vGPU guest): ",
                   l.Error(r)));
      default:
        return absl::FailedPreconditionError(
            StrCat(what, ": ", Failed(l, "nvmlDeviceCreateGpuInstanceWithPlacement", r)));
    }
  } else if (!ComputeInstances(l, gi).empty()) {
    return absl::OkStatus();  // complete already
  }

  // Its compute instance: the whole GPU instance.
  absl::Status made = [&]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(nvml::ComputeInstanceProfileInfo ci_profile,
                             FullComputeProfile(l, gi, info.sliceCount, what));
    nvml::ComputeInstance ci{nullptr};
    if (nvml::Return r = l.ci_create(gi, ci_profile.id, &ci); r != nvml::kSuccess) {
      return absl::FailedPreconditionError(StrCat(
          what, ": its compute instance (profile ", ci_profile.id, ", ", ci_profile.sliceCount,
          " slices): ", Failed(l, "nvmlGpuInstanceCreateComputeInstance", r)));
    }
    return absl::OkStatus();
  }();
  if (made.ok() || !created) return made;
  // Roll back: a GPU instance without a compute instance serves nobody and blocks its slices.
  if (nvml::Return r = l.gi_destroy(gi); r != nvml::kSuccess) {
    return absl::Status(
        made.code(), StrCat(made.message(), "; and its new GPU instance could not be destroyed (",
                            Failed(l, "nvmlGpuInstanceDestroy", r),
                            "): destroy it by hand (nvidia-smi mig -i ", gpu.index, " -dgi)"));
  }
  return made;
}

absl::Status NvmlDestroyMigInstance(const NvmlLibrary& l, const NvmlMigTarget& gpu,
                                    const core::MigProfile& profile, int start) {
  TESSERA_RETURN_IF_ERROR(Need(
      l, {reinterpret_cast<const void*>(l.gi_profile), reinterpret_cast<const void*>(l.gi_list),
          reinterpret_cast<const void*>(l.gi_info), reinterpret_cast<const void*>(l.gi_destroy),
          reinterpret_cast<const void*>(l.ci_profile), reinterpret_cast<const void*>(l.ci_list),
          reinterpret_cast<const void*>(l.ci_destroy)}));
  const std::string what = StrCat(InstanceName(profile, start), " on ", gpu.Describe());
  TESSERA_ASSIGN_OR_RETURN(nvml::GpuInstanceProfileInfo info, GpuInstanceProfile(l, gpu, profile));
  TESSERA_ASSIGN_OR_RETURN(std::vector<Existing> existing, GpuInstances(l, gpu, info));
  nvml::GpuInstance gi{nullptr};
  unsigned gi_id = 0;
  for (const Existing& e : existing) {
    if (e.info.placement.start == static_cast<unsigned>(start)) {
      gi = e.handle;
      gi_id = e.info.id;
    }
  }
  if (gi.handle == nullptr) return absl::NotFoundError(StrCat(what, ": there is none"));
  for (nvml::ComputeInstance ci : ComputeInstances(l, gi)) {
    const nvml::Return r = l.ci_destroy(ci);
    if (r == nvml::kSuccess) continue;
    if (r == nvml::kErrorInUse) {
      return absl::FailedPreconditionError(
          StrCat(what, ": a process still runs on it (nvmlComputeInstanceDestroy: ", l.Error(r),
                 "; nvidia-smi lists it under GPU instance ", gi_id,
                 "): it is destroyed once that "
                 "process ends"));
    }
    return absl::FailedPreconditionError(
        StrCat(what, ": ", Failed(l, "nvmlComputeInstanceDestroy", r)));
  }
  if (nvml::Return r = l.gi_destroy(gi); r != nvml::kSuccess) {
    if (r == nvml::kErrorInUse) {
      return absl::FailedPreconditionError(
          StrCat(what, ": still in use after its compute instances were destroyed ",
                 "(nvmlGpuInstanceDestroy: ", l.Error(r),
                 "); nvidia-smi lists what holds GPU "
                 "instance ",
                 gi_id));
    }
    return absl::FailedPreconditionError(
        StrCat(what, ": ", Failed(l, "nvmlGpuInstanceDestroy", r)));
  }
  return absl::OkStatus();
}

}  // namespace tessera::agent
