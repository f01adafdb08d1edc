#include "agent/procs/host_processes.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

constexpr char kUid[] = "8d1c0a2e-5f2b-4c1e-9d7a-2b6c8e1f4a10";
constexpr char kCid[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

TEST(ParseCgroupOwnerTest, TheKubeletsNamesForBothDriversAndVersions) {
  // cgroupfs driver, cgroup v1 (the test harness: cgroupRoot /tessera/<instance>/<node>).
  EXPECT_EQ(ParseCgroupOwner(std::string("12:pids:/tessera/t1/gpu-a/kubepods/besteffort/pod") +
                             kUid + "/" + kCid + "\n11:freezer:/\n"),
            (ProcessOwner{kUid, kCid}));
  // Guaranteed pods have no QoS folder.
  EXPECT_EQ(ParseCgroupOwner(std::string("0::/kubepods/pod") + kUid + "/" + kCid + "\n"),
            (ProcessOwner{kUid, kCid}));
  // systemd driver, cgroup v2: underscores in the UID, the runtime's prefix and ".scope".
  std::string underscored = kUid;
  for (char& c : underscored) c = c == '-' ? '_' : c;
  EXPECT_EQ(ParseCgroupOwner("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                             underscored + ".slice/cri-containerd-" + kCid + ".scope\n"),
            (ProcessOwner{kUid, kCid}));
  EXPECT_EQ(ParseCgroupOwner("0::/kubepods.slice/kubepods-pod" + underscored + ".slice/crio-" +
                             kCid + ".scope"),
            (ProcessOwner{kUid, kCid}));
  // The pod's own cgroup (no container below it).
  EXPECT_EQ(ParseCgroupOwner(std::string("0::/kubepods/besteffort/pod") + kUid),
            (ProcessOwner{kUid, ""}));
  // Not a pod: the host, a system service, names that look almost right.
  EXPECT_EQ(ParseCgroupOwner("0::/\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupOwner("0::/system.slice/containerd.service\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupOwner("0::/kubepods/besteffort/pod1234/abc\n"), std::nullopt);
  EXPECT_EQ(ParseCgroupOwner(std::string("0::/kubepods/besteffort/xpod") + kUid + "\n"),
            std::nullopt);
  EXPECT_EQ(ParseCgroupOwner(""), std::nullopt);
  EXPECT_EQ(ParseCgroupOwner("garbage without colons\n::\n"), std::nullopt);
}

TEST(ParseStartTimeTest, FindsField22WhateverTheCommandName) {
  EXPECT_EQ(ParseStartTime("1234 (a) b) c) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 "
                           "987654 20 21"),
            987654u);
  EXPECT_EQ(ParseStartTime("1 (x) S 1 2 3"), std::nullopt);
  EXPECT_EQ(ParseStartTime("no parenthesis"), std::nullopt);
}

class HostProcessesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-proc-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  // A fake /proc/<pid> with a start time and a cgroup.
  void Process(uint32_t pid, uint64_t start, const std::string& cgroup,
               const std::string& nspid = "") {
    const std::string dir = root_ + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/stat") << pid << " (sh) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 "
                                 << start << " 20";
    std::ofstream(dir + "/cgroup") << cgroup;
    std::ofstream(dir + "/status")
        << "Name:\tsh\nNSpid:\t" << (nspid.empty() ? std::to_string(pid) : nspid) << "\n";
  }
  std::string root_;
};

TEST_F(HostProcessesTest, OwnersAreCachedByStartTimeAndAReusedPidIsReadAgain) {
  Process(100, 5000, std::string("0::/kubepods/pod") + kUid + "/" + kCid + "\n");
  Process(200, 5000, "0::/system.slice/sshd.service\n");
  HostProcesses p(root_);
  EXPECT_EQ(p.OwnerOf(100), (ProcessOwner{kUid, kCid}));
  EXPECT_EQ(p.OwnerOf(200), std::nullopt);
  EXPECT_EQ(p.OwnerOf(300), std::nullopt);  // gone
  // PID 100 exits and is reused by a host process: never taken for the pod's.
  Process(100, 6000, "0::/user.slice\n");
  EXPECT_EQ(p.OwnerOf(100), std::nullopt);
}

TEST_F(HostProcessesTest, PodsWithProcessesAreThoseWithOneLeft) {
  constexpr char kOther[] = "8d1c0a2e-5f2b-4c1e-9d7a-2b6c8e1f4a11";
  Process(100, 5000, std::string("0::/kubepods/pod") + kUid + "/" + kCid + "\n");
  Process(101, 5001, std::string("0::/kubepods/besteffort/pod") + kOther + "\n");  // its pause
  Process(200, 5000, "0::/system.slice/sshd.service\n");
  std::filesystem::create_directories(root_ + "/self");  // not a PID
  HostProcesses p(root_);
  EXPECT_EQ(p.PodsWithProcesses(), (std::set<std::string>{kUid, kOther}));
  std::filesystem::remove_all(root_ + "/101");  // the other pod's last process exits
  EXPECT_EQ(p.PodsWithProcesses(), (std::set<std::string>{kUid}));
  EXPECT_TRUE(HostProcesses(root_ + "/absent").PodsWithProcesses().empty());
}

TEST_F(HostProcessesTest, TellsWhetherItSeesTheHostsPidNamespace) {
  std::filesystem::create_directories(root_ + "/self");
  std::ofstream(root_ + "/self/status") << "Name:\tagent\nNSpid:\t4242\n";
  EXPECT_TRUE(HostProcesses(root_).InHostPidNamespace());
  std::ofstream(root_ + "/self/status") << "Name:\tagent\nNSpid:\t4242\t1\n";
  EXPECT_FALSE(HostProcesses(root_).InHostPidNamespace());
  EXPECT_TRUE(HostProcesses("/proc").InHostPidNamespace());  // this test runs on the host
}

TEST(HostProcessesRealTest, ResolvesThisProcessOnTheRealProc) {
  HostProcesses p("/proc");
  char link[64] = {};
  ASSERT_GT(::readlink("/proc/self/ns/pid", link, sizeof(link) - 1), 0);
  const uint64_t inode = std::strtoull(std::strchr(link, '[') + 1, nullptr, 10);
  EXPECT_EQ(p.HostPidOf(inode, static_cast<uint32_t>(::getpid())),
            static_cast<uint32_t>(::getpid()));
  EXPECT_EQ(p.HostPidOf(inode + 1, static_cast<uint32_t>(::getpid())), std::nullopt);
  EXPECT_EQ(p.OwnerOf(static_cast<uint32_t>(::getpid())), std::nullopt);  // not in a pod
}

}  // namespace
}  // namespace tessera::agent
