// The `tessera` binary as a user runs it: help, the default run, exit status 2 on bad input.
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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
// stdout alone (a JSON document); stderr dropped.
Output TesseraStdout(const std::string& args) {
  return tessera::cli_testing::RunTessera(args, tessera::cli_testing::Stderr::kDiscarded);
}

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

// -o json everywhere, --json kept as its alias; a format that does not exist is bad input.
TEST(Cli, OutputFlagOnEveryCommandThatPrints) {
  Output o = TesseraStdout("simulate -o json --policy tessera");
  Output alias = TesseraStdout("simulate --json --policy tessera");
  ASSERT_EQ(o.status, 0) << o.out;
  nlohmann::json a = nlohmann::json::parse(o.out), b = nlohmann::json::parse(alias.out);
  for (nlohmann::json* doc : {&a, &b}) {
    for (nlohmann::json& r : (*doc)["results"]) r.erase("seconds");  // wall time differs
  }
  EXPECT_EQ(a, b);
  EXPECT_EQ(Tessera("simulate -o yaml").status, 2);
  Output profiles = Tessera("topo profiles -o json");
  ASSERT_EQ(profiles.status, 0) << profiles.out;
  EXPECT_FALSE(nlohmann::json::parse(profiles.out)["profiles"].empty());
  for (const char* cmd : {"status", "doctor", "doctor node", "explain pod", "plan defrag",
                          "agent compare", "agent uninstall"}) {
    Output help = Tessera(std::string(cmd) + " --help");
    EXPECT_EQ(help.status, 0) << cmd;
    EXPECT_THAT(help.out, HasSubstr("-o,--output")) << cmd;
    EXPECT_THAT(help.out, HasSubstr("--json")) << cmd;
  }
}

// `--help` on each new command says what it answers and its exit statuses.
TEST(Cli, HelpExplainsTheKubectlSideCommands) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> want = {
      {"doctor", {"Preflight checks", "doctor node", "4 errors found", "--namespace", "--mode"}},
      {"doctor node", {"This node's checks", "--nri-socket", "--cdi-dir", "--gpus-file"}},
      {"explain", {"Why a pod waits", "explain pod NS/NAME"}},
      {"explain pod",
       {"Why this pod waits", "queue", "2 bad flags or no such pod", "--kubeconfig"}},
      {"simulate", {"-f,--filename", "your own manifests", "-n,--namespace"}},
      {"status", {"-n,--namespace", "RBAC covers one namespace"}}};
  for (const auto& [cmd, texts] : want) {
    Output help = Tessera(cmd + " --help");
    EXPECT_EQ(help.status, 0) << cmd;
    for (const std::string& t : texts) EXPECT_THAT(help.out, HasSubstr(t)) << cmd;
  }
}

// `simulate -f`: a user's manifests on a cluster file, no API server needed.
TEST(Cli, SimulateTakesKubernetesManifests) {
  std::string cluster = TempFile("m-c.yaml", "nodes:\n  - name: a\n    profile: dgx-a100\n");
  std::string manifests = TempFile("m.yaml", R"(apiVersion: apps/v1
kind: Deployment
metadata: {name: infer}
spec:
  replicas: 20
  template:
    spec:
      schedulerName: tessera
      containers: [{name: c, resources: {limits: {tessera.dev/gpu-memory: 20Gi}}}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
)");
  Output r = TesseraStdout("simulate --cluster " + cluster + " -f " + manifests +
                           " --policy tessera -o json");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  EXPECT_EQ(doc["results"][0]["placed"], 20);  // 8 x 80Gi: four 20Gi shares per GPU
  Output skipped = Tessera("simulate --cluster " + cluster + " -f " + manifests);
  EXPECT_THAT(skipped.out, HasSubstr("skipped ConfigMap settings"));
  EXPECT_THAT(skipped.out, HasSubstr("workload: 1 jobs, 20 pods"));
  EXPECT_EQ(Tessera("simulate -f " + manifests).status, 2);  // no cluster
  Output both =
      Tessera("simulate --cluster " + cluster + " -f " + manifests + " --workload " + cluster);
  EXPECT_EQ(both.status, 2);
  EXPECT_THAT(both.out, HasSubstr("--workload and -f do not mix"));
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
