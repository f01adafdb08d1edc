// The node agent's maintenance step (PodManager::Maintain, every 250 ms: reap every share's ledger,
// resolve and check host PIDs, the compute controller, the memory backstop) on a node full of
// share pods, each with live processes in a pod cgroup of their own, as the kubelet makes them.
// bench/run_agent.sh builds it for this tree and for the branch point and runs both side by side
// (the hardening of issue 27, measured: bench/results/agent.md).
//
//   agent_bench PODS PROCESSES STEPS     one JSON line: CPU and wall time per Maintain, in us
//
// Each pod is a child process moved into <cgroup v1 pids>/tessera-agent-bench-<pid>/kubepods/
// pod<UID>/<container ID> (removed at the end) holding PROCESSES ledger slots of its pod's share;
// the bench process is the agent. Needs root (mounts in a mount namespace of its own, cgroups).
// With TESSERA_AGENT_BENCH_NVML defined (this tree's build) and $AGENT_BENCH_NVML naming the fake
// libnvidia-ml.so.1, the agent also samples the GPUs' processes (the backstop, the controller);
// with $AGENT_BENCH_USAGE_EVERY_STEP=1 too, it samples the GPUs' busy time (the usage counters and
// the idle rule, once a second in the agent) at every step, so that the difference is its cost.
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "agent/discovery/fake_discovery.h"
#include "agent/pods/pod_manager.h"
#include "records/assignment.h"
#include "shim/ledger.h"
#include "spdlog/spdlog.h"
#ifdef TESSERA_AGENT_BENCH_NVML
#include "agent/procs/gpu_processes.h"
#include "fake_cuda/fake_machine.h"
#endif

namespace {

namespace fs = std::filesystem;
using namespace tessera;

// Where the pods' folders go: PodManagerOptions::pods_dir since the node refactor (issue 32),
// edits.pods_dir before it; bench/run_agent.sh builds this file against both.
template <typename Options>
std::string& PodsDir(Options& options) {
  if constexpr (requires { options.pods_dir; }) {
    return options.pods_dir;
  } else {
    return options.edits.pods_dir;
  }
}

int64_t Micros(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

std::string Uid(int i) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "0f5e3a8c-5f2b-4c1e-9d7a-%012d", i);
  return buf;
}
std::string GpuUuid(int g) { return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(g); }

std::string GpusFile(int gpus) {
  std::string s = R"({"version": 1, "driver_version": "580.95.05", "gpus": [)";
  for (int g = 0; g < gpus; ++g) {
    s += (g ? "," : "") + std::string(R"({"index": )") + std::to_string(g) + R"(, "uuid": ")" +
         GpuUuid(g) + R"(", "model": "H100-80GB", "memory_mib": 81559})";
  }
  s += R"(], "links": [)";
  for (int a = 0; a < gpus; ++a) {
    s += a ? ",[" : "[";
    for (int b = 0; b < gpus; ++b) s += (b ? "," : "") + std::string(a == b ? "\"X\"" : "\"NV18\"");
    s += "]";
  }
  return s + "]}";
}

}  // namespace

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // stdout is the one JSON line
  if (argc != 4) {
    std::fprintf(stderr, "usage: agent_bench PODS PROCESSES STEPS\n");
    return 2;
  }
  const int pods = std::atoi(argv[1]), procs = std::atoi(argv[2]), steps = std::atoi(argv[3]);
  // Mounts (the pods' ledger folders) stay in this process's own mount namespace.
  if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr)) {
    std::perror("unshare (needs root)");
    return 1;
  }
  char tmpl[] = "/tmp/tessera-agent-bench-XXXXXX";
  const fs::path dir = ::mkdtemp(tmpl);
  const int gpus = 8;
  std::ofstream(dir / "gpus.json") << GpusFile(gpus);
  fs::create_directories(dir / "dev");
  for (const char* n : {"nvidia0", "nvidiactl"}) fs::create_symlink("/dev/null", dir / "dev" / n);
  for (int g = 1; g < gpus; ++g)
    fs::create_symlink("/dev/null", dir / "dev" / ("nvidia" + std::to_string(g)));
  agent::PodManagerOptions options;
  options.node_name = "n1";
  options.edits.dev_dir = (dir / "dev").string();
  PodsDir(options) = (dir / "pods").string();
  // The driver's libraries and the shims as files of this folder: the agent refuses a share whose
  // shim is missing on the node (it would not be enforced), and nothing here loads them.
  fs::create_directories(dir / "lib");
  const auto lib = [&dir](const char* name) {
    std::ofstream(dir / "lib" / name) << "";
    return (dir / "lib" / name).string();
  };
  options.edits.driver.cuda = {lib("libcuda.so.580.95.05"), "libcuda.so.1"};
  options.edits.driver.nvml = {lib("libnvidia-ml.so.580.95.05"), "libnvidia-ml.so.1"};
  options.edits.driver.shim_cuda = lib("libtessera-cuda.so");
  options.edits.driver.shim_nvml = lib("libtessera-nvml.so");
