// The fault-injection soak (issue 30): tessera's scheduler (two replicas, leader election) and
// agents on three harness nodes with fake GPUs of three kinds, under a steady workload (shares,
// whole GPUs, gangs, MIG instances, DRA claims; arrivals and completions) while a seeded fault
// injector breaks things, and a checker that shares no code with tessera (checker.h) verifies the
// invariants all along and that nothing leaks once the pods are gone.
//
//   soak-a  8 x H100 NVSwitch (GPU 7 in MIG mode), classic mode
//   soak-b  2 x L40S PCIe, classic mode
//   soak-c  2 x A100 PCIe with an NVLink bridge (GPU 0 in MIG mode), DRA mode
//
// Faults, one at a time from the seeded plan (plan.h), each with its recovery measured: SIGKILL of
// the scheduler replica holding the lease (and its restart), of an agent, of a kubelet, of a
// containerd; a restart of the API server and of etcd; a node NotReady (kubelet stopped, the Node
// marked as node-lifecycle-controller would) and back; an application XID on a GPU a pod uses; a
// hardware XID with the driver's "reset required", reset 15 s later; a share pod's CUDA process
// SIGKILLed while it holds its ledger slot's lock; a scheduler replica renewing its lease with its
// clock an hour off.
//
// The scheduler replicas are kept as their Deployment's pods would be (ReplicasLoop): a replica
// that exits on its own (it does when it loses the Lease, and when the API server is away as it
// starts) is started again after the kubelet's crash-loop back-off.
//
// Environment: SOAK_DURATION (seconds of workload and faults, default 300), SOAK_SEED (default
// 30), SOAK_FAULT_GAP (mean seconds between faults, default 25), SOAK_FAULTS (the fault kinds to
// draw from, comma-separated, default all: a run aimed at a few kinds), SOAK_REPORT (write the
// figures as markdown there). A failure prints the seed and the fault plan; the same seed replays
// it.
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "common/testing/promtool.h"
#include "controlplane/controlplane.h"
#include "controlplane/fake_gpu_faults.h"
#include "controlplane/pod_testing.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "probe_nodes.h"
#include "probe_pod.h"
#include "scoped_process.h"
#include "soak/checker.h"
#include "soak/plan.h"

