#include "agent/nri/delivery.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/status.h"
#include "common/strings.h"
#include "records/assignment.h"
#include "spdlog/spdlog.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

// The driver's nodes every CUDA process opens besides its GPUs', when the host has them.
constexpr const char* kControlNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"};

std::string PodName(const nri::PodSandbox& pod) { return StrCat(pod.ns, "/", pod.name); }

// Writes `text` to `path` unless it already holds exactly that (atomic: temp file and rename).
absl::Status WriteIfChanged(const fs::path& path, const std::string& text) {
  {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      std::stringstream have;
      have << in.rdbuf();
      if (have.str() == text) return absl::OkStatus();
    }
  }
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot create ", path.parent_path().string(), ": ", ec.message()));
  }
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) {
      return absl::InternalError(StrCat("cannot write ", tmp.string(), ": ", std::strerror(errno)));
    }
  }
  fs::rename(tmp, path, ec);
  if (ec) return absl::InternalError(StrCat("cannot write ", path.string(), ": ", ec.message()));
  return absl::OkStatus();
}

// A pod UID (a UUID: 8-4-4-4-12 hex digits), the only names made and removed under pods_dir.
bool ValidUid(std::string_view uid) {
  if (uid.size() != 36) return false;
  for (size_t i = 0; i < uid.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? uid[i] != '-' : !std::isxdigit(static_cast<unsigned char>(uid[i]))) return false;
  }
  return true;
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

Delivery::Delivery(DeliveryOptions options) : options_(std::move(options)) {}

void Delivery::SetGpus(std::shared_ptr<const NodeGpus> gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  gpus_ = std::move(gpus);
}

absl::StatusOr<nri::ContainerAdjustment> Delivery::CreateContainer(const nri::PodSandbox& pod,
                                                                   const nri::Container& c) {
  absl::StatusOr<nri::ContainerAdjustment> adjust = Adjust(pod, c);
  if (!adjust.ok()) {
    ++refused_;
    spdlog::error("pod {} container {}: {}", PodName(pod), c.name, adjust.status().message());
    return absl::Status(adjust.status().code(), StrCat("tessera: ", adjust.status().message()));
  }
  if (!adjust->devices.empty() || !adjust->cdi_devices.empty()) {
    ++delivered_;
    std::string uuids;
    for (const auto& [k, v] : adjust->env) {
      if (k == kEnvVisibleDevices) uuids = v;
    }
    spdlog::info("pod {} container {}: GPUs {}", PodName(pod), c.name, uuids);
  }
  return adjust;
}

