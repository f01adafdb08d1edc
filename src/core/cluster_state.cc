#include "core/cluster_state.h"

#include "common/strings.h"
#include "common/status.h"

namespace tessera::core {

ClusterState::ClusterState(const Cluster& cluster) : cluster_(&cluster) {
  nodes_.resize(cluster.node_count());
  int32_t begin = 0;
  for (int i = 0; i < cluster.node_count(); ++i) {
    const NodeSpec& spec = cluster.node(NodeId(i));
    NodeState& s = nodes_[i];
    s.free_cpu_milli = spec.cpu_milli;
    s.free_memory_mib = spec.memory_mib;
    s.gpu_begin = begin;
    s.gpu_count = spec.gpu_count();
    s.whole_free_mask = spec.all_gpus_mask();
    begin += spec.gpu_count();
    for (const GpuSpec& g : spec.gpus) {
      gpus_.push_back(GpuState{g.memory_mib, 1000, 0, false});
    }
  }
}

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
    return fail(StrCat("node ", spec.name, " has ", n.free_cpu_milli,
                             "m CPU free, needs ", p.cpu_milli, "m"));
  }
  if (p.memory_mib > n.free_memory_mib) {
    return fail(StrCat("node ", spec.name, " has ", n.free_memory_mib,
                             "Mi memory free, needs ", p.memory_mib, "Mi"));
  }
  uint64_t seen = 0;
  for (const GpuGrant& g : p.gpus) {
    if (g.gpu < 0 || g.gpu >= n.gpu_count) return fail(StrCat("no GPU ", g.gpu));
    if (seen & (1ULL << g.gpu)) return fail(StrCat("GPU ", g.gpu, " granted twice"));
    seen |= 1ULL << g.gpu;
    const GpuState& s = gpus_[n.gpu_begin + g.gpu];
    if (g.memory_mib < 0 || g.compute_milli < 0) return fail("negative grant");
    if (s.exclusive) return fail(StrCat("GPU ", g.gpu, " is held exclusively"));
    if (g.exclusive && s.grants > 0) return fail(StrCat("GPU ", g.gpu, " is shared"));
    if (g.memory_mib > s.free_memory_mib) {
      return fail(StrCat("GPU ", g.gpu, " has ", s.free_memory_mib, "Mi free, needs ",
                               g.memory_mib, "Mi"));
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
    s.exclusive = g.exclusive;
    s.free_memory_mib -= g.memory_mib;
    s.free_compute_milli -= g.compute_milli;
    allocated_compute_milli_ += g.compute_milli;
    allocated_gpu_memory_mib_ += g.memory_mib;
  }
  ++n.version;
}

void ClusterState::Revert(const Placement& p) {
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
    s.exclusive = false;
    s.free_memory_mib += g.memory_mib;
    s.free_compute_milli += g.compute_milli;
    TESSERA_CHECK(s.free_memory_mib <= spec.gpus[g.gpu].memory_mib);
    TESSERA_CHECK(s.free_compute_milli <= 1000);
    allocated_compute_milli_ -= g.compute_milli;
    allocated_gpu_memory_mib_ -= g.memory_mib;
    if (s.grants == 0) {
      TESSERA_CHECK(s.free_memory_mib == spec.gpus[g.gpu].memory_mib);
      TESSERA_CHECK(s.free_compute_milli == 1000);
      --gpus_in_use_;
      n.whole_free_mask |= 1ULL << g.gpu;
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
      if (s.grants == 0) {
        TESSERA_CHECK(s.free_memory_mib == spec.gpus[g].memory_mib);
        TESSERA_CHECK(s.free_compute_milli == 1000);
        free_mask |= 1ULL << g;
      } else {
        ++in_use;
      }
    }
    TESSERA_CHECK(free_mask == n.whole_free_mask);
  }
  TESSERA_CHECK(in_use == gpus_in_use_);
}

}  // namespace tessera::core