namespace tessera::e2e {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using soak::FaultKind;
using soak::UnitKind;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

constexpr char kNs[] = "soak";
constexpr char kScheduler[] = "tessera-soak";
constexpr char kLease[] = "tessera-soak-scheduler";
const std::vector<std::string> kClassic = {"soak-a", "soak-b"};
constexpr char kDra[] = "soak-c";

ControlPlane& Cp() { return ControlPlane::Shared(); }

int64_t EnvInt(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoll(v) : fallback;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What happened to one fault.
struct FaultRecord {
  soak::PlannedFault planned;
  std::string target;
  Clock::time_point start, recovered;
  bool ok = false;
  std::string note;
};

// The soak: its world (agents, schedulers), workload, injector and checker.
class Soak {
 public:
  Soak() {
    start_ = Clock::now();  // no other thread yet
    duration_ = seconds(EnvInt("SOAK_DURATION", 300));
    seed_ = static_cast<uint64_t>(EnvInt("SOAK_SEED", 30));
    gap_ = seconds(EnvInt("SOAK_FAULT_GAP", 25));
    char tmpl[] = "/tmp/tessera-soak-XXXXXX";
    dir_ = ::mkdtemp(tmpl) ? tmpl : "/tmp/tessera-soak";
    ::chmod(dir_.c_str(), 0755);
    fs::create_directories(ReportsDir());
    ::chmod(ReportsDir().c_str(), 0777);
  }

  ~Soak() { StopReplicas(); }
  std::string Setup();
  void Run();
  std::string Report() const;
  const std::vector<soak::Violation>& violations() const { return violations_; }
  std::string PlanText() const { return soak::DescribePlan(plan_); }
  uint64_t seed() const { return seed_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string ReportsDir() const { return dir_ + "/reports"; }
  std::string MachinesDir() const { return dir_ + "/machines"; }
  std::vector<std::string> AgentArgv(const std::string& node) const;
  std::vector<std::string> SchedulerArgv(const std::string& identity) const;
  // The scheduler replicas. Every start and the injector's kills run on the replicas thread
  // (OnReplicasThread): ScopedProcess's PR_SET_PDEATHSIG follows the thread that forked, and this
  // one lives as long as the soak.
  using Env = std::vector<std::pair<std::string, std::string>>;
  absl::Status StartScheduler(int replica, const Env& env = {});  // replicas thread only
  absl::Status OnReplicasThread(std::function<absl::Status()> task);
  void ReplicasLoop();
  void StopReplicas();
  // The node's ResourceSlices of gpu.tessera.dev list a whole pool: every slice of its newest
  // generation, with devices.
  bool PoolPublished(const std::string& node);
  std::string AgentLog(const std::string& node) const {
    return Read(Cp().FindNode(node)->dir + "/agent.log");
  }

  // Workload.
  void WorkloadLoop(Clock::time_point end);
  void CreateUnit(const soak::PlannedUnit& u, Clock::time_point now);
  json SoakPod(const std::string& name, UnitKind kind, const soak::PlannedUnit& u,
               const std::string& gang) const;
  // Checker.
  void CheckerLoop();
  bool TakeSnapshot(soak::Snapshot* s);
  // Faults.
  void InjectorLoop(Clock::time_point start);
  FaultRecord Inject(const soak::PlannedFault& f);
  bool CanaryBound(seconds timeout, Clock::time_point* at);
  std::string LeaseHolder();
  int64_t ReapedTotal(const std::string& node);

  std::string dir_;
  seconds duration_, gap_;
  uint64_t seed_;
  std::vector<soak::PlannedFault> plan_;
  Clock::time_point start_;  // the workload's (guarded by mu_; the soak's until it starts)
  // A scheduler replica as its Deployment keeps it. Touched on the replicas thread only.
  struct Replica {
    std::unique_ptr<ScopedProcess> process;
    Env env;            // what it was started with; a restart keeps it, as a pod's spec does
    bool held = false;  // the injector killed it and starts it again itself
    Clock::time_point started, restart_at;  // restart_at: set while it waits to be restarted
    seconds backoff{10};
  };
  Replica replicas_[2];
  int scheduler_generation_ = 0;
  std::thread replicas_thread_;
  std::mutex tasks_mu_;
  std::vector<std::pair<std::function<absl::Status()>, std::promise<absl::Status>>> tasks_;
  std::atomic<bool> stop_replicas_{false};
  std::mutex mu_;  // guards everything below
  struct Unit {
    UnitKind kind;
    std::vector<std::string> pods;
    Clock::time_point end;
  };
  std::vector<Unit> units_;
  std::map<std::string, int> units_by_kind_;
  int64_t pods_created_ = 0;
  std::set<std::string> pods_ran_;                  // names seen Running
  std::map<std::string, std::string> pods_waited_;  // name -> why (pending > 10 s)
  std::map<std::string, Clock::time_point> pending_since_;
  soak::Snapshot last_;
  bool have_last_ = false;
  soak::Checker checker_;
  std::vector<soak::Violation> violations_;
  std::vector<FaultRecord> faults_;
  std::vector<std::string> replica_exits_;  // "t+508s soak-0 exited (1): <its last log line>"
  std::atomic<bool> stop_checker_{false};
  int64_t snapshots_ = 0, snapshots_failed_ = 0;
  double seconds_run_ = 0;
  std::string load_before_, load_after_;
};

std::vector<std::string> Soak::AgentArgv(const std::string& node) const {
  const Node* n = Cp().FindNode(node);
  std::vector<std::string> argv = {TESSERA_BINARY,
                                   "agent",
                                   "--node-name",
                                   node,
                                   "--gpus-file",
                                   n->fake_gpus,
                                   "--dev-dir",
                                   n->dev_dir,
                                   "--pods-dir",
                                   n->dir + "/tessera/pods",
                                   "--driver-lib-dir",
                                   fs::path(TESSERA_FAKE_CUDA).parent_path().string(),
                                   "--shim-dir",
                                   fs::path(TESSERA_SHIM_LIBRARY).parent_path().string(),
                                   "--shim-install-dir",
                                   n->dir + "/tessera/lib",
                                   "--mps-root",
                                   n->dir + "/tessera/mps",
                                   "--rediscover-interval",
                                   "2s",
                                   "--metrics-bind-address",
                                   "127.0.0.1",
                                   "--metrics-port",
                                   "0",
                                   "--gpu-fault-policy",
                                   "evict",
                                   "--gpu-quiet-period",
                                   "5s",
                                   "--gpu-fault-retry",
                                   "2s"};
  if (node == kDra) {
    argv.insert(argv.end(), {"--dra", "--no-nri", "--claims-dir", n->dir + "/tessera/claims",
                             "--dra-resync-interval", "2s"});
  }
  return argv;
}

std::vector<std::string> Soak::SchedulerArgv(const std::string& identity) const {
  return {TESSERA_BINARY,           "scheduler",  "--kubeconfig", Cp().kubeconfig(), "--config",
          dir_ + "/scheduler.yaml", "--identity", identity};
}

absl::Status Soak::StartScheduler(int replica, const Env& env) {
  std::vector<std::string> argv = SchedulerArgv(StrCat("soak-", replica));
  if (!env.empty()) {
    std::vector<std::string> with = {"/usr/bin/env"};
    for (const auto& [k, v] : env) with.push_back(StrCat(k, "=", v));
    argv.insert(argv.begin(), with.begin(), with.end());
  }
  const std::string log =
      StrCat(dir_, "/scheduler-", replica, "-", ++scheduler_generation_, ".log");
  Replica& r = replicas_[replica];
  r.process.reset();
  r.env = env;
  r.held = false;
  r.restart_at = {};
  r.started = Clock::now();
  absl::StatusOr<std::unique_ptr<ScopedProcess>> p = ScopedProcess::Start(argv, log);
  if (!p.ok()) return p.status();
  r.process = std::move(*p);
  return absl::OkStatus();
}

absl::Status Soak::OnReplicasThread(std::function<absl::Status()> task) {
  std::future<absl::Status> done;
  {
    std::lock_guard<std::mutex> lock(tasks_mu_);
    tasks_.emplace_back(std::move(task), std::promise<absl::Status>());
    done = tasks_.back().second.get_future();
  }
  return done.get();
}

// What the kubelet does for a Deployment's pod (restartPolicy Always): a container that exited is
// started again after a back-off of 10 s, doubled on each exit up to 5 minutes, and back to 10 s
// once it has run 10 minutes. tessera's scheduler exits by design when it loses the Lease (a
// restart starts from the API server's state) and when it cannot reach the API server as it
// starts: without this, an API server restart left a replica dead for the rest of the soak, and
// the next scheduler-kill killed the only one left (the 1500-s run of 2026-12-04: no canary
// bound for 180 s, twice, and a pod that waited without a reason).
void Soak::ReplicasLoop() {
  while (!stop_replicas_.load()) {
    decltype(tasks_) tasks;
    {
      std::lock_guard<std::mutex> lock(tasks_mu_);
      tasks.swap(tasks_);
    }
    for (auto& [task, done] : tasks) done.set_value(task());
    const auto now = Clock::now();
    for (int i : {0, 1}) {
      Replica& r = replicas_[i];
      if (r.held || !r.process) continue;
      if (r.restart_at == Clock::time_point{}) {
        if (r.process->Running()) {
          if (now - r.started >= std::chrono::minutes(10)) r.backoff = seconds(10);
          continue;
        }
        const int status = r.process->Wait(milliseconds(0));
        std::string last;
        std::istringstream lines(r.process->Log());
        for (std::string line; std::getline(lines, line);) {
          if (!line.empty()) last = line;
        }
        std::lock_guard<std::mutex> lock(mu_);
        const std::string what =
            StrCat("t+", static_cast<int64_t>(Seconds(now - start_)), "s soak-", i, " exited (",
                   status, "): ", last.substr(0, 160));
        std::cerr << "soak: " << what << "; restarting it in " << r.backoff.count() << " s\n";
        replica_exits_.push_back(what);
        r.restart_at = now + r.backoff;
        r.backoff = std::min<seconds>(r.backoff * 2, seconds(300));
      } else if (now >= r.restart_at) {
        if (absl::Status s = StartScheduler(i, r.env); !s.ok()) {
          std::cerr << "soak: restarting soak-" << i << ": " << s.message() << "\n";
        }
      }
    }
    std::this_thread::sleep_for(milliseconds(200));
  }
  std::lock_guard<std::mutex> lock(tasks_mu_);
  for (auto& [task, done] : tasks_) done.set_value(absl::CancelledError("the soak is ending"));
  tasks_.clear();
}

void Soak::StopReplicas() {
  if (!replicas_thread_.joinable()) return;
  stop_replicas_.store(true);
  replicas_thread_.join();
  for (Replica& r : replicas_) r.process.reset();
}

bool Soak::PoolPublished(const std::string& node) {
  CommandResult r = Cp().Kubectl({"get", "resourceslices", "-o", "json", "--request-timeout=10s"});
  if (!r.ok()) return false;
  const json slices = json::parse(r.out, nullptr, false);
  if (slices.is_discarded()) return false;
  int64_t newest = -1, count = 0, listed = 0, devices = 0;
  for (const json& s : slices.value("items", json::array())) {
    const json& spec = s["spec"];
    if (spec.value("nodeName", "") != node || spec.value("driver", "") != "gpu.tessera.dev")
      continue;
    const json& pool = spec["pool"];
    const int64_t g = pool.value("generation", int64_t{-1});
    if (g > newest) {
      newest = g;
      count = pool.value("resourceSliceCount", int64_t{0});
      listed = devices = 0;
    }
    if (g == newest) {
      ++listed;
      devices += static_cast<int64_t>(spec.value("devices", json::array()).size());
    }
  }
  return newest >= 0 && listed == count && devices > 0;
}

std::string Soak::Setup() {
  load_before_ = Read("/proc/loadavg");
  // GPU 7 of the H100 node and GPU 0 of the A100 node in MIG mode.
  if (std::string e = EditFakeGpus(Cp().FindNode("soak-a")->fake_gpus,
                                   [](json& d) { d["gpus"][7]["mig"]["enabled"] = true; });
      !e.empty()) {
    return e;
  }
  if (std::string e = EditFakeGpus(Cp().FindNode(kDra)->fake_gpus,
                                   [](json& d) { d["gpus"][0]["mig"]["enabled"] = true; });
      !e.empty()) {
    return e;
  }
  std::vector<std::string> all = kClassic;
  all.push_back(kDra);
  const std::string prepared = PrepareProbeNodes(
      Cp(), all, dir_, MachinesDir(),
      {TESSERA_SHIM_CLIENT, TESSERA_FAKE_CUDA, TESSERA_FAKE_NVML, TESSERA_SHIM_LIBRARY});
  if (!prepared.empty()) return prepared;
  for (const std::string& node : all) {
    CommandResult labeled = Cp().Kubectl({"label", "node", node, "--overwrite",
                                          StrCat("soak/mode=", node == kDra ? "dra" : "classic")});
    if (!labeled.ok()) return labeled.err;
    absl::StatusOr<pid_t> pid = Cp().NodeSpawn(node, "agent", AgentArgv(node), {});
    if (!pid.ok()) return StrCat("agent on ", node, ": ", pid.status().message());
  }
  auto applied =
      Cp().KubectlOk({"apply", "-f", StrCat(TESSERA_SOURCE_DIR, "/deploy/dra-deviceclasses.yaml")});
  if (!applied.ok()) return std::string(applied.status().message());
  if (!Cp().KubectlOk({"create", "namespace", kNs}).ok()) return "cannot create namespace soak";
  // Claim templates: shares of 4, 8, 12 GiB, a whole GPU, a 1g.10gb MIG instance.
  json templates = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
  auto tmpl = [&](const std::string& name, const json& exactly) {
    templates["items"].push_back(
        {{"apiVersion", "resource.k8s.io/v1"},
         {"kind", "ResourceClaimTemplate"},
         {"metadata", {{"name", name}, {"namespace", kNs}}},
         {"spec",
          {{"spec", {{"devices", {{"requests", {{{"name", "gpu"}, {"exactly", exactly}}}}}}}}}}});
  };
  for (int gib : {4, 8, 12}) {
    tmpl(StrCat("dra-share-", gib),
         {{"deviceClassName", "gpu-share.tessera.dev"},
          {"capacity", {{"requests", {{"memory", StrCat(gib, "Gi")}}}}}});
  }
  tmpl("dra-whole", {{"deviceClassName", "gpu.tessera.dev"}});
  tmpl("dra-mig",
       {{"deviceClassName", "mig.tessera.dev"},
        {"selectors",
         {{{"cel",
            {{"expression", "device.attributes[\"gpu.tessera.dev\"].profile == \"1g.10gb\""}}}}}}});
  if (auto r = Cp().KubectlOk({"create", "-f", "-"}, templates.dump()); !r.ok()) {
    return std::string(r.status().message());
  }
  std::ofstream(dir_ + "/scheduler.yaml") << StrCat(R"(apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: )",
                                                    kScheduler, R"(
leaderElection:
  resourceNamespace: default
  resourceName: )",
                                                    kLease, R"(
  leaseDuration: 6s
  renewDeadline: 4s
  retryPeriod: 1s
metrics: {bindAddress: 127.0.0.1, port: 0}
retry: {minInterval: 200ms, period: 2s}
dra: {enabled: true}
)");
  replicas_thread_ = std::thread([this] { ReplicasLoop(); });
  for (int r : {0, 1}) {
    if (absl::Status s = OnReplicasThread([this, r] { return StartScheduler(r); }); !s.ok()) {
      return std::string(s.message());
    }
  }
  for (const std::string& node : all) {
    const bool ready = WaitUntil(
        [&] {
          CommandResult r = Cp().Kubectl({"get", "node", node, "-o", "json"});
          if (!r.ok()) return false;
          json n = json::parse(r.out);
          if (!n["metadata"]["annotations"].contains("tessera.dev/gpu-inventory")) return false;
          if (node == kDra) return AgentLog(node).find("dra: pool") != std::string::npos;
          return AgentLog(node).find("NRI: configured by") != std::string::npos;
        },
        seconds(120));
    if (!ready) return StrCat("the agent on ", node, " is not ready:\n", AgentLog(node));
  }
  std::vector<FaultKind> kinds;
  std::string bad;
  const char* chosen = std::getenv("SOAK_FAULTS");
  if (!soak::ParseFaultKinds(chosen ? chosen : "", &kinds, &bad))
    return StrCat("SOAK_FAULTS: ", bad);
  plan_ = soak::PlanFaults(seed_, duration_ - std::min(duration_, seconds(30)), gap_, seconds(8),
                           kinds);
  return "";
}

json Soak::SoakPod(const std::string& name, UnitKind kind, const soak::PlannedUnit& u,
                   const std::string& gang) const {
  std::map<std::string, std::string> limits, annotations;
  switch (kind) {
    case UnitKind::kShare:
      limits["tessera.dev/gpu-memory"] = StrCat(u.memory_gib, "Gi");
      break;
    case UnitKind::kWhole:
    case UnitKind::kGang:
      limits["tessera.dev/gpu"] = "1";
      break;
    case UnitKind::kMig:
      annotations["tessera.dev/mig"] = "1g.10gb";
      break;
    default:
      break;
  }
  if (kind == UnitKind::kGang) {
    annotations["tessera.dev/gang"] = gang;
    annotations["tessera.dev/gang-size"] = std::to_string(u.members);
  }
  json pod = ProbePodOnAnyNode(kNs, name, kScheduler, MachinesDir(), limits, annotations);
  json& c = pod["spec"]["containers"][0];
  c["command"] = {"/bin/sh", "-c", R"(r=/soak-reports/$POD_UID
echo "visible=$NVIDIA_VISIBLE_DEVICES limit_mib=$TESSERA_GPU_MEMORY_LIMIT_MIB" >"$r"
if [ -n "$TESSERA_GPU_MEMORY_LIMIT_MIB" ]; then
  export CUDA_VISIBLE_DEVICES="$NVIDIA_VISIBLE_DEVICES"
  { printf 'init\nalloc a 1048576\n'; sleep 100000; } | shim_client >/dev/null 2>&1 &
fi
exec sleep 100000
)"};
  c["env"].push_back(
      {{"name", "POD_UID"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.uid"}}}}}});
  c["volumeMounts"].push_back({{"name", "reports"}, {"mountPath", "/soak-reports"}});
  pod["spec"]["volumes"].push_back(
      {{"name", "reports"}, {"hostPath", {{"path", ReportsDir()}, {"type", "Directory"}}}});
  const bool dra =
      kind == UnitKind::kDraShare || kind == UnitKind::kDraWhole || kind == UnitKind::kDraMig;
  pod["spec"]["nodeSelector"] = {{"soak/mode", dra ? "dra" : "classic"}};
  if (dra) {
    const std::string t = kind == UnitKind::kDraShare   ? StrCat("dra-share-", u.memory_gib)
                          : kind == UnitKind::kDraWhole ? "dra-whole"
                                                        : "dra-mig";
    pod["spec"]["resourceClaims"] = {{{"name", "gpu"}, {"resourceClaimTemplateName", t}}};
    c["resources"] = {{"claims", {{{"name", "gpu"}}}}};
  }
  pod["metadata"]["labels"] = {{"soak/kind", std::string(soak::UnitKindName(kind))}};
  return pod;
}

void Soak::CreateUnit(const soak::PlannedUnit& u, Clock::time_point now) {
  static int counter = 0;
  const int id = ++counter;
  Unit unit;
  unit.kind = u.kind;
  unit.end = now + u.lifetime;
  json list = {{"apiVersion", "v1"}, {"kind", "List"}, {"items", json::array()}};
  const std::string base = StrCat(soak::UnitKindName(u.kind), "-", id);
  for (int m = 0; m < u.members; ++m) {
    const std::string name = u.members > 1 ? StrCat(base, "-", m) : base;
    list["items"].push_back(SoakPod(name, u.kind, u, base));
    unit.pods.push_back(name);
  }
  CommandResult r = Cp().Kubectl({"create", "-f", "-"}, list.dump());
  std::lock_guard<std::mutex> lock(mu_);
  if (!r.ok()) {
    // The API server may be down: this arrival is lost, as a client's would be. What it may have
    // created before failing (a gang's first members) is deleted with the units whose time is up.
    unit.end = now;
    units_.push_back(std::move(unit));
    return;
  }
  ++units_by_kind_[std::string(soak::UnitKindName(u.kind))];
  pods_created_ += u.members;
  units_.push_back(std::move(unit));
}

void Soak::WorkloadLoop(Clock::time_point end) {
  soak::WorkloadDraws draws(seed_ * 7919 + 1);
  constexpr size_t kMaxUnits = 14;
  // Pods whose time is up, kept until a delete of them succeeds: a delete sent while the API
  // server restarts fails, and dropping it left pods running for the rest of the soak (the
  // 2100-s run of 2026-12-04: dra-whole-33 held soak-c's only whole GPU for 20 minutes), as no
  // client that means to delete would.
  std::vector<std::string> done;
  while (Clock::now() < end) {
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto it = units_.begin(); it != units_.end();) {
        if (it->end <= now) {
          done.insert(done.end(), it->pods.begin(), it->pods.end());
          it = units_.erase(it);
        } else {
          ++it;
        }
      }
    }
    if (!done.empty()) {
      std::vector<std::string> args = {
          "delete", "pods", "-n", kNs, "--grace-period=1", "--wait=false", "--ignore-not-found"};
      args.insert(args.end(), done.begin(), done.end());
      if (Cp().Kubectl(args).ok()) done.clear();
    }
    size_t live;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live = units_.size();
    }
    const soak::PlannedUnit u = draws.Next();
    if (live < kMaxUnits) CreateUnit(u, now);
    std::this_thread::sleep_for(draws.Gap());
  }
}

bool Soak::TakeSnapshot(soak::Snapshot* s) {
  CommandResult r = Cp().Kubectl({"get", "nodes,pods,resourceclaims,resourceslices", "-A", "-o",
                                  "json", "--request-timeout=10s"});
  if (!r.ok()) return false;
  json all = json::parse(r.out, nullptr, false);
  if (all.is_discarded()) return false;
  s->at = Clock::now();
  s->nodes = {{"items", json::array()}};
  s->pods = {{"items", json::array()}};
  s->claims = {{"items", json::array()}};
  s->slices = {{"items", json::array()}};
  for (json& item : all["items"]) {
    const std::string kind = item.value("kind", "");
    if (kind == "Node") s->nodes["items"].push_back(std::move(item));
    if (kind == "Pod") s->pods["items"].push_back(std::move(item));
    if (kind == "ResourceClaim") s->claims["items"].push_back(std::move(item));
    if (kind == "ResourceSlice") s->slices["items"].push_back(std::move(item));
  }
  for (const std::string& uid : ListDir(ReportsDir()))
    s->reports[uid] = Read(ReportsDir() + "/" + uid);
  return true;
}

void Soak::CheckerLoop() {
  while (!stop_checker_.load()) {
    soak::Snapshot s;
    if (TakeSnapshot(&s)) {
      std::vector<soak::Violation> found = checker_.Check(s);
      std::lock_guard<std::mutex> lock(mu_);
      ++snapshots_;
      for (const soak::Violation& v : found) {
        std::cerr << "VIOLATION " << v.invariant << ": " << v.detail << "\n";
        violations_.push_back(v);
      }
      for (const json& pod : s.pods["items"]) {
        if (pod["metadata"].value("namespace", "") != kNs) continue;
        const std::string name = pod["metadata"].value("name", "");
        if (pod["status"].value("phase", "") == "Running") {
          pods_ran_.insert(name);
          pending_since_.erase(name);
          continue;
        }
        if (pod["status"].value("phase", "") != "Pending" || pods_ran_.contains(name)) continue;
        auto since = pending_since_.try_emplace(name, s.at).first;
        if (s.at - since->second < seconds(10)) continue;
        std::string why = "bound, starting";
        for (const json& c : pod["status"].value("conditions", json::array())) {
          if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False") {
            why = c.value("message", c.value("reason", "unschedulable"));
          }
        }
        pods_waited_[name] = why;
      }
      last_ = std::move(s);
      have_last_ = true;
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      ++snapshots_failed_;
    }
    std::this_thread::sleep_for(seconds(3));
  }
}

std::string Soak::LeaseHolder() {
  CommandResult r = Cp().Kubectl({"get", "lease", kLease, "-n", "default", "-o", "json"});
  if (!r.ok()) return "";
  return json::parse(r.out)["spec"].value("holderIdentity", "");
}

bool Soak::CanaryBound(seconds timeout, Clock::time_point* at) {
  static int counter = 0;
  const std::string name = StrCat("canary-", ++counter);
  json pod = TestPod(name, kNs, "", "sleep 1");
  pod["spec"]["schedulerName"] = kScheduler;
  pod["spec"]["nodeSelector"] = {{"soak/mode", "classic"}};
  const auto deadline = Clock::now() + timeout;
  while (!Cp().Kubectl({"create", "-f", "-"}, pod.dump()).ok()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(500));
  }
  const bool bound = WaitUntil(
      [&] {
        CommandResult r =
            Cp().Kubectl({"get", "pod", name, "-n", kNs, "-o", "jsonpath={.spec.nodeName}"});
        return r.ok() && !r.out.empty();
      },
      std::chrono::duration_cast<milliseconds>(deadline - Clock::now()), milliseconds(200));
  *at = Clock::now();
  (void)Cp().Kubectl({"delete", "pod", name, "-n", kNs, "--grace-period=0", "--wait=false"});
  return bound;
}

