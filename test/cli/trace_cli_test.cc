// `tessera simulate --nodes ... --trace ...` as a user runs it: tables, JSON in the issue's
// shape, counted failures for pods that can never fit, exit status 2 with file and line on bad
// input.
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_tessera.h"

namespace {

using ::testing::HasSubstr;

using tessera::cli_testing::Output;
using tessera::cli_testing::TempFile;

// `out` is stdout alone (JSON), `all` adds stderr.
Output Tessera(const std::string& args) {
  return tessera::cli_testing::RunTessera(args, tessera::cli_testing::Stderr::kSeparate);
}

const char kNodes[] =
    "sn,cpu_milli,memory_mib,gpu,model\n"
    "n0,64000,262144,2,P100\n"
    "n1,96000,393216,8,G2\n";

std::string PodsCsv() {
  std::string s = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n";
  for (int i = 0; i < 10; ++i) s += "p" + std::to_string(i) + ",4000,8192,1,500,\n";
  s += "w,8000,8192,1,1000,\n";
  s += "huge,1000,1024,16,1000,\n";  // more GPUs than any node has
  s += "t4,1000,1024,1,300,T4\n";    // a model the cluster does not have
  return s;
}

TEST(TraceCli, HelpNamesTheTraceFlags) {
  Output r = Tessera("simulate --help");
  ASSERT_EQ(r.status, 0);
  for (const char* flag : {"--nodes", "--trace", "--protocol", "--seeds", "--report", "--threads",
                           "--tune-ratio", "--speedup", "--ceiling"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

TEST(TraceCli, FgdProtocolJsonAndCountedFailures) {
  const std::string nodes = TempFile("nodes.csv", kNodes);
  const std::string pods = TempFile("pods.csv", PodsCsv());
  Output r = Tessera("simulate --nodes " + nodes + " --trace " + pods +
                     " --seeds 1-3 --policy fgd,tessera --tune-ratio 3 --json");
  ASSERT_EQ(r.status, 0) << r.all;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["protocol"], "fgd");
  EXPECT_EQ(j["capacity_gpus"], 10);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& p : j["results"]) {
    EXPECT_TRUE(p["policy"] == "fgd" || p["policy"] == "tessera");
    EXPECT_GT(p["final_allocation_ratio"].get<double>(), 0);
    EXPECT_LE(p["final_allocation_ratio"].get<double>(), 100);
    EXPECT_GE(p["failed_pods"].get<double>(), 2);  // at least "huge" and "t4"
    EXPECT_TRUE(p.contains("fragmentation_rate"));
    EXPECT_TRUE(p.contains("seconds"));
    ASSERT_TRUE(p["curve"].is_array());
    EXPECT_EQ(p["curve"][0][0], 0);
  }
}

// --ceiling: the proven ceiling beside the runs, in the table and in the JSON; every run under it.
TEST(TraceCli, CeilingBesideTheRuns) {
  const std::string nodes = TempFile("nodes.csv", kNodes);
  const std::string pods = TempFile("pods.csv", PodsCsv());
  Output r = Tessera("simulate --nodes " + nodes + " --trace " + pods +
                     " --seeds 1-3 --policy fgd,tessera,random --ceiling --json");
  ASSERT_EQ(r.status, 0) << r.all;
  nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("ceiling")) << r.out;
  const double ceiling = j["ceiling"]["allocation_ratio"].get<double>();
  EXPECT_GT(ceiling, 0);
  EXPECT_LE(ceiling, 100);
  EXPECT_EQ(j["ceiling"]["per_seed"].size(), 3u);
  for (const auto& p : j["results"]) {
    EXPECT_LE(p["final_allocation_ratio"].get<double>(), ceiling + 0.005) << p["policy"];
  }
  const std::string dir = ::testing::TempDir() + "/ceiling_report";
  Output text = Tessera("simulate --nodes " + nodes + " --trace " + pods +
                        " --seeds 1,2 --ceiling --report " + dir);
  ASSERT_EQ(text.status, 0) << text.all;
  EXPECT_THAT(text.out, HasSubstr("ceiling: no policy can allocate more than"));
  // The report keeps the per-seed ceilings and draws the mean as a line on the zoomed chart.
  std::ifstream csv(dir + "/ceiling.csv");
  std::string line;
  int rows = 0;
  while (std::getline(csv, line)) ++rows;
  EXPECT_EQ(rows, 3);  // header and two seeds
  std::ifstream gp(dir + "/allocation_zoom.gp");
  std::string script((std::istreambuf_iterator<char>(gp)), std::istreambuf_iterator<char>());
  EXPECT_THAT(script, HasSubstr("title 'ceiling at 130%: no policy ends higher'"));
  Output timeline =
      Tessera("simulate --nodes " + nodes + " --trace " + pods + " --protocol timeline --ceiling");
  EXPECT_EQ(timeline.status, 2);
  EXPECT_THAT(timeline.all, HasSubstr("fgd protocol only"));
}

TEST(TraceCli, TablesForPeopleAndTheTimeline) {
  const std::string nodes = TempFile("nodes.csv", kNodes);
  const std::string pods =
      TempFile("timed.csv",
               "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
               "deletion_time,scheduled_time\n"
               "a,4000,8192,8,1000,,LS,Running,0,100,0\n"
               "b,4000,8192,8,1000,,LS,Running,10,200,10\n");
  Output fgd = Tessera("simulate --nodes " + nodes + " --trace " + pods + " --seeds 7");
  ASSERT_EQ(fgd.status, 0) << fgd.all;
  EXPECT_THAT(fgd.out, HasSubstr("alloc@130%"));
  EXPECT_THAT(fgd.out, HasSubstr("gpu-clustering"));  // every paper policy by default
  Output tl = Tessera("simulate --nodes " + nodes + " --trace " + pods +
                      " --protocol timeline --seeds 7 --policy tessera,bestfit");
  ASSERT_EQ(tl.status, 0) << tl.all;
  EXPECT_THAT(tl.out, HasSubstr("p99"));
  Output tj = Tessera("simulate --nodes " + nodes + " --trace " + pods +
                      " --protocol timeline --seeds 7 --policy tessera --json");
  ASSERT_EQ(tj.status, 0) << tj.all;
  nlohmann::json j = nlohmann::json::parse(tj.out);
  EXPECT_EQ(j["results"][0]["started"], 2);
  EXPECT_DOUBLE_EQ(j["results"][0]["pending_seconds"]["max"].get<double>(), 90);  // b waits for a
}

TEST(TraceCli, ReservationsOnTheTimelineOnly) {
  const std::string nodes = TempFile("nodes.csv", kNodes);
  const std::string pods =
      TempFile("timed.csv",
               "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
               "deletion_time,scheduled_time\n"
               "a,4000,8192,8,1000,,LS,Running,0,100,0\n"
               "b,4000,8192,8,1000,,LS,Running,10,200,10\n");
  Output fgd =
      Tessera("simulate --nodes " + nodes + " --trace " + pods + " --seeds 7 --reservations 2");
  EXPECT_EQ(fgd.status, 2);
  EXPECT_THAT(fgd.all, HasSubstr("are for --protocol timeline"));
  Output tj = Tessera("simulate --nodes " + nodes + " --trace " + pods +
                      " --protocol timeline --seeds 7 --policy tessera --json --reservations 2"
                      " --reserve-after 0 --declare-percent 100");
  ASSERT_EQ(tj.status, 0) << tj.all;
  nlohmann::json j = nlohmann::json::parse(tj.out);
  EXPECT_EQ(j["results"][0]["started"], 2);
  EXPECT_EQ(j["results"][0]["reservations"]["declared"], 2);
  EXPECT_EQ(j["results"][0]["reservations"]["made"], 1);  // b, as a leaves
  EXPECT_EQ(j["results"][0]["reservations"]["backfilled"], 0);
  Output tl = Tessera("simulate --nodes " + nodes + " --trace " + pods +
                      " --protocol timeline --seeds 7 --policy tessera --reservations 2");
  ASSERT_EQ(tl.status, 0) << tl.all;
  EXPECT_THAT(tl.out, HasSubstr("Reservations with backfill (at most 2 at once"));
}

TEST(TraceCli, BadInputSaysFileAndLineWithStatus2) {
  const std::string nodes = TempFile("nodes.csv", kNodes);
  struct Case {
    std::string file;
    std::string text;
    std::string expect;
  };
  const Case cases[] = {
      {"missing.csv", "name,cpu_milli,memory_mib,gpu_milli\np,1,1,1\n",
       "missing.csv:1: missing column num_gpu"},
      {"nonnumeric.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,1\nq,x,1,1,1\n",
       "nonnumeric.csv:3: column cpu_milli: \"x\" is not an integer"},
      {"empty.csv", "", "empty.csv: the file is empty"},
      {"short.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1\n",
       "short.csv:2: 3 cells, but the header has 5 columns"},
  };
  for (const Case& c : cases) {
    Output r = Tessera("simulate --nodes " + nodes + " --trace " + TempFile(c.file, c.text));
    EXPECT_EQ(r.status, 2) << c.file;
    EXPECT_THAT(r.all, HasSubstr(c.expect)) << c.file;
  }
  const std::string pods = TempFile("ok.csv", PodsCsv());
  Output bad_nodes =
      Tessera("simulate --nodes " + TempFile("n.csv", "sn,cpu_milli\nx,1\n") + " --trace " + pods);
  EXPECT_EQ(bad_nodes.status, 2);
  EXPECT_THAT(bad_nodes.all, HasSubstr("n.csv:1: missing column memory_mib"));
  EXPECT_EQ(Tessera("simulate --trace " + pods).status, 2);
  Output seeds = Tessera("simulate --nodes " + nodes + " --trace " + pods + " --seeds 9-3");
  EXPECT_EQ(seeds.status, 2);
  EXPECT_THAT(seeds.all, HasSubstr("backwards"));
  Output timeline =
      Tessera("simulate --nodes " + nodes + " --trace " + pods + " --protocol timeline");
  EXPECT_EQ(timeline.status, 2);
  EXPECT_THAT(timeline.all, HasSubstr("needs creation_time and deletion_time"));
  Output policy = Tessera("simulate --nodes " + nodes + " --trace " + pods + " --policy nope");
  EXPECT_EQ(policy.status, 2);
  EXPECT_THAT(policy.all, HasSubstr("unknown policy"));
  Output mix = Tessera("simulate --nodes " + nodes + " --trace " + pods + " --cluster " + nodes);
  EXPECT_EQ(mix.status, 2);
}

}  // namespace
