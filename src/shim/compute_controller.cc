#include "shim/compute_controller.h"

#include <algorithm>
#include <set>

namespace tessera::shim {

std::map<std::string, ComputeController::PodMeasure> ComputeController::Step(
    const std::string& gpu_uuid, const std::vector<Segment*>& pods, UtilizationSource& source) {
  std::map<std::string, PodMeasure> out;
  ++steps_;
  auto samples = source.Sample(gpu_uuid);
  std::map<uint32_t, uint32_t> by_pid;
  uint32_t total = 0;
  if (samples.ok()) {
    for (const auto& s : *samples) {
      by_pid[s.pid] += s.sm_permille;
      total += s.sm_permille;
    }
  }
  total = std::min<uint32_t>(total, 1000);

  // Stable order for the phases: by pod UID, then path.
  std::vector<Segment*> ordered = pods;
  std::sort(ordered.begin(), ordered.end(), [](Segment* a, Segment* b) {
    std::string ua = a->limits().file().pod_uid, ub = b->limits().file().pod_uid;
    return ua != ub ? ua < ub : a->ledger().path() < b->ledger().path();
  });

  // Measure every pod first: a work-conserving pod yields when another pod wants its share.
  struct Pod {
    Segment* seg;
    std::string key;
    uint32_t cap;
    PodMeasure m;
    bool waited = false;  // its processes waited at the gate in this interval
  };
  std::vector<Pod> measured;
  for (Segment* seg : ordered) {
    Pod p{seg, seg->ledger().path(), seg->limits().compute_limit(), {}};
    SegmentInfo info = seg->Inspect();
    std::set<uint32_t> pids;
    // Host PIDs the agent resolved (and checked to be the pod's): a PID in a container's own
    // namespace would name another process on the host.
    for (const auto& proc : info.processes) {
      if (proc.host_pid != 0) pids.insert(proc.host_pid);
    }
    for (uint32_t pid : pids) {
      auto it = by_pid.find(pid);
      if (it != by_pid.end()) p.m.utilization_permille += it->second;
    }
    p.m.utilization_permille = std::min<uint32_t>(p.m.utilization_permille, 1000);
    PodState& st = state_[p.key];
    // Hungry: its processes waited at the gate in this interval or the one before (a period
    // may be longer than an interval), or it used all of its window.
    p.waited = st.duty != 0 && info.gate_wait_ns > st.gate_wait_ns;
    if (p.waited) st.last_wait_step = steps_;
    st.gate_wait_ns = info.gate_wait_ns;
    p.m.hungry = st.duty != 0 && (steps_ - st.last_wait_step <= 1 ||
                                  p.m.utilization_permille + kToleranceBelowCap >= st.duty);
    measured.push_back(p);
  }
  // Whether this interval's measurement can be believed. A pod whose processes waited at their
  // gate had work, and its window ran some of it; measured at nothing, the figure is the
  // driver's, not the GPU's: on an H200 with driver 580 NVML names one process per 200 ms sample
  // when several run, with the GPU's whole load (bench/results/usage-gpu.md), and a driver whose
  // per-process record has no sample for the interval names none. Acting on it would widen the
  // window of the pod it missed (a 30% pod would get 37.5%) and narrow the others', so the
  // windows hold instead.
  bool trusted = samples.ok();
  if (trusted) {
    for (const Pod& p : measured) {
      if (p.waited && p.m.utilization_permille == 0) trusted = false;
    }
  }
  if (!trusted && samples.ok()) ++untrusted_steps_;
  // One interval of NVML is noisy (a few periods, whole kernels): decisions use a moving
  // average over about a second.
  if (trusted) {
    for (const Pod& p : measured) {
      PodState& st = state_[p.key];
      st.utilization = st.samples++ == 0 ? p.m.utilization_permille
                                         : (3 * st.utilization + p.m.utilization_permille) / 4;
    }
  }
  // A pod is short when it waits at its gate yet gets less than its cap.
  auto short_of_cap = [](const Pod& p) {
    return p.cap > 0 && p.m.hungry && p.m.utilization_permille + kToleranceBelowCap < p.cap;
  };

  uint32_t phase = 0;
  for (Pod& p : measured) {
    PodMeasure& m = p.m;
    if (p.cap == 0) {
      m.duty_permille = 1000;
      m.phase_permille = 0;
      p.seg->SetSchedule(1000, 0);
      out[p.key] = m;
      continue;
    }
    PodState& st = state_[p.key];
    if (st.duty == 0) st.duty = p.cap;
    const bool work_conserving = p.seg->limits().compute_mode() == ComputeMode::kWorkConserving;
    const int64_t u = st.utilization;
    if (trusted && m.hungry) {
      if (work_conserving) {
        int64_t target = p.cap;
        bool others_short = false;
        for (const Pod& q : measured) others_short |= (&q != &p && short_of_cap(q));
        // Everything the others do not use, unless one of them is short of its cap.
        const int64_t others = int64_t{total} - m.utilization_permille;
        if (!others_short) target = std::max<int64_t>(p.cap, 1000 - std::max<int64_t>(others, 0));
        st.duty += (target - u) / 4;
      } else if (std::abs(int64_t{p.cap} - u) > kDeadbandPermille) {
        // The windows already give a hard cap its share; this only trims a steady bias (a
        // stream the gate cannot see, work of others inside the window), slowly.
        st.duty += (int64_t{p.cap} - u) / 8;
      }
    } else if (!m.hungry) {
      st.duty += (int64_t{p.cap} - st.duty) / 4;  // idle or demand-limited: back towards the cap
    }
    // A hard cap's window stays near the cap, so that the windows of the pods keep tiling the
    // period; a work-conserving one may grow to the whole period.
    const int64_t low = std::max<int64_t>(p.cap * 4 / 5, 1);
    const int64_t high = work_conserving ? 1000 : std::min<int64_t>(1000, int64_t{p.cap} * 5 / 4);
    st.duty = std::clamp(st.duty, low, high);
    m.duty_permille = static_cast<uint32_t>(st.duty);
    m.phase_permille = phase % 1000;
    p.seg->SetSchedule(m.duty_permille, m.phase_permille);
    phase += p.cap;
    out[p.key] = m;
  }
  return out;
}

}  // namespace tessera::shim
