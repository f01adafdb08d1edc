// `tessera plan defrag` and `tessera plan scale-up` as a user runs them, on the example files in
// examples/plan (the examples of docs/planning.md): text a person can act on, JSON, exit statuses.
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_tessera.h"

namespace {

using tessera::cli_testing::Output;
using tessera::cli_testing::RunTessera;
using tessera::cli_testing::Stderr;
using tessera::cli_testing::TempFile;
using ::testing::HasSubstr;

std::string Example(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/examples/plan/" + name;
}
std::string Files() {
  return " --cluster " + Example("cluster.yaml") + " --workload " + Example("workload.yaml");
}

TEST(PlanCli, DefragPrintsMovesAndExitsThreeWhenSomethingHasNoPlan) {
  Output r = RunTessera("plan defrag" + Files());
  EXPECT_EQ(r.status, 3) << r.out;  // gang big needs more capacity
  EXPECT_THAT(r.out, HasSubstr("gang train (4 pods of 1 whole GPU, inside one nvlink-domain):\n"
                               "  gang train (4 pods of 1 whole GPU) fits after 1 move"));
  EXPECT_THAT(r.out, HasSubstr("  1. move infer-5  from dgx-0 GPU 3 (40Gi, 50%)  to dgx-0 GPU 4"));
  EXPECT_THAT(r.out, HasSubstr("gang big (3 pods of 8 whole GPUs, inside one rack):\n"
                               "  impossible without more capacity"));

  Output train = RunTessera("plan defrag --job train" + Files());
  EXPECT_EQ(train.status, 0) << train.out;
  EXPECT_THAT(train.out, ::testing::Not(HasSubstr("gang big")));
}

TEST(PlanCli, DefragJsonNamesEveryMoveAndPlacement) {
  Output r = RunTessera("plan defrag --json --job train,big" + Files(), Stderr::kDiscarded);
  ASSERT_EQ(r.status, 3) << r.out;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["policy"], "tessera");
  EXPECT_EQ(doc["max_moves"], 4);
  ASSERT_EQ(doc["plans"].size(), 2u);
  const nlohmann::json& train = doc["plans"][0];
  EXPECT_EQ(train["gang"], "train");
  EXPECT_EQ(train["verdict"], "plan");
  EXPECT_EQ(train["proven_minimal"], true);
  EXPECT_EQ(train["whole_gpus_moved"], 0);
  ASSERT_EQ(train["moves"].size(), 1u);
  EXPECT_EQ(train["moves"][0]["pod"], "infer-5");
  EXPECT_EQ(train["moves"][0]["from"]["node"], "dgx-0");
  EXPECT_EQ(train["moves"][0]["to"]["gpus"][0]["memory_mib"], 40960);
  ASSERT_EQ(train["placements"].size(), 4u);
  for (const nlohmann::json& p : train["placements"]) EXPECT_EQ(p["node"], "dgx-0");
  EXPECT_EQ(doc["plans"][1]["verdict"], "needs-capacity");
}

// The example's train gang made elastic (12 members, min 4; 12 never fit one NVLink domain): the
// defrag plan is for the 4 it starts with, a new 8-GPU node starts it with 8; both say so.
TEST(PlanCli, AnElasticGangIsPlannedForItsMin) {
  std::ifstream in(Example("workload.yaml"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string train = "    replicas: 4\n";
  const std::string gang = "    gang: {size: 4, topology: nvlink-domain, mode: required}\n";
  size_t at = text.find(gang);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, gang.size(),
               "    gang: {size: 12, min: 4, topology: nvlink-domain, mode: required}\n");
  at = text.rfind(train, at);
  ASSERT_NE(at, std::string::npos);
  text.replace(at, train.size(), "    replicas: 12\n");
  const std::string files = " --cluster " + Example("cluster.yaml") + " --workload " +
                            TempFile("plan_cli_elastic.yaml", text);

  Output d = RunTessera("plan defrag --job train" + files);
  EXPECT_EQ(d.status, 0) << d.out;
  EXPECT_THAT(d.out, HasSubstr("gang train (12 pods of 1 whole GPU, inside one nvlink-domain, "
                               "starts with 4 of 12):\n"
                               "  gang train (4 pods of 1 whole GPU: it starts with 4 of its 12 "
                               "members) fits after 1 move"));
  EXPECT_THAT(d.out, HasSubstr("  gang train starts with these 4 of its 12 members (its min); the "
                               "other 8 join as room frees up, with no moves"));
  Output j = RunTessera("plan defrag --json --job train" + files, Stderr::kDiscarded);
  ASSERT_EQ(j.status, 0) << j.out;
  nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["plans"][0]["starts_with"], 4);
  EXPECT_EQ(doc["plans"][0]["pods"].size(), 12u);
  EXPECT_EQ(doc["plans"][0]["placements"].size(), 4u);

  Output s =
      RunTessera("plan scale-up --job train --templates " + Example("templates.yaml") + files);
  EXPECT_EQ(s.status, 0) << s.out;
  EXPECT_THAT(s.out, HasSubstr("  * hgx-h100: 1 node (8 GPUs) run 8 of 12 waiting pods\n"
                               "      gang train starts with 8 of its 12 members (min 4); the "
                               "others join as room frees up"));
  EXPECT_THAT(s.out, HasSubstr("add 1 x hgx-h100 (8 GPUs): every waiting pod or gang starts (8 of "
                               "the 12 waiting pods run)"));
}

