#include "agent/pods/pod_manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/discovery/fake_discovery.h"
#include "agent/discovery/fake_gpus_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "shim/ledger.h"
#include "shim/mount_namespace_testing.h"

namespace tessera::agent {
namespace {

// Pods' ledger folders are tmpfs mounts: this process's own, gone with it.
const bool kPrivateMounts = shim::EnterPrivateMountNamespace();

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::string Uuid(int i) { return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i); }
std::string Uid(int i) { return "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a" + std::to_string(10 + i); }

// Two H100s: GPU 0 plain, GPU 1 in MIG mode with 1g.10gb at slices 0 and 1.
constexpr char kGpusFile[] = R"({"version": 1, "driver_version": "580.95.05", "gpus": [
  {"index": 0, "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000000", "model": "H100-80GB",
   "memory_mib": 81559},
  {"index": 1, "uuid": "GPU-6f1c2a9e-0000-4000-8000-000000000001", "model": "H100-80GB",
   "memory_mib": 81559, "mig": {"enabled": true, "instances": [
     {"profile": "1g.10gb", "start": 0}, {"profile": "1g.10gb", "start": 1}]}}],
 "links": [["X", "NV18"], ["NV18", "X"]]})";

records::AssignedGpu Share(int gpu, int64_t memory_mib, int32_t compute_milli = 0) {
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.memory_mib = memory_mib;
  g.grant.compute_milli = compute_milli;
  g.uuid = Uuid(gpu);
  return g;
}

// All of GPU `gpu`.
records::AssignedGpu Whole(int gpu) {
  records::AssignedGpu g = Share(gpu, 81559, 1000);
  g.grant.exclusive = true;
  return g;
}

records::AssignedGpu Mig(int gpu, const std::string& profile, int start) {
  records::AssignedGpu g;
  g.grant.gpu = gpu;
  g.grant.exclusive = true;
  g.uuid = Uuid(gpu);
  g.mig_profile = profile;
  g.mig_start = start;
  return g;
}

PodRef Pod(int i, records::Assignment a, std::map<std::string, std::string> more = {}) {
  a.node = "n1";
  PodRef p{"team", "p" + std::to_string(i), Uid(i), std::move(more)};
  p.annotations["tessera.dev/assignment"] = records::AssignmentToJson(a);
  return p;
}
PodRef Pod(int i, std::vector<records::AssignedGpu> gpus,
           std::map<std::string, std::string> more = {}) {
  records::Assignment a;
  a.gpus = std::move(gpus);
  return Pod(i, std::move(a), std::move(more));
}

std::string Env(const ContainerEdits& e, const std::string& key) {
  for (const auto& [k, v] : e.env) {
    if (k == key) return v;
  }
  return "(unset)";
}

class PodManagerTest : public ::testing::Test {
 protected:
  PodManagerTest() {
    char tmpl[] = "/tmp/tessera-pods-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    gpus_file_ = dir_ / "gpus.json";
    std::ofstream(gpus_file_) << kGpusFile;
    fs::create_directories(dir_ / "dev");
    for (const char* n : {"nvidia0", "nvidia1", "nvidiactl"}) {
      fs::create_symlink("/dev/null", dir_ / "dev" / n);
    }
    options_.node_name = "n1";
    options_.edits.dev_dir = (dir_ / "dev").string();
    options_.pods_dir = (dir_ / "pods").string();
    options_.edits.driver.cuda = {"/usr/lib64/libcuda.so.580.95.05", "libcuda.so.1"};
    options_.edits.driver.nvml = {"/usr/lib64/libnvidia-ml.so.580.95.05", "libnvidia-ml.so.1"};
    options_.edits.driver.shim_cuda = "/run/tessera/lib/libtessera-cuda.so";
    options_.edits.driver.shim_nvml = "/run/tessera/lib/libtessera-nvml.so";
    // The driver and the shim at these host paths (the edits check that they are there).
    options_.edits.file_exists = [](const std::string&) { return true; };
    options_.ledger_slots = 8;
    options_.sized_ledger_folders = kPrivateMounts;
    options_.mps.control = TESSERA_FAKE_MPS_CONTROL;
    options_.mps.root = (dir_ / "mps").string();
    options_.mps.exclusive_command = {
        TESSERA_FAKE_MPS_CONTROL, "--as-nvidia-smi", "-i", "{uuid}", "-c", "EXCLUSIVE_PROCESS"};
    options_.mps.restore_command = {
        TESSERA_FAKE_MPS_CONTROL, "--as-nvidia-smi", "-i", "{uuid}", "-c", "DEFAULT"};
    options_.mps.private_shm = false;
    ::setenv("FAKE_SMI_LOG", (dir_ / "smi.log").c_str(), 1);
  }
  ~PodManagerTest() override {
    // No MPS daemon outlives the test, whatever failed.
    for (const auto& entry : fs::directory_iterator(dir_ / "mps", ec_)) {
      if (fs::exists(entry.path() / "pipe" / "control", ec_)) {
        auto d = mps::MpsDaemon::Start(entry.path().filename().string(), options_.mps);
        if (d.ok()) (void)(*d)->Stop();
      }
    }
    shim::RemoveTestTree(dir_);  // a pod left prepared keeps its ledger folder's tmpfs
  }

  std::shared_ptr<const NodeGpus> Gpus() {
    FakeDiscovery d(gpus_file_.string());
    absl::StatusOr<NodeGpus> n = d.Discover();
    EXPECT_TRUE(n.ok()) << n.status();
    return std::make_shared<const NodeGpus>(*n);
  }
  std::unique_ptr<PodManager> Manager(MigReconfigurer* mig = nullptr,
                                      GpuProcessSampler* sampler = nullptr) {
    auto m = std::make_unique<PodManager>(options_, mig, sampler);
    m->SetGpus(Gpus());
    return m;
  }
  std::string PodDir(int i) const { return options_.pods_dir + "/" + Uid(i); }

  std::error_code ec_;
  fs::path dir_, gpus_file_;
  PodManagerOptions options_;
};

