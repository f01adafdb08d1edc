// tessera: the default policy. Place each pod where it leaves the least GPU capacity that the live
// mix of arriving work is unlikely ever to use, filling nodes in a fixed order that keeps big and
// NVLink-connected servers free for the jobs that need them.
//
// Objective. The policy learns the mix of requests it is asked to place (TaskMix: the most popular
// shapes covering 95% of recent requests) and measures each node's expected stranded capacity
// against it (WasteModel, waste.h: free pieces weighted by the chance that no fitting task comes
// along, plus free GPUs the node's free CPU cannot feed). A placement is scored by how much it
// increases that waste on its node; for a share, every GPU with room is tried (the node and the
// GPU are chosen together).
//
// Order. Ties in waste are common (a whole GPU taken from any large node strands nothing), and how
// they are broken decides how well the cluster packs. Nodes are ranked once: PCIe-only nodes before
// NVLink ones; within each, fewer GPUs first (CPU-only nodes first of all); then by a hash of the
// name salted with PolicyOptions::seed. The rank enters the score as a penalty of up to one GPU of
// waste, so pods fill low-ranked nodes first (first fit) unless another node wastes clearly less,
// and the big NVLink servers stay whole longest.
//
// Topology comes first for whole GPUs: a node where the set meets an interconnect level the pod
// prefers (whole_set.h) beats any other, and nodes of rack-scale NVLink domains (one
// tessera.dev/nvlink-domain label on several nodes, such as GB200 NVL72 trays) are taken only when
// nothing else fits, so they stay whole for the gangs that need them. MIG asks go to the MIG
// instance whose use costs the fewest other profiles (mig_node.h), by a plain scan.
//
// Whole GPUs that take a node's last free GPUs win over the order (exact fit: worth two GPUs of
// waste). Small nudges, each worth a few hundredths of a GPU, settle near-ties: whole GPUs prefer
// the node left with the fewest free GPUs (best fit) and take the best-connected set on it;
// a share prefers the GPU it leaves fullest (best fit: a short burst of small shares packs as
// tightly as binpack); a CPU-only pod prefers nodes with the fewest free GPUs (it strands none).
//
// Free GPUs in a sharing cluster. When the asks in the live mix that need more than half a GPU
// are mostly shares (0.65, 0.81 ...) rather than whole GPUs, a free GPU will most likely end up
// holding one such share and stranding the rest of it. A share then gets a bonus for opening a
// free GPU: kOpenFreeGpu x f^4, where f is that fraction of shares. Partly used GPUs are left
// for partners that come later, and the free GPUs run out sooner for the shares that strand.
// With whole GPUs in the mix (f = 0.27 on the Alibaba trace's default: 0.002 GPU), best fit
// is unchanged; with no whole GPUs (gpushare100: f = 1) the bonus is 0.4 GPU and the FGD
// protocol's allocation goes up by 0.83 points (bench/results/tessera-tuning.md).
//
// Filling and churning. Everything above plans for a cluster being filled: nothing has left yet,
// so a free piece will be offered many more arrivals and only what nothing fits is lost. Once a
// pod has left (OnReleased), the cluster churns: pods that do not fit wait for others to leave,
// and what counts is what the waiting pods can use at the peaks, not where the fill ends. Two
// things change then (the first departure switches for good; a cluster that only fills, like the
// FGD paper's protocol, never switches):
//  - A share that opens a free GPU pays kOpenFreeGpuChurn x w (w: of the mix's GPU asks, the part
//    that needs more than half a GPU, which only a free GPU holds) instead of the bonus above:
//    shares pair up on partly used GPUs when the pair strands little, and the free GPUs stay for
//    the whole-GPU pods and big shares, which are the ones that wait. Two 0.47 shares on one GPU
//    strand 0.06 (60 milli-GPU of waste) and side by side on two GPUs nothing (the mix fills each
//    0.53 one day), so while filling the second opens a GPU; churning, with w = 0.79 on the
//    trace's default mix, opening costs 63 and they pair, and so does any pair that strands
//    under about 0.07 GPU.
//  - GPUs of contended models are kept for the asks that can use nothing else: a pod placed where
//    narrower asks of the mix (a model list that is a strict subset of the pod's) could run pays
//    kContendedModel x p per GPU it takes, p being the demand per GPU those asks put on the node
//    (each spread over the GPUs of its models on nodes with enough of them) against the mix's
//    demand per GPU of the whole cluster, at most 2. With a third of the pods bound to T4 GPUs
//    (the trace's gpuspec33: p = 1.3 on T4 nodes, 0.1 on G2 nodes) other pods keep off the T4
//    nodes while anything else has room. While filling the same pressure costs only
//    kContendedFilling x p (0.3 GPU per unit): a lean away from the contended models that
//    reorders near-ties (FGD's workload model weighs their free capacity like this) but does not
//    override the node order. More costs the fill what the diverted pods then break: keeping
//    pods off the T4 nodes from the first pod costs 0.04 points of the FGD protocol's allocation
//    on gpuspec33 at 0.4 GPU per unit and 0.9 points at 10 GPUs (bench/results/churn-analysis.md,
//    where the trade-off is measured), and no rule tried kept the fill whole and the T4 GPUs
//    free early enough for the churn of gpuspec33 (but see the next paragraph).
//
// Bound models' last free GPUs (issue 31). Demand bound to a set of models is a claim on that
// set's free GPUs: of what is free, the bound asks will want their part of the mix's demand (the
// share b of the GPU demand that may run only within the set). So once the set's free milli-GPU
// are fewer than b x the cluster's free milli-GPU, the set is reserved, and while filling a whole
// GPU taken there pays kContendedModel (not kContendedFilling) per unit of the pressure that
// reserved sets put on the node. With a third of the pods bound (gpuspec33: b = 0.17 on T4, 842
// of 6212 GPUs) the T4 GPUs are reserved from the first pod and the unbound whole pods that come
// before any pod leaves (in a replay of the trace, its long-running pods, which stay) go
// elsewhere; with b = 0.03 (gpuspec05) only once the T4 GPUs are nearly all taken. Shares keep
// the light weight while filling: keeping them off too cost the FGD protocol's fill 0.46 points
// on gpuspec33, whole GPUs alone 0.07 (bench/results/model-reserve.md, which has what is won and
// lost). TesseraOptions::reserve_bound_models = false (tessera.h) restores the rule before.
//
// Example (the reality check): an 8-GPU NVSwitch server and a 2-GPU PCIe server, twenty 4Gi
// shares. No placement strands anything, so the order decides: the PCIe server ranks first, and
// on it the first GPU already shared is the fullest that fits: all twenty share one GPU, and the
// NVSwitch server stays whole for an 8-GPU job.
//
// Speed: a node's score depends only on its own state, so evaluations are kept per request shape
// in a ShapeIndex (re-evaluating only nodes that changed); a node's waste is a few table lookups.
// Gangs restricted to a domain (candidates) are scored by a plain scan of the candidates.
#include "core/policy/tessera.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "core/policy/factories.h"
#include "core/policy/fragmentation.h"
#include "core/policy/mig_node.h"
#include "core/policy/shape_index.h"
#include "core/policy/waste.h"
#include "core/policy/whole_set.h"
#include "core/topology/domains.h"
#include "core/topology/gpu_select.h"

