// The control-plane harness without a control plane: the command runner, and what cluster.sh
// says when it cannot start one.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::e2e {
namespace {

using ::testing::HasSubstr;

std::string MakeTempDir() {
  std::string pattern = "/tmp/tessera-cp-unit-XXXXXX";
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

TEST(RunCommand, CapturesStdoutStderrAndExitCode) {
  CommandResult r = RunCommand({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_FALSE(r.ok());
}

TEST(RunCommand, FeedsStdin) {
  CommandOptions options;
  options.stdin_data = std::string(1 << 20, 'x');  // larger than a pipe buffer
  CommandResult r = RunCommand({"wc", "-c"}, options);
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_EQ(std::stol(r.out), 1 << 20);
}

TEST(RunCommand, ReadsOutputsLargerThanAPipeWhileTheCommandRuns) {
  // 4 MiB on each of stdout and stderr, interleaved: a reader that waited for the exit would
  // deadlock on the first full pipe (64 KiB).
  CommandResult r = RunCommand(
      {"sh", "-c",
       "for i in 1 2 3 4; do head -c 1048576 /dev/zero; head -c 1048576 /dev/zero >&2; done"});
  ASSERT_TRUE(r.ok()) << r.exit_code;
  EXPECT_EQ(r.out.size(), 4u << 20);
  EXPECT_EQ(r.err.size(), 4u << 20);
}

TEST(RunCommand, SurvivesACommandThatIgnoresStdin) {
  CommandOptions options;
  options.stdin_data = std::string(1 << 20, 'x');
  CommandResult r = RunCommand({"true"}, options);
  EXPECT_EQ(r.exit_code, 0);
}

TEST(RunCommand, PassesEnvironmentOverrides) {
  CommandOptions options;
  options.env = {{"TESSERA_UNIT_TEST_VALUE", "42"}};
  CommandResult r = RunCommand({"sh", "-c", "echo $TESSERA_UNIT_TEST_VALUE"}, options);
  EXPECT_EQ(r.out, "42\n");
}

TEST(RunCommand, ReportsSignalsMissingProgramsAndTimeouts) {
  EXPECT_EQ(RunCommand({"sh", "-c", "kill -TERM $$"}).exit_code, 128 + 15);
  CommandResult missing = RunCommand({"/nonexistent/program"});
  EXPECT_EQ(missing.exit_code, -1);
  EXPECT_THAT(missing.err, HasSubstr("cannot run /nonexistent/program"));
  CommandOptions options;
  options.timeout = std::chrono::seconds(1);
  CommandResult slow = RunCommand({"sleep", "30"}, options);
  EXPECT_EQ(slow.exit_code, -1);
  EXPECT_THAT(slow.err, HasSubstr("timed out"));
}

TEST(ClusterScript, HelpDescribesStartAndStop) {
  CommandResult r = RunCommand({ClusterScript(), "--help"});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_THAT(r.out, HasSubstr("cluster.sh start DIR"));
  EXPECT_THAT(r.out, HasSubstr("--with-scheduler"));
  EXPECT_THAT(r.out, HasSubstr("cluster.sh stop DIR"));
}

TEST(ClusterScript, MissingBuildTellsTheUserToRunBuildSh) {
  std::string dir = MakeTempDir();
  CommandOptions options;
  options.env = {{"TESSERA_CONTROLPLANE_BIN_DIR", "/nonexistent/tessera-bin"}};
  CommandResult r = RunCommand({ClusterScript(), "start", dir}, options);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("test/controlplane/build.sh"));
  std::filesystem::remove_all(dir);
}

TEST(ClusterScript, StopWithNothingRecordedSucceeds) {
  std::string dir = MakeTempDir();
  CommandResult r = RunCommand({ClusterScript(), "stop", dir});
  EXPECT_TRUE(r.ok()) << r.err;
  std::filesystem::remove_all(dir);
}

TEST(ClusterScript, StopKillsExactlyTheRecordedProcesses) {
  // Two stand-ins for components, recorded in DIR/pids, and one bystander that is not.
  std::string dir = MakeTempDir();
  CommandResult spawn =
      RunCommand({"sh", "-c",
                  "touch " + dir +
                      "/a; "
                      "setsid tail -f " +
                      dir +
                      "/a </dev/null >/dev/null 2>&1 & echo $!; "
                      "setsid tail -f " +
                      dir +
                      "/a </dev/null >/dev/null 2>&1 & echo $!; "
                      "setsid tail -f /dev/null </dev/null >/dev/null 2>&1 & echo $!"});
  ASSERT_TRUE(spawn.ok()) << spawn.err;
  std::istringstream pids(spawn.out);
  pid_t a, b, bystander;
  pids >> a >> b >> bystander;
  {
    std::ofstream f(dir + "/pids");
    f << "etcd " << a << "\nkube-apiserver " << b << "\n";
  }
  ASSERT_TRUE(ProcessAlive(a) && ProcessAlive(b) && ProcessAlive(bystander));
  CommandResult r = RunCommand({ClusterScript(), "stop", dir});
  EXPECT_TRUE(r.ok()) << r.err;
  // Orphans are reaped by init; allow it a moment.
  for (int i = 0; i < 50 && (ProcessAlive(a) || ProcessAlive(b)); ++i) usleep(100000);
  EXPECT_FALSE(ProcessAlive(a));
  EXPECT_FALSE(ProcessAlive(b));
  EXPECT_TRUE(ProcessAlive(bystander));
  kill(bystander, SIGKILL);
  EXPECT_TRUE(std::filesystem::exists(dir + "/pids.stopped"));
  std::filesystem::remove_all(dir);
}

// cp-kill and cp-restart on a stand-in for a component: killed, started again with its recorded
// command line, its line in DIR/pids replaced.
TEST(ClusterScript, ControlPlaneProcessesAreKilledAndRestartedWithTheirCommandLine) {
  std::string dir = MakeTempDir();
  std::ofstream(dir + "/a") << "";
  // The command line cluster.sh's launch records (NUL-separated), and the process it started.
  std::ofstream(dir + "/etcd.argv") << "tail" << '\0' << "-f" << '\0' << dir + "/a" << '\0';
  CommandResult spawn =
      RunCommand({"sh", "-c", "setsid tail -f " + dir + "/a </dev/null >/dev/null 2>&1 & echo $!"});
  ASSERT_TRUE(spawn.ok()) << spawn.err;
  const pid_t first = std::stoi(spawn.out);
  std::ofstream(dir + "/pids") << "etcd " << first << "\n";
  CommandResult r = RunCommand({ClusterScript(), "cp-restart", dir, "etcd"});
  ASSERT_TRUE(r.ok()) << r.err;
  for (int i = 0; i < 50 && ProcessAlive(first); ++i) usleep(100000);
  EXPECT_FALSE(ProcessAlive(first));
  std::ifstream pids(dir + "/pids");
  std::string name;
  pid_t second = -1;
  pids >> name >> second;
  EXPECT_EQ(name, "etcd");
  EXPECT_NE(second, first);
  EXPECT_TRUE(ProcessAlive(second));
  std::string more;
  EXPECT_FALSE(pids >> more) << "one line for etcd";
  r = RunCommand({ClusterScript(), "cp-kill", dir, "etcd", "--signal", "KILL"});
  EXPECT_TRUE(r.ok()) << r.err;
  for (int i = 0; i < 50 && ProcessAlive(second); ++i) usleep(100000);
  EXPECT_FALSE(ProcessAlive(second));
  r = RunCommand({ClusterScript(), "cp-restart", dir, "kube-scheduler"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("no command line recorded for 'kube-scheduler'"));
  std::filesystem::remove_all(dir);
}

TEST(ParseNodeArgs, GroupsGpusAndLabelsWithTheLastNodes) {
  auto nodes = ParseNodeArgs({"--nodes", "2", "--gpus", "/g/two.json", "--label", "a=b",
                              "--node=big", "--gpus=/g/h100.json", "--label", "pool=h100",
                              "--label", "x=y=z", "--node", "plain"});
  ASSERT_TRUE(nodes.ok()) << nodes.status();
  ASSERT_EQ(nodes->size(), 4u);
  EXPECT_EQ((*nodes)[0].name, "node-1");
  EXPECT_EQ((*nodes)[1].name, "node-2");
  EXPECT_EQ((*nodes)[1].fake_gpus, "/g/two.json");
  EXPECT_EQ((*nodes)[1].labels, (std::vector<std::pair<std::string, std::string>>{{"a", "b"}}));
  EXPECT_EQ((*nodes)[2].name, "big");
  EXPECT_EQ((*nodes)[2].fake_gpus, "/g/h100.json");
  EXPECT_EQ((*nodes)[2].labels,
            (std::vector<std::pair<std::string, std::string>>{{"pool", "h100"}, {"x", "y=z"}}));
  EXPECT_EQ((*nodes)[3].name, "plain");
  EXPECT_TRUE((*nodes)[3].fake_gpus.empty());
  EXPECT_TRUE((*nodes)[3].labels.empty());
  // NodeArgs writes what ParseNodeArgs reads.
  auto again = ParseNodeArgs(NodeArgs(*nodes));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*again)[i].name, (*nodes)[i].name);
    EXPECT_EQ((*again)[i].fake_gpus, (*nodes)[i].fake_gpus);
    EXPECT_EQ((*again)[i].labels, (*nodes)[i].labels);
  }
  EXPECT_TRUE(ParseNodeArgs({})->empty());
}

TEST(ParseNodeArgs, RejectsWhatClusterShRejects) {
  EXPECT_THAT(ParseNodeArgs({"--gpus", "f.json"}).status().message(),
              HasSubstr("put it after --node or --nodes"));
  EXPECT_THAT(ParseNodeArgs({"--node", "a", "--label", "novalue"}).status().message(),
              HasSubstr("KEY=VALUE"));
  EXPECT_THAT(ParseNodeArgs({"--nodes", "two"}).status().message(), HasSubstr("number"));
  EXPECT_THAT(ParseNodeArgs({"--node"}).status().message(), HasSubstr("needs a value"));
  EXPECT_THAT(ParseNodeArgs({"--frobnicate", "1"}).status().message(),
              HasSubstr("unknown node option --frobnicate"));
}

// cluster.sh checks the node options before it starts anything (no build needed to see these).
TEST(ClusterScript, NodeOptionErrorsComeFirst) {
  std::string dir = MakeTempDir();
  auto start = [&](const std::vector<std::string>& args) {
    std::vector<std::string> argv = {ClusterScript(), "start", dir};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandOptions options;
    options.env = {{"TESSERA_CONTROLPLANE_BIN_DIR", "/nonexistent/tessera-bin"}};
    return RunCommand(argv, options);
  };
  CommandResult r = start({"--gpus", "x.json"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("put it after --node or --nodes"));
  r = start({"--node", "Bad_Name"});
  EXPECT_THAT(r.err, HasSubstr("bad node name 'Bad_Name'"));
  r = start({"--node", "a", "--gpus", dir + "/missing.json"});
  EXPECT_THAT(r.err, HasSubstr("no fake-GPU file"));
  { std::ofstream(dir + "/bad.json") << "{\"gpu\": []}"; }
  r = start({"--node", "a", "--gpus", dir + "/bad.json"});
  EXPECT_THAT(r.err, HasSubstr("is not a fake-GPU description"));
  r = start({"--node", "a", "--node", "a"});
  EXPECT_THAT(r.err, HasSubstr("two nodes with one name"));
  r = start({"--nodes", "x"});
  EXPECT_THAT(r.err, HasSubstr("--nodes needs a number"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/pids"));
  std::filesystem::remove_all(dir);
}

TEST(ClusterScript, NodeCommandsNameTheNodesThereAre) {
  std::string dir = MakeTempDir();
  CommandResult r = RunCommand({ClusterScript(), "node-exec", dir, "n1", "--", "true"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("no node 'n1' in " + dir + " (nodes: none)"));
  r = RunCommand({ClusterScript(), "node-spawn", dir, "n1", "x"});
  EXPECT_THAT(r.err, HasSubstr("usage: cluster.sh node-spawn"));
  r = RunCommand({ClusterScript(), "--help"});
  EXPECT_THAT(r.out, HasSubstr("cluster.sh node-exec DIR NODE"));
  EXPECT_THAT(r.out, HasSubstr("--gpus FILE"));
  std::filesystem::remove_all(dir);
}

// The shipped fake-GPU descriptions (the agent's reality-check nodes) are what they claim.
TEST(FakeGpuFiles, ShippedDescriptionsAreConsistent) {
  for (const auto& [file, count, link] : std::vector<std::tuple<std::string, int, std::string>>{
           {"h100-8x-nvswitch.json", 8, "NV18"},
           {"l40s-2x-pcie.json", 2, "SYS"},
           {"a100-pcie-2x-nvlink.json", 2, "NV12"}}) {
    std::string path = std::string(TESSERA_CONTROLPLANE_DIR) + "/gpus/" + file;
    CommandResult r = RunCommand(
        {"jq", "-r",
         "[.version, (.gpus | length), ([.gpus[].uuid] | unique | length),"
         " ([.gpus[].pci_bus_id] | unique | length), ([.gpus[].index] == [range(.gpus | length)]),"
         " (.links | length), ([.links[][]] | map(select(. != \"X\")) | unique | join(\",\")),"
         " ([range(.links | length) as $i | .links[$i][$i]] | unique | join(\",\"))] | @tsv",
         path});
    ASSERT_TRUE(r.ok()) << path << ": " << r.err;
    std::string n = std::to_string(count);
    EXPECT_EQ(r.out, "1\t" + n + "\t" + n + "\t" + n + "\ttrue\t" + n + "\t" + link + "\tX\n")
        << path;
  }
}

}  // namespace
}  // namespace tessera::e2e