TEST_F(PodManagerTest, AShimShareHasItsSegmentWhileItRunsAndNothingAfter) {
  auto m = Manager();
  PodRef pod = Pod(1, {Share(0, 4096, 300)});
  absl::StatusOr<std::optional<ContainerEdits>> e = m->Prepare(pod);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_TRUE(e->has_value());
  EXPECT_EQ(Env(**e, "TESSERA_GPU_SHARING"), "shim");
  const std::string limits = PodDir(1) + "/limits/" + Uuid(0) + ".limits";
  ASSERT_TRUE(fs::exists(limits));
  EXPECT_TRUE(fs::exists(PodDir(1) + "/ledger/" + Uuid(0) + ".ledger"));
  auto seg = shim::Segment::Open(PodDir(1), Uuid(0));
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ((*seg)->Inspect().limits.memory_limit_bytes, 4096ull << 20);
  EXPECT_EQ((*seg)->Inspect().limits.compute_limit_permille, 300u);
  EXPECT_EQ((*seg)->Inspect().pod_uid, Uid(1));
  seg->reset();

  // A second container of the pod: the same edits, the same files.
  absl::StatusOr<std::optional<ContainerEdits>> again = m->Prepare(pod);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->mounts, (*e)->mounts);
  EXPECT_EQ(m->prepared(), 2);

  std::vector<GpuUse> use = m->Use();
  ASSERT_EQ(use.size(), 2u);
  ASSERT_EQ(use[0].pods.size(), 1u);
  EXPECT_EQ(use[0].pods[0].name, "p1");
  EXPECT_EQ(use[0].pods[0].sharing, Sharing::kShim);
  EXPECT_EQ(use[0].pods[0].memory_mib, 4096);
  EXPECT_EQ(use[0].pods[0].used_bytes, 0);
  EXPECT_TRUE(use[1].pods.empty());

  m->Release(Uid(1));
  EXPECT_FALSE(fs::exists(PodDir(1)));
  EXPECT_EQ(m->pod_count(), 0u);
}

// Records the scheduler did not write (admission should have refused them): the node never gives
// what another pod holds, nor more than a GPU has.
TEST_F(PodManagerTest, NothingIsGivenTwice) {
  auto m = Manager();
  const records::AssignedGpu whole = Whole(0);
  ASSERT_TRUE(m->Prepare(Pod(1, {whole})).ok());
  absl::StatusOr<std::optional<ContainerEdits>> e = m->Prepare(Pod(2, {whole}));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(),
              HasSubstr("pod team/p2 is assigned GPU 0 (" + Uuid(0) +
                        "), but pod team/p1 holds "
                        "all of it on this node; the agent never gives a GPU twice"));
  e = m->Prepare(Pod(3, {Share(0, 1024)}));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("but pod team/p1 holds all of it"));
  EXPECT_FALSE(fs::exists(PodDir(2)));
  m->Release(Uid(1));

  ASSERT_TRUE(m->Prepare(Pod(4, {Share(0, 60000, 600)})).ok());
  e = m->Prepare(Pod(5, {Share(0, 30000)}));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(),
              HasSubstr("comes to 90000 MiB of its 81559 MiB and 60% of its compute; the agent "
                        "never over-commits a GPU"));
  e = m->Prepare(Pod(6, {Share(0, 1000, 500)}));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("110% of its compute"));
  e = m->Prepare(Pod(7, {whole}));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("holds a share of it"));
  EXPECT_TRUE(m->Prepare(Pod(8, {Share(0, 20000, 400)})).ok());  // what fits, fits
}

// A process of the pod that is SIGKILLed while it holds memory gives it back at the next
// maintenance step.
TEST_F(PodManagerTest, MaintenanceGivesBackWhatAKilledProcessHeld) {
  auto m = Manager();
  ASSERT_TRUE(m->Prepare(Pod(1, {Share(0, 4096)})).ok());
  const std::string ledger = PodDir(1) + "/ledger/" + Uuid(0) + ".ledger";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string err;
    auto l = shim::Ledger::Open(ledger, &err);
    if (l == nullptr || !l->Claim(shim::ProcessIdentity::Current(), &err) ||
        !l->TryCharge(3ull << 30, 4ull << 30)) {
      ::_exit(1);
    }
    char ok = 'k';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  m->Maintain();
  EXPECT_EQ(m->Use()[0].pods[0].used_bytes, 3ll << 30);
  EXPECT_EQ(m->Use()[0].pods[0].processes, 1u);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  m->Maintain();
  EXPECT_EQ(m->Use()[0].pods[0].used_bytes, 0);
  EXPECT_EQ(m->reaped_slots(), 1);
  ::close(ready[0]);
  ::close(ready[1]);
}

// A hostile process of the pod rewrites its ledger's header (the file is mapped read-write into
// its containers). The agent puts it back, counts it (/metrics) and tells the pod (an Event, at
// most once a minute); an agent restarted while the header was broken does the same, and the
// share keeps working.
TEST_F(PodManagerTest, ALedgerChangedByThePodIsPutBackCountedAndNoticed) {
  auto m = Manager();
  ASSERT_TRUE(m->Prepare(Pod(1, {Share(0, 4096)})).ok());
  const std::string ledger = PodDir(1) + "/ledger/" + Uuid(0) + ".ledger";
  auto rewrite_slot_count = [&](uint32_t count) {
    std::fstream f(ledger, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(offsetof(shim::LedgerHeader, slot_count));
    f.write(reinterpret_cast<const char*>(&count), sizeof(count));
  };
  rewrite_slot_count(0xffffffffu);
  m->Maintain();
  m->Maintain();
  std::vector<PodNotice> notices = m->TakeNotices();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].pod.Name(), "team/p1");
  EXPECT_EQ(notices[0].pod.uid, Uid(1));
  EXPECT_EQ(notices[0].reason, "LedgerTampered");
  EXPECT_THAT(notices[0].message, HasSubstr("slot count 4294967295 (was 8)"));
  EXPECT_EQ(m->Use()[0].pods[0].ledger_tampered, 1u);
  rewrite_slot_count(7);
  m->Maintain();
  EXPECT_EQ(m->Use()[0].pods[0].ledger_tampered, 2u);
  EXPECT_TRUE(m->TakeNotices().empty());  // told once a minute

  // Broken while no agent ran: the next one puts it back when it takes the pod back.
  m.reset();
  rewrite_slot_count(1u << 20);
  m = Manager();
  m->Synchronize({Pod(1, {Share(0, 4096)})});
  EXPECT_EQ(m->pod_count(), 1u);
  m->Maintain();
  notices = m->TakeNotices();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_THAT(notices[0].message, HasSubstr("1048576"));
  std::string error;
  EXPECT_NE(shim::Ledger::Open(ledger, &error), nullptr) << error;
}

