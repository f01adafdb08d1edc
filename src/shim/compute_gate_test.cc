#include "shim/compute_gate.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tessera::shim {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(ComputeGateTest, WindowArithmetic) {
  const int64_t period = 50 * kMs;
  // duty 300, phase 0: open in [0, 15ms) of each period.
  auto w = ComputeGate::At(1000 * period + 5 * kMs, 300, 0, period);
  EXPECT_TRUE(w.open);
  EXPECT_EQ(w.start_ns, 1000 * period);
  EXPECT_EQ(w.target_end_ns, 1000 * period + 15 * kMs);
  EXPECT_EQ(w.next_start_ns, 1001 * period);
  EXPECT_FALSE(ComputeGate::At(1000 * period + 15 * kMs, 300, 0, period).open);
  // phase 500 shifts the window by half a period.
  auto shifted = ComputeGate::At(1000 * period + 5 * kMs, 300, 500, period);
  EXPECT_FALSE(shifted.open);
  EXPECT_EQ(shifted.start_ns, 999 * period + 25 * kMs);
  EXPECT_EQ(shifted.next_start_ns, 1000 * period + 25 * kMs);
  EXPECT_TRUE(ComputeGate::At(1000 * period + 30 * kMs, 300, 500, period).open);
  // No cap: always open.
  EXPECT_TRUE(ComputeGate::At(123, 1000, 0, period).open);
}

TEST(ComputeGateTest, LearnsTheCostOfALaunchAndAdmitsWhatFits) {
  ComputeGate g;
  const int64_t period = 50 * kMs, t0 = 100 * period;
  // Cost unknown: the open window admits anything.
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(g.Admit(t0 + i * 1000, 300, 0, period, nullptr));
  // A drain at 1 ms that lasts until 20 ms: the 10 launches took 2 ms each.
  g.ObserveSync(t0 + 1 * kMs, t0 + 20 * kMs);
  EXPECT_EQ(g.cost_ns(), 2 * kMs);
  // They ran 20 ms in a 15 ms window: 5 ms of debt. Next window: 15 ms less the debt, 2 ms per
  // launch: 5 launches.
  EXPECT_EQ(g.credit_ns(), -5 * kMs);
  int admitted = 0;
  for (int i = 0; i < 20; ++i) admitted += g.Admit(t0 + period + i * 1000, 300, 0, period, nullptr);
  EXPECT_EQ(admitted, 5);
  // The window after: 15 ms, each launch ending by 15 ms give or take half a launch: the 8th ends
  // at 16 ms.
  g.ObserveSync(t0 + period + 9 * kMs, t0 + period + 10 * kMs);  // they took their 10 ms
  admitted = 0;
  for (int i = 0; i < 20; ++i) {
    admitted += g.Admit(t0 + 2 * period + i * 1000, 300, 0, period, nullptr);
  }
  EXPECT_EQ(admitted, 8);
  // A sync that finds the GPU idle bounds the cost from above.
  g.ObserveSync(t0 + 2 * period + 30 * kMs, t0 + 2 * period + 30 * kMs + 10);
  EXPECT_LE(g.cost_ns(), 30 * kMs / 8);
}

TEST(ComputeGateTest, ALaunchLongerThanTheWindowRunsInEveryOtherWindow) {
  ComputeGate g;
  const int64_t period = 50 * kMs, t0 = 100 * period;
  ASSERT_TRUE(g.Admit(t0, 300, 0, period, nullptr));
  g.ObserveSync(t0 + kMs, t0 + 30 * kMs);  // one 30 ms graph
  ASSERT_EQ(g.cost_ns(), 30 * kMs);
  int admitted = 0;
  for (int k = 1; k <= 10; ++k) {
    int64_t t = t0 + k * period;
    if (g.Admit(t, 300, 0, period, nullptr)) {
      ++admitted;
      g.ObserveSync(t + kMs, t + 30 * kMs);
    }
  }
  EXPECT_EQ(admitted, 5);  // 30 ms every 100 ms: 30%
}

// One launch attempt at *t as the hooks make it: admitted at once; else the gate drains the
// stream (the simulated GPU is free at `gpu_free`), which tells it the cost, and tries again; else
// it sleeps until the next window: false, with *t that window's start and nothing launched.
bool AdmitAsTheHooksDo(ComputeGate& g, uint32_t duty, int64_t period, int64_t gpu_free,
                       int64_t* t) {
  if (g.Admit(*t, duty, 0, period, nullptr)) return true;
  const int64_t done = std::max(*t, gpu_free);
  g.ObserveSync(*t, done);
  *t = done;
  if (g.Admit(*t, duty, 0, period, nullptr)) return true;
  *t = ComputeGate::At(*t, duty, 0, period).next_start_ns;
  return false;
}

// A process that launches kernels of one length as fast as the gate lets it, on a simulated GPU
// that runs them back to back, and syncs every `sync_every` launches (as the GPU check's matmul
// loop does); the hooks report its syncs to the gate. Returns the fraction of time the GPU ran it.
double SimulatedShare(uint32_t duty, int64_t kernel_ns, int sync_every, int64_t seconds) {
  ComputeGate g;
  const int64_t period = 50 * kMs;
  const int64_t launch_cost = 5'000;
  int64_t t = 1'000 * period;  // host clock
  const int64_t start = t, end = t + seconds * 1'000 * kMs;
  int64_t gpu_free = t, busy = 0;
  int launches = 0;
  while (t < end) {
    if (!AdmitAsTheHooksDo(g, duty, period, gpu_free, &t)) continue;
    int64_t s = std::max(t, gpu_free);
    gpu_free = s + kernel_ns;
    busy += std::min(gpu_free, end) - std::min(s, end);
    t += launch_cost;
    if (++launches % sync_every == 0) {
      int64_t done = std::max(t, gpu_free);
      g.ObserveSync(t, done);
      t = done;
    }
  }
  return static_cast<double>(busy) / static_cast<double>(end - start);
}

