// Several processes of one pod share one cap: reservations are atomic across processes, a
// process that dies (SIGKILL included) gives its memory back at once, fork children and threads
// are accounted as what they are, and random sequences of every allocation path across
// processes never let the driver hold more than the cap, with free = cap - used throughout.
#include <random>
#include <thread>

#include "shim_testing.h"

namespace tessera::shim::testing {
namespace {

TEST(MultiProcessTest, TwoProcessesShareOneCap) {
  Node node;
  node.Share("pod", 0, 1 * kGiB);
  Client a(node, "pod"), b(node, "pod");
  ASSERT_EQ(a.Do("init"), "ok");
  ASSERT_EQ(b.Do("init"), "ok");
  ASSERT_EQ(a.Do("alloc x 629145600"), "ok");  // 600 MiB
  EXPECT_EQ(b.Do("alloc y 629145600"), "err 2");
  EXPECT_EQ(b.Values("meminfo"), (std::vector<uint64_t>{424 * kMiB, 1 * kGiB}));
  ASSERT_EQ(b.Do("alloc y 419430400"), "ok");  // 400 MiB: exactly what is left but 24 MiB
  EXPECT_EQ(a.Values("meminfo"), (std::vector<uint64_t>{24 * kMiB, 1 * kGiB}));
  ASSERT_EQ(a.Do("free x"), "ok");
  EXPECT_EQ(b.Do("alloc z 524288000"), "ok");
  EXPECT_EQ(node.PhysicalBytes(0), 900 * kMiB);
}

// A process killed while holding most of the cap: the next allocation by another process of the
// pod succeeds at once (it reclaims the dead slot itself), and the agent's reaper does the same
// without waiting for anyone to need the memory.
TEST(MultiProcessTest, SigkilledHolderGivesItsMemoryBackAtOnce) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  Client holder(node, "pod"), other(node, "pod");
  ASSERT_EQ(holder.Do("init"), "ok");
  ASSERT_EQ(other.Do("init"), "ok");
  ASSERT_EQ(holder.Do("alloc x 943718400"), "ok");  // 900 MiB
  ASSERT_EQ(other.Do("alloc y 524288000"), "err 2");
  holder.Kill();
  EXPECT_EQ(node.PhysicalBytes(0), 0u);            // the driver freed it
  EXPECT_EQ(other.Do("alloc y 524288000"), "ok");  // first try after the kill
  EXPECT_EQ(seg.Inspect().reclaimed_bytes, 900 * kMiB);

  Client second(node, "pod");
  ASSERT_EQ(second.Do("init"), "ok");
  ASSERT_EQ(second.Do("alloc z 314572800"), "ok");
  second.Kill();
  ReapResult reaped = seg.Reap();  // the agent's maintenance step
  EXPECT_EQ(reaped.slots, 1u);
  EXPECT_EQ(reaped.bytes, 300 * kMiB);
  EXPECT_EQ(seg.Inspect().used_bytes, 500 * kMiB);
  EXPECT_EQ(other.Values("meminfo"), (std::vector<uint64_t>{524 * kMiB, 1 * kGiB}));
}

// An exported allocation outlives its creator, killed after handing it on: the importer's hold
// keeps it counted (the driver keeps it), until the importer dies too.
TEST(MultiProcessTest, ExportedMemoryStaysCountedAfterItsCreatorIsKilled) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  Client creator(node, "pod"), holder(node, "pod");
  ASSERT_EQ(creator.Do("init"), "ok");
  ASSERT_EQ(holder.Do("init"), "ok");
  const std::string sock = node.dir() + "/vmm.sock";
  ASSERT_EQ(holder.Do("fdlisten " + sock), "ok");
  ASSERT_EQ(creator.Do("vmm x 314572800 device"), "ok");  // 300 MiB
  ASSERT_EQ(creator.Do("vmmsend x " + sock), "ok");
  ASSERT_EQ(holder.Do("vmmimport x"), "ok");
  creator.Kill();
  seg.Reap();
  EXPECT_EQ(node.PhysicalBytes(0), 300 * kMiB);
  EXPECT_EQ(seg.Inspect().used_bytes, 300 * kMiB);
  EXPECT_EQ(seg.Inspect().shared_bytes, 300 * kMiB);
  EXPECT_EQ(holder.Do("alloc y 838860800"), "err 2");  // 800 MiB
  holder.Kill();
  EXPECT_EQ(node.PhysicalBytes(0), 0u);
  seg.Reap();
  EXPECT_EQ(seg.Inspect().used_bytes, 0u);
}

