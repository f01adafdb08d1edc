// Reclaiming many GPUs at once (issue 35): the time from the first waiting pod to the last bound
// one when queue tb reclaims k GPUs from queue ta, on a simulated clock with the evicted pods'
// graceful termination taken as --grace seconds.
//
// The cluster: --nodes nodes of 8 GPUs (H100-80GB, NVSwitch), every GPU held by a one-GPU pod of
// queue ta (bound, with its tessera.dev/assignment). Queues ta and tb each deserve half the GPUs.
// k pods of tb (one GPU each) arrive at once. The scheduler is SchedulerCore with its preemption
// on (the live scheduler's code, fed the objects the API server would send); a fake writer
// records nominations and evictions. The simulated API server: a bind lands at once; an evicted
// pod shows terminating at once and is deleted --grace seconds later. The clock moves 1 s per
// step (a step: the deletions due, then one ScheduleSome). Printed per k: the simulated time from
// the first waiting pod to the last bound, the evictions, the cycles, and the CPU the scheduler's
// cycles took (this thread's CPU time, summed).
//
//   build/dev/bench/reclaim_bench [--nodes N] [--grace S] k...   (bench/run_reclaim.sh)
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/strings.h"
#include "k8s/scheduler/scheduler_core.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

using Clock = std::chrono::steady_clock;

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

class Recorder : public Binder, public Reporter, public PreemptionWriter {
 public:
  void Bind(const PodInfo& pod, const records::Assignment& assignment, uint64_t attempt) override {
    binds.push_back({pod.key, assignment, attempt});
  }
  void ReportFailure(const PodInfo&, std::string_view, const std::string&, bool) override {}
  void ReportWarning(const PodInfo&, std::string_view, const std::string&) override {}
  void Nominate(const PodInfo&, const std::string&) override {}
  void Evict(const PodInfo& victim) override { evicted.push_back(victim.key); }
  std::vector<Refusal> TakeRefusals() override { return {}; }

  struct BindCall {
    std::string key;
    records::Assignment assignment;
    uint64_t attempt;
  };
  std::vector<BindCall> binds;
  std::vector<std::string> evicted;
};

struct Result {
  double seconds = -1;  // simulated: first waiting pod to last bound (-1: not all bound)
  size_t evictions = 0;
  int cycles = 0;
  double cpu = 0;
};

Result Run(int nodes, int k, int grace_s) {
  Recorder rec;
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  SchedulerCoreOptions o;
  o.retry_min_interval = std::chrono::milliseconds(1'000);
  o.retry_period = std::chrono::milliseconds(30'000);
  auto made = SchedulerCore::Create(o, &rec, &rec, nullptr, [&now] { return now; });
  TESSERA_CHECK(made.ok());
  std::unique_ptr<SchedulerCore> core = std::move(*made);
  core->EnablePreemption(&rec);
  core::QueueSpec ta, tb;
  ta.name = "ta";
  ta.deserved[core::kQueueGpu] = int64_t{nodes} * 4 * 1000;
  tb.name = "tb";
  tb.deserved[core::kQueueGpu] = int64_t{nodes} * 4 * 1000;
  core->SetQueues({ta, tb}, true);
  std::map<std::string, nlohmann::json> objects;
  auto add = [&](const nlohmann::json& object, Change change) {
    std::shared_ptr<const PodInfo> p = DecodePod(object);
    TESSERA_CHECK_MSG(p->input_error.empty(), p->input_error.c_str());
    objects[p->key] = object;
    core->OnPod(change, std::move(p));
  };
  for (int n = 0; n < nodes; ++n) {
    const std::string node = StrCat("node-", n);
    core->OnNode(Change::kAdded,
                 DecodeNode(testing::NodeObject(node).Gpus(8, "H100-80GB").NvSwitch().Json()));
    for (int g = 0; g < 8; ++g) {
      records::Assignment a;
      a.node = node;
      records::AssignedGpu gpu;
      gpu.grant.gpu = g;
      gpu.grant.exclusive = true;
      gpu.uuid = StrCat("GPU-", node, "-", g);
      a.gpus.push_back(gpu);
      add(testing::PodObject("ta", StrCat("a-", n, "-", g))
              .Limit("tessera.dev/gpu", "1")
              .Annotation("tessera.dev/queue", "ta")
              .Assigned(a)
              .Json(),
          Change::kAdded);
    }
  }
  core->SetSynced(true, true);
  core->ScheduleSome();

  Result r;
  const Clock::time_point start = now;
  for (int i = 0; i < k; ++i) {
    add(testing::PodObject("tb", StrCat("b-", i))
            .Limit("tessera.dev/gpu", "1")
            .Annotation("tessera.dev/queue", "tb")
            .Json(),
        Change::kAdded);
  }
  std::multimap<Clock::time_point, std::string> deletions;
  size_t seen_evictions = 0, seen_binds = 0;
  int bound = 0;
  const Clock::time_point give_up = start + std::chrono::hours(4);
  while (bound < k && now < give_up) {
    while (!deletions.empty() && deletions.begin()->first <= now) {
      const std::string key = deletions.begin()->second;
      deletions.erase(deletions.begin());
      core->OnPod(Change::kDeleted, DecodePod(objects.at(key)));
      objects.erase(key);
    }
    const double cpu = CpuSeconds();
    core->ScheduleSome();
    r.cpu += CpuSeconds() - cpu;
    ++r.cycles;
    for (; seen_evictions < rec.evicted.size(); ++seen_evictions) {
      const std::string& key = rec.evicted[seen_evictions];
      nlohmann::json pod = objects.at(key);
      pod["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z";
      add(pod, Change::kUpdated);
      deletions.emplace(now + std::chrono::seconds(grace_s), key);
    }
    for (; seen_binds < rec.binds.size(); ++seen_binds) {
      const Recorder::BindCall& b = rec.binds[seen_binds];
      core->OnBindResult(b.key, b.attempt, absl::OkStatus());
      nlohmann::json pod = objects.at(b.key);
      pod["spec"]["nodeName"] = b.assignment.node;
      pod["metadata"]["annotations"]["tessera.dev/assignment"] =
          records::AssignmentToJson(b.assignment);
      add(pod, Change::kUpdated);
      ++bound;
    }
    if (bound == k) {
      r.seconds = std::chrono::duration<double>(now - start).count();
      break;
    }
    now += std::chrono::seconds(1);
  }
  r.evictions = rec.evicted.size();
  return r;
}

}  // namespace
}  // namespace tessera::k8s

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  int nodes = 1000, grace = 30;
  std::vector<int> ks;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nodes" && i + 1 < argc) {
      nodes = std::atoi(argv[++i]);
    } else if (a == "--grace" && i + 1 < argc) {
      grace = std::atoi(argv[++i]);
    } else {
      ks.push_back(std::atoi(argv[i]));
    }
  }
  if (ks.empty()) ks = {8, 32, 128};
  std::printf(
      "| GPUs reclaimed | first waiting to last bound (s, simulated) | evictions | cycles |"
      " scheduler CPU (s) |\n|---:|---:|---:|---:|---:|\n");
  for (int k : ks) {
    const tessera::k8s::Result r = tessera::k8s::Run(nodes, k, grace);
    std::printf("| %d | %.0f | %zu | %d | %.2f |\n", k, r.seconds, r.evictions, r.cycles, r.cpu);
    std::fflush(stdout);
  }
  return 0;
}
