#include "core/policy/policy.h"

#include "common/strings.h"
#include "core/policy/factories.h"

namespace tessera::core {

EffectiveRequest::EffectiveRequest(const Policy& policy, const PodRequest& request)
    : request_(request) {
  if (policy.whole_gpus_only() &&
      (request.gpu.kind == GpuAsk::Kind::kShare || request.gpu.kind == GpuAsk::Kind::kFraction)) {
    whole_ = request;
    whole_->gpu = GpuAsk::Whole(1);
  }
}

std::optional<NodeChoice> Policy::Choose(const ClusterState& state, const Query& query,
                                         std::vector<NodeId>* declined) {
  return ScanCandidates(state, query, declined);
}

std::optional<NodeChoice> Policy::ScanCandidates(const ClusterState& state, const Query& query,
                                                 std::vector<NodeId>* declined) {
  std::optional<NodeChoice> best;
  auto visit = [&](NodeId id, uint64_t allowed) {
    NodeFit fit = CheckNode(state, query, id, allowed);
    if (!fit.ok()) return;
    std::optional<NodeChoice> c = ScoreNode(state, query, id, fit);
    if (!c) {
      if (declined) declined->push_back(id);
      return;
    }
    if (!best || c->score > best->score) best = std::move(c);
  };
  if (query.candidates) {
    for (const Candidate& c : *query.candidates) visit(c.node, c.gpu_mask);
  } else {
    for (int i = 0; i < state.node_count(); ++i) visit(NodeId(i), ~0ULL);
  }
  return best;
}

namespace {

struct Entry {
  std::string_view name;
  std::unique_ptr<Policy> (*make)(const PolicyOptions&);
};

const std::vector<Entry>& Registry() {
  static const std::vector<Entry> kEntries = {
      {"tessera", &NewTesseraPolicy},
      {"whole-gpu", &NewWholeGpuPolicy},
      {"binpack", &NewBinpackPolicy},
      {"spread", &NewSpreadPolicy},
      {"random", &NewRandomPolicy},
      {"dotprod", &NewDotProdPolicy},
      {"gpu-clustering", &NewGpuClusteringPolicy},
      {"gpu-packing", &NewGpuPackingPolicy},
      {"bestfit", &NewBestFitPolicy},
      {"fgd", &NewFgdPolicy},
  };
  return kEntries;
}

}  // namespace

std::vector<std::string> PolicyNames() {
  std::vector<std::string> names;
  for (const Entry& e : Registry()) names.emplace_back(e.name);
  return names;
}

absl::StatusOr<std::unique_ptr<Policy>> CreatePolicy(std::string_view name,
                                                     const PolicyOptions& options) {
  for (const Entry& e : Registry()) {
    if (e.name != name) continue;
    std::unique_ptr<Policy> policy = e.make(options);
    policy->use_index_ = options.use_index;
    return policy;
  }
  return absl::InvalidArgumentError(
      StrCat("unknown policy \"", name, "\"; known policies: ", StrJoin(PolicyNames(), ", ")));
}

}  // namespace tessera::core
