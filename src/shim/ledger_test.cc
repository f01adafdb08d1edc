#include "shim/ledger.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::shim {
namespace {

constexpr char kUuid[] = "GPU-11111111-2222-3333-4444-555555555555";

class LedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-ledger-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/ledger";
  }
  void TearDown() override {
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  std::unique_ptr<Ledger> OpenClaimed() {
    std::string error;
    auto l = Ledger::Open(path_, &error);
    EXPECT_NE(l, nullptr) << error;
    if (l == nullptr) return nullptr;
    EXPECT_TRUE(l->Claim(ProcessIdentity::Current(), &error)) << error;
    return l;
  }
  std::string dir_, path_;
};

TEST_F(LedgerTest, CreateRefusesToReplaceAndOpenValidates) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 8, &error)) << error;
  EXPECT_FALSE(Ledger::Create(path_, kUuid, 8, &error));
  EXPECT_NE(error.find("cannot publish"), std::string::npos) << error;

  auto l = Ledger::Open(path_, &error);
  ASSERT_NE(l, nullptr) << error;
  EXPECT_EQ(l->slot_count(), 8u);
  EXPECT_STREQ(l->header()->gpu_uuid, kUuid);
  EXPECT_EQ(l->Used(), 0u);

  EXPECT_FALSE(Ledger::Create(dir_ + "/x", kUuid, 0, &error));
  EXPECT_FALSE(Ledger::Create(dir_ + "/x", kUuid, kMaxLedgerSlots + 1, &error));
  EXPECT_FALSE(Ledger::Create(dir_ + "/x", "", 4, &error));
}

TEST_F(LedgerTest, OpenRefusesForeignAndTruncatedFiles) {
  std::string error;
  std::string junk = dir_ + "/junk";
  FILE* f = std::fopen(junk.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::vector<char> zeros(8192, 0);
  std::fwrite(zeros.data(), 1, zeros.size(), f);
  std::fclose(f);
  EXPECT_EQ(Ledger::Open(junk, &error), nullptr);
  EXPECT_NE(error.find("bad magic"), std::string::npos) << error;

  ASSERT_TRUE(Ledger::Create(path_, kUuid, 64, &error)) << error;
  ASSERT_EQ(::truncate(path_.c_str(), LedgerFileSize(64) - 64), 0);
  EXPECT_EQ(Ledger::Open(path_, &error), nullptr);
  EXPECT_NE(error.find("needs"), std::string::npos) << error;

  EXPECT_EQ(Ledger::Open(dir_ + "/missing", &error), nullptr);
  EXPECT_NE(error.find("cannot open ledger"), std::string::npos) << error;
}

TEST_F(LedgerTest, ChargesAreSharedAndCapped) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 8, &error)) << error;
  // Two open file descriptions in one process behave as two processes.
  auto a = OpenClaimed();
  auto b = OpenClaimed();
  ASSERT_NE(a->slot_index(), b->slot_index());
  const uint64_t limit = 1000;
  EXPECT_TRUE(a->TryCharge(600, limit));
  EXPECT_TRUE(b->TryCharge(400, limit));
  EXPECT_EQ(a->Used(), 1000u);
  EXPECT_FALSE(b->TryCharge(1, limit));
  EXPECT_EQ(a->header()->oom_count.load(), 1u);
  a->Uncharge(100);
  EXPECT_TRUE(b->TryCharge(100, limit));
  EXPECT_EQ(b->OwnUsed(), 500u);
  EXPECT_EQ(b->Used(), 1000u);
  // Unbalanced releases never go below zero.
  a->Uncharge(10'000);
  EXPECT_EQ(a->OwnUsed(), 0u);
  EXPECT_EQ(b->Used(), 500u);
  // No limit: always granted.
  EXPECT_TRUE(a->TryCharge(1ULL << 40, 0));
  EXPECT_EQ(a->header()->peak_used_bytes.load(), 1000u);
}

