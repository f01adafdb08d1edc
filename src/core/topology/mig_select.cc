#include "core/topology/mig_select.h"

#include "common/strings.h"

namespace tessera::core {
namespace {

// Loss vector as one number, largest profile most significant (each entry is 0..7).
double LossKey(const std::array<int8_t, 8>& loss) {
  double key = 0;
  for (int8_t l : loss) key = key * 8 + l;
  return key;
}

double Score(const MigChoice& c, MigPreference preference) {
  const double cost = double(2 - c.cost) * 1e15;
  const double loss = LossKey(c.loss);  // < 8^8 = 1.7e7
  // Fewer idle instances destroyed is the next tie-break after the loss (0..7).
  const double destroyed = static_cast<double>(c.plan.destroy.size());
  switch (preference) {
    case MigPreference::kLeastLoss:
      return cost - loss * 100 - destroyed * 10 - c.unassigned_after;
    case MigPreference::kFullest:
      return cost - c.unassigned_after * 1e10 - loss * 10 - destroyed;
    case MigPreference::kEmptiest:
      return cost + c.unassigned_after * 1e10 - loss * 10 - destroyed;
    case MigPreference::kFirstFit:
      return cost - c.placement.start;
  }
  return cost;
}

std::optional<MigChoice> BestOnGpu(const MigModel& model, const MigGpuState& m, int profile,
                                   int gpu, int64_t free_memory, MigPreference preference) {
  const MigProfile& want = model.profiles[profile];
  if (free_memory < want.memory_mib) return std::nullopt;
  const std::array<int8_t, 8> before = MigCapacity(model, static_cast<uint8_t>(~m.assigned));
  bool assigned_media = false;
  for (const MigGpuState::Instance& i : m.instances) {
    assigned_media |= i.assigned && model.profiles[i.placement.profile].media_extensions;
  }
  if (want.media_extensions && assigned_media) return std::nullopt;
  std::optional<MigChoice> best;
  for (int s = 0; s < kMigSlots; ++s) {
    if (!want.may_start_at(s)) continue;
    const uint8_t slots = want.slots(s);
    if (slots & m.assigned) continue;
    MigChoice c;
    c.gpu = gpu;
    c.placement = MigPlacement{static_cast<int8_t>(profile), static_cast<int8_t>(s)};
    c.plan = MigPlanFor(model, m, c.placement);  // what is in the way is idle: see above
    c.cost = !c.plan.create ? 0 : c.plan.destroy.empty() ? 1 : 2;
    const uint8_t after = static_cast<uint8_t>(~(m.assigned | slots));
    const std::array<int8_t, 8> left = MigCapacity(model, after);
    for (size_t k = 0; k < c.loss.size(); ++k) c.loss[k] = static_cast<int8_t>(before[k] - left[k]);
    c.unassigned_after = __builtin_popcount(after);
    c.score = Score(c, preference);
    if (!best || c.score > best->score) best = std::move(c);
  }
  return best;
}

}  // namespace

MigPlan MigPlanFor(const MigModel& model, const MigGpuState& m, MigPlacement want) {
  MigPlan plan;
  if (const MigGpuState::Instance* same = m.Find(want); same && !same->assigned) return plan;
  plan.create = true;
  for (const MigGpuState::Instance& i : m.instances) {
    if (!i.assigned && MigInstancesConflict(model, i.placement, want)) {
      plan.destroy.push_back(i.placement);
    }
  }
  return plan;
}

std::array<int8_t, 8> MigCapacity(const MigModel& model, uint8_t available) {
  std::array<int8_t, 8> cap{};
  size_t k = 0;
  for (const MigProfile& p : model.profiles) {
    if (p.media_extensions || k == cap.size()) continue;  // same slices as its plain 1g
    int n = 0;
    for (int s = 0; s < kMigSlots; ++s) {
      if (p.may_start_at(s) && (p.slots(s) & available) == p.slots(s)) ++n;
    }
    cap[k++] = static_cast<int8_t>(n);
  }
  return cap;
}

std::optional<MigChoice> ChooseMig(const ClusterState& state, NodeId node, uint64_t gpus,
                                   std::string_view profile, MigPreference preference) {
  const Cluster& cluster = state.cluster();
  std::optional<MigChoice> best;
  for (uint64_t a = gpus & cluster.mig_mask(node); a; a &= a - 1) {
    const int g = __builtin_ctzll(a);
    const MigModel* model = cluster.mig_model(node, g);
    const int p = model->Find(profile);
    if (p < 0) continue;
    std::optional<MigChoice> c =
        BestOnGpu(*model, state.mig(node, g), p, g, state.gpu(node, g).free_memory_mib, preference);
    if (!c) continue;
    if (preference == MigPreference::kFirstFit) return c;
    if (!best || c->score > best->score) best = std::move(c);
  }
  return best;
}

bool MigFits(const ClusterState& state, NodeId node, int g, std::string_view profile) {
  const MigModel* model = state.cluster().mig_model(node, g);
  if (!model) return false;
  const int p = model->Find(profile);
  if (p < 0) return false;
  const MigProfile& want = model->profiles[p];
  const MigGpuState& m = state.mig(node, g);
  if (state.gpu(node, g).free_memory_mib < want.memory_mib) return false;
  if (want.media_extensions) {
    for (const MigGpuState::Instance& i : m.instances) {
      if (i.assigned && model->profiles[i.placement.profile].media_extensions) return false;
    }
  }
  for (int s = 0; s < kMigSlots; ++s) {
    if (want.may_start_at(s) && !(want.slots(s) & m.assigned)) return true;
  }
  return false;
}

std::string DescribeMigPlan(const ClusterState& state, const Placement& p) {
  if (!p.mig_plan.repartition() || p.gpus.empty() || !p.gpus[0].is_mig()) return "";
  const GpuGrant& g = p.gpus[0];
  const MigModel& model = *state.cluster().mig_model(p.node, g.gpu);
  std::vector<std::string> destroyed;
  for (MigPlacement d : p.mig_plan.destroy) destroyed.push_back(MigPlacementName(model, d));
  return StrCat("node ", state.cluster().node(p.node).name, " GPU ", g.gpu, ": destroy idle ",
                StrJoin(destroyed, ", "), "; create ", MigPlacementName(model, g.mig));
}

}  // namespace tessera::core
