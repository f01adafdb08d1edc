// The preemption decision's latency (issue 18: p99 under 10 ms at 1,000 nodes x 8 GPUs with
// 8,000 running pods). A cluster of hgx-h100 nodes is filled by the engine (tessera policy) with
// exactly --pods pods, a mix of whole GPUs (1 and 2) and 10-40Gi shares, until no GPU is wholly
// free, so that every preemptor below needs victims. Each decision draws the running pods'
// priorities (0..9) and queues afresh and plans for one preemptor; the engine is not changed
// (a plan is not carried out), so every decision sees the same full cluster.
//
// Scenarios: a whole GPU, four whole GPUs, a 70Gi share (priority 10: every running pod is a
// candidate, the worst case for the search; none fits without evictions); reclaim: a whole GPU for
// queue `infer` (deserves half, holds a quarter) from `train` (deserves half, holds three
// quarters), where no pod of the same queue is a victim; a gang of 4 pods x 8 GPUs.
//
//   bench/run_preemption.sh   (build/release/bench/preemption_bench)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/strings.h"
#include "core/engine.h"
#include "core/model/profiles.h"
#include "core/preemption/planner.h"

namespace tessera::core {
namespace {

Cluster MakeCluster(int nodes) {
  Profile p = *FindProfile("hgx-h100");
  std::vector<NodeSpec> specs;
  for (int i = 0; i < nodes; ++i) {
    NodeSpec n;
    n.name = StrCat("node-", i);
    n.cpu_milli = p.cpu_milli;
    n.memory_mib = p.memory_mib;
    n.gpus = p.gpus;
    n.links = p.links;
    specs.push_back(std::move(n));
  }
  return *Cluster::Create(std::move(specs));
}

int FreeWhole(const Engine& e) {
  int n = 0;
  for (int i = 0; i < e.state().node_count(); ++i) n += e.state().whole_free_count(NodeId(i));
  return n;
}

// Fills `e` with exactly `pods` pods and no wholly free GPU (or reports why it could not).
std::vector<std::string> Fill(Engine& e, int pods, Random& rng) {
  std::vector<std::string> names;
  auto place = [&](GpuAsk ask) {
    PodRequest r;
    r.name = StrCat("run-", names.size());
    r.cpu_milli = 1000;
    r.memory_mib = 4096;
    r.gpu = ask;
    if (!e.Place(r).placed()) return false;
    names.push_back(r.name);
    return true;
  };
  auto share = [&] {
    return GpuAsk::Share(1024 * (10 + static_cast<int64_t>(rng.Uniform(31))), 0);
  };
  // A random mix while plenty is free.
  while (FreeWhole(e) > e.state().node_count() && static_cast<int>(names.size()) < pods) {
    const uint64_t k = rng.Uniform(10);
    place(k < 4 ? GpuAsk::Whole(1) : k < 7 ? GpuAsk::Whole(2) : share());
  }
  // Then every free GPU takes one pod, and the count is made exact: shares on GPUs in use add a
  // pod and no GPU, 2-GPU pods take two free GPUs with one pod.
  int guard = 0;
  while (static_cast<int>(names.size()) + FreeWhole(e) != pods && guard++ < 100000) {
    const int diff = pods - static_cast<int>(names.size()) - FreeWhole(e);
    if (diff > 0) {
      // The policy packs a share onto a GPU in use where one has room; the loop re-measures.
      place(GpuAsk::Share(10 * 1024, 0));
    } else {
      place(GpuAsk::Whole(2));
    }
    if (FreeWhole(e) == 0) break;
  }
  while (FreeWhole(e) > 0 && place(GpuAsk::Whole(1))) {
  }
  return names;
}

struct Row {
  std::string name;
  std::vector<double> ms;   // wall
  std::vector<double> cpu;  // this thread's CPU time
  std::vector<size_t> victims;
  int found = 0;
};

double ThreadCpuMs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

int Main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int pods = argc > 2 ? std::atoi(argv[2]) : 8000;
  const int decisions = argc > 3 ? std::atoi(argv[3]) : 200;
  Random rng(18);
  Engine e(MakeCluster(nodes), *CreatePolicy("tessera", {}));
  std::vector<std::string> names = Fill(e, pods, rng);
  std::printf("cluster: %d nodes x 8 GPUs, %zu running pods, %d GPUs wholly free\n", nodes,
              names.size(), FreeWhole(e));

