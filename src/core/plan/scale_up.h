// The scale-up signal: for the pods that wait, which nodes would let them run.
//
// For each node template (a NodeSpec: a profile of the nodes an operator or an autoscaler can
// add), nodes of it are added one at a time to the cluster as it is (the engine's ChangeNodes,
// on a scratch engine holding every running pod), and after each the waiting pods are placed by
// the engine in their order (a gang whole, with its topology rules). The answer per template is
// the number of nodes after which the most waiting pods run; the recommendation is the template
// that runs the most, with the fewest nodes, then the fewest GPUs. This is what Kubernetes'
// cluster-autoscaler does per node group (a binpacking estimate, then an expander choosing a
// group), with tessera's own placement, so shares, topology and gangs count as they will.
//
// Example: a cluster of one full 8-GPU server; a gang of 12 pods x 1 GPU inside one rack waits,
// and so does a 4Gi share. Template `hgx` (8 GPUs, label rack=new): the first node added takes
// the share (the gang needs 12 GPUs), the second makes rack `new` hold 15 free GPUs: 2 nodes run
// all 13 pods. Template `l4` (one 24Gi GPU, rack=new) with max_nodes 8: the first node runs the
// share, the gang never finds 12 GPUs: 1 node runs 1 of 13, the gang named with the engine's
// reason. The estimate is greedy (nodes added one at a time, pods placed as they fit), as the
// autoscaler's is: an upper bound on the nodes needed, exact for alike pods.
//
// An elastic gang (GangAsk::min below its size) is placed as the scheduler starts it
// (Engine::PlaceElasticGang): it counts as run once at least its min members fit together; the
// nodes are for that, and its other members, which join as room frees up, are named in
// TemplateOption::partial (and in the reason), not counted as placed. Example: a gang of size 8,
// min 4, one NVLink domain, on a full cluster; template `hgx4` (4 GPUs, one NVSwitch): 1 node, the
// gang starts with 4 of 8.
//
// A waiting pod that no number of a template could run (a share larger than its GPUs, a gang
// needing a domain the template's labels never make) is named with the engine's reason.
//
// Incremental, with the answer of the procedure above, field by field, reasons included
// (scale_up_reference_test.cc keeps that procedure and compares on varied and generated cases):
//  - one scratch engine is built from the cluster and its running pods; each template but the
//    last runs on a copy of it under a new policy (Engine's copy constructor), not a rebuild; a
//    caller that has the cluster as an engine (ScaleUpInput::base) has each template run on a
//    copy of that, and nothing is built;
//  - a node added joins the domains, the domain index and the policy's order in place
//    (Engine::ChangeNodes with additions alone: as a rebuild would have them);
//  - the passes before the last ask quietly (Ask::Quiet: no per-node explanation of what does not
//    fit, which scans every node); the last pass is explained when it is known to be the last
//    (the max_nodes-th node); when it turns out to be (it ran nothing and patience ran out), each
//    group left is asked again, test-only and explained, on the cluster as that pass found it
//    (it placed nothing). Those asks come after every decision: they change none;
//  - a pod alone (no gang), not MIG, that did not fit is tried next only on the nodes added
//    since, where the policy's choice is per node (Policy::choice_is_per_node: the tessera
//    policy): what the other nodes hold has only grown since, so none of them takes it, and the
//    policy chooses among the new nodes as among all. Gangs (elastic or not) and MIG pods are
//    tried on the whole cluster after every node, as before: a gang may fit in free GPUs of the
//    cluster together with a new node, or in a domain of the cluster that the new node joins;
//    under other policies every pod is.
// Cost at 10,000 nodes (bench/results/scale_up.md): the engines' copies (one per template) are
// most of what is left.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/cluster.h"
#include "core/model/node.h"
#include "core/model/request.h"
#include "core/plan/defrag.h"
#include "core/policy/policy.h"
#include "core/topology/domains.h"

namespace tessera::core {
class Engine;
}  // namespace tessera::core

namespace tessera::plan {

struct ScaleUpInput {
  const core::Cluster* cluster = nullptr;
  std::vector<core::TopologyLevel> levels = core::DefaultTopologyLevels();
  std::function<std::unique_ptr<core::Policy>()> make_policy;
  std::vector<RunningPod> running;     // `movable` is not used
  std::vector<core::NodeId> cordoned;  // nodes that take no new pods
  // What waits, in the order it would be placed: each entry one pod, or every member of a gang.
  std::vector<std::vector<core::PodRequest>> waiting;
  std::vector<core::NodeSpec> templates;  // names unique; added nodes are NAME-new-0, -1, ...
  // The scheduler's hot spares (Engine::KeepSpares) kept on the cluster built from the fields
  // above: no waiting pod takes them and nodes added keep theirs. 0: none.
  int spares_per_domain = 0;
  // Instead of cluster, levels, running and cordoned (then not read): the cluster as it runs,
  // already an engine (the scheduler's ledger); each template is evaluated on a copy of it under
  // a new policy. The plan is the one the running pods restored on its cluster give
  // (scale_up_reference_test), without building that engine; what the engine holds beyond pods
  // counts as there: GPUs held unhealthy, and spares (Engine::KeepSpares), which no waiting pod
  // takes and nodes added keep as the scheduler's would. Not changed; must outlive the call.
  const core::Engine* base = nullptr;
};

struct ScaleUpOptions {
  int max_nodes = 64;  // most nodes of one template
};

struct Unplaced {
  std::vector<std::string> pods;
  std::string reason;  // the engine's, after the last node was added
};

// An elastic gang that starts with fewer than all its members.
struct PartialGang {
  std::string gang;
  int started = 0;  // members placed: at least its min
  int size = 0;
  int min = 0;
  std::vector<std::string> waiting;  // its members not started
};
// "gang t starts with 4 of its 8 members (min 4); the others join as room frees up".
std::string Describe(const PartialGang& g);

struct TemplateOption {
  std::string name;
  int nodes = 0;  // nodes to add: after the last one, nothing more ran
  int gpus = 0;   // GPUs they bring
  int pods_placed = 0;
  int64_t memory_granted_mib = 0;  // GPU memory granted to the waiting pods placed
  std::vector<Unplaced> unplaced;
  std::vector<PartialGang> partial;  // elastic gangs started with fewer than all their members
};

struct ScaleUpPlan {
  int waiting_pods = 0;
  std::vector<TemplateOption> options;  // template order
  int recommended = -1;                 // index into options; -1 when no template helps
  // The recommended option runs every waiting pod (an elastic gang: at least its min).
  bool all_placed = false;
  std::string reason;  // for people
};

// InvalidArgument for inconsistent input (running pods that do not fit together, a template
// that is not a valid node, duplicate template names).
[[nodiscard]] absl::StatusOr<ScaleUpPlan> PlanScaleUp(const ScaleUpInput& input,
                                                      const ScaleUpOptions& options = {});

}  // namespace tessera::plan
