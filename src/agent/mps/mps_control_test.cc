#include "agent/mps/mps_control.h"

#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "shim/mount_namespace_testing.h"

namespace tessera::agent::mps {
namespace {

constexpr char kUuid[] = "GPU-6f1c2a9e-0000-4000-8000-00000000000a";

// The daemons' /dev/shm folders are tmpfs mounts: this process's own, gone with it.
const bool kPrivateMounts = shim::EnterPrivateMountNamespace();

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Whether this process may create a mount namespace (the private /dev/shm needs it).
bool CanUnshareMounts() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(::unshare(CLONE_NEWNS) == 0 ? 0 : 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

class MpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-mps-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    smi_log_ = dir_ + "/smi.log";
    ::setenv("FAKE_SMI_LOG", smi_log_.c_str(), 1);
    options_.control = TESSERA_FAKE_MPS_CONTROL;
    options_.root = dir_ + "/mps";
    options_.exclusive_command = {TESSERA_FAKE_MPS_CONTROL, "--as-nvidia-smi", "-i", "{uuid}", "-c",
                                  "EXCLUSIVE_PROCESS"};
    options_.restore_command = {
        TESSERA_FAKE_MPS_CONTROL, "--as-nvidia-smi", "-i", "{uuid}", "-c", "DEFAULT"};
    options_.private_shm = kPrivateMounts && CanUnshareMounts();
    options_.shm_bytes = 1 << 20;
  }
  void TearDown() override {
    // Never leave a daemon behind, whatever failed.
    for (auto& d : daemons_) {
      if (d) (void)d->Stop();
    }
    std::string cmd = "rm -rf '" + dir_ + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0);
  }
  MpsDaemon& Start() {
    auto d = MpsDaemon::Start(kUuid, options_);
    EXPECT_TRUE(d.ok()) << d.status();
    daemons_.push_back(std::move(*d));
    return *daemons_.back();
  }
  std::string ControlLog() { return Read(options_.root + "/" + kUuid + "/log/control.log"); }

  std::string dir_, smi_log_;
  MpsOptions options_;
  std::vector<std::unique_ptr<MpsDaemon>> daemons_;
};

TEST_F(MpsTest, StartsOneDaemonPerGpuSeeingOnlyItsGpu) {
  MpsDaemon& d = Start();
  EXPECT_FALSE(d.adopted());
  EXPECT_EQ(Read(smi_log_), std::string("-i ") + kUuid + " -c EXCLUSIVE_PROCESS\n");
  std::string log = ControlLog();
  EXPECT_NE(log.find(std::string("env CUDA_VISIBLE_DEVICES=") + kUuid), std::string::npos) << log;
  EXPECT_NE(log.find("env CUDA_MPS_PIPE_DIRECTORY=" + d.pipe_dir()), std::string::npos) << log;
  EXPECT_NE(log.find("env CUDA_MPS_LOG_DIRECTORY=" + d.log_dir()), std::string::npos) << log;
  EXPECT_TRUE(Exists(d.pipe_dir() + "/control"));
  struct stat st {};
  ASSERT_EQ(::stat(d.pipe_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);
}

TEST_F(MpsTest, CeilingsAndCommandsReachTheDaemon) {
  MpsDaemon& d = Start();
  ASSERT_TRUE(d.SetCeilings(70, 8192).ok());
  std::string log = ControlLog();
  EXPECT_NE(log.find("command: set_default_active_thread_percentage 70"), std::string::npos);
  EXPECT_NE(log.find("command: set_default_device_pinned_mem_limit 0 8192M"), std::string::npos);
  auto atp = d.Command("get_default_active_thread_percentage");
  ASSERT_TRUE(atp.ok()) << atp.status();
  EXPECT_EQ(*atp, "70.0");
  auto pinned = d.Command("get_default_device_pinned_mem_limit 0");
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(*pinned, "8192M");
  EXPECT_EQ(d.SetCeilings(0, 1).code(), absl::StatusCode::kInvalidArgument);
  auto bad = d.Command("no_such_command");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("Invalid command"), std::string::npos) << bad.status();
}

