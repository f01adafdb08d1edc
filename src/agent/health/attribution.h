// Which pod caused an application XID. NVML's XID event names the GPU and, for a MIG instance, its
// GPU and compute instance; it never names the process (the kernel log's line does, which the
// agent does not read). So the answer comes from what the node knows of the pods on that GPU:
//   1. the event names a MIG instance: the pod that holds that instance;
//   2. one pod holds the GPU (a whole GPU, or the only share): that pod;
//   3. several share it: those whose processes the shim's ledger counts on the GPU now (the
//      process that faulted had a context there; one that never ran CUDA did not fault);
//   4. otherwise every pod on the GPU, each told that it is one of several.
// `certain` says whether the answer is one pod for sure (1, 2, or 3 with one pod left).
//
// Example: GPU 2 shared by a (2 processes in the ledger) and b (none); XID 31 on GPU 2 ->
// {a}, certain. Shared by a and b, both with processes -> {a, b}, not certain.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/discovery/discovery.h"

namespace tessera::agent {

// A pod that holds (part of) a GPU of this node.
struct GpuPod {
  std::string ns, name, uid;
  std::string gpu_uuid;
  std::string mig;         // "1g.10gb@0" when it holds a MIG instance, else empty
  int64_t processes = -1;  // processes the shim's ledger counts for it on the GPU; -1 unknown
  bool operator==(const GpuPod&) const = default;
};

struct Culprits {
  std::vector<GpuPod> pods;
  bool certain = false;
};

// `pods`: the pods on the node, any GPU (several entries per pod are fine; the same pod from two
// sources is counted once, by uid).
Culprits AttributeXid(const HealthEvent& event, const std::vector<GpuPod>& pods);

}  // namespace tessera::agent
