// A live cluster as a simulator cluster file (`tessera simulate --from-cluster`, `--save`): its
// nodes with their inventories exactly as the agent published them, the nodes that take no new
// pods, and every bound pod with what it holds, so that the simulator starts where the scheduler
// stands.
//
// What a pod holds is read back from the ledger a scheduler starting now would build
// (k8s::ClusterSnapshot::Ledger, the one owner of restoring bound pods), not decoded a second
// time: a pod whose GPUs the scheduler cannot account keeps only its CPU and memory in the file,
// and the node it blocks is cordoned (the scheduler gives it no GPU pods; the simulator has no
// finer switch), with a problem saying so.
#pragma once

#include <vector>

#include "k8s/scheduler/ledger.h"
#include "k8s/snapshot/snapshot.h"
#include "sim/cluster_file.h"

namespace tessera::cli {

// `problems` (optional) gets the snapshot's problems (k8s::ClusterSnapshot::Ledger) and one per
// node cordoned in the file because a pod's GPUs could not be accounted there.
sim::ClusterFile SnapshotToClusterFile(const k8s::ClusterSnapshot& snapshot,
                                       const k8s::LedgerOptions& options,
                                       std::vector<k8s::SnapshotProblem>* problems = nullptr);

}  // namespace tessera::cli
