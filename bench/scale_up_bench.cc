// The scale-up signal's cost at 10,000 nodes (issue 19): what the scheduler pays for it while pods
// wait. The cluster: --nodes hgx-h100-like nodes (8 GPUs on an NVSwitch), each running one pod of
// 7 whole GPUs (bound, with its tessera.dev/assignment), so one GPU per node is free and nothing
// asking 2 or more GPUs fits. W pods wait: 2-GPU pods, every fourth an 8-GPU pod. Two templates
// (hgx-h100, l40s-4gpu), max 64 nodes each: the scheduler's configuration of docs/planning.md.
//
//   BM_PlanScaleUp/W     plan::PlanScaleUp alone (core/plan/scale_up.h): the planner's time on the
//                        scheduler's engine (ScaleUpInput::base, as ScaleUpSignal plans).
//   BM_Cycle/W/signal    one SchedulerCore::ScheduleSome when the W waiting pods are due for their
//                        periodic retry (the clock moves 31 s per cycle; retry.period 30s): with
//                        signal 0 no templates, with 1 the signal recomputed in that cycle
//                        (scaleUp.interval 30s), as it is once per interval while pods wait. The
//                        difference is the signal's cost per interval.
//
// The nodes and pods go through the scheduler's own decoding (DecodeNode, DecodePod of the
// objects the API server would send); the Binder and Reporter do nothing (no API server).
//
//   bench/run_scale_up.sh   (build/<preset>/bench/scale_up_bench)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/strings.h"
#include "core/model/profiles.h"
#include "core/plan/scale_up.h"
#include "k8s/scheduler/plan_inputs.h"
#include "k8s/scheduler/scheduler_core.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {
namespace {

int Nodes() {
  const char* n = std::getenv("SCALE_UP_BENCH_NODES");
  return n != nullptr ? std::atoi(n) : 10'000;
}

// Hot spares per NVLink domain (the scheduler's spareGpusPerDomain; default 0): with 1, each
// node's free GPU is its spare.
int Spares() {
  const char* n = std::getenv("SCALE_UP_BENCH_SPARES");
  return n != nullptr ? std::atoi(n) : 0;
}

class Quiet : public Binder, public Reporter {
 public:
  void Bind(const PodInfo&, const records::Assignment&, uint64_t) override {}
  void ReportFailure(const PodInfo&, std::string_view, const std::string&, bool) override {}
  void ReportWarning(const PodInfo&, std::string_view, const std::string&) override {}
};

std::vector<core::NodeSpec> Templates() {
  std::vector<core::NodeSpec> out;
  for (const char* name : {"hgx-h100", "l40s-4gpu"}) {
    absl::StatusOr<core::Profile> p = core::FindProfile(name);
    TESSERA_CHECK(p.ok());
    core::NodeSpec n;
    n.name = name;
    n.cpu_milli = p->cpu_milli;
    n.memory_mib = p->memory_mib;
    n.gpus = p->gpus;
    n.links = p->links;
    out.push_back(std::move(n));
  }
  return out;
}

// A scheduler holding the cluster and `waiting` pods that wait, after its first cycle.
struct World {
  Quiet quiet;
  std::chrono::steady_clock::time_point now =
      std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  std::unique_ptr<SchedulerCore> core;
  std::vector<std::shared_ptr<const PodInfo>> pods;  // every pod, by key order of creation
  std::map<std::string, const PodInfo*> by_key;
  std::vector<const PodInfo*> waiting;