TEST(ComputeGateTest, SimulatedGpuShareMatchesTheDuty) {
  for (uint32_t duty : {100u, 300u, 700u}) {
    for (int64_t kernel : {int64_t{200'000}, int64_t{1'600'000}, 5 * kMs}) {
      for (int sync_every : {1, 50, 1000000}) {
        double share = SimulatedShare(duty, kernel, sync_every, 20);
        EXPECT_NEAR(share, duty / 1000.0, 0.03)
            << "duty " << duty << " kernel " << kernel << "ns sync every " << sync_every;
      }
    }
  }
}

// A program whose kernels change length (a 10 ms graph, then 2 ms kernels, never syncing itself):
// the cost estimate follows within a couple of windows, so the share holds in the second phase.
TEST(ComputeGateTest, FollowsKernelsThatChangeLength) {
  ComputeGate g;
  const int64_t period = 200 * kMs;
  int64_t t = 1'000 * period, gpu_free = t, busy = 0;
  const int64_t switch_at = t + 2'000 * kMs, measure_from = switch_at + 500 * kMs,
                end = switch_at + 3'000 * kMs;
  while (t < end) {
    if (!AdmitAsTheHooksDo(g, 300, period, gpu_free, &t)) continue;
    const int64_t kernel = t < switch_at ? 10 * kMs : 2 * kMs;
    int64_t s = std::max(t, gpu_free);
    gpu_free = s + kernel;
    busy += std::max<int64_t>(0, std::min(gpu_free, end) - std::max(s, measure_from));
    t += 5'000;
  }
  EXPECT_NEAR(static_cast<double>(busy) / (end - measure_from), 0.30, 0.03);
  EXPECT_NEAR(g.cost_ns(), 2 * kMs, kMs / 10);
}

// A program that mixes launches of very different lengths on a simulated GPU: each cycle is the
// launches of `cycle` (GPU nanoseconds each), then the program's own sync. The gate drains and
// sleeps as the hooks do. Returns the fraction of time the GPU ran it, from `measure_from` seconds.
double MixedShare(uint32_t duty, const std::vector<int64_t>& cycle, int64_t seconds,
                  int64_t measure_from_s = 2) {
  ComputeGate g;
  const int64_t period = 50 * kMs;
  int64_t t = 1'000 * period, gpu_free = t, busy = 0;
  const int64_t from = t + measure_from_s * 1'000 * kMs, end = t + seconds * 1'000 * kMs;
  size_t i = 0;
  while (t < end) {
    if (!AdmitAsTheHooksDo(g, duty, period, gpu_free, &t)) continue;
    int64_t s = std::max(t, gpu_free);
    gpu_free = s + cycle[i];
    busy += std::max<int64_t>(0, std::min(gpu_free, end) - std::max(s, from));
    t += 5'000;  // the host's cost of a launch
    if (++i == cycle.size()) {
      i = 0;
      int64_t done = std::max(t, gpu_free);
      g.ObserveSync(t, done);
      t = done;
    }
  }
  return static_cast<double>(busy) / static_cast<double>(end - from);
}

// A hostile tenant hides a long launch among many empty ones (a CUDA graph of 70 ms, then 200
// launches of 10 us, then a sync): the gate's cost per launch is their average, 0.36 ms, so the
// graph was charged as 0.36 ms and ran in every window it was admitted in. Before the gate
// trued up its credit at each sync with what the launches since the last one really took, a 30%
// cap gave this program 0.58 of the GPU (0.48 with the long launch last, 0.75 with two).
TEST(ComputeGateTest, LongLaunchesHiddenAmongShortOnesAreChargedWhatTheyTook) {
  std::vector<int64_t> cycle = {70 * kMs};
  cycle.insert(cycle.end(), 200, 10'000);
  EXPECT_NEAR(MixedShare(300, cycle, 20), 0.30, 0.03);
  // The same with the long launch last, and with two of them.
  std::rotate(cycle.begin(), cycle.begin() + 1, cycle.end());
  EXPECT_NEAR(MixedShare(300, cycle, 20), 0.30, 0.03);
  cycle.push_back(40 * kMs);
  EXPECT_NEAR(MixedShare(300, cycle, 20), 0.30, 0.03);
}

// Two pods with phases that tile the period get their duties, not half of the overlap each.
TEST(ComputeGateTest, TiledPhasesDoNotOverlap) {
  const int64_t period = 50 * kMs;
  int overlap = 0, open_a = 0, open_b = 0;
  for (int64_t t = 100 * period; t < 101 * period; t += kMs / 10) {
    bool oa = ComputeGate::At(t, 300, 0, period).open;
    bool ob = ComputeGate::At(t, 700, 300, period).open;
    open_a += oa;
    open_b += ob;
    overlap += oa && ob;
  }
  EXPECT_EQ(overlap, 0);
  EXPECT_EQ(open_a, 150);
  EXPECT_EQ(open_b, 350);
}

}  // namespace
}  // namespace tessera::shim
