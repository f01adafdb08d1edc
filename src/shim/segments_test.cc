#include "shim/segments.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gtest/gtest.h"
#include "shim/contract.h"
#include "shim/mount_namespace_testing.h"

namespace tessera::shim {
namespace {

constexpr char kUuid[] = "GPU-6f1c2a9e-0000-4000-8000-000000000001";

// Sized ledger folders are tmpfs mounts: this process's own, gone with it.
const bool kPrivateMounts = EnterPrivateMountNamespace();

class SegmentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-segments-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    pod_dir_ = root_ + "/pod-a";  // created by Segment::Create
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + root_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  SegmentOptions Options(uint64_t memory, uint32_t compute) {
    SegmentOptions o;
    o.pod_uid = "8d1c0000-aaaa-bbbb-cccc-000000000001";
    o.limits.memory_limit_bytes = memory;
    o.limits.compute_limit_permille = compute;
    o.slots = 8;
    return o;
  }
  // The ledger's header mapped read-write, as the pod's containers map it.
  struct MappedHeader {
    int fd = -1;
    void* map = MAP_FAILED;
    LedgerHeader* operator->() const { return static_cast<LedgerHeader*>(map); }
    ~MappedHeader() {
      if (map != MAP_FAILED) ::munmap(map, kLedgerHeaderSize);
      if (fd >= 0) ::close(fd);
    }
  };
  void MapHeader(MappedHeader* out) {
    out->fd = ::open(PathsFor(pod_dir_, kUuid).ledger.c_str(), O_RDWR);
    ASSERT_GE(out->fd, 0);
    out->map = ::mmap(nullptr, kLedgerHeaderSize, PROT_READ | PROT_WRITE, MAP_SHARED, out->fd, 0);
    ASSERT_NE(out->map, MAP_FAILED);
  }
  std::string root_, pod_dir_;
};

TEST_F(SegmentsTest, CreateLaysOutTheContract) {
  auto seg = Segment::Create(pod_dir_, kUuid, Options(4ULL << 30, 300));
  ASSERT_TRUE(seg.ok()) << seg.status();
  SegmentPaths paths = PathsFor(pod_dir_, kUuid);
  EXPECT_EQ(paths.limits, pod_dir_ + "/limits/" + kUuid + ".limits");
  EXPECT_EQ(paths.ledger, pod_dir_ + "/ledger/" + kUuid + ".ledger");
  struct stat st {};
  ASSERT_EQ(::stat(paths.limits.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, kLimitsFileSize);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  ASSERT_EQ(::stat(paths.ledger.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), LedgerFileSize(8));
  EXPECT_EQ(st.st_mode & 0777, 0666u);
  // The folder is the agent's: containers get the file mounted, never the folder.
  ASSERT_EQ(::stat((pod_dir_ + "/ledger").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);

  SegmentInfo info = (*seg)->Inspect();
  EXPECT_EQ(info.gpu_uuid, kUuid);
  EXPECT_EQ(info.pod_uid, "8d1c0000-aaaa-bbbb-cccc-000000000001");
  EXPECT_EQ(info.limits.memory_limit_bytes, 4ULL << 30);
  EXPECT_EQ(info.limits.compute_limit_permille, 300u);
  EXPECT_EQ(info.slots, 8u);
  EXPECT_EQ(info.used_bytes, 0u);
  EXPECT_TRUE(info.processes.empty());

  auto uuids = ListSegments(pod_dir_);
  ASSERT_TRUE(uuids.ok());
  EXPECT_EQ(*uuids, std::vector<std::string>{kUuid});
  auto pods = ListPodDirs(root_);
  ASSERT_TRUE(pods.ok());
  EXPECT_EQ(*pods, std::vector<std::string>{pod_dir_});
}

TEST_F(SegmentsTest, CreateMakesMissingParents) {
  const std::string deep = root_ + "/run/tessera/pods/uid-1";
  auto seg = Segment::Create(deep, kUuid, Options(1, 0));
  ASSERT_TRUE(seg.ok()) << seg.status();
  EXPECT_EQ((*ListSegments(deep)).size(), 1u);
}

TEST_F(SegmentsTest, CreateAgainUpdatesAndKeepsTheLedger) {
  auto first = Segment::Create(pod_dir_, kUuid, Options(4ULL << 30, 0));
  ASSERT_TRUE(first.ok()) << first.status();
  std::string error;
  // The agent observes; a shim claims through a ledger of its own.
  EXPECT_FALSE((*first)->ledger().Claim(ProcessIdentity::Current(), &error));
  auto shim = Ledger::Open(PathsFor(pod_dir_, kUuid).ledger, &error);
  ASSERT_NE(shim, nullptr) << error;
  ASSERT_TRUE(shim->Claim(ProcessIdentity::Current(), &error)) << error;
  ASSERT_TRUE(shim->TryCharge(1000, 4ULL << 30));
  auto again = Segment::Create(pod_dir_, kUuid, Options(8ULL << 30, 500));
  ASSERT_TRUE(again.ok()) << again.status();
  SegmentInfo info = (*again)->Inspect();
  EXPECT_EQ(info.limits.memory_limit_bytes, 8ULL << 30);
  EXPECT_EQ(info.used_bytes, 1000u);
  // The first handle sees the live update.
  EXPECT_EQ((*first)->limits().memory_limit(), 8ULL << 30);
  EXPECT_EQ((*first)->limits().compute_limit(), 500u);
}

TEST_F(SegmentsTest, RejectsBadInput) {
  EXPECT_EQ(Segment::Create(pod_dir_, "../etc", Options(1, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  SegmentOptions bad = Options(1, 0);
  bad.limits.period_us = 10;
  EXPECT_EQ(Segment::Create(pod_dir_, kUuid, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  bad = Options(1, 0);
  bad.slots = 0;
  EXPECT_EQ(Segment::Create(pod_dir_, kUuid, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Segment::Open(pod_dir_, kUuid).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SegmentsTest, UpdateAndScheduleReachTheShimsView) {
  auto seg = Segment::Create(pod_dir_, kUuid, Options(1ULL << 30, 300));
  ASSERT_TRUE(seg.ok());
  std::string error;
  auto shim_view = LimitsMap::Open(PathsFor(pod_dir_, kUuid).limits, /*writable=*/false, &error);
  ASSERT_NE(shim_view, nullptr) << error;
  EXPECT_EQ(shim_view->effective_duty(), 300u);  // no controller yet: the cap
  (*seg)->SetSchedule(450, 300);
  EXPECT_EQ(shim_view->effective_duty(), 450u);
  EXPECT_EQ(shim_view->phase(), 300u);
  ShareLimits bigger;
  bigger.memory_limit_bytes = 2ULL << 30;
  ASSERT_TRUE((*seg)->Update(bigger).ok());
  EXPECT_EQ(shim_view->memory_limit(), 2ULL << 30);
  EXPECT_EQ(shim_view->compute_limit(), 0u);
  EXPECT_EQ(shim_view->effective_duty(), 1000u);  // no compute cap: always open
  EXPECT_EQ(shim_view->period_us(), kDefaultPeriodUs);
}

// The agent's reaper gives back what a SIGKILLed process held and fills in host PIDs.
TEST_F(SegmentsTest, ReapReclaimsDeadProcessesAndResolvesHostPids) {
  auto seg = Segment::Create(pod_dir_, kUuid, Options(1000, 0));
  ASSERT_TRUE(seg.ok());
  const std::string ledger_path = PathsFor(pod_dir_, kUuid).ledger;
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string e;
    auto l = Ledger::Open(ledger_path, &e);
    if (l == nullptr || !l->Claim(ProcessIdentity::Current(), &e) || !l->TryCharge(700, 1000)) {
      ::_exit(1);
    }
    char ok = 'k';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ReapResult live = (*seg)->Reap();
  EXPECT_EQ(live.slots, 0u);
  EXPECT_EQ(live.resolved, 1u);
  SegmentInfo info = (*seg)->Inspect();
  ASSERT_EQ(info.processes.size(), 1u);
  EXPECT_EQ(info.processes[0].pid, static_cast<uint32_t>(child));
  EXPECT_EQ(info.processes[0].host_pid, static_cast<uint32_t>(child));  // same namespace here
  EXPECT_TRUE(info.processes[0].alive);
  EXPECT_EQ(info.used_bytes, 700u);

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ReapResult dead = (*seg)->Reap();
  EXPECT_EQ(dead.slots, 1u);
  EXPECT_EQ(dead.bytes, 700u);
  info = (*seg)->Inspect();
  EXPECT_EQ(info.used_bytes, 0u);
  EXPECT_TRUE(info.processes.empty());
  EXPECT_EQ(info.reclaimed_bytes, 700u);
  ::close(ready[0]);
  ::close(ready[1]);
}

// The ledger is mapped read-write by the pod's containers: a hostile one rewrites the header the
// agent validated at open (here: slot_count 65536 and every live bit set) and the agent's reaper
// and inspection, which run as root every 250 ms and on every /metrics scrape, must still read
// and write only inside the file they validated.
TEST_F(SegmentsTest, AHeaderRewrittenByTheContainerIsNeverTrusted) {
  auto seg = Segment::Create(pod_dir_, kUuid, Options(1000, 0));
  ASSERT_TRUE(seg.ok());
  MappedHeader h;
  ASSERT_NO_FATAL_FAILURE(MapHeader(&h));
  h->slot_count = 65536;
  for (auto& word : h->live_bitmap) word.store(~uint64_t{0});
  SegmentInfo info = (*seg)->Inspect();
  EXPECT_EQ(info.slots, 8u);
  EXPECT_LE(info.processes.size(), 8u);
  ReapResult r = (*seg)->Reap();
  EXPECT_EQ(r.tampered, "slot count 65536 (was 8), live bits past the slot count");
  // Put back: the validated header, no bit past slot 8.
  EXPECT_EQ(h->slot_count, 8u);
  EXPECT_EQ(h->live_bitmap[0].load(), 0u);  // 8 dead slots: reclaimed
  EXPECT_EQ(h->live_bitmap[1].load(), 0u);
  EXPECT_EQ((*seg)->Reap().tampered, "");
  std::strcpy(h->gpu_uuid, "GPU-someone-else");
  h->magic = 0;
  EXPECT_EQ((*seg)->Reap().tampered, "magic, GPU UUID");
  EXPECT_EQ(std::string(h->gpu_uuid), kUuid);
  EXPECT_EQ((*seg)->Inspect().gpu_uuid, kUuid);
}

// Bytes written after the GPU UUID's terminating NUL (found by segment_fuzz): the check compares
// the whole field, so the restore must put back the whole field, or the agent reports the same
// tampering at every reap (every 250 ms) and never puts the header back.
TEST_F(SegmentsTest, BytesAfterTheGpuUuidAreReportedOnceAndPutBack) {
  auto seg = Segment::Create(pod_dir_, kUuid, Options(1000, 0));
  ASSERT_TRUE(seg.ok());
  MappedHeader h;
  ASSERT_NO_FATAL_FAILURE(MapHeader(&h));
  ASSERT_LT(std::strlen(kUuid) + 2, sizeof(h->gpu_uuid));
  h->gpu_uuid[sizeof(h->gpu_uuid) - 2] = 'x';  // past the NUL: the string still reads kUuid
  EXPECT_EQ((*seg)->Reap().tampered, "GPU UUID");
  EXPECT_EQ(h->gpu_uuid[sizeof(h->gpu_uuid) - 2], '\0');
  EXPECT_EQ((*seg)->Reap().tampered, "");
}

// The same container truncates the file under the agent's mapping: touching the pages past the
// new end would raise SIGBUS in the agent.
TEST_F(SegmentsTest, ALedgerTruncatedByTheContainerDoesNotKillTheAgent) {
  auto seg = Segment::Create(pod_dir_, kUuid, Options(1000, 0));
  ASSERT_TRUE(seg.ok());
  const std::string ledger_path = PathsFor(pod_dir_, kUuid).ledger;
  ASSERT_EQ(::truncate(ledger_path.c_str(), 0), 0);
  SegmentInfo info = (*seg)->Inspect();  // cut short by SIGBUS, not killed
  EXPECT_EQ(info.used_bytes, 0u);
  EXPECT_EQ((*seg)->Reap().tampered, "the file is 0 bytes long, it was 4608");
  EXPECT_EQ((*seg)->Reap().tampered, "");
  struct stat st {};
  ASSERT_EQ(::stat(ledger_path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), LedgerFileSize(8));
}

// A container of a pod whose ledger folder it could write (the layout before files were mounted
// one by one) plants symlinks to a host file at every name the agent might write next: the
// ledger's temporary names (predictable: "<ledger>.tmp.<agent PID>" for an agent that restarted as
// PID 1) and the ledger itself. Root must not truncate, rewrite or chmod the host file.
TEST_F(SegmentsTest, SymlinksPlantedInTheLedgerFolderAreNeverFollowed) {
  const std::string victim = root_ + "/host-file";
  {
    FILE* f = std::fopen(victim.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("root:x:0:0::/root:/bin/sh\n", f);
    std::fclose(f);
  }
  ASSERT_EQ(::chmod(victim.c_str(), 0600), 0);
  const std::string ledger = PathsFor(pod_dir_, kUuid).ledger;
  ASSERT_EQ(::system(("mkdir -p " + pod_dir_ + "/ledger").c_str()), 0);
  for (const std::string& name :
       {ledger + ".tmp." + std::to_string(::getpid()), ledger + ".tmp.1"}) {
    ASSERT_EQ(::symlink(victim.c_str(), name.c_str()), 0);
  }
  auto seg = Segment::Create(pod_dir_, kUuid, Options(1000, 0));
  ASSERT_TRUE(seg.ok()) << seg.status();
  struct stat st {};
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 26);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::lstat(ledger.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));

  // Now the ledger name itself, before an agent restart re-creates the segment.
  seg->reset();
  ASSERT_EQ(::unlink(ledger.c_str()), 0);
  ASSERT_EQ(::symlink(victim.c_str(), ledger.c_str()), 0);
  auto again = Segment::Create(pod_dir_, kUuid, Options(1000, 0));
  ASSERT_EQ(::stat(victim.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 26);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(::lstat(ledger.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

// The ledger folder as a tmpfs of the ledgers' size: a process growing its ledger gets ENOSPC
// within the folder's pages; the pod's end unmounts and removes it.
TEST_F(SegmentsTest, ASizedLedgerFolderHoldsItsLedgersAndNoMore) {
  if (!kPrivateMounts) GTEST_SKIP() << "needs CAP_SYS_ADMIN for a mount namespace";
  SegmentOptions o = Options(1000, 0);
  o.ledger_folder_bytes = LedgerFolderBytes(2, o.slots);
  EXPECT_EQ(o.ledger_folder_bytes, 2u * 8192);  // 4608 bytes: two pages each
  ASSERT_TRUE(Segment::Create(pod_dir_, kUuid, o).ok());
  auto second = Segment::Create(pod_dir_, "GPU-second", o);
  ASSERT_TRUE(second.ok()) << second.status();
  struct stat folder {
  }, pod{};
  ASSERT_EQ(::stat((pod_dir_ + "/ledger").c_str(), &folder), 0);
  ASSERT_EQ(::stat(pod_dir_.c_str(), &pod), 0);
  EXPECT_NE(folder.st_dev, pod.st_dev) << "a filesystem of its own";
  int fd = ::open(PathsFor(pod_dir_, kUuid).ledger.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  std::string block(4096, 'x');
  size_t written = 0;
  ssize_t n = 0;
  while (written < (1u << 20) && (n = ::write(fd, block.data(), block.size())) > 0) written += n;
  const int error = errno;
  ::close(fd);
  EXPECT_EQ(error, ENOSPC);
  EXPECT_LE(written, 2u * 4096);  // no more than the pages of the folder
  ASSERT_TRUE(RemovePodSegments(pod_dir_).ok());
  EXPECT_NE(::stat(pod_dir_.c_str(), &pod), 0);

  // A pod of the earlier layout (its ledger in a plain folder, mapped by its containers) keeps
  // its ledger where it is: nothing is mounted over it.
  ASSERT_TRUE(Segment::Create(pod_dir_, kUuid, Options(1000, 0)).ok());
  auto adopted = Segment::Create(pod_dir_, kUuid, o);
  ASSERT_TRUE(adopted.ok()) << adopted.status();
  ASSERT_EQ(::stat((pod_dir_ + "/ledger").c_str(), &folder), 0);
  ASSERT_EQ(::stat(pod_dir_.c_str(), &pod), 0);
  EXPECT_EQ(folder.st_dev, pod.st_dev);
}

// A slot names whatever identity and host PID its writer chose. The agent reports only the host
// PIDs it resolved itself through its lookup (which the agent limits to the pod's own processes),
// never the host_pid a slot claims, and looks an unresolved identity up again only now and then.
TEST_F(SegmentsTest, HostPidsAreTheAgentsOwnNeverTheSlots) {
  auto seg = Segment::Create(pod_dir_, kUuid, Options(1000, 0));
  ASSERT_TRUE(seg.ok());
  std::string error;
  auto shim = Ledger::Open(PathsFor(pod_dir_, kUuid).ledger, &error);
  ASSERT_NE(shim, nullptr) << error;
  ProcessIdentity forged;
  forged.pid = 4242;
  forged.pidns_inode = 77;
  ASSERT_TRUE(shim->Claim(forged, &error)) << error;
  shim->SetHostPid(static_cast<uint32_t>(shim->slot_index()), 1);  // "I am the host's init"
  int lookups = 0;
  const HostPidLookup nobody = [&](uint64_t, uint32_t) {
    ++lookups;
    return std::optional<uint32_t>();
  };
  for (int i = 0; i < 10; ++i) (*seg)->Reap(nobody);
  SegmentInfo info = (*seg)->Inspect();
  ASSERT_EQ(info.processes.size(), 1u);
  EXPECT_EQ(info.processes[0].host_pid, 0u);
  EXPECT_EQ(lookups, 2) << "once, then again after kLookupRetryReaps reaps";
  // Resolved by the agent (at the next look-up, within kLookupRetryReaps reaps): that one is
  // reported, and kept.
  const HostPidLookup agent = [](uint64_t inode, uint32_t pid) {
    return inode == 77 && pid == 4242 ? std::optional<uint32_t>(31337) : std::nullopt;
  };
  for (int i = 0; i < 8; ++i) (*seg)->Reap(agent);
  for (int i = 0; i < 8; ++i) (*seg)->Reap(nobody);
  EXPECT_EQ((*seg)->Inspect().processes[0].host_pid, 31337u);
}

TEST_F(SegmentsTest, RemovePodSegmentsLeavesNothing) {
  ASSERT_TRUE(Segment::Create(pod_dir_, kUuid, Options(1, 0)).ok());
  ASSERT_TRUE(Segment::Create(pod_dir_, "GPU-second", Options(1, 0)).ok());
  ASSERT_TRUE(RemovePodSegments(pod_dir_).ok());
  struct stat st {};
  EXPECT_NE(::stat(pod_dir_.c_str(), &st), 0);
  EXPECT_TRUE(RemovePodSegments(pod_dir_).ok());  // twice is fine
  auto pods = ListPodDirs(root_);
  ASSERT_TRUE(pods.ok());
  EXPECT_TRUE(pods->empty());
}

TEST(ResolveHostPidTest, FindsThisProcess) {
  auto me = ProcessIdentity::Current();
  auto pid = ResolveHostPid(me.pidns_inode, me.pid);
  ASSERT_TRUE(pid.has_value());
  EXPECT_EQ(*pid, me.pid);
  EXPECT_FALSE(ResolveHostPid(me.pidns_inode, 0x7ffffff0).has_value());
  EXPECT_FALSE(ResolveHostPid(1, me.pid).has_value());
}

}  // namespace
}  // namespace tessera::shim