TEST_F(LedgerTest, ReleaseFreesTheSlotAndAFullLedgerSaysSo) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 2, &error)) << error;
  auto a = OpenClaimed();
  auto b = OpenClaimed();
  ASSERT_TRUE(a->TryCharge(10, 100));
  auto c = Ledger::Open(path_, &error);
  ASSERT_NE(c, nullptr);
  EXPECT_FALSE(c->Claim(ProcessIdentity::Current(), &error));
  EXPECT_NE(error.find("all 2 process slots"), std::string::npos) << error;
  a->Release();
  EXPECT_EQ(b->Used(), 0u);
  EXPECT_TRUE(c->Claim(ProcessIdentity::Current(), &error)) << error;
}

// An allocation several processes hold counts once, whoever created it, until the last holder
// lets go (or dies: its holds go with its descriptor).
TEST_F(LedgerTest, SharedAllocationsCountOnceUntilTheLastHolderGoes) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 8, &error)) << error;
  auto exporter = OpenClaimed();
  auto importer = OpenClaimed();
  ASSERT_TRUE(exporter->TryCharge(700, 1000));
  const int shared = exporter->CreateShared(/*key=*/0xabc, 500);
  ASSERT_GE(shared, 0);
  EXPECT_EQ(exporter->OwnUsed(), 200u);  // moved, not added
  EXPECT_EQ(exporter->Used(), 700u);
  uint64_t bytes = 0;
  EXPECT_EQ(importer->JoinShared(0xdef, &bytes), -1);  // no such allocation
  ASSERT_EQ(importer->JoinShared(0xabc, &bytes), shared);
  EXPECT_EQ(bytes, 500u);
  EXPECT_EQ(importer->Used(), 700u);  // counted once
  // The creator lets go: the importer still holds it, so it still counts.
  exporter->LeaveShared(shared);
  EXPECT_EQ(importer->Used(), 700u);
  EXPECT_EQ(importer->ReclaimDead().slots, 0u);  // held: not reclaimable
  EXPECT_FALSE(importer->TryCharge(301, 1000));
  // Joined twice by one process: held until both holds are given back.
  ASSERT_EQ(importer->JoinShared(0xabc, &bytes), shared);
  importer->LeaveShared(shared);
  EXPECT_EQ(exporter->Used(), 700u);
  importer->LeaveShared(shared);
  EXPECT_EQ(exporter->Used(), 200u);
  EXPECT_EQ(exporter->JoinShared(0xabc, &bytes), -1);  // gone
  // The last holder is SIGKILLed: its holds go with its descriptor, and the slot is reclaimed.
  ASSERT_GE(exporter->CreateShared(0x123, 200), 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  if (child == 0) {
    auto mine = Ledger::Open(path_, &error);
    uint64_t b = 0;
    char ok = (mine != nullptr && mine->Claim(ProcessIdentity::Current(), &error) &&
               mine->JoinShared(0x123, &b) >= 0)
                  ? 1
                  : 0;
    if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char ok = 0;
  ASSERT_EQ(::read(ready[0], &ok, 1), 1);
  ASSERT_EQ(ok, 1);
  exporter.reset();                   // exits: gives back its slot and its hold
  EXPECT_EQ(importer->Used(), 200u);  // the child still holds it
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  EXPECT_EQ(importer->ReclaimDead().bytes, 200u);  // the shared slot (the child's own held 0)
  EXPECT_EQ(importer->Used(), 0u);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(LedgerTest, RecordsWhoHoldsASlot) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 4, &error)) << error;
  auto a = OpenClaimed();
  ASSERT_TRUE(a->TryCharge(42, 0));
  auto probe = Ledger::Open(path_, &error);
  auto slots = probe->Slots(/*check_alive=*/true);
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0].pid, static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(slots[0].pidns_inode, ProcessIdentity::Current().pidns_inode);
  EXPECT_NE(slots[0].start_time_ticks, 0u);
  EXPECT_EQ(slots[0].used_bytes, 42u);
  EXPECT_TRUE(slots[0].alive);
  probe->SetHostPid(slots[0].index, 4242);
  EXPECT_EQ(probe->Slots(false)[0].host_pid, 4242u);
}

