#include "agent/pods/usage_meter.h"

#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

constexpr int64_t kS = 1'000'000'000;
constexpr char kGpu[] = "GPU-6f1c2a9e-0000-4000-8000-000000000000";

TEST(UsageMeterTest, ThePodAloneOnAGpuIsChargedItsBusyTime) {
  UsageMeter m;
  m.Observe(kGpu, 10 * kS, 900, {"a"});  // starts the clock
  EXPECT_EQ(m.gpu(kGpu)->sampled_ns, 0u);
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), std::nullopt);
  m.Observe(kGpu, 11 * kS, 600, {"a"});
  UsageMeter::Charge c = m.Observe(kGpu, 13 * kS, 250, {"a"});
  EXPECT_EQ(c.elapsed_ns, uint64_t{2 * kS});
  EXPECT_EQ(c.busy_ns, uint64_t{kS / 2});
  EXPECT_EQ(m.gpu(kGpu)->sampled_ns, uint64_t{3 * kS});
  EXPECT_EQ(m.gpu(kGpu)->busy_ns, uint64_t{kS * 6 / 10 + 2 * kS / 4});
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), m.gpu(kGpu)->busy_ns);
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, 0u);
}

TEST(UsageMeterTest, TimeOfSeveralRunningPodsWithoutReportsOrNoneIsUnattributed) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {});
  m.Observe(kGpu, kS, 500, {"a", "b"});  // neither has a shim to say whose
  m.Observe(kGpu, 2 * kS, 400, {});      // busy with no pod's process: someone else's
  m.Observe(kGpu, 3 * kS, 1000, {"b"});
  EXPECT_EQ(m.gpu(kGpu)->busy_ns, uint64_t{kS / 2 + kS * 4 / 10 + kS});
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, uint64_t{kS / 2 + kS * 4 / 10});
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), std::nullopt);
  EXPECT_EQ(m.pod_busy_ns("b", kGpu), uint64_t{kS});
}

TEST(UsageMeterTest, AGapOrAClockGoingBackChargesNothing) {
  UsageMeter m;
  m.Observe(kGpu, 5 * kS, 1000, {"a"});
  m.Skip(kGpu);                          // the GPU gave no figure
  m.Observe(kGpu, 9 * kS, 1000, {"a"});  // restarts the clock: the 4 s are not guessed
  m.Observe(kGpu, 8 * kS, 1000, {"a"});  // backwards: restarts again
  m.Observe(kGpu, 9 * kS, 2000, {"a"});  // over 100%: counted as 100%
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{kS});
  m.Forget("a");
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), std::nullopt);
  EXPECT_EQ(m.gpu(kGpu)->busy_ns, uint64_t{kS});  // the GPU's own count stays
  EXPECT_EQ(m.gpu("GPU-other"), nullptr);
}

TEST(UsageMeterTest, TheDevicesRecordIsChargedOverTheTimeItCoversNotTheInterval) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {"a"});
  // The record's samples cover 0.83 s of the second (they trail the observation), then 1.17 s.
  m.Observe(kGpu, kS, 600, {"a"}, {}, 833'000'000);
  m.Observe(kGpu, 2 * kS, 600, {"a"}, {}, 1'167'000'000);
  EXPECT_EQ(m.gpu(kGpu)->sampled_ns, uint64_t{2 * kS});
  EXPECT_EQ(m.gpu(kGpu)->busy_ns, uint64_t{499'800'000 + 700'200'000});
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{1'200'000'000});
}

using Reports = std::map<std::string, UsageMeter::Report>;
constexpr int64_t kMs = 1'000'000;

// Reports of counters (ns) without caps.
Reports Counters(std::initializer_list<std::pair<const char*, int64_t>> counters) {
  Reports out;
  for (const auto& [uid, ns] : counters) out[uid] = {static_cast<uint64_t>(ns), 0};
  return out;
}

TEST(UsageMeterTest, RunningPodsThatReportUnderTheDeviceGetWhatTheyReported) {
  UsageMeter m;
  // The first observation reads the starting points (the counters are since each shim started).
  m.Observe(kGpu, 10 * kS, 0, {"a", "b", "c"}, Counters({{"a", 5 * kS}, {"b", 0}, {"c", 7}}));
  // The header's second example: 0.15 + 0.30 + 0.25 s of a 0.80 s busy second.
  UsageMeter::Charge c =
      m.Observe(kGpu, 11 * kS, 800, {"a", "b", "c"},
                Counters({{"a", 5 * kS + 150 * kMs}, {"b", 300 * kMs}, {"c", 7 + 250 * kMs}}));
  EXPECT_TRUE(c.rejected.empty());
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{150 * kMs});
  EXPECT_EQ(m.pod_busy_ns("b", kGpu), uint64_t{300 * kMs});
  EXPECT_EQ(m.pod_busy_ns("c", kGpu), uint64_t{250 * kMs});
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, uint64_t{100 * kMs});
  EXPECT_EQ(m.gpu(kGpu)->busy_ns, uint64_t{800 * kMs});
}

