// agent_gpu_run: the node agent's per-GPU loop alone, over pods' segments on one GPU, with the real
// NVML: what `tessera agent` does for the pods it runs (PodManager::Maintain), without a cluster
// around it: every 250 ms a reap (host PIDs of the pods' processes, from /proc) and one step of the
// compute controller (src/shim/compute_controller.h), and every second the usage meter
// (src/agent/pods/usage_meter.h) charging the device's busy time to the one pod running on it, or
// splitting it among several by what their shims reported in their ledgers.
// For the GPU checks: pods made with segment_tool, their processes run through the shim, and this
// runs beside them until SIGTERM, SIGINT or --seconds (scripts/gpu_shim_check.py, stage
// compute_controlled; scripts/gpu_usage_probe.py --agent).
//
//   agent_gpu_run --gpu UUID [--interval-ms 250] [--seconds 0] [--nvml LIB] POD_DIR...
//
// On exit it prints one JSON document: per pod (by POD_DIR) every step's measured utilisation,
// hunger, duty and phase, the last duty, the host PIDs its processes had, the busy seconds the
// usage meter charged to it and the seconds its shims reported (its ledger's gpu_busy_ns over the
// run); the GPU's sampled, busy and unattributed seconds and the reports the meter refused; the
// steps whose
// per-process split the controller did not believe; and every NVML per-process answer it was given
// (pid -> permille per step), so that what the driver said is on record beside what the agent made
// of it.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "agent/pods/pod_manager.h"
#include "agent/pods/usage_meter.h"
#include "agent/procs/gpu_processes.h"
#include "nlohmann/json.hpp"
#include "shim/compute_controller.h"
#include "shim/segments.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

// The sampler's answers, kept as they were given to the controller.
class RecordingSource : public tessera::shim::UtilizationSource {
 public:
  explicit RecordingSource(tessera::shim::UtilizationSource& inner) : inner_(inner) {}
  absl::StatusOr<std::vector<tessera::shim::PidUtilization>> Sample(
      const std::string& gpu_uuid) override {
    auto s = inner_.Sample(gpu_uuid);
    nlohmann::json step = nlohmann::json::object();
    if (s.ok()) {
      for (const auto& u : *s) step[std::to_string(u.pid)] = u.sm_permille;
    } else {
      step["error"] = std::string(s.status().message());
    }
    steps_.push_back(std::move(step));
    return s;
  }
  const nlohmann::json& steps() const { return steps_; }