TEST_F(MpsTest, ClientEditsCarryTheShareAndTheDaemonsDirectories) {
  MpsDaemon& d = Start();
  ContainerEdits e = d.EditsFor({30, 4096, 0});
  std::map<std::string, std::string> env(e.env.begin(), e.env.end());
  EXPECT_EQ(env["CUDA_MPS_PIPE_DIRECTORY"], "/tmp/nvidia-mps");
  EXPECT_EQ(env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "30");
  EXPECT_EQ(env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=4096M");
  EXPECT_EQ(env["TESSERA_GPU_SHARING"], "mps");
  ASSERT_EQ(e.mounts.size(), 2u);
  EXPECT_EQ(e.mounts[0].host_path, d.pipe_dir());
  EXPECT_EQ(e.mounts[0].container_path, "/tmp/nvidia-mps");
  // Read-only: a client connects to the daemon's sockets but creates no name there (no symlink
  // planted for the daemon to follow, nothing written into the host's /run).
  EXPECT_TRUE(e.mounts[0].read_only);
  EXPECT_FALSE(e.mounts[1].read_only);
  EXPECT_EQ(e.mounts[1].container_path, "/dev/shm");
  EXPECT_EQ(e.mounts[1].host_path, options_.private_shm ? d.shm_dir() : "/dev/shm");
  EXPECT_EQ(d.EditsFor({100, 0, 0}).env.size(), 3u);  // no pinned limit, no variable
}

// The daemon's /dev/shm is its own directory, shared with its clients and no one else.
TEST_F(MpsTest, PrivateSharedMemory) {
  if (!options_.private_shm) GTEST_SKIP() << "no CAP_SYS_ADMIN for a mount namespace here";
  MpsDaemon& d = Start();
  std::string log = ControlLog();
  size_t at = log.find("shm marker /dev/shm/");
  ASSERT_NE(at, std::string::npos) << log;
  const size_t start = at + std::string("shm marker /dev/shm/").size();
  std::string name = log.substr(start, log.find('\n', at) - start);
  EXPECT_TRUE(Exists(d.shm_dir() + "/" + name)) << name;
  EXPECT_FALSE(Exists("/dev/shm/" + name)) << "the daemon wrote to the host's /dev/shm";
  // A tmpfs of its own size: a client filling its /dev/shm gets ENOSPC there, and the host's
  // /run (here the test's folder) takes nothing.
  const std::string fill = d.shm_dir() + "/fill";
  FILE* f = std::fopen(fill.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::string block(64 << 10, 'x');
  size_t written = 0;
  while (written < (64u << 20) && std::fwrite(block.data(), 1, block.size(), f) == block.size() &&
         std::fflush(f) == 0) {
    written += block.size();
  }
  std::fclose(f);
  EXPECT_LE(written, options_.shm_bytes);
}

// An agent that restarts finds its daemons answering and adopts them: one daemon per GPU.
TEST_F(MpsTest, ARestartedAgentAdoptsTheRunningDaemon) {
  MpsDaemon& first = Start();
  ASSERT_TRUE(first.SetCeilings(40, 0).ok());
  MpsDaemon& second = Start();
  EXPECT_TRUE(second.adopted());
  EXPECT_EQ(*second.Command("get_default_active_thread_percentage"), "40.0");
  std::string log = ControlLog();
  EXPECT_EQ(log.find("started pid"), log.rfind("started pid"));  // started once
}

TEST_F(MpsTest, StopQuitsRestoresAndCleansUp) {
  MpsDaemon& d = Start();
  ASSERT_TRUE(d.Stop().ok());
  EXPECT_NE(ControlLog().find("quit"), std::string::npos);
  EXPECT_EQ(Read(smi_log_),
            std::string("-i ") + kUuid + " -c EXCLUSIVE_PROCESS\n-i " + kUuid + " -c DEFAULT\n");
  EXPECT_FALSE(Exists(d.pipe_dir()));
  EXPECT_FALSE(Exists(d.shm_dir()));
  EXPECT_TRUE(Exists(d.log_dir() + "/control.log"));
  EXPECT_FALSE(d.Command("get_server_list").ok());
  EXPECT_TRUE(d.Stop().ok());  // twice is fine
}

TEST_F(MpsTest, ClearErrorsWhenMpsIsMissingOrTheModeCannotBeSet) {
  MpsOptions missing = options_;
  missing.control = dir_ + "/no-such-mps-control";
  missing.exclusive_command.clear();
  auto d = MpsDaemon::Start(kUuid, missing);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("cannot start the MPS control daemon"), std::string::npos)
      << d.status();
  MpsOptions mode = options_;
  mode.exclusive_command = {"false"};
  d = MpsDaemon::Start(kUuid, mode);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("EXCLUSIVE_PROCESS"), std::string::npos) << d.status();
  EXPECT_EQ(MpsDaemon::Start("../x", options_).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::agent::mps
