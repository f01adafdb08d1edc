// Fidelity of the FGD paper's baselines: on the `default` trace with the paper's seeds 42..51,
// each policy's mean GPU allocation at 130% arrived demand is within 0.5 percentage points of the
// paper's table (data/reference/fgd-results.md), the criterion. And tessera allocates
// at least as much as FGD. The same runs as `bench/fgd_table.sh default`, in about 20 s.
#include "gtest/gtest.h"
#include "sim/fgd_replay.h"
#include "sim/paper_reference.h"
#include "sim/testing/trace_testing.h"
#include "sim/trace_runs.h"

namespace tessera::sim {
namespace {

TEST(Fidelity, PaperBaselinesOnDefaultWithinHalfAPoint) {
  const std::string data = TESSERA_DATA_DIR;
  absl::StatusOr<PaperTable> paper = ReadFgdReference(data + "/reference/fgd-results.md");
  ASSERT_TRUE(paper.ok()) << paper.status();
  ASSERT_TRUE(paper->count("default"));
  absl::StatusOr<testing::AlibabaWorkload> w = testing::LoadAlibaba("default");
  ASSERT_TRUE(w.ok()) << w.status();
  const std::vector<std::string> policies = {"random",  "dotprod", "gpu-clustering", "gpu-packing",
                                             "bestfit", "fgd",     "tessera"};
  std::vector<uint64_t> seeds;
  for (uint64_t s = 42; s <= 51; ++s) seeds.push_back(s);
  absl::StatusOr<std::vector<PolicyRuns>> runs =
      RunFgdSeeds(w->cluster, w->trace, policies, seeds, 1.3, 2, nullptr);
  ASSERT_TRUE(runs.ok()) << runs.status();
  std::map<std::string, double> ours;
  for (const PolicyRuns& p : *runs) ours[p.policy] = p.mean.final_allocation;
  for (const auto& [policy, published] : paper->at("default")) {
    ASSERT_TRUE(ours.count(policy)) << policy;
    EXPECT_NEAR(ours[policy], published, 0.5) << policy;
  }
  EXPECT_GE(ours["tessera"], ours["fgd"]);
  EXPECT_GE(ours["tessera"], paper->at("default").at("fgd"));
}

// In a cluster where every GPU ask is a share (gpushare100), tessera opens free GPUs for small
// shares (core/policy/tessera.cc, "Free GPUs in a sharing cluster"): on seed 42 that takes it from
// 88.52% to 89.37%; FGD gets 86.65%.
TEST(Fidelity, TesseraOnASharingClusterOpensFreeGpus) {
  absl::StatusOr<testing::AlibabaWorkload> w = testing::LoadAlibaba("gpushare100");
  ASSERT_TRUE(w.ok()) << w.status();
  FgdRunOptions o;
  o.policy = "tessera";
  o.seed = 42;
  o.typical_tasks = TraceTypicalTasks(w->trace, w->cluster);
  absl::StatusOr<FgdRunResult> run = RunFgdProtocol(w->cluster, w->trace, o);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_GE(run->final_allocation, 89.0);
}

TEST(PaperReference, ParsesTheFirstTable) {
  absl::StatusOr<PaperTable> t = ParseFgdReference(
      "# x\n\n| workload | Random | FGD |\n|---|---:|---:|\n| default | 87.47 | 95.39 |\n"
      "| cpu050 | 91.24 | 95.21 |\n\n| arrived % | Random | FGD |\n|---|---|---|\n| 80 | 1 | 2 |\n",
      "ref.md");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), 2u);
  EXPECT_DOUBLE_EQ(t->at("default").at("random"), 87.47);
  EXPECT_DOUBLE_EQ(t->at("cpu050").at("fgd"), 95.21);
  EXPECT_FALSE(ParseFgdReference("| workload | FGD |\n| default | x |\n", "r.md").ok());
  EXPECT_FALSE(ParseFgdReference("nothing\n", "r.md").ok());
}

}  // namespace
}  // namespace tessera::sim