// Memory exported over CUDA IPC outlives its exporter, killed after handing the handle on: the
// opener's hold keeps it counted, until the opener dies too.
TEST(MultiProcessTest, IpcMemoryStaysCountedAfterItsExporterIsKilled) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  Client exporter(node, "pod"), opener(node, "pod");
  ASSERT_EQ(exporter.Do("init"), "ok");
  ASSERT_EQ(opener.Do("init"), "ok");
  ASSERT_EQ(exporter.Do("alloc x 314572800"), "ok");  // 300 MiB
  std::string handle = exporter.Do("ipcget x");
  ASSERT_EQ(handle.rfind("ok ", 0), 0u) << handle;
  ASSERT_EQ(opener.Do("ipcopen x " + handle.substr(3)), "ok");
  exporter.Kill();
  seg.Reap();
  EXPECT_EQ(seg.Inspect().used_bytes, 300 * kMiB);
  EXPECT_EQ(seg.Inspect().shared_bytes, 300 * kMiB);
  EXPECT_EQ(opener.Do("alloc y 838860800"), "err 2");  // 800 MiB
  opener.Kill();
  seg.Reap();
  EXPECT_EQ(seg.Inspect().used_bytes, 0u);
}

// The fallback when a process has no slot in the pod's ledger used to be the whole cap for that
// process alone, so N such processes got N caps. Missing, malformed or full: each gets only the
// small allowance, and says why.
TEST(MultiProcessTest, WithoutALedgerSlotAProcessGetsOnlyTheSmallAllowance) {
  const std::string ledger_file = std::string("/ledger/") + Node::Uuid(0) + contract::kLedgerSuffix;
  for (const char* how : {"missing", "malformed", "full"}) {
    SCOPED_TRACE(how);
    Node node;
    node.Share("pod", 0, 1 * kGiB, 0, ComputeMode::kHardCap,
               /*slots=*/std::string(how) == "full" ? 1 : 64);
    const std::string path = node.PodDir("pod") + ledger_file;
    std::unique_ptr<Client> first;
    if (std::string(how) == "missing") {
      ASSERT_EQ(::unlink(path.c_str()), 0);
    } else if (std::string(how) == "malformed") {
      FILE* f = std::fopen(path.c_str(), "r+");
      ASSERT_NE(f, nullptr);
      std::fputs("not a ledger", f);
      std::fclose(f);
    } else {
      first = std::make_unique<Client>(node, "pod");  // takes the only slot
      ASSERT_EQ(first->Do("init"), "ok");
      ASSERT_EQ(first->Do("alloc a 104857600"), "ok");
    }
    Client a(node, "pod"), b(node, "pod");
    for (Client* c : {&a, &b}) {
      ASSERT_EQ(c->Do("init"), "ok");
      EXPECT_EQ(c->Do("alloc big 629145600"), "err 2");  // 600 MiB each: N caps before
      EXPECT_EQ(c->Do("alloc small 33554432"), "ok");    // 32 MiB: within the allowance
      EXPECT_EQ(c->Values("meminfo"), (std::vector<uint64_t>{32 * kMiB, 64 * kMiB}));
    }
    std::string status = a.Do("status");
    const char* cause = std::string(how) == "missing"     ? "cannot open ledger"
                        : std::string(how) == "malformed" ? "bad magic"
                                                          : "all 1 process slots";
    EXPECT_NE(status.find(cause), std::string::npos) << status;
  }
}

