// A pod's grant on this node: its tessera.dev/assignment checked against the GPUs the agent
// discovered, and how the pod's shares are enforced. Pure: no files, no processes.
//
// The checks are the delivery's refusals (src/agent/README.md "Delivering the assignment"): a
// record that names another node, a GPU this node does not have (by UUID), a GPU whose index here
// differs, a MIG instance on a GPU that is not in MIG mode, or a sharing mode that is not known
// fails with a message that names it, and the pod never gets another GPU.
//
// How a share is enforced (Sharing, edits/container_edits.h), from the pod's annotation
// tessera.dev/gpu-sharing (records/names.h): "shim" (the default) puts the CUDA shim into the
// containers (src/shim/contract.h), "mps" the GPU's MPS daemon (src/agent/mps). Whole GPUs and
// MIG instances need neither: the hardware is the pod's alone. What the containers get is the
// grant as a ContainerGrant (ContainerGrantOf), decided by edits/container_edits.h.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "agent/discovery/discovery.h"
#include "agent/edits/container_edits.h"
#include "records/assignment.h"

namespace tessera::agent {

// The pod, as the container runtime (NRI) or the kubelet (DRA) describes it.
struct PodRef {
  std::string ns;
  std::string name;
  std::string uid;
  std::map<std::string, std::string> annotations;

  std::string Name() const { return ns + "/" + name; }
};

// One GPU of the grant as this node has it.
struct GrantedGpu {
  DiscoveredGpu gpu;              // the node's GPU (index, UUID, minor, MIG instances)
  records::AssignedGpu assigned;  // what the record grants on it
  // A MIG grant: the instance's identity once it exists (MIG-... from discovery), else empty.
  std::string mig_uuid;
  bool mig() const { return !assigned.mig_profile.empty(); }
  bool share() const { return !mig() && !assigned.grant.exclusive; }
};

struct PodGrant {
  PodRef pod;
  std::string record;  // the annotation's text, as written by the scheduler
  records::Assignment assignment;
  std::vector<GrantedGpu> gpus;  // in the record's order
  Sharing sharing = Sharing::kNone;
  // For a compute share: work-conserving (tessera.dev/gpu-compute-mode), else a hard cap.
  bool work_conserving = false;

  bool has_mig() const;
  std::vector<std::string> uuids() const;  // the GPUs' UUIDs (MIG: the instance's, when known)
};

// The pod's grant, or nullopt for a pod without a record (it gets no GPU), or an error saying why
// the record cannot be honoured on node `node_name` with `gpus`. A MIG instance the record's plan
// creates need not exist yet (mig_uuid stays empty until it does).
[[nodiscard]] absl::StatusOr<std::optional<PodGrant>> ResolveGrant(const PodRef& pod,
                                                                   const std::string& node_name,
                                                                   const NodeGpus& gpus);

// Host paths of a pod's files: its folder under `pods_dir` (the shim's limits/ and ledger/), and
// its record.
std::string PodDir(const std::string& pods_dir, const std::string& uid);
std::string AssignmentFile(const std::string& pods_dir, const std::string& uid);

// What the pod's containers are granted: its GPUs, its record (AssignmentFile) and its segments
// (PodDir) under `pods_dir`.
ContainerGrant ContainerGrantOf(const PodGrant& grant, const std::string& pods_dir);

}  // namespace tessera::agent