#ifdef TESSERA_AGENT_BENCH_NVML
  std::unique_ptr<agent::NvmlProcessSampler> sampler;
  if (const char* nvml = std::getenv("AGENT_BENCH_NVML"); nvml && *nvml) {
    // The fake driver's machine: the node's GPUs (the fake NVML reads it).
    std::vector<fake::DeviceSpec> devices;
    for (int g = 0; g < gpus; ++g)
      devices.push_back({GpuUuid(g), "H100 (fake)", 81559ull << 20, 132});
    const std::string machine = (dir / "machine").string();
    if (std::string e = fake::CreateMachine(machine, devices); !e.empty()) {
      std::fprintf(stderr, "%s\n", e.c_str());
      return 1;
    }
    ::setenv("TESSERA_FAKE_GPU_MACHINE", machine.c_str(), 1);
    auto s = agent::NvmlProcessSampler::Load(nvml);
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
      return 1;
    }
    sampler = std::move(*s);
  }
  if (const char* every = std::getenv("AGENT_BENCH_USAGE_EVERY_STEP"); every && *every == '1') {
    options.usage_interval = std::chrono::milliseconds(0);
  }
  agent::PodManager manager(options, nullptr, sampler.get());
#else
  agent::PodManager manager(options);
#endif
  agent::FakeDiscovery discovery((dir / "gpus.json").string());
  auto node = discovery.Discover();
  if (!node.ok()) return 1;
  manager.SetGpus(std::make_shared<const agent::NodeGpus>(*node));

  // The pods: shares spread over the GPUs, each with a child process in its pod's cgroup that
  // holds `procs` slots of the pod's ledger.
  const std::string cgroups =
      "/sys/fs/cgroup/pids/tessera-agent-bench-" + std::to_string(::getpid());
  std::vector<pid_t> children;
  int ready[2];
  if (::pipe(ready) != 0) return 1;
  for (int i = 0; i < pods; ++i) {
    records::Assignment a;
    a.node = "n1";
    records::AssignedGpu g;
    g.grant.gpu = i % gpus;
    g.grant.memory_mib = 1024;
    g.grant.compute_milli = 0;
    g.uuid = GpuUuid(i % gpus);
    a.gpus.push_back(g);
    agent::PodRef pod{"bench", "p" + std::to_string(i), Uid(i), {}};
    pod.annotations["tessera.dev/assignment"] = records::AssignmentToJson(a);
    if (absl::Status st = manager.Prepare(pod).status(); !st.ok()) {
      std::fprintf(stderr, "pod %d was refused: %s\n", i, std::string(st.message()).c_str());
      return 1;
    }
    const std::string cg = cgroups + "/kubepods/pod" + Uid(i) + "/" + std::string(64, 'a' + i % 6);
    fs::create_directories(cg);
    pid_t child = ::fork();
    if (child == 0) {
      std::ofstream(cg + "/cgroup.procs") << ::getpid();
      std::vector<std::unique_ptr<shim::Ledger>> slots;
      const std::string ledger =
          PodsDir(options) + "/" + Uid(i) + "/ledger/" + GpuUuid(i % gpus) + ".ledger";
      for (int p = 0; p < procs; ++p) {
        std::string error;
        auto l = shim::Ledger::Open(ledger, &error);
        if (l == nullptr || !l->Claim(shim::ProcessIdentity::Current(), &error) ||
            !l->TryCharge(1 << 20, 1ull << 30)) {
          std::fprintf(stderr, "%s\n", error.c_str());
          ::_exit(1);
        }
        slots.push_back(std::move(l));
      }
      char c = 'k';
      if (::write(ready[1], &c, 1) != 1) ::_exit(1);
      ::pause();
      ::_exit(0);
    }
    children.push_back(child);
  }
  for (int i = 0; i < pods; ++i) {
    char c;
    if (::read(ready[0], &c, 1) != 1) return 1;
  }
  for (int i = 0; i < 8; ++i) manager.Maintain();  // warm: host PIDs resolved
  std::vector<int64_t> cpu, wall;
  for (int s = 0; s < steps; ++s) {
    const int64_t c0 = Micros(CLOCK_THREAD_CPUTIME_ID), w0 = Micros(CLOCK_MONOTONIC);
    manager.Maintain();
    cpu.push_back(Micros(CLOCK_THREAD_CPUTIME_ID) - c0);
    wall.push_back(Micros(CLOCK_MONOTONIC) - w0);
    ::usleep(2000);
  }
  for (pid_t c : children) ::kill(c, SIGKILL);
  for (pid_t c : children) ::waitpid(c, nullptr, 0);
  std::error_code ec;
  for (int i = 0; i < pods; ++i) {
    const std::string pod = cgroups + "/kubepods/pod" + Uid(i);
    ::rmdir((pod + "/" + std::string(64, 'a' + i % 6)).c_str());
    ::rmdir(pod.c_str());
  }
  ::rmdir((cgroups + "/kubepods").c_str());
  ::rmdir(cgroups.c_str());
  for (int i = 0; i < pods; ++i) manager.Release(Uid(i));
  fs::remove_all(dir, ec);
  auto median = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  };
  auto p99 = [](std::vector<int64_t> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[std::min(v.size() - 1, v.size() * 99 / 100)];
  };
  int64_t sum = 0;
  for (int64_t c : cpu) sum += c;
  std::printf(
      "{\"pods\": %d, \"processes\": %d, \"steps\": %d, \"cpu_us_p50\": %lld, \"cpu_us_p99\": "
      "%lld, "
      "\"cpu_us_mean\": %.1f, \"wall_us_p50\": %lld}\n",
      pods, procs, steps, static_cast<long long>(median(cpu)), static_cast<long long>(p99(cpu)),
      static_cast<double>(sum) / std::max<size_t>(1, cpu.size()),
      static_cast<long long>(median(wall)));
  return 0;
}