// Lock order: two threads allocating from two pools near the cap are both refused at once and
// each re-reads the other's pool. Holding its own pool's mutex while waiting for the other's,
// they deadlocked; the deadline only catches a hang.
TEST(MultiProcessTest, TwoPoolsNearTheCapNeverDeadlock) {
  Node node;
  node.Share("pod", 0, 1 * kGiB);
  Client app(node, "pod");
  ASSERT_EQ(app.Do("init"), "ok");
  std::string answer = app.DoWithin("poolrace 3000 629145600", 300);  // 600 MiB each
  EXPECT_EQ(answer.rfind("ok ", 0), 0u) << answer;
}

// A process killed while it holds the ledger's locks (its slot's, mid-allocation, from several
// threads, with stream-ordered pools in use) stops no one: another process of the pod then gets
// the whole cap, within a deadline that only catches a hang.
TEST(MultiProcessTest, AProcessKilledWhileHoldingItsLocksStopsNoOne) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  Client survivor(node, "pod");
  ASSERT_EQ(survivor.Do("init"), "ok");
  for (int round = 0; round < 4; ++round) {
    Client victim(node, "pod");
    ASSERT_EQ(victim.Do("init"), "ok");
    ASSERT_EQ(victim.Do("bgthreads 4 104857600 1000000"), "ok");
    for (int i = 0; i < 1 + round * 50; ++i) victim.Do("pid");  // a little later each round
    victim.Kill();
    EXPECT_EQ(survivor.DoWithin("alloc all 1073741824", 120), "ok");
    EXPECT_EQ(survivor.DoWithin("free all", 120), "ok");
  }
  EXPECT_EQ(seg.Inspect().used_bytes, 0u);
}

// A fork child is a process of its own: its allocations go to its own slot and come back when it
// exits; the parent's slot and usage are untouched by the fork.
TEST(MultiProcessTest, ForkChildrenAndExec) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  Client parent(node, "pod");
  ASSERT_EQ(parent.Do("init"), "ok");
  ASSERT_EQ(parent.Do("alloc p 314572800"), "ok");  // 300 MiB
  // The child sees the pod's usage and the cap like any process of the pod.
  EXPECT_EQ(parent.Do("forkrun alloc c 838860800"), "ok err 2");  // 800 MiB: over
  EXPECT_EQ(parent.Do("forkrun alloc c 629145600"), "ok ok");     // 600 MiB
  seg.Reap();
  EXPECT_EQ(seg.Inspect().used_bytes, 300 * kMiB);
  EXPECT_EQ(seg.Inspect().processes.size(), 1u);
  EXPECT_EQ(parent.Do("alloc q 734003200"), "ok");  // 700 MiB: the child's 600 came back
  // exec: a new image (each client is fork + exec of the test) loads the shim afresh and joins.
  Client exec_child(node, "pod");
  ASSERT_EQ(exec_child.Do("init"), "ok");
  EXPECT_EQ(exec_child.Values("meminfo"), (std::vector<uint64_t>{24 * kMiB, 1 * kGiB}));
  EXPECT_EQ(exec_child.Do("alloc e 33554432"), "err 2");
  EXPECT_EQ(node.PhysicalBytes(0), 1000 * kMiB);
}

TEST(MultiProcessTest, ThreadsOfOneProcess) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  Client app(node, "pod");
  ASSERT_EQ(app.Do("init"), "ok");
  ASSERT_EQ(app.Do("threads 8 134217728 60"), "ok");  // 8 x 128 MiB: some refused, none lost
  ASSERT_EQ(app.Do("sync"), "ok");
  EXPECT_EQ(seg.Inspect().used_bytes, node.PhysicalBytes(0));
  EXPECT_EQ(app.Values("meminfo"),
            (std::vector<uint64_t>{1 * kGiB - node.PhysicalBytes(0), 1 * kGiB}));
}

