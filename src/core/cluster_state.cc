#include "core/cluster_state.h"

#include <algorithm>

#include "common/status.h"
#include "common/strings.h"

namespace tessera::core {

ClusterState::ClusterState(const Cluster& cluster) : cluster_(&cluster) {
  for (int i = 0; i < cluster.node_count(); ++i) InitNode(NodeId(i));
}

ClusterState::ClusterState(const ClusterState& other, const Cluster& cluster)
    : cluster_(&cluster),
      gpus_in_use_(other.gpus_in_use_),
      allocated_compute_milli_(other.allocated_compute_milli_),
      allocated_gpu_memory_mib_(other.allocated_gpu_memory_mib_),
      allocated_cpu_milli_(other.allocated_cpu_milli_) {
  constexpr size_t kRoomNodes = 64;
  const size_t room_gpus = kRoomNodes * static_cast<size_t>(cluster.max_gpus_per_node());
  nodes_.reserve(other.nodes_.size() + kRoomNodes);
  nodes_.insert(nodes_.end(), other.nodes_.begin(), other.nodes_.end());
  gpus_.reserve(other.gpus_.size() + room_gpus);
  gpus_.insert(gpus_.end(), other.gpus_.begin(), other.gpus_.end());
  mig_.reserve(other.mig_.size() + room_gpus);
  mig_.insert(mig_.end(), other.mig_.begin(), other.mig_.end());
}

void ClusterState::InitNode(NodeId id) {
  const int i = id.value();
  const NodeSpec& spec = cluster_->node(id);
  if (i == static_cast<int>(nodes_.size())) nodes_.emplace_back();
  NodeState& s = nodes_[i];
  for (int g = 0; g < s.gpu_count; ++g) {
    TESSERA_CHECK_MSG(gpus_[s.gpu_begin + g].grants == 0, "re-initialising a node with grants");
  }
  s.free_cpu_milli = spec.cpu_milli;
  s.free_memory_mib = spec.memory_mib;
  s.whole_free_mask = spec.all_gpus_mask() & ~cluster_->mig_mask(id);
  ++s.version;
  if (s.gpu_count != spec.gpu_count()) {
    // A new region at the end (the old one, if any, is left unused).
    s.gpu_begin = static_cast<int32_t>(gpus_.size());
    s.gpu_count = spec.gpu_count();
    gpus_.resize(gpus_.size() + spec.gpu_count());
    mig_.resize(mig_.size() + spec.gpu_count());
  }
  for (int g = 0; g < spec.gpu_count(); ++g) {
    const GpuSpec& gpu = spec.gpus[g];
    gpus_[s.gpu_begin + g] = GpuState{gpu.memory_mib, 1000, 0, false};
    MigGpuState m;
    if (gpu.mig_enabled) {
      const MigModel& model = *FindMigModel(gpu.model);
      for (MigPlacement p : gpu.mig_layout) {
        m.instances.push_back({p, false});
        m.configured |= model.profiles[p.profile].slots(p.start);
      }
    }
    mig_[s.gpu_begin + g] = std::move(m);
  }
}

void ClusterState::SetCordoned(NodeId id, bool cordoned) {
  NodeState& s = nodes_[id.value()];
  if (s.cordoned == cordoned) return;
  s.cordoned = cordoned;
  ++s.version;
}

namespace {

// Whether a MIG grant with its plan fits the GPU's configured instances.
bool CanApplyMig(const MigModel& model, const MigGpuState& m, const GpuGrant& g,
                 const MigPlan& plan, std::string* why) {
  const MigPlacement want = g.mig;
  if (want.profile >= static_cast<int>(model.profiles.size())) {
    *why = "unknown MIG profile";
    return false;
  }
  const MigProfile& prof = model.profiles[want.profile];
  if (!prof.may_start_at(want.start)) {
    *why = StrCat(prof.name, " cannot start at slice ", static_cast<int>(want.start));
    return false;
  }
  if (g.exclusive || g.memory_mib != prof.memory_mib || g.compute_milli != prof.compute_milli()) {
    *why = StrCat("a ", prof.name, " grant is ", prof.memory_mib, "Mi and ", prof.compute_milli(),
                  " milli-GPU, not exclusive");
    return false;
  }
  uint8_t configured = m.configured;
  int media = 0;
  for (const MigGpuState::Instance& i : m.instances) {
    media += model.profiles[i.placement.profile].media_extensions;
  }
  for (MigPlacement d : plan.destroy) {
    const MigGpuState::Instance* i = m.Find(d);
    if (!i || i->assigned) {
      *why = StrCat("the plan destroys ", MigPlacementName(model, d),
                    ", which is not an idle instance");
      return false;
    }
    configured &= ~model.profiles[d.profile].slots(d.start);
    media -= model.profiles[d.profile].media_extensions;
  }
  const uint8_t slots = prof.slots(want.start);
  if (!plan.create) {
    const MigGpuState::Instance* i = m.Find(want);
    if (!i || i->assigned || !plan.destroy.empty()) {
      *why = StrCat("no idle ", MigPlacementName(model, want), " instance to take");
      return false;
    }
    return true;
  }
  if (configured & slots) {
    *why = StrCat("memory slices ", static_cast<int>(want.start), "..", want.start + prof.size - 1,
                  " are taken by other instances");
    return false;
  }
  if (prof.media_extensions && media > 0) {
    *why = "the GPU's media engines are in another +me instance";
    return false;
  }
  return true;
}

}  // namespace

bool ClusterState::CanApply(const Placement& p, std::string* why) const {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  if (!p.node.valid() || p.node.value() >= node_count()) return fail("no such node");
  const NodeState& n = nodes_[p.node.value()];
  const NodeSpec& spec = cluster_->node(p.node);
  if (p.cpu_milli < 0 || p.memory_mib < 0) return fail("negative request");
  if (p.cpu_milli > n.free_cpu_milli) {
    return fail(StrCat("node ", spec.name, " has ", n.free_cpu_milli, "m CPU free, needs ",
                       p.cpu_milli, "m"));
  }
  if (p.memory_mib > n.free_memory_mib) {
    return fail(StrCat("node ", spec.name, " has ", n.free_memory_mib, "Mi memory free, needs ",
                       p.memory_mib, "Mi"));
  }
  uint64_t seen = 0;
  for (const GpuGrant& g : p.gpus) {
    if (g.gpu < 0 || g.gpu >= n.gpu_count) return fail(StrCat("no GPU ", g.gpu));
    if (seen & (1ULL << g.gpu)) return fail(StrCat("GPU ", g.gpu, " granted twice"));
    seen |= 1ULL << g.gpu;
    const GpuState& s = gpus_[n.gpu_begin + g.gpu];
    if (g.memory_mib < 0 || g.compute_milli < 0) return fail("negative grant");
    const MigModel* model = cluster_->mig_model(p.node, g.gpu);
    if (!model != !g.is_mig()) {
      return fail(model ? StrCat("GPU ", g.gpu, " is in MIG mode: it takes MIG grants only")
                        : StrCat("GPU ", g.gpu, " is not in MIG mode"));
    }
    if (model) {
      if (std::string mig_why;
          !CanApplyMig(*model, mig_[n.gpu_begin + g.gpu], g, p.mig_plan, &mig_why)) {
        return fail(StrCat("GPU ", g.gpu, ": ", mig_why));
      }
      if (p.gpus.size() != 1) return fail("a MIG grant is the pod's only GPU grant");
    }
    if (s.exclusive) return fail(StrCat("GPU ", g.gpu, " is held exclusively"));
    if (g.exclusive && s.grants > 0) return fail(StrCat("GPU ", g.gpu, " is shared"));
    if (!g.exclusive && !g.is_mig() && !s.TakesShareMode(g.mode)) {
      return fail(StrCat("GPU ", g.gpu, "'s shares are enforced by ",
                         g.mode == ShareMode::kMps ? "the shim" : "MPS",
                         "; a GPU serves MPS shares or shim shares, not both"));
    }
    if (g.memory_mib > s.free_memory_mib) {
      return fail(
          StrCat("GPU ", g.gpu, " has ", s.free_memory_mib, "Mi free, needs ", g.memory_mib, "Mi"));
    }
    if (g.compute_milli > s.free_compute_milli) {
      return fail(StrCat("GPU ", g.gpu, " has ", s.free_compute_milli,
                         " milli-GPU compute free, needs ", g.compute_milli));
    }
  }
  return true;
}

void ClusterState::Apply(const Placement& p) {
  std::string why;
  TESSERA_CHECK_MSG(CanApply(p, &why), why.c_str());
  NodeState& n = nodes_[p.node.value()];
  n.free_cpu_milli -= p.cpu_milli;
  n.free_memory_mib -= p.memory_mib;
  allocated_cpu_milli_ += p.cpu_milli;
  for (const GpuGrant& g : p.gpus) {
    GpuState& s = gpus_[n.gpu_begin + g.gpu];
    if (s.grants == 0) {
      ++gpus_in_use_;
      n.whole_free_mask &= ~(1ULL << g.gpu);
    }
    ++s.grants;
    if (g.mode == ShareMode::kMps) ++s.mps_grants;
    s.exclusive = g.exclusive;
    s.free_memory_mib -= g.memory_mib;
    s.free_compute_milli -= g.compute_milli;
    allocated_compute_milli_ += g.compute_milli;
    allocated_gpu_memory_mib_ += g.memory_mib;
    if (g.is_mig()) {
      const MigModel& model = *cluster_->mig_model(p.node, g.gpu);
      MigGpuState& m = mig_[n.gpu_begin + g.gpu];
      for (MigPlacement d : p.mig_plan.destroy) {
        auto it = std::find_if(m.instances.begin(), m.instances.end(),
                               [&](const MigGpuState::Instance& i) { return i.placement == d; });
        m.instances.erase(it);
        m.configured &= ~model.profiles[d.profile].slots(d.start);
      }
      const uint8_t slots = model.profiles[g.mig.profile].slots(g.mig.start);
      if (p.mig_plan.create) {
        m.instances.push_back({g.mig, true});
        m.configured |= slots;
      } else {
        for (MigGpuState::Instance& i : m.instances) {
          if (i.placement == g.mig) i.assigned = true;
        }
      }
      m.assigned |= slots;
    }
  }
  ++n.version;
}

void ClusterState::Revert(const Placement& p) { Return(p, false); }
void ClusterState::Release(const Placement& p) { Return(p, true); }

void ClusterState::Return(const Placement& p, bool keep_mig_instance) {
  TESSERA_CHECK(p.node.valid() && p.node.value() < node_count());
  NodeState& n = nodes_[p.node.value()];
  const NodeSpec& spec = cluster_->node(p.node);
  n.free_cpu_milli += p.cpu_milli;
  n.free_memory_mib += p.memory_mib;
  TESSERA_CHECK(n.free_cpu_milli <= spec.cpu_milli && n.free_memory_mib <= spec.memory_mib);
  allocated_cpu_milli_ -= p.cpu_milli;
  for (const GpuGrant& g : p.gpus) {
    TESSERA_CHECK(g.gpu >= 0 && g.gpu < n.gpu_count);
    GpuState& s = gpus_[n.gpu_begin + g.gpu];
    TESSERA_CHECK_MSG(s.grants > 0, "revert of a grant that was never applied");
    TESSERA_CHECK(s.exclusive == g.exclusive || !g.exclusive);
    --s.grants;
    if (g.mode == ShareMode::kMps) --s.mps_grants;
    TESSERA_CHECK(s.mps_grants >= 0 && s.mps_grants <= s.grants);
    s.exclusive = false;
    s.free_memory_mib += g.memory_mib;
    s.free_compute_milli += g.compute_milli;
    TESSERA_CHECK(s.free_memory_mib <= spec.gpus[g.gpu].memory_mib);
    TESSERA_CHECK(s.free_compute_milli <= 1000);
    allocated_compute_milli_ -= g.compute_milli;
    allocated_gpu_memory_mib_ -= g.memory_mib;
    if (g.is_mig()) {
      const MigModel* model = cluster_->mig_model(p.node, g.gpu);
      TESSERA_CHECK(model != nullptr);
      MigGpuState& m = mig_[n.gpu_begin + g.gpu];
      auto it = std::find_if(m.instances.begin(), m.instances.end(),
                             [&](const MigGpuState::Instance& i) { return i.placement == g.mig; });
      TESSERA_CHECK_MSG(it != m.instances.end() && it->assigned,
                        "return of a MIG instance that is not assigned");
      const uint8_t slots = model->profiles[g.mig.profile].slots(g.mig.start);
      m.assigned &= ~slots;
      if (keep_mig_instance || !p.mig_plan.create) {
        it->assigned = false;
      } else {
        m.instances.erase(it);
        m.configured &= ~slots;
      }
      if (!keep_mig_instance) {
        for (MigPlacement d : p.mig_plan.destroy) {
          const uint8_t back = model->profiles[d.profile].slots(d.start);
          TESSERA_CHECK((m.configured & back) == 0);
          m.instances.push_back({d, false});
          m.configured |= back;
        }
      }
    }
    if (s.grants == 0) {
      TESSERA_CHECK(s.free_memory_mib == spec.gpus[g.gpu].memory_mib);
      TESSERA_CHECK(s.free_compute_milli == 1000);
      --gpus_in_use_;
      if (!g.is_mig()) n.whole_free_mask |= 1ULL << g.gpu;
    }
  }
  ++n.version;
}

void ClusterState::CheckInvariants() const {
  int in_use = 0;
  for (int i = 0; i < node_count(); ++i) {
    const NodeState& n = nodes_[i];
    const NodeSpec& spec = cluster_->node(NodeId(i));
    TESSERA_CHECK(n.free_cpu_milli >= 0 && n.free_cpu_milli <= spec.cpu_milli);
    TESSERA_CHECK(n.free_memory_mib >= 0 && n.free_memory_mib <= spec.memory_mib);
    uint64_t free_mask = 0;
    for (int g = 0; g < n.gpu_count; ++g) {
      const GpuState& s = gpus_[n.gpu_begin + g];
      TESSERA_CHECK(s.free_memory_mib >= 0 && s.free_memory_mib <= spec.gpus[g].memory_mib);
      TESSERA_CHECK(s.free_compute_milli >= 0 && s.free_compute_milli <= 1000);
      TESSERA_CHECK(s.grants >= 0);
      TESSERA_CHECK(!s.exclusive || s.grants == 1);
      TESSERA_CHECK(s.mps_grants >= 0 && s.mps_grants <= s.grants);
      const MigGpuState& m = mig_[n.gpu_begin + g];
      const MigModel* model = cluster_->mig_model(NodeId(i), g);
      if (model) {
        TESSERA_CHECK(!s.exclusive);
        std::vector<MigPlacement> placements;
        uint8_t configured = 0, assigned = 0;
        int assigned_count = 0;
        for (const MigGpuState::Instance& inst : m.instances) {
          placements.push_back(inst.placement);
          const uint8_t slots = model->profiles[inst.placement.profile].slots(inst.placement.start);
          configured |= slots;
          if (inst.assigned) {
            assigned |= slots;
            ++assigned_count;
          }
        }
        absl::Status valid = ValidateMigInstances(*model, placements, "MIG state");
        TESSERA_CHECK_MSG(valid.ok(), std::string(valid.message()).c_str());
        TESSERA_CHECK(configured == m.configured && assigned == m.assigned);
        TESSERA_CHECK(assigned_count == s.grants);
      } else {
        TESSERA_CHECK(m.instances.empty() && m.configured == 0 && m.assigned == 0);
      }
      if (s.grants == 0) {
        TESSERA_CHECK(s.free_memory_mib == spec.gpus[g].memory_mib);
        TESSERA_CHECK(s.free_compute_milli == 1000);
        if (!model) free_mask |= 1ULL << g;
      } else {
        ++in_use;
      }
    }
    TESSERA_CHECK(free_mask == n.whole_free_mask);
  }
  TESSERA_CHECK(in_use == gpus_in_use_);
}

}  // namespace tessera::core