// The ledger is the one file a container can write; growing it must fill a tmpfs of the ledgers'
// size, never the host's /run (here: the test's folder). Writes until ENOSPC, as a container would.
TEST_F(PodManagerTest, AContainerGrowingItsLedgerFillsItsOwnSmallTmpfsNotTheHost) {
  if (!kPrivateMounts) GTEST_SKIP() << "needs CAP_SYS_ADMIN for a mount namespace";
  auto m = Manager();
  ASSERT_TRUE(m->Prepare(Pod(1, {Share(0, 4096)})).ok());
  const std::string ledger = PodDir(1) + "/ledger/" + Uuid(0) + ".ledger";
  struct statvfs before {};
  ASSERT_EQ(::statvfs(options_.pods_dir.c_str(), &before), 0);
  int fd = ::open(ledger.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  std::string block(1 << 20, 'x');
  int64_t written = 0;
  int error = 0;
  while (written < (int64_t{256} << 20)) {
    ssize_t n = ::write(fd, block.data(), block.size());
    if (n <= 0) {
      error = errno;
      break;
    }
    written += n;
  }
  ::close(fd);
  EXPECT_EQ(error, ENOSPC);
  EXPECT_LE(written, int64_t{1} << 20);  // at most the ledger folder's pages
  struct statvfs after {};
  ASSERT_EQ(::statvfs(options_.pods_dir.c_str(), &after), 0);
  // The filesystem under the pods' folder did not take the writes (allow 1 MiB of unrelated use).
  EXPECT_LE(static_cast<int64_t>(before.f_bavail * before.f_frsize) -
                static_cast<int64_t>(after.f_bavail * after.f_frsize),
            int64_t{1} << 20);
  // The agent puts the ledger's length back at the next step, and the pod's end unmounts it.
  m->Maintain();
  struct stat st {};
  ASSERT_EQ(::stat(ledger.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), shim::LedgerFileSize(8));
  m->Release(Uid(1));
  EXPECT_FALSE(fs::exists(PodDir(1)));
}

// An agent that restarts takes back the running pods (their segments and what they hold) and
// removes the files of pods that ended while it was away.
TEST_F(PodManagerTest, ARestartedAgentTakesBackRunningPodsAndDropsEndedOnes) {
  PodRef running = Pod(1, {Share(0, 4096)});
  PodRef ended = Pod(2, {Share(0, 8192)});
  // A process of the running pod holds 1 MiB (this test's process, through its own mapping).
  std::unique_ptr<shim::Ledger> process;
  {
    auto first = Manager();
    ASSERT_TRUE(first->Prepare(running).ok());
    ASSERT_TRUE(first->Prepare(ended).ok());
    std::string err;
    process = shim::Ledger::Open(PodDir(1) + "/ledger/" + Uuid(0) + ".ledger", &err);
    ASSERT_NE(process, nullptr) << err;
    ASSERT_TRUE(process->Claim(shim::ProcessIdentity::Current(), &err)) << err;
    ASSERT_TRUE(process->TryCharge(1 << 20, 4096ull << 20));
    // The agent is killed: nothing is released.
  }
  EXPECT_TRUE(fs::exists(PodDir(2)));
  auto second = Manager();
  second->Synchronize({running, PodRef{"kube-system", "dns", Uid(3), {}}});
  EXPECT_EQ(second->pod_count(), 1u);
  EXPECT_FALSE(fs::exists(PodDir(2)));
  std::vector<GpuUse> use = second->Use();
  ASSERT_EQ(use[0].pods.size(), 1u);
  EXPECT_EQ(use[0].pods[0].used_bytes, 1 << 20);  // the ledger survived, untouched
  // The pod's next container gets the same edits as before.
  EXPECT_TRUE(second->Prepare(running).ok());
}

// The runtime synchronizes as soon as the NRI plugin registers, which on a busy node can come
// before the agent has discovered the GPUs (agent_nodes_e2e saw it after an agent restart): the
// running pods are taken back once the GPUs are known, not left unserved; one that ends in
// between is not. Failed before the fix: the running pod was left unserved (0 pods served).
TEST_F(PodManagerTest, PodsListedBeforeTheGpusAreKnownAreTakenBackOnceTheyAre) {
  PodRef running = Pod(1, {Share(0, 4096)});
  PodRef ends = Pod(2, {Share(1, 4096)});
  {
    auto first = Manager();
    ASSERT_TRUE(first->Prepare(running).ok());
    ASSERT_TRUE(first->Prepare(ends).ok());
  }
  auto second = std::make_unique<PodManager>(options_, nullptr, nullptr);
  second->Synchronize({running, ends});
  EXPECT_EQ(second->pod_count(), 0u);
  EXPECT_TRUE(fs::exists(PodDir(1)));
  second->Release(Uid(2));
  second->SetGpus(Gpus());
  EXPECT_EQ(second->pod_count(), 1u);
  std::vector<GpuUse> use = second->Use();
  ASSERT_EQ(use[0].pods.size(), 1u);
  EXPECT_EQ(use[0].pods[0].uid, Uid(1));
  EXPECT_TRUE(second->Prepare(running).ok());
}

// The mounts under `dir` in this process's mount namespace (a pod's sized ledger folder).
std::vector<std::string> MountsUnder(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in("/proc/self/mounts");
  for (std::string device, target, rest; in >> device >> target && std::getline(in, rest);) {
    if (target.rfind(dir + "/", 0) == 0) out.push_back(target);
  }
  return out;
}

// A fake host /proc for the pod manager: the agent's own status (the host's PID namespace), and
// processes of pods (their cgroups name them).
class FakeHostProc {
 public:
  explicit FakeHostProc(const fs::path& root) : root_(root) {
    fs::create_directories(root_ / "self");
    std::ofstream(root_ / "self" / "status") << "Name:\ttessera\nNSpid:\t4242\n";
  }
  void Process(uint32_t pid, const std::string& uid) {
    const fs::path d = root_ / std::to_string(pid);
    fs::create_directories(d);
    std::ofstream(d / "stat") << pid << " (pause) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 "
                              << 1000 + pid << " 20";
    std::ofstream(d / "cgroup") << "0::/kubepods/besteffort/pod" << uid << "/"
                                << std::string(64, 'a') << "\n";
  }
  void Exit(uint32_t pid) { fs::remove_all(root_ / std::to_string(pid)); }

 private:
  fs::path root_;
};

// The soak's leak (seed 30): containerd, restarted, never tells plugins that the pods it had before
// ended (no StopPodSandbox, no RemovePodSandbox), and lists stopped sandboxes as its pods, so an
// agent that took them back kept their files, their ledger tmpfs and their grants (the next share
// on the GPU was refused as over-committed). A pod with no process left on the host, not even its
// pause process, is released. Failed before the fix: all 3 pods stayed served, the ended pod's
// folder and mount there, the memory it held refused to the next pod.
TEST_F(PodManagerTest, APodWithNoProcessLeftIsReleasedWhenTheRuntimeNeverSaysItEnded) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(100, Uid(1));
  proc.Process(200, Uid(2));
  options_.proc_root = (dir_ / "proc").string();
  options_.released_without_processes = std::chrono::seconds(0);
  PodRef ends = Pod(1, {Share(0, 4096)});
  PodRef runs = Pod(2, {Share(0, 8192)});
  PodRef stopped = Pod(3, {Share(0, 4096)});  // a stopped sandbox the runtime still lists
  {
    auto first = Manager();
    for (const PodRef& p : {ends, runs, stopped}) ASSERT_TRUE(first->Prepare(p).ok());
  }  // the agent restarts
  auto second = Manager();
  ASSERT_TRUE(second->sees_host_pids());
  second->Synchronize({ends, runs, stopped});
  ASSERT_EQ(second->pod_count(), 3u);
  second->Maintain();
  EXPECT_EQ(second->pod_count(), 2u);
  EXPECT_FALSE(fs::exists(PodDir(3)));
  if (kPrivateMounts) {
    EXPECT_EQ(MountsUnder(PodDir(1)).size(), 1u);
  }

  proc.Exit(100);  // the pod's sandbox is stopped; the runtime says nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the next scan of /proc
  second->Maintain();
  EXPECT_EQ(second->pod_count(), 1u);
  EXPECT_FALSE(fs::exists(PodDir(1)));
  EXPECT_THAT(MountsUnder(PodDir(1)), ::testing::IsEmpty());
  EXPECT_TRUE(fs::exists(PodDir(2)));
  // Their GPU memory is free again: a share the ended pods' would not have fitted beside.
  EXPECT_TRUE(second->Prepare(Pod(4, {Share(0, 81559 - 8192)})).ok());

  // A pod taken back after the restart ends the ordinary way: its tmpfs goes with its folder.
  second->Release(Uid(2));
  EXPECT_FALSE(fs::exists(PodDir(2)));
  EXPECT_THAT(MountsUnder(PodDir(2)), ::testing::IsEmpty());
}