  QueueSet queues;
  queues.SetCapacity(CapacityOf(e.cluster()));
  const int64_t half = CapacityOf(e.cluster())[kQueueGpu] / 2;
  QueueSpec train, infer;
  train.name = "train";
  train.deserved[kQueueGpu] = half;
  infer.name = "infer";
  infer.deserved[kQueueGpu] = half;
  queues.SetSpecs({train, infer});

  std::vector<RunningPod> running(names.size());
  std::vector<QueueResources> usage(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    running[i].name = names[i];
    usage[i] = UsageOf(e.cluster(), *e.Find(names[i]));
  }
  // Queues: three quarters of the pods in train, a quarter in infer (or all in default).
  auto assign = [&](bool two_queues) {
    for (size_t i = 0; i < running.size(); ++i) {
      if (!running[i].queue.empty()) queues.SubAllocated(running[i].queue, usage[i]);
      running[i].queue = !two_queues ? "default" : rng.Uniform(4) == 0 ? "infer" : "train";
      running[i].priority = static_cast<int32_t>(rng.Uniform(10));
      queues.AddAllocated(running[i].queue, usage[i]);
    }
  };

  struct Scenario {
    std::string name;
    std::vector<PodRequest> members;
    std::string queue;
    int32_t priority;
  };
  auto pod = [](std::string name, GpuAsk ask) {
    PodRequest r;
    r.name = std::move(name);
    r.cpu_milli = 1000;
    r.memory_mib = 4096;
    r.gpu = ask;
    return r;
  };
  std::vector<Scenario> scenarios = {
      {"whole GPU", {pod("p", GpuAsk::Whole(1))}, "default", 10},
      {"4 whole GPUs", {pod("p", GpuAsk::Whole(4))}, "default", 10},
      {"70Gi share", {pod("p", GpuAsk::Share(70 * 1024, 0))}, "default", 10},
      {"reclaim: whole GPU", {pod("p", GpuAsk::Whole(1))}, "infer", 0},
  };
  Scenario gang{"gang 4 x 8 GPUs", {}, "default", 10};
  for (int i = 0; i < 4; ++i) {
    gang.members.push_back(pod(StrCat("g-", i), GpuAsk::Whole(8)));
    gang.members.back().gang = GangAsk{"g", 4, "", false};
  }
  scenarios.push_back(gang);

  std::vector<Row> rows;
  PreemptionPlanner planner(e, queues);
  for (const Scenario& s : scenarios) {
    Row row{s.name, {}, {}, {}, 0};
    if (s.members.size() == 1 && e.Place(s.members[0], Mode::kTestOnly).placed()) {
      std::printf("note: %s fits without evictions\n", s.name.c_str());
    }
    const bool reclaim = s.queue != "default";
    for (int d = 0; d < decisions; ++d) {
      assign(reclaim);
      PreemptionRequest r;
      r.members = s.members;
      r.queue = s.queue;
      r.priority = s.priority;
      for (const PodRequest& m : s.members) r.demand += DemandOf(m, 80 * 1024);
      const double cpu_start = ThreadCpuMs();
      const auto start = std::chrono::steady_clock::now();
      PreemptionPlan plan = planner.Plan(r, running);
      const auto end = std::chrono::steady_clock::now();
      row.cpu.push_back(ThreadCpuMs() - cpu_start);
      row.ms.push_back(std::chrono::duration<double, std::milli>(end - start).count());
      row.victims.push_back(plan.victims.size());
      row.found += plan.found ? 1 : 0;
    }
    rows.push_back(std::move(row));
  }
  std::printf(
      "| preemptor | decisions | plans found | median victims | p50 ms CPU | p99 ms CPU | "
      "max ms CPU | p50 ms wall | p99 ms wall |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& row : rows) {
    std::vector<double> v(row.victims.begin(), row.victims.end());
    std::printf("| %s | %zu | %d | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", row.name.c_str(),
                row.ms.size(), row.found, Percentile(v, 0.5), Percentile(row.cpu, 0.5),
                Percentile(row.cpu, 0.99), Percentile(row.cpu, 1.0), Percentile(row.ms, 0.5),
                Percentile(row.ms, 0.99));
  }
  return 0;
}

}  // namespace
}  // namespace tessera::core

int main(int argc, char** argv) { return tessera::core::Main(argc, argv); }