// Many processes starting at once all get slots (no lock files, no waiting on each other).
TEST(MultiProcessTest, SixteenProcessesStartAtOnce) {
  Node node;
  Segment& seg = node.Share("pod", 0, 1 * kGiB);
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 16; ++i) clients.push_back(std::make_unique<Client>(node, "pod"));
  for (auto& c : clients) ASSERT_EQ(c->Do("init"), "ok");
  for (auto& c : clients) ASSERT_EQ(c->Do("alloc a 33554432"), "ok");
  EXPECT_EQ(seg.Inspect().processes.size(), 16u);
  EXPECT_EQ(seg.Inspect().used_bytes, 512 * kMiB);
  for (auto& c : clients) c->Kill();
  EXPECT_EQ(seg.Reap().slots, 16u);
  EXPECT_EQ(seg.Inspect().used_bytes, 0u);
}

// Random sequences of every allocation path across four processes: the driver never holds more
// than the cap, the pod's tally equals the driver's ledger after every step, a refusal is always
// CUDA_ERROR_OUT_OF_MEMORY, and every process sees free = cap - used.
TEST(MultiProcessTest, RandomSequencesKeepTheInvariants) {
  const uint64_t cap = 1 * kGiB;
  for (uint32_t seed : {1u, 2u, 3u}) {
    Node node;
    Segment& seg = node.Share("pod", 0, cap);
    std::vector<std::unique_ptr<Client>> clients;
    std::vector<std::vector<std::pair<std::string, std::string>>> held(4);  // (name, kind)
    for (int i = 0; i < 4; ++i) {
      clients.push_back(std::make_unique<Client>(
          node, "pod", true, i % 2 == 0 ? LoadMode::Dlopen() : LoadMode::Linked()));
      ASSERT_EQ(clients.back()->Do("init"), "ok");
    }
    std::mt19937 rng(seed);
    int granted = 0, refused = 0;
    for (int step = 0; step < 150; ++step) {
      const int who = static_cast<int>(rng() % 4);
      Client& c = *clients[who];
      auto& mine = held[who];
      const std::string name = "n" + std::to_string(step);
      const uint64_t size = (1 + rng() % 160) * kMiB / 2 + rng() % 4096;
      std::string kind, command;
      switch (mine.empty() ? rng() % 6 : rng() % 9) {
        case 0:
          kind = "free";
          command = "alloc " + name + " " + std::to_string(size);
          break;
        case 1:
          kind = "free";
          command = "managed " + name + " " + std::to_string(size);
          break;
        case 2:
          kind = "free";
          command = "pitch " + name + " " + std::to_string(size / 2048) + " 2048";
          break;
        case 3:
          kind = "asyncfree";
          command = "async " + name + " " + std::to_string(size);
          break;
        case 4:
          kind = "vmmfree";
          command = "vmm " + name + " " + std::to_string((size / (2 * kMiB) + 1) * 2 * kMiB) +
                    (rng() % 4 == 0 ? " host" : " device");
          break;
        case 5:
          command = "sync";
          break;
        default: {
          size_t i = rng() % mine.size();
          command = mine[i].second + " " + mine[i].first;
          mine.erase(mine.begin() + static_cast<long>(i));
        }
      }
      std::string answer = c.Do(command);
      if (answer.rfind("ok", 0) == 0) {
        if (!kind.empty()) mine.emplace_back(name, kind);
        ++granted;
      } else {
        EXPECT_EQ(answer, "err 2") << command;
        ++refused;
      }
      const uint64_t physical = node.PhysicalBytes(0);
      ASSERT_LE(physical, cap) << "seed " << seed << " step " << step << ": " << command;
      ASSERT_EQ(seg.Inspect().used_bytes, physical)
          << "seed " << seed << " step " << step << ": " << command;
      if (step % 10 == 0) {
        EXPECT_EQ(clients[rng() % 4]->Values("meminfo"),
                  (std::vector<uint64_t>{cap - physical, cap}));
      }
    }
    EXPECT_GT(granted, 50);
    EXPECT_GT(refused, 0) << "seed " << seed << " never reached the cap";
  }
}

}  // namespace
}  // namespace tessera::shim::testing
