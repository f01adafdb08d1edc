// The `tessera` binary as a user runs it: help, the default run, exit status 2 on bad input.
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "run_tessera.h"

namespace {

using ::testing::HasSubstr;

using tessera::cli_testing::Output;
using tessera::cli_testing::TempFile;

// stdout and stderr together.
Output Tessera(const std::string& args) { return tessera::cli_testing::RunTessera(args); }

TEST(Cli, HelpExplainsEveryFlag) {
  Output top = Tessera("--help");
  EXPECT_EQ(top.status, 0);
  EXPECT_THAT(top.out, HasSubstr("simulate"));
  Output sim = Tessera("simulate --help");
  EXPECT_EQ(sim.status, 0);
  for (const char* flag : {"--cluster", "--workload", "--policy", "--json", "--show-default"}) {
    EXPECT_THAT(sim.out, HasSubstr(flag));
  }
}

TEST(Cli, DefaultRunIsTheRealityCheck) {
  Output r = Tessera("simulate");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Part 1"));
  EXPECT_THAT(r.out, HasSubstr("Part 3"));
  EXPECT_THAT(r.out, HasSubstr("whole-gpu"));
}

TEST(Cli, JsonIsOneDocument) {
  Output r = Tessera("simulate --json --policy tessera 2>/dev/null");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["results"].size(), 3u);
  EXPECT_EQ(doc["results"][2]["placed"], 28);
}

TEST(Cli, ShowDefaultPrintsFilesThatRunAsIs) {
  Output shown = Tessera("simulate --show-default");
  ASSERT_EQ(shown.status, 0);
  std::string text = shown.out;
  size_t w = text.find("# workload file");
  std::string cluster = TempFile("c.yaml", text.substr(0, w));
  size_t part3 = text.rfind("# workload file");
  std::string workload = TempFile("w.yaml", text.substr(part3));
  Output r = Tessera("simulate --json --cluster " + cluster + " --workload " + workload);
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["results"][1]["policy"], "tessera");
  EXPECT_EQ(doc["results"][1]["placed"], 28);
}

TEST(Cli, BadInputExitsTwoWithTheFileAndLine) {
  std::string cluster =
      TempFile("bad-c.yaml", "nodes:\n  - name: a\n    cpu: four\n    memory: 1Gi\n");
  std::string workload = TempFile("ok-w.yaml", "jobs:\n  - name: x\n");
  Output r = Tessera("simulate --cluster " + cluster + " --workload " + workload);
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.out, HasSubstr("bad-c.yaml:3:10: cpu: invalid quantity \"four\""));

  EXPECT_EQ(Tessera("simulate --policy nope").status, 2);
  EXPECT_THAT(Tessera("simulate --policy nope").out, HasSubstr("unknown policy \"nope\""));
  EXPECT_EQ(Tessera("simulate --cluster " + cluster).status, 2);
  EXPECT_EQ(Tessera("simulate --cluster /no/such/file --workload " + workload).status, 2);
  EXPECT_EQ(Tessera("simulate --frobnicate").status, 2);
  EXPECT_EQ(Tessera("").status, 2);
}

}  // namespace

namespace {

TEST(CliScheduler, HelpAndBadInputExitTwoBeforeTouchingAnyServer) {
  Output help = Tessera("scheduler --help");
  EXPECT_EQ(help.status, 0);
  for (const char* flag : {"--kubeconfig", "--config", "--policy", "--scheduler-name",
                           "--node-selector", "--leader-elect", "--metrics-port"}) {
    EXPECT_THAT(help.out, HasSubstr(flag));
  }
  Output missing = Tessera("scheduler --kubeconfig /no/such/kubeconfig");
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.out, HasSubstr("/no/such/kubeconfig"));
  std::string kubeconfig = TempFile("kc.yaml", R"(clusters:
- {name: c, cluster: {server: "https://127.0.0.1:1"}}
contexts:
- {name: x, context: {cluster: c}}
current-context: x
)");
  Output policy = Tessera("scheduler --kubeconfig " + kubeconfig + " --policy fastest");
  EXPECT_EQ(policy.status, 2);
  EXPECT_THAT(policy.out, HasSubstr("fastest"));
  std::string config = TempFile("sched.yaml", "schedulerName: x\nretry: {period: soon}\n");
  Output bad = Tessera("scheduler --kubeconfig " + kubeconfig + " --config " + config);
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.out, HasSubstr("sched.yaml:2"));
  // A valid configuration and an API server that is not there: a failure at run time.
  Output down = Tessera("scheduler --kubeconfig " + kubeconfig);
  EXPECT_EQ(down.status, 1);
  EXPECT_THAT(down.out, HasSubstr("cannot reach the API server at https://127.0.0.1:1"));
}

}  // namespace
