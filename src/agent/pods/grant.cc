#include "agent/pods/grant.h"

#include <algorithm>

#include "common/strings.h"
#include "records/names.h"

namespace tessera::agent {

bool PodGrant::has_mig() const {
  return std::any_of(gpus.begin(), gpus.end(), [](const GrantedGpu& g) { return g.mig(); });
}

std::vector<std::string> PodGrant::uuids() const {
  std::vector<std::string> out;
  for (const GrantedGpu& g : gpus) out.push_back(g.mig() ? g.mig_uuid : g.gpu.spec.uuid);
  return out;
}

std::string PodDir(const std::string& pods_dir, const std::string& uid) {
  return StrCat(pods_dir, "/", uid);
}

std::string AssignmentFile(const std::string& pods_dir, const std::string& uid) {
  return StrCat(PodDir(pods_dir, uid), "/assignment.json");
}

ContainerGrant ContainerGrantOf(const PodGrant& grant, const std::string& pods_dir) {
  ContainerGrant c;
  c.owner = StrCat("pod ", grant.pod.Name());
  for (const GrantedGpu& g : grant.gpus) {
    c.gpus.push_back(ContainerGrant::Gpu{.index = g.gpu.spec.index,
                                         .uuid = g.gpu.spec.uuid,
                                         .minor = g.gpu.minor,
                                         .mig_profile = g.assigned.mig_profile,
                                         .mig_start = g.assigned.mig_start,
                                         .mig_uuid = g.mig_uuid,
                                         .exclusive = g.assigned.grant.exclusive,
                                         .memory_mib = g.assigned.grant.memory_mib,
                                         .compute_milli = g.assigned.grant.compute_milli});
  }
  c.sharing = grant.sharing;
  c.work_conserving = grant.work_conserving;
  c.record_file = AssignmentFile(pods_dir, grant.pod.uid);
  c.segments_dir = PodDir(pods_dir, grant.pod.uid);
  return c;
}

absl::StatusOr<std::optional<PodGrant>> ResolveGrant(const PodRef& pod,
                                                     const std::string& node_name,
                                                     const NodeGpus& gpus) {
  auto it = pod.annotations.find(std::string(records::kAssignmentAnnotation));
  if (it == pod.annotations.end()) return std::optional<PodGrant>();
  PodGrant grant;
  grant.pod = pod;
  grant.record = it->second;
  absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(it->second);
  if (!a.ok()) {
    return absl::InvalidArgumentError(StrCat("pod ", pod.Name(), ": its ",
                                             records::kAssignmentAnnotation,
                                             " cannot be read: ", a.status().message()));
  }
  grant.assignment = std::move(*a);
  if (grant.assignment.node != node_name) {
    return absl::FailedPreconditionError(StrCat("pod ", pod.Name(), " is assigned GPUs on node ",
                                                grant.assignment.node, ", not on this node (",
                                                node_name, ")"));
  }
  for (const records::AssignedGpu& ag : grant.assignment.gpus) {
    const DiscoveredGpu* found = nullptr;
    if (!ag.uuid.empty()) {
      for (const DiscoveredGpu& g : gpus.gpus) {
        if (g.spec.uuid == ag.uuid) found = &g;
      }
      if (!found) {
        std::vector<std::string> have;
        for (const DiscoveredGpu& g : gpus.gpus) have.push_back(g.spec.uuid);
        return absl::NotFoundError(StrCat("pod ", pod.Name(), " is assigned GPU ", ag.uuid,
                                          ", which node ", node_name, " does not have (it has ",
                                          StrJoin(have, ", "), ")"));
      }
      if (found->spec.index != ag.grant.gpu) {
        return absl::FailedPreconditionError(
            StrCat("pod ", pod.Name(), " is assigned GPU ", ag.uuid, " as index ", ag.grant.gpu,
                   ", but it is index ", found->spec.index, " on node ", node_name));
      }
    } else {
      if (ag.grant.gpu < 0 || static_cast<size_t>(ag.grant.gpu) >= gpus.gpus.size()) {
        return absl::NotFoundError(StrCat("pod ", pod.Name(), " is assigned GPU index ",
                                          ag.grant.gpu, "; node ", node_name, " has ",
                                          gpus.gpus.size(), " GPUs"));
      }
      found = &gpus.gpus[ag.grant.gpu];
    }
    GrantedGpu g{*found, ag, ""};
    if (g.mig()) {
      const std::string instance = StrCat(ag.mig_profile, "@", ag.mig_start);
      if (!found->spec.mig_enabled) {
        return absl::FailedPreconditionError(
            StrCat("pod ", pod.Name(), " is assigned MIG instance ", instance, " of GPU ",
                   found->spec.uuid, ", which is not in MIG mode on node ", node_name));
      }
      const int k = FindMigInstance(*found, ag.mig_profile, ag.mig_start);
      if (k < 0 && !grant.assignment.mig_create) {
        return absl::NotFoundError(StrCat("pod ", pod.Name(), " is assigned MIG instance ",
                                          instance, " of GPU ", found->spec.uuid,
                                          ", which is not configured on node ", node_name,
                                          " (and its record does not create it)"));
      }
      if (k >= 0 && static_cast<size_t>(k) < found->mig_uuids.size()) {
        g.mig_uuid = found->mig_uuids[k];
      }
    }
    grant.gpus.push_back(std::move(g));
  }
  const bool share = std::any_of(grant.gpus.begin(), grant.gpus.end(),
                                 [](const GrantedGpu& g) { return g.share(); });
  auto sharing = pod.annotations.find(std::string(records::kGpuSharingAnnotation));
  if (sharing != pod.annotations.end() && sharing->second != "shim" && sharing->second != "mps") {
    return absl::InvalidArgumentError(StrCat("pod ", pod.Name(), ": ",
                                             records::kGpuSharingAnnotation, " is \"",
                                             sharing->second, "\"; it must be shim or mps"));
  }
  if (share) {
    grant.sharing = sharing != pod.annotations.end() && sharing->second == "mps" ? Sharing::kMps
                                                                                 : Sharing::kShim;
    if (grant.sharing == Sharing::kMps && grant.gpus.size() != 1) {
      return absl::InvalidArgumentError(StrCat("pod ", pod.Name(), " asks for MPS (",
                                               records::kGpuSharingAnnotation,
                                               ") with more than one GPU; MPS serves shares of "
                                               "one GPU"));
    }
  }
  auto mode = pod.annotations.find(std::string(records::kGpuComputeModeAnnotation));
  if (mode != pod.annotations.end()) {
    if (mode->second != "hard-cap" && mode->second != "work-conserving") {
      return absl::InvalidArgumentError(
          StrCat("pod ", pod.Name(), ": ", records::kGpuComputeModeAnnotation, " is \"",
                 mode->second, "\"; it must be hard-cap or work-conserving"));
    }
    grant.work_conserving = mode->second == "work-conserving";
  }
  return std::optional<PodGrant>(std::move(grant));
}

}  // namespace tessera::agent
