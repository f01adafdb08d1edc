// The control-plane harness without a control plane: the command runner, and what cluster.sh
// says when it cannot start one.
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace tessera::e2e
