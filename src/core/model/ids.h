#pragma once

#include "common/strong_id.h"

namespace tessera::core {

struct NodeIdTag {};
// Index of a node in its Cluster (0..n-1). Stable for the cluster's lifetime.
using NodeId = StrongId<NodeIdTag>;

}  // namespace tessera::core
