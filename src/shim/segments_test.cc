#include "shim/segments.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"
#include "shim/contract.h"

namespace tessera::shim {
namespace {

constexpr char kUuid[] = "GPU-6f1c2a9e-0000-4000-8000-000000000001";

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
  ASSERT_EQ(::stat((pod_dir_ + "/ledger").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);

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
  ASSERT_TRUE((*first)->ledger().Claim(ProcessIdentity::Current(), &error)) << error;
  ASSERT_TRUE((*first)->ledger().TryCharge(1000, 4ULL << 30));
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