TEST(UsageMeterTest, ReportsOverTheDeviceAreScaledToIt) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {"a", "b", "c"}, Counters({{"a", 0}, {"b", 0}, {"c", 0}}));
  // The header's worked example: 0.15 + 0.30 + 0.45 = 0.90 s reported, 0.80 s busy.
  m.Observe(kGpu, kS, 800, {"a", "b", "c"},
            Counters({{"a", 150 * kMs}, {"b", 300 * kMs}, {"c", 450 * kMs}}));
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{133'333'333});
  EXPECT_EQ(m.pod_busy_ns("b", kGpu), uint64_t{266'666'666});
  EXPECT_EQ(m.pod_busy_ns("c", kGpu), uint64_t{400'000'000});
  // Only the rounding is left: the pods' sum and the unattributed time make the device's.
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, uint64_t{1});
  EXPECT_EQ(m.gpu(kGpu)->busy_ns, uint64_t{800 * kMs});
}

TEST(UsageMeterTest, APodWithoutAReportLeavesItsTimeUnattributed) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {"a", "noshim"}, Counters({{"a", 0}}));
  m.Observe(kGpu, kS, 900, {"a", "noshim"}, Counters({{"a", 400 * kMs}}));
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{400 * kMs});
  EXPECT_EQ(m.pod_busy_ns("noshim", kGpu), std::nullopt);
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, uint64_t{500 * kMs});
  // A pod whose first reading this is only starts from it.
  m.Observe(kGpu, 2 * kS, 900, {"a", "late"}, Counters({{"a", 800 * kMs}, {"late", 9 * kS}}));
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{800 * kMs});
  EXPECT_EQ(m.pod_busy_ns("late", kGpu), std::nullopt);
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, uint64_t{1000 * kMs});
  m.Observe(kGpu, 3 * kS, 900, {"a", "late"},
            Counters({{"a", 800 * kMs}, {"late", 9 * kS + 200 * kMs}}));
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{800 * kMs});  // reported nothing: gets nothing
  EXPECT_EQ(m.pod_busy_ns("late", kGpu), uint64_t{200 * kMs});
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, uint64_t{1700 * kMs});
}

TEST(UsageMeterTest, ReportsAreClampedToTheIntervalAndAHardCapsWindow) {
  UsageMeter m;
  Reports r = Counters({{"a", 0}, {"b", 0}});
  r["b"].hard_cap_permille = 300;
  m.Observe(kGpu, 0, 0, {"a", "b"}, r);
  // a: 1.5 s in a 1 s interval (within the slack: a long work interval ending now): 1 s.
  // b: 0.6 s with a 30% hard cap: its window and the slack, 0.4 s.
  r["a"].counter_ns = 1500 * kMs;
  r["b"].counter_ns = 600 * kMs;
  UsageMeter::Charge c = m.Observe(kGpu, kS, 1000, {"a", "b"}, r);
  EXPECT_TRUE(c.rejected.empty());
  // 1.0 + 0.4 > 1 s busy: scaled.
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{kS * 10 / 14});
  EXPECT_EQ(m.pod_busy_ns("b", kGpu), uint64_t{kS * 4 / 14});
  EXPECT_EQ(m.gpu(kGpu)->rejected_reports, 0u);
}