// A process that holds memory and is SIGKILLed gives it back at the next reclaim, and a new
// process can take its slot; nobody else's usage is touched.
TEST_F(LedgerTest, SigkilledHolderIsReclaimed) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 4, &error)) << error;
  auto survivor = OpenClaimed();
  ASSERT_TRUE(survivor->TryCharge(100, 1000));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::string e;
    auto l = Ledger::Open(path_, &e);
    if (l == nullptr || !l->Claim(ProcessIdentity::Current(), &e) || !l->TryCharge(800, 1000)) {
      ::_exit(1);
    }
    char ok = 'k';
    if (::write(ready[1], &ok, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  EXPECT_EQ(survivor->Used(), 900u);
  EXPECT_FALSE(survivor->TryCharge(200, 1000) && (survivor->Uncharge(200), true));
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  // The dead child's 800 bytes no longer stand in the way: the charge reclaims them itself.
  EXPECT_TRUE(survivor->TryCharge(200, 1000));
  EXPECT_EQ(survivor->Used(), 300u);
  EXPECT_EQ(survivor->header()->reclaimed_slots.load(), 1u);
  EXPECT_EQ(survivor->header()->reclaimed_bytes.load(), 800u);
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_F(LedgerTest, ForkChildAbandonsTheParentsSlot) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 4, &error)) << error;
  auto parent = OpenClaimed();
  ASSERT_TRUE(parent->TryCharge(300, 1000));
  const int parent_slot = parent->slot_index();
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    parent->AbandonAfterFork();
    std::string e;
    bool ok = parent->ReopenAfterFork(&e) && parent->Claim(ProcessIdentity::Current(), &e) &&
              parent->slot_index() != parent_slot && parent->OwnUsed() == 0 &&
              parent->TryCharge(500, 1000) && parent->Used() == 800 &&
              !parent->TryCharge(300, 1000);
    parent->Release();
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(parent->slot_index(), parent_slot);
  EXPECT_EQ(parent->Used(), 300u);
  EXPECT_EQ(parent->ReclaimDead().slots, 0u);  // the child released its own slot
}

// Threads with their own slots race to reserve; what they hold together never passes the limit.
TEST_F(LedgerTest, ConcurrentReservationsNeverPassTheLimit) {
  std::string error;
  ASSERT_TRUE(Ledger::Create(path_, kUuid, 16, &error)) << error;
  const uint64_t limit = 1'000'000;
  std::atomic<uint64_t> committed{0};
  std::atomic<bool> violated{false};
  std::atomic<uint64_t> granted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      auto l = OpenClaimed();
      std::mt19937_64 rng(static_cast<uint64_t>(t) * 7919);
      std::vector<uint64_t> held;
      for (int i = 0; i < 4000; ++i) {
        if (held.empty() || rng() % 3 != 0) {
          uint64_t size = 1 + rng() % 200'000;
          if (l->TryCharge(size, limit)) {
            if (committed.fetch_add(size) + size > limit) violated = true;
            held.push_back(size);
            ++granted;
          } else {
            ++refused;
          }
        } else {
          uint64_t size = held.back();
          held.pop_back();
          committed.fetch_sub(size);
          l->Uncharge(size);
        }
      }
      for (uint64_t size : held) {
        committed.fetch_sub(size);
        l->Uncharge(size);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(violated.load());
  EXPECT_GT(granted.load(), 0u);
  EXPECT_GT(refused.load(), 0u);  // the limit was reached
}

TEST(PrivateLedgerTest, CapsOneProcess) {
  auto l = Ledger::Private(kUuid);
  ASSERT_NE(l, nullptr);
  std::string error;
  ASSERT_TRUE(l->Claim(ProcessIdentity::Current(), &error));
  EXPECT_TRUE(l->TryCharge(70, 100));
  EXPECT_FALSE(l->TryCharge(31, 100));
  EXPECT_EQ(l->ReclaimDead().slots, 0u);
  EXPECT_EQ(l->Used(), 70u);
}

}  // namespace
}  // namespace tessera::shim