int64_t Soak::ReapedTotal(const std::string& node) {
  const std::string log = AgentLog(node);
  const std::string mark = "serving /metrics on http://127.0.0.1:";
  const size_t at = log.rfind(mark);
  if (at == std::string::npos) return -1;
  httplib::Client client("127.0.0.1", std::stoi(log.substr(at + mark.size())));
  auto got = client.Get("/metrics");
  if (!got || got->status != 200) return -1;
  // promtool passes on every /metrics the tests scrape (once per shape: this runs in wait loops).
  absl::Status lint = ::tessera::testing::PromtoolCheckMetricsOnce(got->body);
  EXPECT_TRUE(lint.ok()) << node << "'s agent /metrics: " << lint;
  // The sample line: `tessera_agent_reaped_processes_total{node="soak-b"} 1` (the # HELP and
  // # TYPE lines name the metric too).
  const std::string key = "tessera_agent_reaped_processes_total";
  std::istringstream lines(got->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t sp = line.rfind(' ');
    if (sp != std::string::npos) return std::atoll(line.c_str() + sp + 1);
  }
  return -1;
}

FaultRecord Soak::Inject(const soak::PlannedFault& f) {
  FaultRecord rec;
  rec.planned = f;
  rec.start = Clock::now();
  std::vector<std::string> nodes = kClassic;
  nodes.push_back(kDra);
  const std::string node = nodes[f.pick % nodes.size()];
  const seconds kRecover(180);
  auto log_has_after = [&](const std::string& n, size_t from, const std::string& what) {
    return WaitUntil(
        [&] {
          const std::string log = AgentLog(n);
          return log.size() > from && log.find(what, from) != std::string::npos;
        },
        kRecover);
  };
  // The snapshot's pods, for targets.
  soak::Snapshot snap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snap = last_;
  }
  const auto holdings = soak::Checker::Holdings(snap);
  switch (f.kind) {
    case FaultKind::kSchedulerKill:
    case FaultKind::kLeaseSkew: {
      const std::string holder = LeaseHolder();
      const int leader = holder == "soak-1" ? 1 : 0;
      rec.target = StrCat("soak-", leader);
      if (f.kind == FaultKind::kLeaseSkew) {
        // The standby comes back with its wall clock an hour ahead, then the leader dies: the
        // skewed replica must take over on its own clock and nothing may be granted twice. Never
        // behind: the harness's certificates are minutes old, so a client an hour behind finds
        // them "not yet valid" and reaches no API server at all (the first soak's lease-skew
        // fault did exactly that), which tests TLS, not the lease.
        const std::string skew = "3600";
        rec.note = StrCat("standby's clock ", skew, " s");
        (void)OnReplicasThread([&] {
          return StartScheduler(1 - leader, {{"LD_PRELOAD", TESSERA_CLOCK_SKEW_LIBRARY},
                                             {"SOAK_CLOCK_SKEW_SECONDS", skew}});
        });
        std::this_thread::sleep_for(seconds(3));
      }
      (void)OnReplicasThread([&] {
        Replica& r = replicas_[leader];
        r.held = true;  // this fault starts it again, once the canary is judged
        if (r.process) {
          r.process->Signal(SIGKILL);
          r.process->Wait(seconds(10));
        }
        return absl::OkStatus();
      });
      rec.ok = CanaryBound(kRecover, &rec.recovered);
      (void)OnReplicasThread([&] { return StartScheduler(leader); });
      if (f.kind == FaultKind::kLeaseSkew) {
        std::this_thread::sleep_for(seconds(10));
        (void)OnReplicasThread(
            [&] { return StartScheduler(1 - leader); });  // its clock right again
      }
      break;
    }
    case FaultKind::kAgentKill: {
      rec.target = node;
      const size_t from = AgentLog(node).size();
      (void)Cp().NodeKill(node, "agent", SIGKILL);
      // DRA: the kubelet took the restarted plugin, and the pool is on the API server. Not the
      // log's "dra: pool" line: the agent writes it only when it changes the slices, and a
      // restarted agent finds its own still there (the kubelet deletes them only when it
      // restarts itself), so it rightly writes nothing; judged by that line, the 1500-s run of
      // 2026-12-04 found both agent-kills on soak-c not recovered while the agent prepared claims.
      const auto deadline = rec.start + kRecover;
      rec.ok = Cp().NodeRestart(node, "agent").ok() &&
               (node == kDra
                    ? log_has_after(node, from, "dra: registered with the kubelet as") &&
                          WaitUntil([&] { return PoolPublished(node); },
                                    std::chrono::duration_cast<milliseconds>(std::max(
                                        deadline - Clock::now(), Clock::duration(milliseconds(1)))))
                    : log_has_after(node, from, "NRI: configured by"));
      rec.recovered = Clock::now();
      break;
    }
    case FaultKind::kKubeletKill:
    case FaultKind::kNodeNotReady: {
      rec.target = node;
      (void)Cp().NodeKill(node, "kubelet", SIGKILL);
      if (f.kind == FaultKind::kNodeNotReady) {
        // What node-lifecycle-controller does to a node that stopped reporting (it is off here).
        json status = {{"status",
                        {{"conditions",
                          {{{"type", "Ready"},
                            {"status", "Unknown"},
                            {"reason", "NodeStatusUnknown"},
                            {"message", "Kubelet stopped posting node status (soak)"}}}}}}};
        (void)Cp().Kubectl({"patch", "node", node, "--subresource=status", "--type=strategic", "-p",
                            status.dump()});
        (void)Cp().Kubectl(
            {"taint", "node", node, "node.kubernetes.io/unreachable:NoSchedule", "--overwrite"});
        std::this_thread::sleep_for(seconds(20));
      }
      const bool restarted = Cp().NodeRestart(node, "kubelet").ok();
      if (f.kind == FaultKind::kNodeNotReady) {
        (void)Cp().Kubectl({"taint", "node", node, "node.kubernetes.io/unreachable:NoSchedule-"});
      }
      const Node* n = Cp().FindNode(node);
      rec.ok = restarted &&
               WaitUntil(
                   [&] {
                     CommandResult c = RunCommand(
                         {"curl", "-s", "--max-time", "2",
                          StrCat("http://127.0.0.1:", n->kubelet_healthz_port, "/healthz")});
                     return c.ok() && c.out == "ok";
                   },
                   kRecover) &&
               Cp().WaitForNodeReady(node, kRecover).ok();
      rec.recovered = Clock::now();
      break;
    }
    case FaultKind::kContainerdKill: {
      rec.target = node;
      const size_t from = AgentLog(node).size();
      (void)Cp().NodeKill(node, "containerd", SIGKILL);
      rec.ok = Cp().NodeRestart(node, "containerd").ok();
      if (rec.ok && node != kDra) rec.ok = log_has_after(node, from, "NRI: configured by");
      rec.recovered = Clock::now();
      break;
    }
    case FaultKind::kApiServerRestart:
    case FaultKind::kEtcdRestart: {
      const std::string what = f.kind == FaultKind::kApiServerRestart ? "kube-apiserver" : "etcd";
      rec.target = what;
      CommandResult r = RunCommand({ClusterScript(), "cp-restart", Cp().dir(), what});
      rec.ok = r.ok() &&
               WaitUntil(
                   [&] {
                     return Cp().Kubectl({"create", "configmap", "soak-probe", "-n", kNs}).ok() &&
                            Cp().Kubectl({"delete", "configmap", "soak-probe", "-n", kNs}).ok();
                   },
                   kRecover);
      if (!r.ok()) rec.note = r.err;
      rec.recovered = Clock::now();
      break;
    }
    case FaultKind::kXidApplication: {
      // A pod that runs on a GPU: an MMU fault of its own work.
      for (const json& pod : snap.pods.value("items", json::array())) {
        if (pod["status"].value("phase", "") != "Running") continue;
        auto held = holdings.find(pod["metadata"].value("uid", ""));
        if (held == holdings.end() || held->second.empty() || !held->second[0].mig.empty()) {
          continue;
        }
        const soak::Holding& h = held->second[0];
        const json inv = json::parse(Read(Cp().FindNode(h.node)->fake_gpus), nullptr, false);
        int index = -1;
        for (const json& g : inv.value("gpus", json::array())) {
          if (g.value("uuid", "") == h.gpu_uuid) index = g.value("index", -1);
        }
        if (index < 0) continue;
        const std::string name = pod["metadata"].value("name", "");
        rec.target = StrCat(h.node, " GPU ", index, " pod ", name);
        (void)AppendFakeXid(Cp().FindNode(h.node)->fake_gpus, index, f.pick % 2 ? 31 : 13);
        rec.ok = WaitUntil(
            [&] {
              CommandResult e =
                  Cp().Kubectl({"get", "events", "-n", kNs, "--field-selector",
                                StrCat("involvedObject.name=", name, ",reason=GPUApplicationError"),
                                "-o", "name"});
              return e.ok() && !e.out.empty();
            },
            kRecover);
        rec.recovered = Clock::now();
        break;
      }
      if (rec.target.empty()) rec.note = "no running pod on a GPU: skipped";
      break;
    }
    case FaultKind::kXidHardware: {
      const Node* n = Cp().FindNode(node);
      const json inv = json::parse(Read(n->fake_gpus), nullptr, false);
      const int count = static_cast<int>(inv.value("gpus", json::array()).size());
      const int gpu = static_cast<int>((f.pick / 7) % std::max(count, 1));
      static constexpr int kXids[] = {48, 79, 95, 119};
      const int xid = kXids[(f.pick / 3) % 4];
      rec.target = StrCat(node, " GPU ", gpu, " XID ", xid);
      (void)EditFakeGpus(n->fake_gpus,
                         [&](json& d) { d["gpus"][gpu]["recovery_action"] = "reset"; });
      (void)AppendFakeXid(n->fake_gpus, gpu, xid);
      std::this_thread::sleep_for(seconds(15));  // then the operator resets the GPU
      (void)EditFakeGpus(n->fake_gpus, [&](json& d) { d["gpus"][gpu].erase("recovery_action"); });
      const std::string uuid = inv["gpus"][gpu].value("uuid", "");
      rec.ok = WaitUntil(
          [&] {
            CommandResult r = Cp().Kubectl({"get", "node", node, "-o", "json"});
            if (!r.ok()) return false;
            const std::string text = json::parse(r.out)["metadata"]["annotations"].value(
                "tessera.dev/gpu-inventory", "");
            return text.find("\"healthy\":false") == std::string::npos;
          },
          kRecover);
      rec.recovered = Clock::now();
      break;
    }
    case FaultKind::kShimLockKill: {
      // A share pod's CUDA process (the shim holds its ledger slot's lock for its lifetime).
      for (const json& pod : snap.pods.value("items", json::array())) {
        if (pod["status"].value("phase", "") != "Running" ||
            pod["metadata"].value("labels", json::object()).value("soak/kind", "") != "share") {
          continue;
        }
        const std::string uid = pod["metadata"].value("uid", "");
        const std::string node_of = pod["spec"].value("nodeName", "");
        pid_t victim = -1;
        for (const std::string& p : ListDir("/proc")) {
          if (p.find_first_not_of("0123456789") != std::string::npos) continue;
          if (Read("/proc/" + p + "/comm") != "shim_client\n") continue;
          if (Read("/proc/" + p + "/cgroup").find(uid) == std::string::npos) continue;
          victim = std::atoi(p.c_str());
        }
        if (victim < 0) continue;
        rec.target = StrCat(node_of, " pod ", pod["metadata"].value("name", ""), " pid ", victim);
        const int64_t before = ReapedTotal(node_of);
        ::kill(victim, SIGKILL);
        rec.ok = before >= 0 && WaitUntil([&] { return ReapedTotal(node_of) > before; }, kRecover);
        if (before < 0) rec.note = "the agent's metrics could not be read";
        rec.recovered = Clock::now();
        break;
      }
      if (rec.target.empty()) rec.note = "no running share pod with its CUDA process: skipped";
      break;
    }
  }
  if (rec.recovered == Clock::time_point{}) rec.recovered = Clock::now();
  return rec;
}

