// The node's preflight on folders the test prepares: each check clean, then with its fault
// planted (the e2e test runs it inside a harness node).
#include "agent/doctor/node_checks.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/strings.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using k8s::Finding;
using k8s::Severity;
using ::testing::HasSubstr;

using tessera::testing::TempDir;

// A listening unix socket, closed at the end.
class Listener {
 public:
  explicit Listener(const std::string& path) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
    EXPECT_EQ(::listen(fd_, 4), 0);
  }
  ~Listener() { ::close(fd_); }

 private:
  int fd_ = -1;
};

const Finding* Find(const k8s::DoctorReport& r, const std::string& check) {
  for (const Finding& f : r.findings) {
    if (f.check == check) return &f;
  }
  return nullptr;
}

TEST(NodeChecks, NriSocketAnswersOrSaysHowToTurnNriOn) {
  TempDir dir;
  const std::string sock = dir.path() + "/nri.sock";
  Finding missing = CheckNriSocket(sock);
  EXPECT_EQ(missing.severity, Severity::kError);
  EXPECT_THAT(missing.what, HasSubstr("does not exist: NRI is off"));
  EXPECT_THAT(missing.fix, HasSubstr("io.containerd.nri.v1.nri"));
  {
    Listener l(sock);
    EXPECT_EQ(CheckNriSocket(sock).severity, Severity::kOk);
  }
  // A socket file nobody listens on any more.
  Finding dead = CheckNriSocket(sock);
  EXPECT_EQ(dead.severity, Severity::kError);
  EXPECT_THAT(dead.what, HasSubstr("cannot connect"));
}

TEST(NodeChecks, CdiDirAndCgroup) {
  TempDir dir;
  EXPECT_EQ(CheckCdiDir(dir.path()).severity, Severity::kOk);
  Finding gone = CheckCdiDir(dir.path() + "/cdi");
  EXPECT_EQ(gone.severity, Severity::kError);
  EXPECT_THAT(gone.fix, HasSubstr("mkdir -p " + dir.path() + "/cdi"));
  // A folder that is not a cgroup2 mount: a warning (a kubelet with failCgroupV1: false runs).
  Finding not_cgroup = CheckCgroup(dir.path());
  EXPECT_EQ(not_cgroup.severity, Severity::kWarning);
  EXPECT_THAT(not_cgroup.what, HasSubstr("is not cgroup v2"));
  EXPECT_THAT(not_cgroup.why, HasSubstr("failCgroupV1"));
  EXPECT_THAT(not_cgroup.fix, HasSubstr("failCgroupV1: false"));
  EXPECT_EQ(CheckCgroup(dir.path() + "/none").severity, Severity::kError);
}

// The whole node: fake GPUs (a test node's description file), device nodes and driver libraries
// in prepared folders. Clean first, then each fault planted.
TEST(NodeChecks, AWholeNodeCleanThenWithEachFault) {
  TempDir dir;
  const std::string dev = dir.path() + "/dev", libs = dir.path() + "/lib";
  std::filesystem::create_directories(dev);
  std::filesystem::create_directories(libs);
  for (const char* name : {"nvidiactl", "nvidia-uvm", "nvidia0", "nvidia1"}) {
    ASSERT_EQ(::mknod((dev + "/" + name).c_str(), S_IFCHR | 0666, makedev(1, 3)), 0)
        << std::strerror(errno);
  }
  std::ofstream(libs + "/libcuda.so.1") << "x";
  std::ofstream(libs + "/libnvidia-ml.so.1") << "x";
  const std::string sock = dir.path() + "/nri.sock";
  Listener nri(sock);
  NodeCheckOptions o;
  o.node_name = "gpu-a";
  o.gpus_file = TESSERA_TEST_GPUS;
  o.dev_dir = dev;
  o.driver.driver_lib_dirs = {libs};
  o.nri_socket = sock;
  o.cgroup_root = "/sys/fs/cgroup";
  k8s::DoctorReport clean = CheckNode(o);
  // The host's cgroup version is the host's: ok on v2, a warning on v1, never an error.
  EXPECT_NE(Find(clean, "cgroup")->severity, Severity::kError);
  EXPECT_EQ(clean.errors(), 0) << k8s::RenderDoctorText(clean);
  EXPECT_THAT(Find(clean, "gpus")->what, HasSubstr("2 GPUs (L40S-48GB)"));
  EXPECT_EQ(Find(clean, "device-nodes")->severity, Severity::kOk);
  EXPECT_EQ(Find(clean, "driver-libraries")->severity, Severity::kOk);
  EXPECT_EQ(Find(clean, "nri-socket")->severity, Severity::kOk);
  EXPECT_EQ(Find(clean, "cdi-dir"), nullptr);  // classic mode

  std::filesystem::remove(dev + "/nvidia1");
  std::filesystem::remove(libs + "/libcuda.so.1");
  o.nri_socket = dir.path() + "/no-nri.sock";
  k8s::DoctorReport faulty = CheckNode(o);
  EXPECT_EQ(faulty.errors(), 3) << k8s::RenderDoctorText(faulty);
  EXPECT_THAT(Find(faulty, "device-nodes")->what, HasSubstr(dev + "/nvidia1"));
  EXPECT_THAT(Find(faulty, "driver-libraries")->what, HasSubstr("libcuda.so.1"));
  EXPECT_THAT(Find(faulty, "driver-libraries")->fix, HasSubstr("--driver-lib-dir"));
  EXPECT_EQ(Find(faulty, "nri-socket")->severity, Severity::kError);

  // DRA mode asks for the CDI folder and the kubelet's plugin registry instead of NRI.
  o.mode = "dra";
  o.cdi_dir = dir.path() + "/cdi";
  o.kubelet_dir = dir.path() + "/kubelet";
  k8s::DoctorReport dra = CheckNode(o);
  EXPECT_EQ(Find(dra, "nri-socket"), nullptr);
  EXPECT_EQ(Find(dra, "cdi-dir")->severity, Severity::kError);
  EXPECT_EQ(Find(dra, "kubelet-plugins")->severity, Severity::kError);
  std::filesystem::create_directories(o.cdi_dir);
  std::filesystem::create_directories(o.kubelet_dir + "/plugins_registry");
  dra = CheckNode(o);
  EXPECT_EQ(Find(dra, "cdi-dir")->severity, Severity::kOk);
  EXPECT_EQ(Find(dra, "kubelet-plugins")->severity, Severity::kOk);

  // No GPUs at all: the description file is unreadable.
  o.gpus_file = dir.path() + "/missing.json";
  k8s::DoctorReport none = CheckNode(o);
  EXPECT_EQ(Find(none, "gpus")->severity, Severity::kError);
  EXPECT_EQ(Find(none, "device-nodes"), nullptr);
}

}  // namespace
}  // namespace tessera::agent