 private:
  tessera::shim::UtilizationSource& inner_;
  nlohmann::json steps_ = nlohmann::json::array();
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Runs the node agent's per-GPU loop (reap, compute controller, usage meter) over pod "
      "segments on one GPU with the real NVML, for the GPU checks; prints what it measured and "
      "set as JSON"};
  std::string gpu, nvml = "libnvidia-ml.so.1";
  int interval_ms = 250;
  double seconds = 0;
  std::vector<std::string> pods;
  app.add_option("--gpu", gpu, "the GPU's UUID (GPU-...)")->required();
  app.add_option("--interval-ms", interval_ms, "time between steps (the agent: 250)")
      ->check(CLI::Range(10, 10000));
  app.add_option("--seconds", seconds, "stop after this long (0: at SIGTERM or SIGINT)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--nvml", nvml, "the NVML library to load (the real one, not the shim's)");
  app.add_option("pods", pods, "pod directories made by segment_tool create")->required();
  CLI11_PARSE(app, argc, argv);

  auto sampler = tessera::agent::NvmlProcessSampler::Load(nvml);
  if (!sampler.ok()) {
    std::fprintf(stderr, "agent_gpu_run: %s\n", sampler.status().ToString().c_str());
    return 2;
  }
  std::vector<std::unique_ptr<tessera::shim::Segment>> segments;
  std::vector<tessera::shim::Segment*> segs;
  for (const std::string& dir : pods) {
    auto seg = tessera::shim::Segment::Open(dir, gpu);
    if (!seg.ok()) {
      std::fprintf(stderr, "agent_gpu_run: %s\n", seg.status().ToString().c_str());
      return 2;
    }
    segs.push_back(seg->get());
    segments.push_back(std::move(*seg));
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::printf("{\"ready\": true}\n");
  std::fflush(stdout);

  tessera::shim::ComputeController controller;
  RecordingSource source(**sampler);
  std::map<std::string, nlohmann::json> trace;  // by ledger path
  std::map<std::string, std::string> dir_of;    // ledger path -> pod dir
  for (auto* s : segs) dir_of[s->ledger().path()] = s->pod_dir();
  tessera::agent::UsageMeter usage;
  const auto start = std::chrono::steady_clock::now();
  auto next = start;
  auto next_usage = start;
  int64_t steps = 0;
  int64_t usage_errors = 0;
  std::map<std::string, std::set<uint32_t>> host_pids;  // by pod dir
  // by pod dir: the ledger's gpu_busy_ns at the first and the last step
  std::map<std::string, uint64_t> reported_first, reported_last;
  while (!g_stop) {
    next += std::chrono::milliseconds(interval_ms);
    std::this_thread::sleep_until(next);
    if (seconds > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >=
            seconds) {
      break;
    }
    for (auto* s : segs) s->Reap();  // the host PIDs of the pods' processes (/proc)
    auto measured = controller.Step(gpu, segs, source);
    ++steps;
    for (const auto& [key, m] : measured) {
      trace[key].push_back({m.utilization_permille, m.hungry, m.duty_permille, m.phase_permille});
    }
    // Every host PID the reaps resolved, for the record, and the pods with a live process on
    // the GPU, for the usage meter: one reading of each segment.
    std::vector<std::string> running;
    std::map<std::string, tessera::agent::UsageMeter::Report> reports;  // by pod dir
    for (auto* s : segs) {
      if (auto r = tessera::agent::UsageReportOf(*s)) {
        reports[s->pod_dir()] = *r;
        reported_first.try_emplace(s->pod_dir(), r->counter_ns);
        reported_last[s->pod_dir()] = r->counter_ns;
      }
      bool live = false;
      for (const auto& p : s->Inspect().processes) {
        if (p.host_pid == 0) continue;
        host_pids[s->pod_dir()].insert(p.host_pid);
        live |= p.alive;
      }
      if (live) running.push_back(s->pod_dir());
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_usage) {  // the agent's --usage-interval: a second
      next_usage = now + std::chrono::seconds(1);
      auto u = (*sampler)->DeviceBusyTime(gpu);
      if (!u.ok()) {
        ++usage_errors;
        usage.Skip(gpu);
        continue;
      }
      usage.Observe(
          gpu, std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
          u->permille, running, reports, u->span_ns);
    }
  }
  nlohmann::json out;
  out["steps"] = steps;
  out["untrusted_steps"] = controller.untrusted_steps();
  out["interval_ms"] = interval_ms;
  out["columns"] = {"utilization_permille", "hungry", "duty_permille", "phase_permille"};
  for (const auto& [key, rows] : trace) {
    nlohmann::json& pod = out["pods"][dir_of[key]];
    pod["steps"] = rows;
    pod["last_duty_permille"] = rows.empty() ? nlohmann::json() : rows.back()[2];
  }
  constexpr double kNs = 1e9;
  for (auto* s : segs) {
    out["pods"][s->pod_dir()]["busy_s"] = usage.pod_busy_ns(s->pod_dir(), gpu).value_or(0) / kNs;
    out["pods"][s->pod_dir()]["host_pids"] = host_pids[s->pod_dir()];
    out["pods"][s->pod_dir()]["reported_s"] = (static_cast<double>(reported_last[s->pod_dir()]) -
                                               static_cast<double>(reported_first[s->pod_dir()])) /
                                              kNs;
  }
  if (const auto* g = usage.gpu(gpu); g != nullptr) {
    out["gpu"] = {{"sampled_s", g->sampled_ns / kNs},
                  {"busy_s", g->busy_ns / kNs},
                  {"unattributed_s", g->unattributed_ns / kNs},
                  {"rejected_reports", g->rejected_reports}};
  }
  out["usage_errors"] = usage_errors;
  out["nvml"] = source.steps();
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
