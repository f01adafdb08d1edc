#include "agent/nri/delivery.h"

#include <map>

#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace tessera::agent {
namespace {

PodRef RefOf(const nri::PodSandbox& pod) {
  return PodRef{pod.ns, pod.name, pod.uid, pod.annotations};
}

}  // namespace

nri::ContainerAdjustment AdjustmentFor(const ContainerEdits& edits) {
  nri::ContainerAdjustment a;
  a.env = edits.env;
  for (const BindMount& m : edits.mounts) {
    a.mounts.push_back(nri::Mount{m.container_path,
                                  "bind",
                                  m.host_path,
                                  {"bind", m.read_only ? "ro" : "rw", "nosuid", "nodev"}});
  }
  for (const DeviceNode& d : edits.devices) {
    a.devices.push_back(nri::LinuxDevice{d.path, std::string(1, d.type), d.major, d.minor, 0666u,
                                         std::nullopt, std::nullopt});
  }
  a.cdi_devices = edits.cdi_devices;
  return a;
}

Delivery::Delivery(DeliveryOptions options, PodManager& pods)
    : options_(std::move(options)), pods_(pods) {}

absl::StatusOr<nri::ContainerAdjustment> Delivery::CreateContainer(const nri::PodSandbox& pod,
                                                                   const nri::Container& c) {
  const PodRef ref = RefOf(pod);
  absl::StatusOr<std::optional<ContainerEdits>> edits = pods_.Prepare(ref);
  if (!edits.ok()) {
    ++refused_;
    spdlog::error("pod {} container {}: {}", ref.Name(), c.name, edits.status().message());
    return absl::Status(edits.status().code(), StrCat("tessera: ", edits.status().message()));
  }
  if (!edits->has_value()) {
    // No GPUs for this pod. A container must not get them from the NVIDIA runtime either.
    nri::ContainerAdjustment adjust;
    if (options_.exempt_namespaces.count(pod.ns) == 0) {
      const std::string prefix = StrCat(kEnvVisibleDevices, "=");
      for (const std::string& e : c.env) {
        if (e.rfind(prefix, 0) == 0 && e != prefix + "void" && e != prefix + "none" &&
            e != prefix) {
          adjust.env.emplace_back(kEnvVisibleDevices, "void");
          spdlog::warn("pod {} container {} asked for {} without a tessera assignment: set to void",
                       ref.Name(), c.name, e);
        }
      }
    }
    return adjust;
  }
  const ContainerEdits& e = **edits;
  if (!e.devices.empty() || !e.cdi_devices.empty()) {
    ++delivered_;
    std::string uuids;
    for (const auto& [k, v] : e.env) {
      if (k == kEnvVisibleDevices) uuids = v;
    }
    spdlog::info("pod {} container {}: GPUs {}", ref.Name(), c.name, uuids);
  }
  return AdjustmentFor(e);
}

void Delivery::Synchronize(const std::vector<nri::PodSandbox>& pods,
                           const std::vector<nri::Container>& containers) {
  // A pod is live while one of its containers is not stopped, or before it has any (its
  // containers are being created).
  std::map<std::string, int> running, all;  // by sandbox id
  for (const nri::Container& c : containers) {
    ++all[c.pod_sandbox_id];
    if (c.state != nri::kContainerStopped) ++running[c.pod_sandbox_id];
  }
  std::vector<PodRef> live;
  for (const nri::PodSandbox& p : pods) {
    if (running[p.id] > 0 || all[p.id] == 0) live.push_back(RefOf(p));
  }
  pods_.Synchronize(live);
}

void Delivery::StopPodSandbox(const nri::PodSandbox& pod) { pods_.Release(pod.uid); }

void Delivery::RemovePodSandbox(const nri::PodSandbox& pod) { pods_.Release(pod.uid); }

}  // namespace tessera::agent