  World(int nodes, int w, bool signal) {
    SchedulerCoreOptions o;
    o.retry_min_interval = std::chrono::milliseconds(1'000);
    o.retry_period = std::chrono::milliseconds(30'000);
    o.spare_gpus_per_domain = Spares();
    if (signal) {
      o.scale_up.templates = Templates();
      o.scale_up.interval = std::chrono::milliseconds(30'000);
    }
    core = std::move(*SchedulerCore::Create(o, &quiet, &quiet, nullptr, [this] { return now; }));
    for (int i = 0; i < nodes; ++i) {
      const std::string node = StrCat("node-", i);
      core->OnNode(Change::kAdded,
                   DecodeNode(testing::NodeObject(node).Gpus(8, "H100-80GB").NvSwitch().Json()));
      records::Assignment a;
      a.node = node;
      for (int g = 0; g < 7; ++g) {
        records::AssignedGpu gpu;
        gpu.grant.gpu = g;
        gpu.grant.exclusive = true;
        gpu.uuid = StrCat("GPU-", node, "-", g);
        a.gpus.push_back(gpu);
      }
      Add(testing::PodObject("run", StrCat("p-", i))
              .Limit("tessera.dev/gpu", "7")
              .Controller("ReplicaSet", "train")
              .Assigned(a)
              .Json());
    }
    for (int i = 0; i < w; ++i) {
      Add(testing::PodObject("wait", StrCat("w-", i))
              .Limit("tessera.dev/gpu", i % 4 == 3 ? "8" : "2")
              .Json());
      waiting.push_back(pods.back().get());
    }
    core->SetSynced(true, true);
    core->ScheduleSome();  // everything waits now; the signal (if on) computed once
  }
  void Add(const nlohmann::json& object) {
    std::shared_ptr<const PodInfo> p = DecodePod(object);
    TESSERA_CHECK_MSG(p->input_error.empty(), p->input_error.c_str());
    core->OnPod(Change::kAdded, p);
    by_key[p->key] = p.get();
    pods.push_back(std::move(p));
  }
};

// One world at a time (each holds a 10,000-node engine), kept while benchmarks use it.
World& Get(int w, bool signal) {
  static std::pair<int, bool> key{-1, false};
  static std::unique_ptr<World> world;
  if (!world || key != std::make_pair(w, signal)) {
    world.reset();
    world = std::make_unique<World>(Nodes(), w, signal);
    key = {w, signal};
  }
  return *world;
}

void BM_PlanScaleUp(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0));
  World& world = Get(w, false);
  // What a scale-up signal plans on: the scheduler's engine, every running pod in it.
  plan::ScaleUpInput in;
  in.base = &world.core->engine();
  in.make_policy = [] { return *core::CreatePolicy(core::kDefaultPolicy, {}); };
  for (const PodInfo* p : world.waiting) in.waiting.push_back({p->request});
  in.templates = Templates();
  for (auto _ : state) {
    absl::StatusOr<plan::ScaleUpPlan> plan = plan::PlanScaleUp(in);
    TESSERA_CHECK(plan.ok());
    benchmark::DoNotOptimize(plan->recommended);
    state.counters["recommended_nodes"] =
        plan->recommended >= 0 ? plan->options[plan->recommended].nodes : 0;
    state.counters["pods_placed"] =
        plan->recommended >= 0 ? plan->options[plan->recommended].pods_placed : 0;
  }
  state.counters["nodes"] = Nodes();
  state.counters["waiting"] = w;
}

void BM_Cycle(benchmark::State& state) {
  const int w = static_cast<int>(state.range(0));
  const bool signal = state.range(1) != 0;
  World& world = Get(w, signal);
  for (auto _ : state) {
    world.now += std::chrono::milliseconds(31'000);  // the retry period and the signal's interval
    const int tried = world.core->ScheduleSome();
    TESSERA_CHECK(tried == w);
  }
  if (signal) {
    TESSERA_CHECK(world.core->scale_up().last().waiting_pods == w);
    const plan::ScaleUpPlan& last = world.core->scale_up().last();
    state.counters["recommended_nodes"] =
        last.recommended >= 0 ? last.options[last.recommended].nodes : 0;
  }
  state.counters["nodes"] = Nodes();
  state.counters["waiting"] = w;
}

BENCHMARK(BM_PlanScaleUp)->Arg(10)->Arg(100)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Cycle)->Args({10, 0})->Args({10, 1})->Args({100, 0})->Args({100, 1})->Unit(
    benchmark::kMillisecond);

}  // namespace
}  // namespace tessera::k8s

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // the scheduler's per-pod lines are not measured
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