namespace tessera::core {
namespace {

// Weights in milli-GPU of expected waste.
constexpr double kRankSpan = 1000;         // the whole node order is worth one GPU of waste
constexpr double kBestFit = 30;            // whole GPUs: per free GPU left on the node (of 8)
constexpr double kExactFit = 2000;         // whole GPUs: the pod takes the node's last free GPUs
constexpr double kCpuOnlySpread = 30;      // CPU-only pods: per free GPU on the node (of 8)
constexpr double kShareBestFit = 20;       // shares: per GPU of room left on the chosen GPU
constexpr double kOpenFreeGpu = 400;       // shares: for opening a free GPU, times f^4 (see above)
constexpr double kOpenFreeGpuChurn = 80;   // churning: shares pay for opening one, times w
constexpr double kContendedModel = 10000;  // churning: per GPU taken, times the model pressure
constexpr double kContendedFilling = 300;  // filling: the same, at most what the fill tolerates
constexpr double kMaxPressure = 2;
// Tiers for whole GPUs, far above any waste (a node has at most 64 GPUs: 64,000).
constexpr double kPreferenceTier = 1e6;  // the set meets the pod's preferred interconnect
constexpr double kKeepDomainTier = 1e5;  // the node is outside every rack-scale NVLink domain
// Scores are kept as integers in micro-GPU.
constexpr double kScale = 1000;

uint64_t HashName(std::string_view name, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ (seed * 0x9E3779B97F4A7C15ULL);
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// kOpenFreeGpu x f^4, f: of the mix's asks for more than half a GPU, the part that are shares.
double OpenFreeGpuBonus(const std::vector<TypicalTask>& mix) {
  double shares = 0, whole = 0;
  for (const TypicalTask& t : mix) {
    if (t.gpu_count < 1 || t.gpu_milli <= 500) continue;
    (t.gpu_milli < 1000 ? shares : whole) += t.weight;
  }
  if (shares + whole <= 0) return 0;
  const double f = shares / (shares + whole);
  return kOpenFreeGpu * f * f * f * f;
}

// Churning: -kOpenFreeGpuChurn x w, w: of the mix's GPU asks, the part that needs more than half a
// GPU (whole GPUs, or shares above 500 milli-GPU).
double OpenFreeGpuChurnTerm(const std::vector<TypicalTask>& mix) {
  double big = 0, all = 0;
  for (const TypicalTask& t : mix) {
    if (t.gpu_count < 1) continue;
    all += t.weight;
    if (t.gpu_milli > 500) big += t.weight;
  }
  return all > 0 ? -kOpenFreeGpuChurn * big / all : 0.0;
}

class TesseraPolicy final : public Policy {
 public:
  TesseraPolicy(const PolicyOptions& options, const TesseraOptions& tessera)
      : seed_(options.seed), reserve_bound_models_(tessera.reserve_bound_models) {}
  std::string_view name() const override { return "tessera"; }
  // Scores are per node (waste, rank, tiers), ties by the rank; a node is declined only when no
  // GPU set meets a required interconnect, which fewer free GPUs never changes.
  bool choice_is_per_node() const override { return true; }

  void Attach(const ClusterState& state) override {
    Order(state.cluster());
    Reset(state);
  }

  // The order is a function of the nodes and the seed alone: a copy of a state a policy of the
  // same seed is attached to takes that policy's order instead of sorting 10,000 keys again (the
  // scale-up planner's what-if copies).
  void AttachCopy(const ClusterState& state, const Policy& base) override {
    const auto* other = dynamic_cast<const TesseraPolicy*>(&base);
    if (other != nullptr && other->seed_ == seed_ &&
        static_cast<int>(other->order_.size()) == state.cluster().node_count()) {
      order_ = other->order_;
      rack_domain_ = other->rack_domain_;
      reference_memory_ = other->reference_memory_;
    } else {
      Order(state.cluster());
    }
    Reset(state);
  }

  // order_, rack_domain_ and reference_memory_ from the nodes.
  void Order(const Cluster& cluster) {
    const int n = cluster.node_count();
    order_.clear();
    reference_memory_ = 0;
    for (int i = 0; i < n; ++i) order_.push_back(KeyOf(cluster.node(NodeId(i)), i));
    // Nodes of a rack-scale NVLink domain: one tessera.dev/nvlink-domain label value on two or
    // more nodes. They come last in the order too.
    std::map<std::string, int> domain_nodes;
    const std::string label(kNvlinkDomainLabel);
    for (const NodeSpec& spec : cluster.nodes()) {
      if (auto it = spec.labels.find(label); it != spec.labels.end()) ++domain_nodes[it->second];
    }
    rack_domain_.assign(n, 0);
    for (int i = 0; i < n; ++i) {
      const NodeSpec& spec = cluster.node(NodeId(i));
      if (auto it = spec.labels.find(label);
          it != spec.labels.end() && domain_nodes[it->second] > 1) {
        rack_domain_[i] = 1;
        order_[i].nvlink = true;  // with the NVLink nodes, after them by the hash below
      }
    }
    std::sort(order_.begin(), order_.end(),
              [&](const Key& a, const Key& b) { return Before(a, b); });
  }

  // Attach's state past the order: the ranks and index from it, nothing learned yet.
  void Reset(const ClusterState& state) {
    const int n = state.cluster().node_count();
    Rank(state);
    mix_ = TaskMix();
    waste_ = WasteModel();
    open_free_bonus_ = 0;
    churning_ = false;
    contended_.clear();
    last_contended_ = nullptr;
    bound_.clear();
    base_.assign(n, Base{});
    set_memo_.assign(n, {});
  }

  // The node order and indexes are derived again; the live request mix survives (and the waste
  // model is rebuilt from it for the new nodes).
  void OnClusterChanged(const ClusterState& state) override {
    TaskMix mix = std::move(mix_);
    Attach(state);
    mix_ = std::move(mix);
    if (!mix_.tasks().empty()) {
      waste_ = WasteModel(state.cluster(), mix_.tasks(), WasteModel::Params{});
      open_free_bonus_ = OpenFreeGpuBonus(mix_.tasks());
      FindBoundModels(state);
    }
  }

  // OnClusterChanged's result without re-deriving the old nodes: each new node's key inserted
  // in the order, the waste model extended (WasteModel::AddNodes), the rest reset as Attach
  // does. A new node labelled tessera.dev/nvlink-domain may make other nodes rack-scale (their
  // keys change): then OnClusterChanged itself.
  void OnNodesAdded(const ClusterState& state, NodeId first) override {
    const Cluster& cluster = state.cluster();
    const int n = cluster.node_count();
    const std::string label(kNvlinkDomainLabel);
    bool in_place = static_cast<int>(order_.size()) == first.value();
    for (int i = first.value(); i < n && in_place; ++i) {
      in_place = !cluster.node(NodeId(i)).labels.contains(label);
    }
    if (!in_place) {
      OnClusterChanged(state);
      return;
    }
    for (int i = first.value(); i < n; ++i) {
      const Key key = KeyOf(cluster.node(NodeId(i)), i);
      rack_domain_.push_back(0);
      order_.insert(std::upper_bound(order_.begin(), order_.end(), key,
                                     [&](const Key& a, const Key& b) { return Before(a, b); }),
                    key);
    }
    Rank(state);
    open_free_bonus_ = 0;
    churning_ = false;
    contended_.clear();
    last_contended_ = nullptr;
    base_.assign(n, Base{});
    set_memo_.resize(n);  // per node and free GPUs: the old nodes' entries hold
    if (mix_.tasks().empty()) {
      bound_.clear();
      waste_ = WasteModel();
    } else {
      if (!waste_.AddNodes(cluster, first.value(), mix_.tasks())) {
        waste_ = WasteModel(cluster, mix_.tasks(), WasteModel::Params{});
      }
      open_free_bonus_ = OpenFreeGpuBonus(mix_.tasks());
      FindBoundModels(state);
    }
  }

  void OnNodeChanged(const ClusterState& state, NodeId node) override {
    index_.NodeChanged(node);
    if (!bound_.empty()) CountFree(state, node);
  }

  void OnReleased(const ClusterState& state, const Placement& placement) override {
    (void)state;
    (void)placement;
    if (churning_) return;
    churning_ = true;  // for good: see "Filling and churning" above
    MixChanged(state);
  }

  std::optional<NodeChoice> ScoreNode(const ClusterState& state, const Query& query, NodeId node,
                                      const NodeFit& fit) override {
    if (query.request->gpu.kind == GpuAsk::Kind::kMig) {
      return ScoreMigNode(state, query, node, fit, MigPreference::kLeastLoss);
    }
    std::optional<Eval> e = Evaluate(state, query, node, fit);
    if (!e) return std::nullopt;
    NodeChoice c;
    c.score = static_cast<double>(e->score) / kScale;
    c.placement = MakePlacement(state, *query.request, node, e->gpus);
    return c;
  }

  std::optional<NodeChoice> Choose(const ClusterState& state, const Query& query,
                                   std::vector<NodeId>* declined) override {
    // MIG slices: the plain scan of ScoreNode (MIG GPUs take nothing else; no index needed).
    if (query.request->gpu.kind == GpuAsk::Kind::kMig) {
      return ScanCandidates(state, query, declined);
    }
    if (mix_.Observe(*query.request, reference_memory_)) {
      waste_ = WasteModel(state.cluster(), mix_.tasks(), WasteModel::Params{});
      base_.assign(state.node_count(), Base{});
      MixChanged(state);
    }
    UpdateReserved();
    auto compute = [&](NodeId node, uint64_t allowed) {
      NodeEval out;
      NodeFit fit = CheckNode(state, query, node, allowed);
      if (!fit.ok()) return out;
      std::optional<Eval> e = Evaluate(state, query, node, fit);
      out.status = e ? NodeEval::kScored : NodeEval::kDeclined;
      if (e) {
        out.score = e->score;
        out.gpus = e->gpus;
      }
      return out;
    };
    NodeId node;
    std::optional<NodeEval> best;
    if (use_index_ && !query.candidates) {
      best = index_.Best(
          state, RequestShape::Of(query), [&](NodeId n) { return compute(n, ~0ULL); }, &node,
          declined);
    } else {
      int64_t best_key = ShapeIndex::kNone;
      auto visit = [&](NodeId n, uint64_t allowed) {
        NodeEval e = compute(n, allowed);
        if (e.status == NodeEval::kDeclined && declined) declined->push_back(n);
        if (e.status != NodeEval::kScored) return;
        const int64_t key = index_.Key(e.score, n);
        if (key > best_key) {
          best_key = key;
          best = e;
          node = n;
        }
      };
      if (query.candidates) {
        for (const Candidate& c : *query.candidates) visit(c.node, c.gpu_mask);
      } else {
        for (int i = 0; i < state.node_count(); ++i) visit(NodeId(i), ~0ULL);
      }
    }
    if (!best) return std::nullopt;
    NodeChoice choice;
    choice.score = static_cast<double>(best->score) / kScale;
    choice.placement = MakePlacement(state, *query.request, node, best->gpus);
    return choice;
  }

 private:
  struct Eval {
    int64_t score = 0;
    uint64_t gpus = 0;
  };
  struct Base {
    uint64_t stamp = 0;
    double waste = 0;
  };
  // Per node, milli-GPU of waste per GPU taken there (see "Filling and churning" above): `whole`
  // for whole GPUs, `share` per GPU's worth of a share.
  struct ContendedCost {
    std::vector<double> whole, share;
  };
  // A set of GPU models that asks of the mix are bound to.
  struct BoundModels {
    ModelSet models;
    std::vector<double> demand;  // per node: the demand per GPU its asks put there
    double share = 0;            // part of the mix's GPU demand that may run only on these models
    int64_t free = 0;            // milli-GPU free on their GPUs (CountFree)
    bool reserved = false;       // fewer free than `share` of the cluster's free (UpdateReserved)
  };

  double BaseWaste(const ClusterState& state, NodeId node, const int32_t* left, int gpus) {
    Base& b = base_[node.value()];
    const uint64_t stamp = state.version(node) + 1;
    if (b.stamp != stamp) {
      b.waste = waste_.Waste(node, state.free_cpu_milli(node), left, gpus);
      b.stamp = stamp;
    }
    return b.waste;
  }

  // Milli-GPU left on GPU g after a share of `ask` is granted there (GpuMilliLeft's figure).
  static int32_t LeftAfterShare(const ClusterState& state, NodeId node, int g, const GpuAsk& ask) {
    const GpuState& s = state.gpu(node, g);
    const int64_t capacity = state.cluster().node(node).gpus[g].memory_mib;
    const int64_t memory = s.free_memory_mib - ShareMemoryOn(ask, capacity);
    const int64_t compute = s.free_compute_milli - ShareComputeOn(ask);
    const int64_t by_memory = capacity > 0 ? memory * 1000 / capacity : 0;
    return static_cast<int32_t>(std::clamp<int64_t>(std::min(compute, by_memory), 0, 999));
  }

  std::optional<Eval> Evaluate(const ClusterState& state, const Query& query, NodeId node,
                               const NodeFit& fit) {
    const PodRequest& r = *query.request;
    const int n = state.cluster().node(node).gpu_count();
    int32_t left[kMaxGpusPerNode];
    for (int g = 0; g < n; ++g) left[g] = GpuMilliLeft(state, node, g);
    const double before = BaseWaste(state, node, left, n);
    const int64_t cpu_after = state.free_cpu_milli(node) - r.cpu_milli;
    const double order = -kRankSpan * rank_fraction_[node.value()];
    // Per GPU taken here: what narrower asks lose (see "Filling and churning" above).
    const ContendedCost& contended = ContendedPenalty(state, query);
    auto to_score = [](double s) { return static_cast<int64_t>(std::llround(s * kScale)); };

    switch (r.gpu.kind) {
      case GpuAsk::Kind::kNone: {
        const double after = waste_.Waste(node, cpu_after, left, n);
        int64_t free = 0;
        for (int g = 0; g < n; ++g) free += left[g];
        const double spread = -kCpuOnlySpread * static_cast<double>(free) / 8000.0;
        return Eval{to_score(before - after + order + spread), 0};
      }
      case GpuAsk::Kind::kWhole: {
        std::optional<WholeSet> set = WholeSetOn(state, query, node, fit.gpus);
        if (!set) return std::nullopt;
        int whole_after = 0;
        for (int g = 0; g < n; ++g) {
          if (set->mask & (1ULL << g)) left[g] = 0;
          whole_after += left[g] >= 1000;
        }
        const double after = waste_.Waste(node, cpu_after, left, n);
        const double fit_term = -kBestFit * whole_after / 8.0 + (whole_after == 0 ? kExactFit : 0);
        const double tiers = (set->preference_met ? kPreferenceTier : 0) +
                             (rack_domain_[node.value()] ? 0 : kKeepDomainTier);
        const double taken = contended.whole[node.value()] * __builtin_popcountll(set->mask);
        return Eval{to_score(before - after + order + fit_term + tiers - taken), set->mask};
      }
      case GpuAsk::Kind::kMig:
        return std::nullopt;  // handled by ScoreNode / Choose
      case GpuAsk::Kind::kShare:
      case GpuAsk::Kind::kFraction: {
        // Every GPU with room, each distinct free amount once (equal amounts score equally).
        int best_gpu = -1;
        double best = 0;
        int32_t best_left = 0;
        int32_t tried[kMaxGpusPerNode];
        int tried_count = 0;
        for (uint64_t a = fit.gpus; a; a &= a - 1) {
          const int g = __builtin_ctzll(a);
          bool seen = false;
          for (int t = 0; t < tried_count; ++t) seen |= tried[t] == left[g];
          if (seen) continue;
          tried[tried_count++] = left[g];
          const int32_t was = left[g];
          left[g] = LeftAfterShare(state, node, g, r.gpu);
          const double s =
              before - waste_.Waste(node, cpu_after, left, n) -
              kShareBestFit * static_cast<double>(left[g]) / 1000.0 +
              (was >= 1000 ? open_free_bonus_ : 0.0) -
              contended.share[node.value()] * static_cast<double>(was - left[g]) / 1000.0;
          left[g] = was;
          // Higher score first; then the fuller GPU (best fit); then the lower index.
          if (best_gpu < 0 || s > best + 1e-9 || (s > best - 1e-9 && was < best_left)) {
            best_gpu = g;
            best = s;
            best_left = was;
          }
        }
        if (best_gpu < 0) return std::nullopt;
        return Eval{to_score(best + order), 1ULL << best_gpu};
      }
    }
    return std::nullopt;
  }

  // The mix changed, or the cluster started churning: everything derived from both.
  void MixChanged(const ClusterState& state) {
    open_free_bonus_ =
        churning_ ? OpenFreeGpuChurnTerm(mix_.tasks()) : OpenFreeGpuBonus(mix_.tasks());
    contended_.clear();
    last_contended_ = nullptr;
    index_.Invalidate();
    FindBoundModels(state);
  }

  // The model sets that asks of the mix are bound to (bound_), each with the demand per GPU its
  // asks put on the nodes that can run them, the part of the mix's GPU demand that may run only
  // within it, and its free GPUs counted afresh.
  void FindBoundModels(const ClusterState& state) {
    const Cluster& cluster = state.cluster();
    const int nodes = cluster.node_count();
    const std::vector<BoundModels> before = std::move(bound_);
    bound_.clear();
    demand_per_gpu_ = 0;
    double demand = 0, gpus = 0;
    for (int n = 0; n < nodes; ++n) gpus += cluster.node(NodeId(n)).gpu_count();
    for (const TypicalTask& t : mix_.tasks()) demand += t.weight * t.gpu_count * t.gpu_milli;
    if (demand <= 0 || gpus <= 0) return CountAllFree(state, before);
    demand_per_gpu_ = demand / gpus;
    std::vector<uint8_t> runs(nodes);
    std::vector<ModelSet> task_models;
    for (const TypicalTask& t : mix_.tasks()) {
      if (t.gpu_count == 0 || t.gpu_models.empty()) continue;
      const ModelSet models = cluster.ResolveModels(t.gpu_models);
      task_models.push_back(models);
      double capacity = 0;  // GPUs of its models, on nodes with enough of them
      for (int n = 0; n < nodes; ++n) {
        const NodeId id(n);
        const int count =
            __builtin_popcountll(cluster.ModelMask(id, models) & ~cluster.mig_mask(id));
        runs[n] = count >= t.gpu_count;
        if (runs[n]) capacity += count;
      }
      if (capacity <= 0) continue;
      auto it = std::find_if(bound_.begin(), bound_.end(),
                             [&](const BoundModels& b) { return b.models == models; });
      if (it == bound_.end()) {
        bound_.push_back(BoundModels{models, std::vector<double>(nodes, 0.0)});
        it = bound_.end() - 1;
      }
      for (int n = 0; n < nodes; ++n) {
        if (runs[n]) it->demand[n] += t.weight * t.gpu_count * t.gpu_milli / capacity;
      }
    }
    size_t m = 0;
    for (const TypicalTask& t : mix_.tasks()) {
      if (t.gpu_count == 0 || t.gpu_models.empty()) continue;
      const ModelSet& models = task_models[m++];
      for (BoundModels& b : bound_) {
        if ((models & ~b.models).none()) b.share += t.weight * t.gpu_count * t.gpu_milli / demand;
      }
    }
    CountAllFree(state, before);
  }

  // node_free_, free_ and each bound set's free for bound_ as FindBoundModels left it. What
  // nothing reads is not counted (no bound set: node_free_ empty), and what was counted before is
  // kept: a row is a function of the node's state and the sets' models alone, and OnNodeChanged
  // kept the rows of every set in `before` up to date (for the nodes there were then). So a node
  // counted before whose every set was counted before is copied, the others (nodes added since,
  // every node when a set is new) are counted; the totals are summed again. The result is what
  // counting every node afresh gives; joining nodes or a new request shape no longer costs a
  // count of every GPU of the cluster (the scale-up planner adds nodes one at a time).
  void CountAllFree(const ClusterState& state, const std::vector<BoundModels>& before) {
    if (bound_.empty()) {
      node_free_.clear();
      free_ = 0;
      return;
    }
    const size_t stride = bound_.size() + 1, stride_before = before.size() + 1;
    // The column of each set before (0: the node's free in all), or -1 where it is new.
    std::vector<int> from(stride, -1);
    if (!before.empty()) {
      from[0] = 0;
      for (size_t b = 0; b < bound_.size(); ++b) {
        for (size_t o = 0; o < before.size(); ++o) {
          if (before[o].models == bound_[b].models) from[b + 1] = static_cast<int>(o + 1);
        }
      }
    }
    const bool reuse = std::find(from.begin(), from.end(), -1) == from.end();
    const size_t counted = before.empty() ? 0 : node_free_.size() / stride_before;
    const size_t nodes = static_cast<size_t>(state.cluster().node_count());
    std::vector<int64_t> rows(nodes * stride, 0);
    for (size_t n = 0; n < nodes; ++n) {
      int64_t* row = &rows[n * stride];
      if (reuse && n < counted) {
        for (size_t c = 0; c < stride; ++c) row[c] = node_free_[n * stride_before + from[c]];
      } else {
        RowOf(state, NodeId(static_cast<int>(n)), row);
      }
    }
    node_free_ = std::move(rows);
    free_ = 0;
    for (size_t n = 0; n < nodes; ++n) {
      const int64_t* row = &node_free_[n * stride];
      free_ += row[0];
      for (size_t b = 0; b < bound_.size(); ++b) bound_[b].free += row[b + 1];
    }
  }

  // Node `node`'s free milli-GPU (GpuMilliLeft, MIG GPUs apart), in all and on each bound model
  // set's GPUs, into the totals.
  void CountFree(const ClusterState& state, NodeId node) {
    const size_t stride = bound_.size() + 1;
    int64_t* row = &node_free_[static_cast<size_t>(node.value()) * stride];
    row_.resize(stride);
    int64_t* fresh = row_.data();
    RowOf(state, node, fresh);
    free_ += fresh[0] - row[0];
    for (size_t b = 0; b < bound_.size(); ++b) bound_[b].free += fresh[b + 1] - row[b + 1];
    std::copy(fresh, fresh + stride, row);
  }

  // Node `node`'s row of node_free_: its free milli-GPU in all, then on each bound set's GPUs.
  void RowOf(const ClusterState& state, NodeId node, int64_t* row) const {
    const Cluster& cluster = state.cluster();
    const int gpus = cluster.node(node).gpu_count();
    const uint64_t usable = ~cluster.mig_mask(node);
    int32_t left[kMaxGpusPerNode];
    int64_t all = 0;
    for (int g = 0; g < gpus; ++g) {
      left[g] = (usable >> g) & 1 ? GpuMilliLeft(state, node, g) : 0;
      all += left[g];
    }
    row[0] = all;
    for (size_t b = 0; b < bound_.size(); ++b) {
      int64_t free = 0;
      for (uint64_t a = cluster.ModelMask(node, bound_[b].models) & usable; a; a &= a - 1) {
        free += left[__builtin_ctzll(a)];
      }
      row[b + 1] = free;
    }
  }

  // Which bound model sets hold fewer free GPUs than their asks' part of the demand claims of
  // what is free (see "Bound models' last free GPUs" above); what depends on it is derived again
  // when that changes.
  void UpdateReserved() {
    bool changed = false;
    for (BoundModels& b : bound_) {
      const bool reserved = reserve_bound_models_ &&
                            static_cast<double>(b.free) < b.share * static_cast<double>(free_);
      changed |= reserved != b.reserved;
      b.reserved = reserved;
    }
    if (changed) {
      contended_.clear();
      last_contended_ = nullptr;
      index_.Invalidate();
    }
  }

  // Per node, what a pod pays per GPU it takes there for the asks of the mix narrower than its own
  // (see "Filling and churning" above), remembered per set of allowed models.
  const ContendedCost& ContendedPenalty(const ClusterState& state, const Query& query) {
    if (last_contended_ && last_models_ == query.models) return *last_contended_;
    auto [it, fresh] = contended_.try_emplace(query.models);
    if (fresh) it->second = Contended(state.cluster(), query.models);
    last_models_ = query.models;
    last_contended_ = &it->second;
    return it->second;
  }

  // The pressure p on each node (the demand per GPU of the narrower asks against the mix's per GPU
  // of the cluster, at most kMaxPressure) in milli-GPU per GPU taken: kContendedModel x p when
  // churning; while filling kContendedFilling x p, and for whole GPUs kContendedModel x the part
  // of p that reserved model sets put there.
  ContendedCost Contended(const Cluster& cluster, const ModelSet& allowed) const {
    const int nodes = cluster.node_count();
    ContendedCost out{std::vector<double>(nodes, 0.0), std::vector<double>(nodes, 0.0)};
    if (demand_per_gpu_ <= 0) return out;
    std::vector<double> all(nodes, 0.0), reserved(nodes, 0.0);
    for (const BoundModels& b : bound_) {
      if ((b.models & ~allowed).any() || b.models == allowed) continue;  // not narrower
      for (int n = 0; n < nodes; ++n) {
        all[n] += b.demand[n];
        if (b.reserved) reserved[n] += b.demand[n];
      }
    }
    for (int n = 0; n < nodes; ++n) {
      const double p = std::min(kMaxPressure, all[n] / demand_per_gpu_);
      const double p_reserved = all[n] > 0 ? p * reserved[n] / all[n] : 0.0;
      out.share[n] = (churning_ ? kContendedModel : kContendedFilling) * p;
      out.whole[n] = churning_ ? out.share[n]
                               : out.share[n] + (kContendedModel - kContendedFilling) * p_reserved;
    }
    return out;
  }

  // The GPU set for a whole ask among `free` (whole_set.h: the best-connected set, honouring a
  // required or preferred interconnect), remembered per node and free mask: it depends on nothing
  // else.
  std::optional<WholeSet> WholeSetOn(const ClusterState& state, const Query& query, NodeId node,
                                     uint64_t free) {
    const GpuAsk& ask = query.request->gpu;
    const uint32_t meta = static_cast<uint32_t>(ask.count) << 8 |
                          static_cast<uint32_t>(ask.topology) << 1 |
                          static_cast<uint32_t>(ask.topology_required);
    auto& memo = set_memo_[node.value()];
    auto [it, fresh] = memo.try_emplace(std::make_pair(free, meta));
    if (fresh) it->second = PickWholeSet(state, query, node, free);
    return it->second;
  }

  // A node's place in the order (Attach): rack-scale NVLink nodes last, then PCIe before
  // NVLink, fewer GPUs first, then the hash of the name; the node id breaks what is left.
  struct Key {
    bool nvlink;
    int gpus;
    uint64_t hash;
    int node;
  };
  bool Before(const Key& a, const Key& b) const {
    if (rack_domain_[a.node] != rack_domain_[b.node])
      return rack_domain_[a.node] < rack_domain_[b.node];
    return std::tie(a.nvlink, a.gpus, a.hash, a.node) < std::tie(b.nvlink, b.gpus, b.hash, b.node);
  }
  // Node i's key before the rack-scale rule; notes its GPUs' memory in reference_memory_.
  Key KeyOf(const NodeSpec& spec, int i) {
    bool nvlink = false;
    for (int a = 0; a < spec.gpu_count() && !nvlink; ++a) {
      for (int b = a + 1; b < spec.gpu_count(); ++b) {
        if (spec.links.at(a, b).kind == LinkKind::kNvLink) nvlink = true;
      }
    }
    for (const GpuSpec& g : spec.gpus)
      reference_memory_ = std::max(reference_memory_, g.memory_mib);
    return {nvlink, spec.gpu_count(), HashName(spec.name, seed_), i};
  }
  // Ranks from order_ (sorted), and the index attached with them.
  void Rank(const ClusterState& state) {
    const int n = static_cast<int>(order_.size());
    std::vector<int32_t> rank(n);
    for (int r = 0; r < n; ++r) rank[order_[r].node] = r;
    rank_fraction_.assign(n, 0.0);
    for (int i = 0; i < n; ++i) rank_fraction_[i] = n > 1 ? double(rank[i]) / (n - 1) : 0.0;
    index_.Attach(state, std::move(rank));
  }

  uint64_t seed_;
  int64_t reference_memory_ = 0;
  std::vector<Key> order_;  // every node's key, sorted: the order (Attach)
  std::vector<absl::flat_hash_map<std::pair<uint64_t, uint32_t>, std::optional<WholeSet>>>
      set_memo_;
  std::vector<uint8_t> rack_domain_;
  std::vector<double> rank_fraction_;
  ShapeIndex index_;
  TaskMix mix_;
  WasteModel waste_;
  std::vector<Base> base_;
  double open_free_bonus_ = 0;  // OpenFreeGpuBonus (filling) or OpenFreeGpuChurnTerm (churning)
  bool churning_ = false;       // a pod has left since Attach
  // ContendedPenalty per set of allowed models (cleared with the mix), and the last one asked.
  absl::flat_hash_map<ModelSet, ContendedCost> contended_;
  ModelSet last_models_;
  const ContendedCost* last_contended_ = nullptr;
  // The model sets of the mix's bound asks (FindBoundModels), the free milli-GPU per node (in all,
  // then per set: bound_.size() + 1 per node), and the cluster's free milli-GPU.
  std::vector<BoundModels> bound_;
  std::vector<int64_t> node_free_;
  std::vector<int64_t> row_;  // CountFree's scratch
  int64_t free_ = 0;
  double demand_per_gpu_ = 0;  // the mix's GPU demand per GPU of the cluster
  bool reserve_bound_models_;  // TesseraOptions::reserve_bound_models
};

}  // namespace

std::unique_ptr<Policy> NewTesseraPolicy(const PolicyOptions& options) {
  return NewTesseraPolicy(options, TesseraOptions{});
}

std::unique_ptr<Policy> NewTesseraPolicy(const PolicyOptions& options,
                                         const TesseraOptions& tessera) {
  return std::make_unique<TesseraPolicy>(options, tessera);
}

}  // namespace tessera::core