void Soak::InjectorLoop(Clock::time_point start) {
  for (const soak::PlannedFault& f : plan_) {
    const auto when = start + f.at;
    // A fault that waited for its recovery can push the rest of the plan past the workload's
    // end: what is left is not injected (the report counts what was).
    if (Clock::now() >= start + duration_) break;
    while (Clock::now() < when) std::this_thread::sleep_for(milliseconds(200));
    std::cerr << "soak: t+" << Seconds(Clock::now() - start) << "s injecting "
              << soak::FaultKindName(f.kind) << "\n";
    FaultRecord rec = Inject(f);
    std::cerr << "soak: " << soak::FaultKindName(f.kind) << " on " << rec.target
              << (rec.ok ? " recovered in " : " NOT recovered after ")
              << Seconds(rec.recovered - rec.start) << " s " << rec.note << "\n";
    std::lock_guard<std::mutex> lock(mu_);
    if (!rec.ok && !rec.target.empty()) {
      violations_.push_back({"recovery", StrCat(soak::FaultKindName(f.kind), " on ", rec.target,
                                                " did not recover within 180 s ", rec.note)});
    }
    faults_.push_back(std::move(rec));
  }
}

void Soak::Run() {
  const auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    start_ = start;
  }
  std::thread checker([this] { CheckerLoop(); });
  std::thread injector([this, start] { InjectorLoop(start); });
  WorkloadLoop(start + duration_);
  injector.join();
  // Drain: every workload pod goes, then nothing may be left on the nodes.
  (void)Cp().Kubectl({"delete", "pods", "--all", "-n", kNs, "--grace-period=1", "--wait=false"});
  const bool gone = WaitUntil(
      [&] {
        CommandResult r = Cp().Kubectl({"get", "pods", "-n", kNs, "-o", "name"});
        return r.ok() && r.out.empty();
      },
      seconds(300), seconds(2));
  const bool claims_gone = WaitUntil(
      [&] {
        CommandResult r = Cp().Kubectl({"get", "resourceclaims", "-n", kNs, "-o", "name"});
        return r.ok() && r.out.empty();
      },
      seconds(180), seconds(2));
  std::this_thread::sleep_for(seconds(15));  // the agents' releases and the DRA unprepare
  stop_checker_.store(true);
  checker.join();
  seconds_run_ = Seconds(Clock::now() - start);
  load_after_ = Read("/proc/loadavg");
  StopReplicas();  // the report reads what it recorded
  std::lock_guard<std::mutex> lock(mu_);
  if (!gone) violations_.push_back({"no-leak", "workload pods still there 300 s after deletion"});
  if (!claims_gone)
    violations_.push_back({"no-leak", "ResourceClaims still there 180 s after their pods"});
  std::vector<soak::NodeLeftovers> left;
  std::vector<std::string> all = kClassic;
  all.push_back(kDra);
  for (const std::string& node : all) {
    const Node* n = Cp().FindNode(node);
    soak::NodeLeftovers l;
    l.node = node;
    l.pod_dirs = ListDir(n->dir + "/tessera/pods");
    l.claim_dirs = ListDir(n->dir + "/tessera/claims");
    for (const std::string& spec : ListDir(n->cdi_dir)) {
      if (spec.find("gpu.tessera.dev") != std::string::npos) l.cdi_specs.push_back(spec);
    }
    const json checkpoint =
        json::parse(Read(n->plugins_dir + "/gpu.tessera.dev/checkpoint.json"), nullptr, false);
    if (checkpoint.is_object()) {
      for (const json& c : checkpoint.value("claims", json::array())) {
        l.checkpoint_claims.push_back(c.value("name", c.dump()));
      }
    }
    if (node == kDra) {
      const json d = json::parse(Read(n->fake_gpus), nullptr, false);
      for (const json& g : d.value("gpus", json::array())) {
        for (const json& i : g["mig"].value("instances", json::array())) {
          l.dra_mig_instances.push_back(
              StrCat(g.value("uuid", ""), " ", i.value("profile", ""), "@", i.value("start", -1)));
        }
      }
    }
    left.push_back(std::move(l));
  }
  for (const soak::Violation& v : soak::CheckLeaks(left)) violations_.push_back(v);
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i =
      std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

