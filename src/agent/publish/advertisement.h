// What a GPU node tells Kubernetes about its GPUs, computed from what discovery found, and the
// patches that bring a Node object in line with it. Pure: no I/O (publisher.h sends the patches).
//
// The node carries (records/inventory.h, records/node_names.h):
//   metadata.annotations[tessera.dev/gpu-inventory]  the inventory record (GPUs, links, health)
//   metadata.labels  tessera.dev/gpu-model, tessera.dev/gpu-count, tessera.dev/nvlink-domain (only
//                    on a fabric clique), and metadata.annotations[tessera.dev/agent-labels]
//                    listing the labels the agent owns
//   status.capacity and status.allocatable  tessera.dev/gpu, tessera.dev/gpu-memory,
//                    tessera.dev/gpu-compute (units in records/node_names.h)
//
// Every GPU counts in the resources, healthy or not: the kubelet admits pods against them, also
// again when it restarts, and a running pod on a GPU that turned unhealthy must not be rejected
// then. Keeping new pods off an unhealthy GPU is the scheduler's job, from the inventory.
//
// Nothing is rewritten that already says the same: the inventory is compared as JSON (not as
// text), quantities by value ("640Gi" is "655360Mi"), labels and the ownership list as strings.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "agent/discovery/discovery.h"
#include "nlohmann/json.hpp"

namespace tessera::agent {

struct NodeAdvertisement {
  std::string inventory;                         // the record, compact JSON
  std::map<std::string, std::string> labels;     // the agent's labels, key -> value
  std::map<std::string, std::string> resources;  // extended resource -> quantity
};

NodeAdvertisement AdvertisementFor(const NodeGpus& gpus);

struct NodePatches {
  nlohmann::json metadata;           // a merge patch of the Node, or null when nothing differs
  nlohmann::json status;             // a merge patch of nodes/NAME/status, or null
  std::vector<std::string> changes;  // for logs: "label tessera.dev/gpu-count: 7 -> 8"
};

// What to patch so that `node` (a Node object as the API server returns it) advertises `ad`.
NodePatches DiffNode(const nlohmann::json& node, const NodeAdvertisement& ad);

// What to patch so that `node` carries nothing the agent wrote (the agent is uninstalled): the
// inventory and ownership annotations, the labels the ownership annotation lists (never labels
// people set, such as tessera.dev/gpu-node or a topology level's), and tessera's extended
// resources in capacity and allocatable. Both patches null when there is nothing to remove.
NodePatches WithdrawNode(const nlohmann::json& node);

}  // namespace tessera::agent