// Where the host's processes show no pod at all (cgroup names the agent does not understand, or a
// runtime whose pods run where the host cannot see them), nothing is released on that account.
TEST_F(PodManagerTest, PodsAreLeftToTheRuntimeWhenTheHostShowsNoPodsProcesses) {
  FakeHostProc proc(dir_ / "proc");
  options_.proc_root = (dir_ / "proc").string();
  options_.released_without_processes = std::chrono::seconds(0);
  PodRef pod = Pod(1, {Share(0, 4096)});
  {
    auto first = Manager();
    ASSERT_TRUE(first->Prepare(pod).ok());
    first->Maintain();
    EXPECT_EQ(first->pod_count(), 1u);
  }
  auto second = Manager();
  second->Synchronize({pod});
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  second->Maintain();
  EXPECT_EQ(second->pod_count(), 1u);
  EXPECT_TRUE(fs::exists(PodDir(1)));
}

// The soak's leak on soak-b (seed 30): containerd restarted (so it never says that its earlier pods
// end), then the agent. The restarted agent took back, in the runtime's order, a pod that was
// deleted (its process gone, its share not yet given back: no process for 10 s) and a pod the
// scheduler had placed in that room, so the GPU's accounting came to more than the GPU, and the
// pod that still ran was refused ("the agent never over-commits a GPU") and not tracked: when it
// ended its folder stayed. A running pod already holds its memory: it is taken back with its share
// as assigned and the over-commit reported; its next container waits until the accounting fits
// (a container that never ran gets nothing another pod holds), and its files go when it ends.
// Failed before the fix: p1 was refused (2 pods served) and its folder was left after it ended.
TEST_F(PodManagerTest, ARestartedAgentTakesBackARunningPodOnAGpuItsAccountingOverCommits) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(100, Uid(1));
  proc.Process(200, Uid(2));
  proc.Process(500, Uid(5));
  options_.proc_root = (dir_ / "proc").string();
  options_.released_without_processes = std::chrono::seconds(0);
  PodRef runs = Pod(1, {Share(0, 40000)});
  PodRef deleted = Pod(2, {Share(0, 40000)});
  PodRef placed = Pod(3, {Share(0, 40000)});  // the scheduler's, in the deleted pod's room
  PodRef small = Pod(5, {Share(0, 1024)});
  {
    auto first = Manager();
    for (const PodRef& p : {runs, deleted, small}) ASSERT_TRUE(first->Prepare(p).ok());
    // A new pod is refused while the deleted one's share is counted.
    absl::StatusOr<std::optional<ContainerEdits>> e = first->Prepare(placed);
    ASSERT_FALSE(e.ok());
    EXPECT_THAT(e.status().message(), HasSubstr("the agent never over-commits a GPU"));
    proc.Exit(200);           // the deleted pod's process ends
  }                           // the agent is killed before it gives the share back
  proc.Process(300, Uid(3));  // the placed pod's sandbox runs

  auto second = Manager();
  ASSERT_TRUE(second->sees_host_pids());
  second->Synchronize({deleted, placed, runs, small});  // the runtime's order
  EXPECT_EQ(second->pod_count(), 4u);
  // Its share is enforced as assigned.
  auto seg = shim::Segment::Open(PodDir(1), Uuid(0));
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ((*seg)->Inspect().limits.memory_limit_bytes, 40000ull << 20);
  seg->reset();
  // The over-commit is told to each pod taken back over it.
  std::map<std::string, std::string> told;  // pod -> message
  for (const PodNotice& n : second->TakeNotices()) {
    EXPECT_EQ(n.reason, "GPUOverCommitted");
    told[n.pod.Name()] = n.message;
  }
  EXPECT_EQ(told.size(), 2u);
  EXPECT_THAT(told["team/p1"], HasSubstr("120000 MiB of its 81559 MiB"));
  EXPECT_THAT(told["team/p1"], HasSubstr("team/p2, team/p3"));
  EXPECT_THAT(told["team/p5"], HasSubstr("121024 MiB of its 81559 MiB"));
  // A new container of such a pod waits until the accounting fits again; new pods are refused.
  absl::StatusOr<std::optional<ContainerEdits>> again = second->Prepare(runs);
  ASSERT_FALSE(again.ok());
  EXPECT_THAT(again.status().message(), HasSubstr("the agent never over-commits a GPU"));
  EXPECT_FALSE(second->Prepare(Pod(4, {Share(0, 1024)})).ok());

  second->Maintain();  // the deleted pod has no process: its share goes
  EXPECT_EQ(second->pod_count(), 3u);
  EXPECT_FALSE(fs::exists(PodDir(2)));
  EXPECT_TRUE(second->Prepare(small).ok());  // it fits now

  proc.Exit(100);  // the pod ends; the runtime says nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the next scan of /proc
  second->Maintain();
  EXPECT_EQ(second->pod_count(), 2u);
  EXPECT_FALSE(fs::exists(PodDir(1)));
  EXPECT_THAT(MountsUnder(PodDir(1)), ::testing::IsEmpty());
}