TEST(UsageMeterTest, ACounterGoingBackOrJumpingIsRejectedAndCounted) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {"a", "b"}, Counters({{"a", 5 * kS}, {"b", 0}}));
  // a went back (a rewritten ledger); b rose by 2.5 s in 1 s (beyond the slack).
  UsageMeter::Charge c =
      m.Observe(kGpu, kS, 600, {"a", "b"}, Counters({{"a", 1 * kS}, {"b", 2500 * kMs}}));
  EXPECT_EQ(c.rejected, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(m.gpu(kGpu)->rejected_reports, 2u);
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), std::nullopt);
  EXPECT_EQ(m.pod_busy_ns("b", kGpu), std::nullopt);
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, uint64_t{600 * kMs});
  // The rejected readings are the new starting points: honest increases count again.
  c = m.Observe(kGpu, 2 * kS, 600, {"a", "b"},
                Counters({{"a", 1 * kS + 200 * kMs}, {"b", 2500 * kMs + 300 * kMs}}));
  EXPECT_TRUE(c.rejected.empty());
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{200 * kMs});
  EXPECT_EQ(m.pod_busy_ns("b", kGpu), uint64_t{300 * kMs});
  // A counter at the top of its range going round is a counter going back.
  m.Observe(kGpu, 3 * kS, 600, {"a", "b"}, Counters({{"a", -1}, {"b", 2800 * kMs}}));
  EXPECT_EQ(m.gpu(kGpu)->rejected_reports, 3u);
}

TEST(UsageMeterTest, WhatAnIntervalCouldNotPayIsOwedForThreeMore) {
  UsageMeter m;
  const auto abc = [](int64_t a, int64_t b, int64_t c) {
    return Counters({{"a", a}, {"b", b}, {"c", c}});
  };
  m.Observe(kGpu, 0, 0, {"a", "b", "c"}, abc(0, 0, 0));
  // The header's first example: 0.90 s reported of 0.80 s busy, 0.10 s owed ...
  m.Observe(kGpu, kS, 800, {"a", "b", "c"}, abc(150 * kMs, 300 * kMs, 450 * kMs));
  // ... of which the next second's 0.05 s pays half, before anything stays unattributed ...
  m.Observe(kGpu, 2 * kS, 50, {"a", "b", "c"}, abc(150 * kMs, 300 * kMs, 450 * kMs));
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{133'333'333 + 8'333'333});
  EXPECT_EQ(m.pod_busy_ns("b", kGpu), uint64_t{266'666'666 + 16'666'666});
  EXPECT_EQ(m.pod_busy_ns("c", kGpu), uint64_t{400'000'000 + 24'999'999});  // rounded down
  // ... and the third second's 0.10 s the rest: each is charged what it reported (to the
  // nanosecond of rounding), never more, and 0.05 s stays nobody's.
  m.Observe(kGpu, 3 * kS, 100, {"a", "b", "c"}, abc(150 * kMs, 300 * kMs, 450 * kMs));
  EXPECT_NEAR(*m.pod_busy_ns("a", kGpu), 150 * kMs, 2);
  EXPECT_NEAR(*m.pod_busy_ns("b", kGpu), 300 * kMs, 2);
  EXPECT_NEAR(*m.pod_busy_ns("c", kGpu), 450 * kMs, 2);
  const uint64_t charged =
      *m.pod_busy_ns("a", kGpu) + *m.pod_busy_ns("b", kGpu) + *m.pod_busy_ns("c", kGpu);
  EXPECT_LE(charged, uint64_t{900 * kMs});
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns + charged, m.gpu(kGpu)->busy_ns);

  // A debt is paid by any of the three intervals after its own (a pod that reports nothing new
  // still ages its debts) ...
  const uint64_t a_before = *m.pod_busy_ns("a", kGpu);
  m.Observe(kGpu, 4 * kS, 0, {"a", "b"}, abc(250 * kMs, 300 * kMs, 450 * kMs));  // a owed 0.1 s
  m.Observe(kGpu, 5 * kS, 0, {"a", "b"}, abc(250 * kMs, 300 * kMs, 450 * kMs));
  m.Observe(kGpu, 6 * kS, 0, {"a", "b"}, abc(250 * kMs, 300 * kMs, 450 * kMs));
  m.Observe(kGpu, 7 * kS, 500, {"a", "b"}, abc(250 * kMs, 300 * kMs, 450 * kMs));
  EXPECT_EQ(*m.pod_busy_ns("a", kGpu), a_before + 100 * kMs);
  // ... and dropped after them: the fifth second's time is nobody's.
  m.Observe(kGpu, 8 * kS, 0, {"a", "b"}, abc(350 * kMs, 300 * kMs, 450 * kMs));  // a owed 0.1 s
  for (int64_t s = 9; s <= 11; ++s) {
    m.Observe(kGpu, s * kS, 0, {"a", "b"}, abc(350 * kMs, 300 * kMs, 450 * kMs));
  }
  const uint64_t unattributed = m.gpu(kGpu)->unattributed_ns;
  m.Observe(kGpu, 12 * kS, 500, {"a", "b"}, abc(350 * kMs, 300 * kMs, 450 * kMs));
  EXPECT_EQ(*m.pod_busy_ns("a", kGpu), a_before + 100 * kMs);
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, unattributed + 500 * kMs);

  // Today's reports come first: a pod owed time does not take it from a neighbour's report.
  const uint64_t b_before = *m.pod_busy_ns("b", kGpu);
  m.Observe(kGpu, 13 * kS, 500, {"a", "b"}, abc(350 * kMs + kS, 300 * kMs, 450 * kMs));
  m.Observe(kGpu, 14 * kS, 500, {"a", "b"},
            abc(350 * kMs + kS, 800 * kMs, 450 * kMs));  // a is owed 0.5 s
  EXPECT_EQ(*m.pod_busy_ns("b", kGpu), b_before + 500 * kMs);
}