std::string Soak::Report() const {
  std::ostringstream out;
  out << "| | |\n| --- | --- |\n";
  out << "| seed | " << seed_ << " |\n";
  if (const char* chosen = std::getenv("SOAK_FAULTS"); chosen && *chosen) {
    out << "| fault kinds | " << chosen << " (SOAK_FAULTS) |\n";
  }
  out << "| duration | " << duration_.count() << " s of workload and faults (" << seconds_run_
      << " s with the drain and the leak check) |\n";
  out << "| pods | " << pods_created_ << " created, " << pods_ran_.size() << " ran |\n";
  std::string units;
  for (const auto& [k, n] : units_by_kind_) units += StrCat(units.empty() ? "" : ", ", k, " ", n);
  out << "| units | " << units << " |\n";
  out << "| checker | " << snapshots_ << " snapshots (" << snapshots_failed_
      << " not taken: API server away) |\n";
  out << "| violations | " << violations_.size() << " |\n";
  out << "| scheduler replicas that exited on their own | " << replica_exits_.size()
      << " (started again after the kubelet's crash-loop back-off, as their Deployment's pods "
         "would be) |\n";
  out << "| load average | before: " << load_before_.substr(0, 14)
      << "; after: " << load_after_.substr(0, 14) << " |\n\n";
  out << "| fault | injected | recovered | p50 s | p99 s | max s |\n| --- | --- | --- | --- | --- "
         "| --- |\n";
  std::map<std::string, std::vector<double>> by_kind;
  std::map<std::string, int> injected, recovered;
  for (const FaultRecord& r : faults_) {
    const std::string k(soak::FaultKindName(r.planned.kind));
    if (r.target.empty()) continue;  // skipped: nothing to target
    ++injected[k];
    if (r.ok) {
      ++recovered[k];
      by_kind[k].push_back(Seconds(r.recovered - r.start));
    }
  }
  for (const auto& [k, n] : injected) {
    const auto& v = by_kind[k];
    out << "| " << k << " | " << n << " | " << recovered[k] << " | "
        << (v.empty() ? 0 : Percentile(v, 0.5)) << " | " << (v.empty() ? 0 : Percentile(v, 0.99))
        << " | " << (v.empty() ? 0 : *std::max_element(v.begin(), v.end())) << " |\n";
  }
  std::map<std::string, int> why;
  for (const auto& [pod, reason] : pods_waited_) why[reason.substr(0, 100)]++;
  out << "\nPods that waited more than 10 s before running (" << pods_waited_.size() << "):\n\n";
  for (const auto& [reason, n] : why) out << "- " << n << " x " << reason << "\n";
  if (!replica_exits_.empty()) {
    out << "\nScheduler replicas that exited on their own:\n\n";
    for (const std::string& e : replica_exits_) out << "- " << e << "\n";
  }
  out << "\nViolations:\n\n";
  if (violations_.empty()) out << "- none\n";
  for (const soak::Violation& v : violations_)
    out << "- " << v.invariant << ": " << v.detail << "\n";
  out << "\nFault plan: " << soak::DescribePlan(plan_) << "\n";
  return out.str();
}

TEST(Soak, NothingLostOrGrantedTwiceWhateverFails) {
  Soak soak;
  const std::string error = soak.Setup();
  ASSERT_EQ(error, "") << "seed " << soak.seed();
  soak.Run();
  const std::string report = soak.Report();
  std::cerr << report;
  if (const char* path = std::getenv("SOAK_REPORT"); path && *path) std::ofstream(path) << report;
  EXPECT_TRUE(soak.violations().empty())
      << "replay with SOAK_SEED=" << soak.seed()
      << " (same SOAK_DURATION, SOAK_FAULT_GAP and SOAK_FAULTS); "
      << "fault plan: " << soak.PlanText() << "; logs in " << soak.dir() << " and the control "
      << "plane's folder";
}

}  // namespace
}  // namespace tessera::e2e