// The same with whole GPUs: a pod that ended (released, but still listed by a restarted runtime)
// and the pod given its GPU afterwards. Taken back in the runtime's order, the running pod is the
// one the accounting says gets a GPU another pod holds: taken back and told, not refused. A pod
// without a process on the host does not run: it gets a new pod's check.
TEST_F(PodManagerTest, ARestartedAgentTakesBackARunningPodOnAWholeGpuAnEndedPodStillHolds) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(200, Uid(2));
  options_.proc_root = (dir_ / "proc").string();
  options_.released_without_processes = std::chrono::seconds(0);
  const records::AssignedGpu whole = Whole(0);
  PodRef ended = Pod(1, {whole});
  PodRef runs = Pod(2, {whole});
  {
    auto first = Manager();
    ASSERT_TRUE(first->Prepare(ended).ok());
    first->Release(Uid(1));
    ASSERT_TRUE(first->Prepare(runs).ok());
  }
  auto second = Manager();
  second->Synchronize({ended, runs});
  EXPECT_EQ(second->pod_count(), 2u);
  std::vector<PodNotice> notices = second->TakeNotices();
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].pod.Name(), "team/p2");
  EXPECT_THAT(notices[0].message, HasSubstr("but pod team/p1 holds all of it"));
  second->Maintain();  // the ended pod has no process
  EXPECT_EQ(second->pod_count(), 1u);
  EXPECT_FALSE(fs::exists(PodDir(1)));
  EXPECT_TRUE(second->Prepare(runs).ok());  // its next container: nothing is held twice now

  // Listed the other way round, the pod with no process gets a new pod's check: refused, untold.
  second.reset();
  auto third = Manager();
  third->Synchronize({runs, ended});
  EXPECT_EQ(third->pod_count(), 1u);
  EXPECT_THAT(third->TakeNotices(), ::testing::IsEmpty());
  EXPECT_EQ(third->Use()[0].pods[0].name, "p2");
}

// A running pod the restarted agent cannot serve again (here: its GPU was replaced while no agent
// ran, so its record names a GPU the node no longer has) keeps its files while it runs and loses
// them when it ends, whether the runtime says so or not. Failed before the fix: its folder stayed.
TEST_F(PodManagerTest, APodARestartedAgentCannotServeLosesItsFilesWhenItEnds) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(100, Uid(1));
  proc.Process(200, Uid(2));
  options_.proc_root = (dir_ / "proc").string();
  options_.released_without_processes = std::chrono::seconds(0);
  PodRef silent = Pod(1, {Share(0, 4096)});  // ends without the runtime saying so
  PodRef told = Pod(2, {Share(0, 4096)});    // ends with the runtime's word
  {
    auto first = Manager();
    ASSERT_TRUE(first->Prepare(silent).ok());
    ASSERT_TRUE(first->Prepare(told).ok());
  }
  std::string gpus = kGpusFile;
  gpus.replace(gpus.find(Uuid(0)), Uuid(0).size(), Uuid(5));
  std::ofstream(gpus_file_, std::ios::trunc) << gpus;

  auto second = Manager();
  second->Synchronize({silent, told});
  EXPECT_EQ(second->pod_count(), 0u);
  second->Maintain();
  EXPECT_TRUE(fs::exists(PodDir(1)));  // it runs: its containers still use them
  EXPECT_TRUE(fs::exists(PodDir(2)));

  second->Release(Uid(2));
  EXPECT_FALSE(fs::exists(PodDir(2)));
  EXPECT_THAT(MountsUnder(PodDir(2)), ::testing::IsEmpty());

  proc.Exit(100);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  second->Maintain();
  EXPECT_FALSE(fs::exists(PodDir(1)));
  EXPECT_THAT(MountsUnder(PodDir(1)), ::testing::IsEmpty());
}