TEST(UsageMeterTest, ALiarTakesFromTheDeviceNeverFromANeighboursReport) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {"honest", "liar"}, Counters({{"honest", 0}, {"liar", 0}}));
  // The liar claims the whole interval; honest ran 0.3 s of a 0.5 s busy second.
  m.Observe(kGpu, kS, 500, {"honest", "liar"}, Counters({{"honest", 300 * kMs}, {"liar", kS}}));
  // Scaled: honest is charged less than it ran, never more.
  EXPECT_EQ(*m.pod_busy_ns("honest", kGpu), uint64_t{300 * kMs * 5 / 13});
  // The liar claims nothing new: honest gets its report, and what is left is paid out of what
  // both were owed (honest 0.185 s, the liar 0.615 s).
  m.Observe(kGpu, 2 * kS, 500, {"honest", "liar"}, Counters({{"honest", 600 * kMs}, {"liar", kS}}));
  const uint64_t owed_honest = 300 * kMs - 300 * kMs * 5 / 13;
  EXPECT_EQ(*m.pod_busy_ns("honest", kGpu),
            uint64_t{300 * kMs * 5 / 13 + 300 * kMs +
                     owed_honest * 200 * kMs / (owed_honest + (kS - kS * 5 / 13))});
  EXPECT_LE(*m.pod_busy_ns("honest", kGpu), uint64_t{600 * kMs});
}

TEST(UsageMeterTest, ThePodAloneGetsTheDevicesFigureWhateverItReports) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {"a"}, Counters({{"a", 0}}));
  m.Observe(kGpu, kS, 700, {"a"}, Counters({{"a", 10 * kMs}}));
  m.Observe(kGpu, 2 * kS, 300, {"a"}, Counters({{"a", 5 * kMs}}));  // even going back
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), uint64_t{1000 * kMs});
  EXPECT_EQ(m.gpu(kGpu)->unattributed_ns, 0u);
  EXPECT_EQ(m.gpu(kGpu)->rejected_reports, 1u);  // counted all the same
  // Forgotten, its starting point goes too: a pod of the same UID starts afresh.
  m.Forget("a");
  m.Observe(kGpu, 3 * kS, 500, {"a", "b"}, Counters({{"a", 0}}));
  EXPECT_EQ(m.pod_busy_ns("a", kGpu), std::nullopt);
  EXPECT_EQ(m.gpu(kGpu)->rejected_reports, 1u);
}

}  // namespace
}  // namespace tessera::agent
