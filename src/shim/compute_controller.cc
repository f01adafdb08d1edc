#include "shim/compute_controller.h"

#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "shim/nvml_abi.h"

namespace tessera::shim {

absl::StatusOr<std::unique_ptr<NvmlUtilization>> NvmlUtilization::Load(const std::string& library) {
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    return absl::UnavailableError(
        absl::StrCat("cannot load ", library, ": ", why ? why : "not found"));
  }
  auto init = reinterpret_cast<PFN_nvmlInit_v2>(::dlsym(h, "nvmlInit_v2"));
  std::unique_ptr<NvmlUtilization> n(new NvmlUtilization());
  n->handle_ = h;
  n->get_handle_by_uuid_ = ::dlsym(h, "nvmlDeviceGetHandleByUUID");
  n->get_process_utilization_ = ::dlsym(h, "nvmlDeviceGetProcessUtilization");
  if (init == nullptr || n->get_handle_by_uuid_ == nullptr ||
      n->get_process_utilization_ == nullptr) {
    return absl::UnavailableError(absl::StrCat(library, " lacks the NVML functions needed"));
  }
  if (nvmlReturn_t r = init(); r != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlInit_v2 failed: ", r));
  }
  return n;
}

NvmlUtilization::~NvmlUtilization() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

absl::StatusOr<std::vector<PidUtilization>> NvmlUtilization::Sample(const std::string& uuid) {
  auto by_uuid = reinterpret_cast<PFN_nvmlDeviceGetHandleByUUID>(get_handle_by_uuid_);
  auto util = reinterpret_cast<PFN_nvmlDeviceGetProcessUtilization>(get_process_utilization_);
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t r = by_uuid(uuid.c_str(), &dev); r != NVML_SUCCESS) {
    return absl::NotFoundError(absl::StrCat("NVML does not know ", uuid, " (", r, ")"));
  }
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const unsigned long long now_us =
      static_cast<unsigned long long>(ts.tv_sec) * 1'000'000ULL + ts.tv_nsec / 1000;
  unsigned long long& last = last_seen_us_[uuid];
  if (last == 0) last = now_us - 250'000;
  std::vector<nvmlProcessUtilizationSample_t> samples(64);
  unsigned int count = static_cast<unsigned int>(samples.size());
  nvmlReturn_t r = util(dev, samples.data(), &count, last);
  if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
    samples.resize(count + 16);
    count = static_cast<unsigned int>(samples.size());
    r = util(dev, samples.data(), &count, last);
  }
  if (r == NVML_ERROR_NOT_FOUND) {
    last = now_us;
    return std::vector<PidUtilization>{};  // nothing ran since the last sample
  }
  if (r != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetProcessUtilization: ", r));
  }
  // Several samples per process: their mean.
  std::map<uint32_t, std::pair<uint64_t, uint32_t>> sums;
  unsigned long long newest = last;
  for (unsigned int i = 0; i < count; ++i) {
    auto& s = sums[samples[i].pid];
    s.first += samples[i].smUtil;
    ++s.second;
    newest = std::max(newest, samples[i].timeStamp);
  }
  last = newest > last ? newest : now_us;
  std::vector<PidUtilization> out;
  for (const auto& [pid, s] : sums) {
    out.push_back({pid, static_cast<uint32_t>(std::min<uint64_t>(1000, s.first * 10 / s.second))});
  }
  return out;
}

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
  };
  std::vector<Pod> measured;
  for (Segment* seg : ordered) {
    Pod p{seg, seg->ledger().path(), seg->limits().compute_limit(), {}};
    SegmentInfo info = seg->Inspect();
    std::set<uint32_t> pids;
    for (const auto& proc : info.processes)
      pids.insert(proc.host_pid != 0 ? proc.host_pid : proc.pid);
    for (uint32_t pid : pids) {
      auto it = by_pid.find(pid);
      if (it != by_pid.end()) p.m.utilization_permille += it->second;
    }
    p.m.utilization_permille = std::min<uint32_t>(p.m.utilization_permille, 1000);
    PodState& st = state_[p.key];
    // Hungry: its processes waited at the gate in this interval or the one before (a period
    // may be longer than an interval), or it used all of its window.
    if (st.duty != 0 && info.gate_wait_ns > st.gate_wait_ns) st.last_wait_step = steps_;
    st.gate_wait_ns = info.gate_wait_ns;
    p.m.hungry = st.duty != 0 && (steps_ - st.last_wait_step <= 1 ||
                                  p.m.utilization_permille + kToleranceBelowCap >= st.duty);
    // One interval of NVML is noisy (a few periods, whole kernels): decisions use a moving
    // average over about a second.
    if (samples.ok()) {
      st.utilization = st.samples++ == 0 ? p.m.utilization_permille
                                         : (3 * st.utilization + p.m.utilization_permille) / 4;
    }
    measured.push_back(p);
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
    if (samples.ok() && m.hungry) {
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