TEST_F(PodManagerTest, MpsPodsShareTheGpusDaemonAndNeverAGpuWithShimPods) {
  auto m = Manager();
  const std::map<std::string, std::string> mps = {{"tessera.dev/gpu-sharing", "mps"}};
  absl::StatusOr<std::optional<ContainerEdits>> a = m->Prepare(Pod(1, {Share(0, 4096, 300)}, mps));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(Env(**a, "TESSERA_GPU_SHARING"), "mps");
  EXPECT_EQ(Env(**a, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "30");
  EXPECT_FALSE(fs::exists(PodDir(1) + "/limits"));  // no shim segments for MPS
  absl::StatusOr<std::optional<ContainerEdits>> b = m->Prepare(Pod(2, {Share(0, 8192, 700)}, mps));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(Env(**b, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "70");
  EXPECT_EQ(m->Use()[0].mps, "running");

  absl::StatusOr<std::optional<ContainerEdits>> shim = m->Prepare(Pod(3, {Share(0, 1024)}));
  ASSERT_FALSE(shim.ok());
  EXPECT_THAT(shim.status().message(), HasSubstr("wants its share of GPU 0 (" + Uuid(0) +
                                                 ") enforced by shim, but pod "
                                                 "team/p1 runs there with mps"));
  EXPECT_FALSE(fs::exists(PodDir(3)));

  m->Release(Uid(1));
  EXPECT_EQ(m->Use()[0].mps, "running");
  m->Release(Uid(2));
  EXPECT_EQ(m->Use()[0].mps, "");  // the last MPS pod took the daemon with it
  std::ifstream smi(dir_ / "smi.log");
  std::string log((std::istreambuf_iterator<char>(smi)), {});
  EXPECT_EQ(log, "-i " + Uuid(0) + " -c EXCLUSIVE_PROCESS\n-i " + Uuid(0) + " -c DEFAULT\n");
  EXPECT_TRUE(m->Prepare(Pod(3, {Share(0, 1024)})).ok());  // the GPU serves shim pods again
}

// A share whose grant reserves no memory (compute only, from a scheduler before the scheduler
// reserved memory for those) used to run with no memory cap: refused, shim or MPS, and nothing
// is left behind.
TEST_F(PodManagerTest, AShareWithoutAMemoryCapIsRefused) {
  auto m = Manager();
  for (const auto& annotations :
       std::vector<std::map<std::string, std::string>>{{}, {{"tessera.dev/gpu-sharing", "mps"}}}) {
    absl::StatusOr<std::optional<ContainerEdits>> p =
        m->Prepare(Pod(1, {Share(0, /*memory_mib=*/0, /*compute_milli=*/300)}, annotations));
    ASSERT_FALSE(p.ok());
    EXPECT_THAT(p.status().message(), HasSubstr("has no memory reserved, and tessera runs no "
                                                "share without a memory cap"));
    EXPECT_FALSE(fs::exists(PodDir(1)));
  }
  EXPECT_TRUE(m->Prepare(Pod(1, {Share(0, 24576, 300)})).ok());  // what the scheduler grants now
}

TEST_F(PodManagerTest, AMigPlanIsCarriedOutBeforeTheContainerStarts) {
  FakeDiscovery backend(gpus_file_.string());
  auto m = Manager(&backend);
  records::Assignment a;
  a.gpus = {Mig(1, "3g.40gb", 0)};
  a.mig_create = true;
  a.mig_destroy = {{"1g.10gb", 0}, {"1g.10gb", 1}};
  absl::StatusOr<std::optional<ContainerEdits>> e = m->Prepare(Pod(1, a));
  ASSERT_TRUE(e.ok()) << e.status();
  const std::string visible = Env(**e, "NVIDIA_VISIBLE_DEVICES");
  EXPECT_TRUE(IsMigUuid(visible)) << visible;
  EXPECT_EQ((*e)->devices[0].path, "/dev/nvidia1");
  // The fake GPUs' state changed as the driver's would: discovery sees the new instance.
  absl::StatusOr<NodeGpus> now = backend.Discover();
  ASSERT_TRUE(now.ok()) << now.status();
  ASSERT_EQ(now->gpus[1].spec.mig_layout.size(), 1u);
  EXPECT_EQ(now->gpus[1].mig_uuids, std::vector<std::string>{visible});
  // The pod's second container: no second plan.
  absl::StatusOr<std::optional<ContainerEdits>> again = m->Prepare(Pod(1, a));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(Env(**again, "NVIDIA_VISIBLE_DEVICES"), visible);
}

TEST_F(PodManagerTest, AMigPlanNeverTakesAnInstanceARunningPodHolds) {
  FakeDiscovery backend(gpus_file_.string());
  auto m = Manager(&backend);
  ASSERT_TRUE(m->Prepare(Pod(1, {Mig(1, "1g.10gb", 1)})).status().ok());
  records::Assignment a;
  a.gpus = {Mig(1, "3g.40gb", 0)};
  a.mig_create = true;
  a.mig_destroy = {{"1g.10gb", 0}, {"1g.10gb", 1}};
  absl::StatusOr<std::optional<ContainerEdits>> e = m->Prepare(Pod(2, a));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("its MIG plan destroys instance 1g.10gb@1 of GPU " +
                                              Uuid(1) + ", which pod team/p1 holds"));
  absl::StatusOr<NodeGpus> now = backend.Discover();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->gpus[1].spec.mig_layout.size(), 2u);  // untouched

  // Without a backend that can reconfigure MIG, the pod is refused and says so.
  auto plain = Manager();
  e = plain->Prepare(Pod(3, a));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("this node's GPU backend cannot reconfigure MIG"));
}

TEST_F(PodManagerTest, APlanTheGpuCannotTakeLeavesTheFileAsItWas) {
  FakeDiscovery backend(gpus_file_.string());
  auto m = Manager(&backend);
  records::Assignment a;
  a.gpus = {Mig(1, "3g.40gb", 0)};
  a.mig_create = true;
  a.mig_destroy = {{"1g.10gb", 0}};  // slice 1 stays taken: 3g.40gb@0 overlaps it
  absl::StatusOr<std::optional<ContainerEdits>> e = m->Prepare(Pod(1, a));
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(e.status().message(), HasSubstr("cannot be created on GPU " + Uuid(1)));
  std::ifstream in(gpus_file_);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), kGpusFile);
}

}  // namespace
}  // namespace tessera::agent

