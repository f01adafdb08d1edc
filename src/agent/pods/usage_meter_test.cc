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

TEST(UsageMeterTest, TimeOfSeveralRunningPodsOrNoneIsUnattributed) {
  UsageMeter m;
  m.Observe(kGpu, 0, 0, {});
  m.Observe(kGpu, kS, 500, {"a", "b"});  // NVML cannot say whose
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

}  // namespace
}  // namespace tessera::agent