absl::StatusOr<nri::ContainerAdjustment> Delivery::Adjust(const nri::PodSandbox& pod,
                                                          const nri::Container& c) {
  nri::ContainerAdjustment adjust;
  auto it = pod.annotations.find(std::string(records::kAssignmentAnnotation));
  if (it == pod.annotations.end()) {
    // No GPUs for this pod. A container must not get them from the NVIDIA runtime either.
    if (options_.exempt_namespaces.count(pod.ns) == 0) {
      for (const std::string& e : c.env) {
        const std::string prefix = StrCat(kEnvVisibleDevices, "=");
        if (e.rfind(prefix, 0) == 0 && e != prefix + "void" && e != prefix + "none" &&
            e != prefix) {
          adjust.env.emplace_back(kEnvVisibleDevices, "void");
          spdlog::warn(
              "pod {} container {} asked for {} without a tessera assignment: set to "
              "void",
              PodName(pod), c.name, e);
        }
      }
    }
    return adjust;
  }
  absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(it->second);
  if (!a.ok()) {
    return absl::InvalidArgumentError(StrCat("pod ", PodName(pod), ": its ",
                                             records::kAssignmentAnnotation,
                                             " cannot be read: ", a.status().message()));
  }
  if (a->node != options_.node_name) {
    return absl::FailedPreconditionError(StrCat("pod ", PodName(pod), " is assigned GPUs on node ",
                                                a->node, ", not on this node (", options_.node_name,
                                                ")"));
  }
  std::shared_ptr<const NodeGpus> gpus;
  {
    std::lock_guard<std::mutex> lock(mu_);
    gpus = gpus_;
  }
  if (!gpus) {
    return absl::UnavailableError("the agent has not discovered this node's GPUs yet");
  }
  std::vector<std::string> uuids;
  std::vector<const DiscoveredGpu*> granted;
  for (const records::AssignedGpu& ag : a->gpus) {
    const DiscoveredGpu* found = nullptr;
    if (!ag.uuid.empty()) {
      for (const DiscoveredGpu& g : gpus->gpus) {
        if (g.spec.uuid == ag.uuid) found = &g;
      }
      if (!found) {
        std::vector<std::string> have;
        for (const DiscoveredGpu& g : gpus->gpus) have.push_back(g.spec.uuid);
        return absl::NotFoundError(StrCat("pod ", PodName(pod), " is assigned GPU ", ag.uuid,
                                          ", which node ", options_.node_name,
                                          " does not have (it has ", StrJoin(have, ", "), ")"));
      }
      if (found->spec.index != ag.grant.gpu) {
        return absl::FailedPreconditionError(
            StrCat("pod ", PodName(pod), " is assigned GPU ", ag.uuid, " as index ", ag.grant.gpu,
                   ", but it is index ", found->spec.index, " on node ", options_.node_name));
      }
    } else {
      if (ag.grant.gpu < 0 || static_cast<size_t>(ag.grant.gpu) >= gpus->gpus.size()) {
        return absl::NotFoundError(StrCat("pod ", PodName(pod), " is assigned GPU index ",
                                          ag.grant.gpu, "; node ", options_.node_name, " has ",
                                          gpus->gpus.size(), " GPUs"));
      }
      found = &gpus->gpus[ag.grant.gpu];
    }
    if (!ag.mig_profile.empty()) {
      return absl::UnimplementedError(StrCat(
          "pod ", PodName(pod), " is assigned MIG instance ", ag.mig_profile, "@", ag.mig_start,
          " of GPU ", found->spec.uuid, ": this agent does not deliver MIG instances yet"));
    }
    granted.push_back(found);
    uuids.push_back(found->spec.uuid);
  }
  if (granted.empty()) return adjust;  // a record without GPUs: nothing to deliver

  if (!options_.cdi_kind.empty()) {
    for (const std::string& uuid : uuids)
      adjust.cdi_devices.push_back(StrCat(options_.cdi_kind, "=", uuid));
  } else {
    for (const DiscoveredGpu* g : granted) {
      const std::string name = StrCat("nvidia", g->minor);
      absl::StatusOr<DeviceNumber> number = options_.lookup(StrCat(options_.dev_dir, "/", name));
      if (!number.ok()) {
        return absl::FailedPreconditionError(
            StrCat("the device node of GPU ", g->spec.index, " (", g->spec.uuid,
                   ") is missing on node ", options_.node_name, ": ", number.status().message()));
      }
      adjust.devices.push_back(nri::LinuxDevice{StrCat("/dev/", name), std::string(1, number->type),
                                                number->major, number->minor, 0666u, std::nullopt,
                                                std::nullopt});
    }
    for (const char* control : kControlNodes) {
      absl::StatusOr<DeviceNumber> number = options_.lookup(StrCat(options_.dev_dir, "/", control));
      if (!number.ok()) continue;  // nvidia-uvm is loaded on demand; not every node has them all
      adjust.devices.push_back(nri::LinuxDevice{StrCat("/dev/", control),
                                                std::string(1, number->type), number->major,
                                                number->minor, 0666u, std::nullopt, std::nullopt});
    }
  }
  adjust.env.emplace_back(kEnvVisibleDevices, StrJoin(uuids, ","));
  // A share (one GPU, not exclusive): its limits, for people and programs in the pod.
  if (a->gpus.size() == 1 && !a->gpus[0].grant.exclusive) {
    const core::GpuGrant& grant = a->gpus[0].grant;
    if (grant.memory_mib > 0) adjust.env.emplace_back(kEnvMemoryLimitMib, StrCat(grant.memory_mib));
    if (grant.compute_milli > 0) {
      adjust.env.emplace_back(kEnvComputePercent, StrCat(grant.compute_milli / 10));
    }
  }
  if (!ValidUid(pod.uid)) {
    return absl::InvalidArgumentError(StrCat("pod ", PodName(pod), " has no usable UID (\"",
                                             pod.uid, "\") for its assignment file"));
  }
  const fs::path file = fs::path(options_.pods_dir) / pod.uid / "assignment.json";
  TESSERA_RETURN_IF_ERROR(WriteIfChanged(file, it->second));
  adjust.mounts.push_back(
      nri::Mount{kAssignmentInContainer, "bind", file.string(), {"bind", "ro", "nosuid", "nodev"}});
  return adjust;
}

void Delivery::Synchronize(const std::vector<nri::PodSandbox>& pods,
                           const std::vector<nri::Container>&) {
  // Files of pods the runtime no longer has (removed while the agent was away) go.
  std::set<std::string> live;
  for (const nri::PodSandbox& p : pods) live.insert(p.uid);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(options_.pods_dir, ec)) {
    const std::string uid = entry.path().filename().string();
    if (entry.is_directory() && live.count(uid) == 0 && ValidUid(uid)) {
      fs::remove_all(entry.path(), ec);
    }
  }
}

void Delivery::RemovePodSandbox(const nri::PodSandbox& pod) {
  if (!ValidUid(pod.uid)) return;
  std::error_code ec;
  fs::remove_all(fs::path(options_.pods_dir) / pod.uid, ec);
}

}  // namespace tessera::agent