namespace tessera::agent {
namespace {

// The driver's figures, scripted: the GPU's own utilisation (the usage meter's source) per GPU.
class DeviceUtilizationSampler : public GpuProcessSampler {
 public:
  absl::StatusOr<std::vector<GpuProcessMemory>> Memory(const std::string&) override {
    return std::vector<GpuProcessMemory>{};
  }
  absl::StatusOr<std::vector<shim::PidUtilization>> Utilization(const std::string&) override {
    return std::vector<shim::PidUtilization>{};
  }
  absl::StatusOr<uint32_t> DeviceUtilization(const std::string& gpu) override {
    auto it = permille.find(gpu);
    if (it == permille.end()) return absl::UnavailableError("not sampled");
    return it->second;
  }
  std::map<std::string, uint32_t> permille;
};

// Per-pod GPU time (issue 34): the GPU's busy time goes to the pod running alone on it; with two
// pods running on a GPU whose shims report nothing it is the GPU's, unattributed (NVML's split by
// process is wrong there on a real driver); a GPU whose utilisation cannot be read has no
// figures at all.
TEST_F(PodManagerTest, TheGpusBusyTimeGoesToThePodRunningAloneOnIt) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(100, Uid(1));
  proc.Process(200, Uid(2));
  proc.Process(300, Uid(3));
  options_.proc_root = (dir_ / "proc").string();
  options_.usage_interval = std::chrono::milliseconds(0);
  DeviceUtilizationSampler sampler;
  sampler.permille[Uuid(1)] = 500;
  auto m = Manager(nullptr, &sampler);
  const records::AssignedGpu whole = Whole(0);
  ASSERT_TRUE(m->Prepare(Pod(1, {whole}, {{"tessera.dev/queue", "research"}})).ok());
  ASSERT_TRUE(m->Prepare(Pod(2, {Share(1, 4096)})).ok());
  ASSERT_TRUE(m->Prepare(Pod(3, {Share(1, 4096)})).ok());
  for (int i = 0; i < 5; ++i) {
    m->Maintain();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<GpuUse> use = m->Use();
  ASSERT_EQ(use.size(), 2u);
  // Each pod with its queue, for the usage by queue ("": the default queue).
  ASSERT_EQ(use[0].pods.size(), 1u);
  EXPECT_EQ(use[0].pods[0].queue, "research");
  for (const GpuUse::Pod& p : use[1].pods) EXPECT_EQ(p.queue, "") << p.name;
  // GPU 0 gives no utilisation here: no figures, for it or its pod.
  EXPECT_EQ(use[0].busy_ns, -1);
  ASSERT_EQ(use[0].pods.size(), 1u);
  EXPECT_EQ(use[0].pods[0].busy_ns, -1);
  // GPU 1, half busy over at least the 80 ms between the first and last step, two pods running
  // whose shims measured nothing: the GPU's time, nobody's in particular.
  EXPECT_GE(use[1].busy_ns, 40'000'000);
  EXPECT_EQ(use[1].unattributed_busy_ns, use[1].busy_ns);
  for (const GpuUse::Pod& p : use[1].pods) EXPECT_EQ(p.busy_ns, 0) << p.name;

  // Pod 3 ends its processes: pod 2 runs alone and is charged from then on; GPU 0 now answers.
  proc.Exit(300);
  sampler.permille[Uuid(0)] = 1000;
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the next scan of /proc
  for (int i = 0; i < 5; ++i) {
    m->Maintain();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  use = m->Use();
  EXPECT_GE(use[0].busy_ns, 80'000'000);
  EXPECT_EQ(use[0].pods[0].busy_ns, use[0].busy_ns);  // the whole GPU's pod: all of it
  EXPECT_EQ(use[0].unattributed_busy_ns, 0);
  int64_t pod2 = -1;
  for (const GpuUse::Pod& p : use[1].pods) {
    if (p.uid == Uid(2)) pod2 = p.busy_ns;
  }
  EXPECT_GE(pod2, 40'000'000);
  EXPECT_EQ(use[1].busy_ns - use[1].unattributed_busy_ns, pod2);
}

// Several pods running on a shared GPU (issue 34): each is charged what its shim reported in its
// ledger (LedgerHeader::gpu_busy_ns, written here as the shims would), within the GPU's busy
// time; a counter that goes back is refused and counted on the GPU.
TEST_F(PodManagerTest, SeveralRunningPodsAreChargedWhatTheirShimsReported) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(200, Uid(2));
  proc.Process(300, Uid(3));
  options_.proc_root = (dir_ / "proc").string();
  options_.usage_interval = std::chrono::milliseconds(0);
  DeviceUtilizationSampler sampler;
  sampler.permille[Uuid(1)] = 500;
  auto m = Manager(nullptr, &sampler);
  ASSERT_TRUE(m->Prepare(Pod(2, {Share(1, 4096)})).ok());
  ASSERT_TRUE(m->Prepare(Pod(3, {Share(1, 4096)})).ok());
  auto ledger2 = shim::Segment::Open(PodDir(2), Uuid(1));
  auto ledger3 = shim::Segment::Open(PodDir(3), Uuid(1));
  ASSERT_TRUE(ledger2.ok() && ledger3.ok());
  auto report = [](std::unique_ptr<shim::Segment>& seg, uint64_t ns) {
    seg->ledger().header()->gpu_busy_ns.store(ns);
  };
  constexpr uint64_t kMs = 1'000'000;
  // Steps at least 20 ms apart, half busy (>= 10 ms each); the pods report 1 and 2 ms a step.
  for (uint64_t i = 0; i < 5; ++i) {
    report(*ledger2, 7 + i * kMs);
    report(*ledger3, i * 2 * kMs);
    m->Maintain();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<GpuUse> use = m->Use();
  ASSERT_EQ(use.size(), 2u);
  std::map<std::string, int64_t> busy;
  for (const GpuUse::Pod& p : use[1].pods) busy[p.uid] = p.busy_ns;
  // The first step only read where the counters start.
  EXPECT_EQ(busy[Uid(2)], int64_t{4 * kMs});
  EXPECT_EQ(busy[Uid(3)], int64_t{8 * kMs});
  EXPECT_EQ(use[1].unattributed_busy_ns, use[1].busy_ns - int64_t{12 * kMs});
  EXPECT_EQ(use[1].rejected_usage_reports, 0);
  // Pod 3's counter goes back: refused, counted, and pod 3 gets nothing for that step.
  report(*ledger2, 7 + 5 * kMs);
  report(*ledger3, kMs);
  m->Maintain();
  use = m->Use();
  for (const GpuUse::Pod& p : use[1].pods) busy[p.uid] = p.busy_ns;
  EXPECT_EQ(busy[Uid(2)], int64_t{5 * kMs});
  EXPECT_EQ(busy[Uid(3)], int64_t{8 * kMs});
  EXPECT_EQ(use[1].rejected_usage_reports, 1);
}

// A hard-capped pod's report counts at most its window (the cap, or the controller's duty if
// larger, and the slack), whatever it wrote: the pod manager reads the window from the limits it
// wrote itself.
TEST_F(PodManagerTest, AHardCappedPodsReportCountsAtMostItsWindow) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(200, Uid(2));
  proc.Process(300, Uid(3));
  options_.proc_root = (dir_ / "proc").string();
  options_.usage_interval = std::chrono::milliseconds(0);
  DeviceUtilizationSampler sampler;
  sampler.permille[Uuid(1)] = 1000;
  auto m = Manager(nullptr, &sampler);
  ASSERT_TRUE(m->Prepare(Pod(2, {Share(1, 4096, 300)})).ok());
  ASSERT_TRUE(m->Prepare(Pod(3, {Share(1, 4096, 300)})).ok());
  auto ledger2 = shim::Segment::Open(PodDir(2), Uuid(1));
  auto ledger3 = shim::Segment::Open(PodDir(3), Uuid(1));
  ASSERT_TRUE(ledger2.ok() && ledger3.ok());
  ASSERT_EQ((*ledger2)->Inspect().limits.compute_mode, shim::ComputeMode::kHardCap);
  // 18 ms a step of at least 20 ms: more than a 30% window (with the controller's widening to
  // 37.5% and the slack, 47.5%) unless a step takes over 37 ms.
  for (uint64_t i = 0; i < 5; ++i) {
    (*ledger2)->ledger().header()->gpu_busy_ns.store(i * 18'000'000);
    (*ledger3)->ledger().header()->gpu_busy_ns.store(i * 18'000'000);
    m->Maintain();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<GpuUse> use = m->Use();
  ASSERT_EQ(use.size(), 2u);
  ASSERT_GT(use[1].busy_ns, 0);
  for (const GpuUse::Pod& p : use[1].pods) {
    EXPECT_GT(p.busy_ns, 0) << p.name;
    EXPECT_LE(p.busy_ns, use[1].busy_ns * 475 / 1000 + 1) << p.name;
    EXPECT_LE(p.busy_ns, 4 * 18'000'000) << p.name;
  }
  EXPECT_EQ(use[1].rejected_usage_reports, 0);
}

// Maintain every 20 ms for `how_long`, collecting what pods were told.
std::vector<PodNotice> MaintainFor(PodManager& m, std::chrono::milliseconds how_long) {
  std::vector<PodNotice> notices;
  const auto until = std::chrono::steady_clock::now() + how_long;
  while (std::chrono::steady_clock::now() < until) {
    m.Maintain();
    for (PodNotice& n : m.TakeNotices()) notices.push_back(std::move(n));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return notices;
}

// Idle GPUs (issue 34): a pod that ran alone on its GPU and kept it under the threshold for the
// whole window is told (GPUIdle, once per window) and shown idle; a busy one is shown not idle.
TEST_F(PodManagerTest, APodThatKeepsItsGpuIdleIsToldOnce) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(100, Uid(1));
  proc.Process(200, Uid(2));
  options_.proc_root = (dir_ / "proc").string();
  options_.usage_interval = std::chrono::milliseconds(0);
  options_.idle = {.threshold_permille = 50, .window = std::chrono::seconds(1)};
  DeviceUtilizationSampler sampler;
  sampler.permille[Uuid(0)] = 10;   // 1%: idle
  sampler.permille[Uuid(1)] = 400;  // 40%: working
  auto m = Manager(nullptr, &sampler);
  const records::AssignedGpu whole = Whole(0);
  ASSERT_TRUE(m->Prepare(Pod(1, {whole})).ok());
  ASSERT_TRUE(m->Prepare(Pod(2, {Share(1, 4096)})).ok());
  const std::vector<PodNotice> notices = MaintainFor(*m, std::chrono::milliseconds(1500));
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].pod.name, "p1");
  EXPECT_EQ(notices[0].reason, "GPUIdle");
  EXPECT_THAT(notices[0].message, HasSubstr("ran this pod's kernels 0.9% of the last 1 s (under "
                                            "5.0%): the pod holds a GPU it does not use"));
  EXPECT_FALSE(notices[0].reclaim_idle);  // the idle-reclaim policy is off
  std::vector<GpuUse> use = m->Use();
  EXPECT_EQ(use[0].pods[0].idle, 1);
  EXPECT_EQ(use[1].pods[0].idle, 0);
}

// With the idle-reclaim policy on, the GPUIdle notice asks the agent to apply it (the agent reads
// the pod and decides, idle_reclaim.h); a busy pod is never asked about.
TEST_F(PodManagerTest, WithIdleReclaimTheIdleNoticeAsksForThePolicy) {
  FakeHostProc proc(dir_ / "proc");
  proc.Process(100, Uid(1));
  proc.Process(200, Uid(2));
  options_.proc_root = (dir_ / "proc").string();
  options_.usage_interval = std::chrono::milliseconds(0);
  options_.idle = {.threshold_permille = 50, .window = std::chrono::seconds(1)};
  options_.idle_reclaim = true;
  DeviceUtilizationSampler sampler;
  sampler.permille[Uuid(0)] = 10;
  sampler.permille[Uuid(1)] = 400;
  auto m = Manager(nullptr, &sampler);
  ASSERT_TRUE(m->Prepare(Pod(1, {Whole(0)})).ok());
  ASSERT_TRUE(m->Prepare(Pod(2, {Whole(1)})).ok());
  const std::vector<PodNotice> notices = MaintainFor(*m, std::chrono::milliseconds(1500));
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_EQ(notices[0].pod.name, "p1");
  EXPECT_TRUE(notices[0].reclaim_idle);
  EXPECT_FALSE(notices[0].evict);
}

}  // namespace
}  // namespace tessera::agent
