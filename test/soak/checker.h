// The soak's invariant checker. It shares no code with tessera: it reads what any observer can
// read (the API server's Nodes, Pods, ResourceClaims and ResourceSlices as JSON, the files each
// container writes about what it received, the node's files) with its own parsing, so that a bug
// in tessera's records or engine cannot hide itself.
//
// Invariants (issue 30), checked on every snapshot:
//   no-double-grant     a GPU held whole (an exclusive classic grant, a DRA device allocated
//                       without a capacity request) is held by one pod (one claim) only; a MIG
//                       instance by one holder only
//   capacity            per GPU, the memory and compute granted to active pods never exceed what
//                       its inventory says it has
//   container-sees      a running container reports exactly the GPUs (UUIDs; "MIG-..." for a MIG
//                       instance) and, for a share, the memory cap its pod was granted
//   unhealthy-gpu       no active pod stays on a GPU the inventory has called unhealthy for longer
//                       than the fault policy allows (evict: `unhealthy_allowance`), and no pod is
//                       bound to such a GPU after it was published unhealthy
//   runs-or-waits       a pod that is not running after `pending_allowance` says why: unbound with
//                       PodScheduled=False and a message, or bound with a waiting container reason
// and once, after the workload is gone (CheckLeaks): nothing left of the pods on the nodes (the
// agent's pod folders with the shim's segments, DRA claim folders, CDI specs, checkpoint entries,
// MIG instances the DRA driver created).
//
// "Active" pods are those not Succeeded or Failed: a pod being deleted still holds its GPUs until
// its containers are gone.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace tessera::soak {

using Clock = std::chrono::steady_clock;

// What the checker reads at one moment.
struct Snapshot {
  Clock::time_point at;
  nlohmann::json nodes = nlohmann::json::object();   // a NodeList
  nlohmann::json pods = nlohmann::json::object();    // a PodList, every namespace
  nlohmann::json claims = nlohmann::json::object();  // a ResourceClaimList, every namespace
  nlohmann::json slices = nlohmann::json::object();  // a ResourceSliceList
  // Pod UID -> the last lines the pod's container wrote about what it received:
  // "visible=<NVIDIA_VISIBLE_DEVICES> limit_mib=<TESSERA_GPU_MEMORY_LIMIT_MIB>".
  std::map<std::string, std::string> reports;
};

struct Violation {
  std::string invariant;  // "no-double-grant", "capacity", ...
  std::string detail;
};

// One GPU (or a part of one) a pod holds, as the checker reads it.
struct Holding {
  std::string node, gpu_uuid;
  int64_t memory_mib = 0;
  int64_t compute_milli = 0;
  bool whole = false;  // the GPU whole
  std::string mig;     // "1g.10gb@0" for a MIG instance
  std::string holder;  // "pod ns/name" or "claim ns/name" (a claim counts once)
  // A DRA device the snapshot's ResourceSlices do not list (its pool is being published again:
  // after a kubelet or agent restart): which GPU it is cannot be told, so it is left out of the
  // per-GPU invariants and its pod's container-sees check until the slices list it again.
  bool unresolved = false;
};

// Quantities as Kubernetes writes them ("4Gi", "81559Mi", "100", "1500m"), in MiB or units.
bool ParseMiB(const std::string& quantity, int64_t* mib);

struct CheckerOptions {
  std::chrono::seconds unhealthy_allowance{90};
  std::chrono::seconds pending_allowance{180};
  std::chrono::seconds bind_slack{10};  // a pod bound this soon after a GPU turned unhealthy
};

class Checker {
 public:
  explicit Checker(CheckerOptions options = {}) : options_(options) {}

  // Checks `s`; returns the violations found in it (also added to violations()).
  std::vector<Violation> Check(const Snapshot& s);

  // What each active pod holds (classic assignments and DRA allocations), by pod UID.
  static std::map<std::string, std::vector<Holding>> Holdings(const Snapshot& s);

  const std::vector<Violation>& violations() const { return violations_; }

 private:
  void Record(std::vector<Violation>* out, const std::string& key, Violation v);

  CheckerOptions options_;
  std::map<std::string, Clock::time_point> unhealthy_since_;  // "node/uuid"
  std::map<std::string, Clock::time_point> seen_since_;       // pod UID: first seen unfinished
  std::map<std::string, Clock::time_point> bound_seen_;       // pod UID: first seen bound
  std::set<std::string> reported_;  // violation keys already reported (once each)
  std::vector<Violation> violations_;
};

// What a node keeps for pods, once every pod is gone (CheckLeaks): file names found.
struct NodeLeftovers {
  std::string node;
  std::vector<std::string> pod_dirs;           // the agent's --pods-dir entries
  std::vector<std::string> claim_dirs;         // the DRA driver's --claims-dir entries
  std::vector<std::string> cdi_specs;          // tessera's CDI spec files
  std::vector<std::string> checkpoint_claims;  // claims in the DRA checkpoint
  std::vector<std::string> dra_mig_instances;  // MIG instances the DRA driver created
};
std::vector<Violation> CheckLeaks(const std::vector<NodeLeftovers>& nodes);

}  // namespace tessera::soak
