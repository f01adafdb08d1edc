#include "cli/snapshot_file.h"

#include <set>

#include "common/strings.h"
#include "records/assignment.h"

namespace tessera::cli {

sim::ClusterFile SnapshotToClusterFile(const k8s::ClusterSnapshot& snapshot,
                                       const k8s::LedgerOptions& options,
                                       std::vector<k8s::SnapshotProblem>* problems) {
  std::vector<k8s::SnapshotProblem> found;
  std::unique_ptr<k8s::ClusterLedger> ledger = snapshot.Ledger(options, &found);
  std::set<std::string> blocked;
  for (const k8s::SnapshotProblem& p : found) {
    if (p.object.starts_with("pod/")) blocked.insert(p.node);
  }
  sim::ClusterFile file;
  file.levels = options.levels;
  for (const k8s::SnapshotNode& n : snapshot.nodes()) {
    core::NodeSpec spec = n.info->spec;
    spec.name = n.name();
    if (n.info->unschedulable || blocked.contains(n.name())) file.cordoned.push_back(n.name());
    if (!n.health.empty() && !spec.gpus.empty()) file.health[n.name()] = n.health;
    file.nodes.push_back(std::move(spec));
  }
  for (const std::string& node : blocked) {
    if (snapshot.FindNode(node) != nullptr && !snapshot.FindNode(node)->info->unschedulable) {
      found.push_back(k8s::SnapshotProblem{
          StrCat("node/", node), node,
          "cordoned in the simulation: a pod there holds GPUs the scheduler cannot account, so it "
          "gives the node no GPU pods"});
    }
  }
  const core::Engine& engine = ledger->engine();
  for (const k8s::PodInfo* p : snapshot.BoundPods()) {
    const core::Placement* placement = engine.Find(p->key);
    if (placement == nullptr) continue;  // on no listed node, or not accounted (a problem says)
    sim::RunningPod pod;
    pod.name = p->key;
    pod.cpu_milli = placement->cpu_milli;
    pod.memory_mib = placement->memory_mib;
    pod.assignment = records::MakeAssignment(engine.cluster(), *placement);
    file.running.push_back(std::move(pod));
  }
  if (problems != nullptr) {
    problems->insert(problems->end(), found.begin(), found.end());
  }
  return file;
}

}  // namespace tessera::cli