TEST(PlanCli, DefragBudgetPinsAndBadInput) {
  // Pinning the infer job leaves no plan for train within the budget of 1.
  Output pinned = RunTessera("plan defrag --job train --pin infer --max-moves 1" + Files());
  EXPECT_EQ(pinned.status, 3) << pinned.out;
  EXPECT_THAT(pinned.out, HasSubstr("no plan of at most 1 move makes room for gang train"));

  Output job = RunTessera("plan defrag --job nosuch" + Files());
  EXPECT_EQ(job.status, 2);
  EXPECT_THAT(job.out, HasSubstr("tessera plan defrag: no job \"nosuch\" in"));
  Output missing = RunTessera("plan defrag --cluster " + Example("cluster.yaml"));
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.out, HasSubstr("--workload is required"));
  std::string bad = TempFile("bad_workload.yaml", "jobs:\n  - name: x\n    gpu: {count: two}\n");
  Output parse =
      RunTessera("plan defrag --cluster " + Example("cluster.yaml") + " --workload " + bad);
  EXPECT_EQ(parse.status, 2);
  EXPECT_THAT(parse.out, HasSubstr("bad_workload.yaml"));

  std::string fits = TempFile("fits.yaml", "jobs:\n  - name: one\n    gpu: {count: 1}\n");
  Output none =
      RunTessera("plan defrag --cluster " + Example("cluster.yaml") + " --workload " + fits);
  EXPECT_EQ(none.status, 0);
  EXPECT_THAT(none.out, HasSubstr("nothing waits: nothing to plan"));
}

TEST(PlanCli, AClusterFilesRunningPodsAndCordonedNodesCount) {
  // Two 2-GPU nodes; b is cordoned and a's GPU 0 is held by a running pod: a job of 2 whole GPUs
  // has no room, and the running pod is not moved (the file says what it holds, not what it
  // asked for). Read as empty, the file would let the job fit on either node.
  std::string cluster = TempFile("running_cluster.yaml", R"(nodes:
  - name: a
    cpu: 64
    memory: 512Gi
    gpus: {model: A100-80GB, count: 2, memory: 80Gi, interconnect: pcie}
  - name: b
    cpu: 64
    memory: 512Gi
    gpus: {model: A100-80GB, count: 2, memory: 80Gi, interconnect: pcie}
    cordoned: true
running:
  - pod: team/holder
    node: a
    assignment: '{"version": 1, "node": "a", "gpus": [{"index": 0, "memory_mib": 81920, "compute_milli": 1000, "exclusive": true}]}'
)");
  std::string workload = TempFile("two_gpus.yaml", "jobs:\n  - name: two\n    gpu: {count: 2}\n");
  Output r = RunTessera("plan defrag --cluster " + cluster + " --workload " + workload);
  EXPECT_EQ(r.status, 3) << r.out;
  EXPECT_THAT(r.out, HasSubstr("already there: 1 running pods (not moved), 1 cordoned nodes"));
  EXPECT_THAT(r.out, HasSubstr("workload: 0 pods placed, 1 wait"));
  EXPECT_THAT(r.out, HasSubstr("impossible without more capacity"));

  Output up = RunTessera("plan scale-up --cluster " + cluster + " --workload " + workload +
                         " --templates " + Example("templates.yaml"));
  EXPECT_THAT(up.out, HasSubstr("already there: 1 running pods"));
}

TEST(PlanCli, ScaleUpRecommendsATemplate) {
  const std::string templates = " --templates " + Example("templates.yaml");
  Output r = RunTessera("plan scale-up" + Files() + templates);
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("  * hgx-h100: 4 nodes (32 GPUs) run 7 of 7 waiting pods"));
  EXPECT_THAT(r.out, HasSubstr("add 4 x hgx-h100 (32 GPUs): every waiting pod (7) runs"));

  Output j =
      RunTessera("plan scale-up --json --job train" + Files() + templates, Stderr::kDiscarded);
  ASSERT_EQ(j.status, 0) << j.out;
  nlohmann::json doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["recommended"], "hgx-h100");
  EXPECT_EQ(doc["options"][0]["nodes"], 1);
  EXPECT_EQ(doc["options"][0]["pods_placed"], 4);
  EXPECT_EQ(doc["options"][2]["template"], "l40s-4gpu");
  EXPECT_EQ(doc["options"][2]["unplaced"][0]["pods"].size(), 4u);

  // Too few nodes allowed: exit 3, and what still waits is named.
  Output few = RunTessera("plan scale-up --max-nodes 2" + Files() + templates);
  EXPECT_EQ(few.status, 3) << few.out;
  EXPECT_THAT(few.out, HasSubstr("still waiting: big-0, big-1, big-2"));
  EXPECT_THAT(few.out, HasSubstr("no template runs them all"));

  Output missing = RunTessera("plan scale-up" + Files());
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.out, HasSubstr("--templates is required"));
}

TEST(PlanCli, HelpExplainsTheAnswersAndExitStatuses) {
  Output d = RunTessera("plan defrag --help");
  EXPECT_EQ(d.status, 0);
  EXPECT_THAT(d.out, HasSubstr("needs-capacity (impossible without more capacity"));
  EXPECT_THAT(d.out, HasSubstr("Exit status: 0 every pod or gang planned for fits now"));
  Output u = RunTessera("plan scale-up --help");
  EXPECT_EQ(u.status, 0);
  EXPECT_THAT(u.out, HasSubstr("--templates"));
  Output p = RunTessera("plan");
  EXPECT_EQ(p.status, 2);
}

}  // namespace
