// The NVML sampler against the fake driver (test/fake_cuda) through the real loader: CUDA
// processes (test/shim's shim_client over the fake libcuda.so.1) allocate and launch, and the
// sampler sees them by host PID, including a process in a PID namespace of its own (a container's).
#include "agent/procs/gpu_processes.h"

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "fake_cuda/fake_machine.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

// A shim_client process over the fake driver, driven through pipes; `new_pid_namespace` starts
// it as PID 1 of a namespace of its own.
class Client {
 public:
  explicit Client(bool new_pid_namespace) {
    int in[2], out[2], report[2];
    EXPECT_EQ(::pipe(in), 0);
    EXPECT_EQ(::pipe(out), 0);
    EXPECT_EQ(::pipe(report), 0);
    const std::string libdir = std::filesystem::path(TESSERA_FAKE_CUDA).parent_path().string();
    pid_t child = ::fork();
    if (child == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::setenv("LD_LIBRARY_PATH", libdir.c_str(), 1);
      if (new_pid_namespace) {
        if (::unshare(CLONE_NEWPID) != 0) ::_exit(3);
        pid_t inner = ::fork();  // PID 1 of the new namespace
        if (inner != 0) {
          uint32_t host = static_cast<uint32_t>(inner);
          if (::write(report[1], &host, sizeof(host)) != sizeof(host)) ::_exit(4);
          int status = 0;
          ::waitpid(inner, &status, 0);
          ::_exit(0);
        }
      }
      ::execl(TESSERA_SHIM_CLIENT, TESSERA_SHIM_CLIENT, nullptr);
      ::_exit(127);
    }
    outer_ = child;
    pid_ = static_cast<uint32_t>(child);
    if (new_pid_namespace) {
      EXPECT_EQ(::read(report[0], &pid_, sizeof(pid_)), static_cast<ssize_t>(sizeof(pid_)));
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(report[0]);
    ::close(report[1]);
    to_ = ::fdopen(in[1], "w");
    from_ = ::fdopen(out[0], "r");
  }
  ~Client() {
    std::fclose(to_);
    std::fclose(from_);
    if (outer_ < 0) return;
    ::kill(outer_, SIGKILL);
    if (pid_ != static_cast<uint32_t>(outer_)) ::kill(static_cast<pid_t>(pid_), SIGKILL);
    int status = 0;
    ::waitpid(outer_, &status, 0);
  }
  std::string Send(const std::string& command) {
    std::fprintf(to_, "%s\n", command.c_str());
    std::fflush(to_);
    char line[4096] = {};
    if (std::fgets(line, sizeof(line), from_) == nullptr) return "(no answer)";
    std::string s = line;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  uint32_t host_pid() const { return pid_; }
  // Waits for the client to exit (after "exit"), so that it is gone, not a zombie.
  void Wait() {
    int status = 0;
    ::waitpid(outer_, &status, 0);
    outer_ = -1;
  }

 private:
  pid_t outer_ = -1;
  uint32_t pid_ = 0;
  std::FILE* to_ = nullptr;
  std::FILE* from_ = nullptr;
};

class GpuProcessesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/tessera-gpu-procs-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // One machine file for the whole test process: the fake NVML maps it once.
    static const std::string machine = dir_ + "/machine";
    if (!std::filesystem::exists(machine)) {
      ASSERT_EQ(fake::CreateMachine(machine, fake::Devices(1, 8ull << 30)), "");
      ::setenv("TESSERA_FAKE_GPU_MACHINE", machine.c_str(), 1);
    }
    auto s = NvmlProcessSampler::Load(TESSERA_FAKE_NVML);
    ASSERT_TRUE(s.ok()) << s.status();
    sampler_ = std::move(*s);
    uuid_ = fake::Devices(1, 8ull << 30)[0].uuid;
  }
  uint64_t BytesOf(uint32_t pid) {
    auto m = sampler_->Memory(uuid_);
    EXPECT_TRUE(m.ok()) << m.status();
    if (!m.ok()) return 0;
    for (const GpuProcessMemory& p : *m) {
      if (p.pid == pid) return p.used_bytes;
    }
    return 0;
  }
  std::string dir_, uuid_;
  std::unique_ptr<NvmlProcessSampler> sampler_;
};

TEST_F(GpuProcessesTest, MemoryAndTimeOfEachProcessByHostPid) {
  Client plain(false);
  ASSERT_EQ(plain.Send("init"), "ok");
  ASSERT_EQ(plain.Send("alloc a 104857600"), "ok");
  EXPECT_EQ(BytesOf(plain.host_pid()), 104857600u);

  // A process in its own PID namespace (PID 1 there) is listed by its host PID.
  Client contained(true);
  ASSERT_EQ(contained.Send("pid"), "ok 1");
  ASSERT_EQ(contained.Send("init"), "ok");
  ASSERT_EQ(contained.Send("alloc b 209715200"), "ok");
  EXPECT_EQ(BytesOf(contained.host_pid()), 209715200u);
  EXPECT_EQ(BytesOf(1), 0u);
  EXPECT_EQ(BytesOf(plain.host_pid()), 104857600u);

  // GPU time, by host PID too.
  (void)sampler_->Utilization(uuid_);
  (void)sampler_->DeviceUtilization(uuid_);  // where the driver's record ends
  ASSERT_EQ(contained.Send("spin 2000000 50 10"), "ok");
  auto u = sampler_->Utilization(uuid_);
  ASSERT_TRUE(u.ok()) << u.status();
  bool found = false;
  for (const auto& s : *u) found |= s.pid == contained.host_pid() && s.sm_permille > 0;
  EXPECT_TRUE(found);
  // And the GPU's own busy fraction since the previous read, which the usage counters are made
  // of: from the driver's record, which ends at its last whole sample period (1/6 s).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  absl::StatusOr<uint32_t> busy = sampler_->DeviceUtilization(uuid_);
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_GT(*busy, 0u);
  EXPECT_LE(*busy, 1000u);
  EXPECT_EQ(sampler_->DeviceUtilization("GPU-not-there").status().code(),
            absl::StatusCode::kNotFound);

  const uint32_t gone = plain.host_pid();
  plain.Send("exit");  // exits without an answer
  plain.Wait();
  EXPECT_EQ(BytesOf(gone), 0u);
  auto unknown = sampler_->Memory("GPU-not-there");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
}

// The usage counters read the GPU's busy fraction once a second, and a real driver's rate
// (nvmlDeviceGetUtilizationRates) covers only its last sample period, 1/6 s to 1 s: a tenant
// whose work ended before each read would not be charged for it. The driver's record
// (nvmlDeviceGetSamples) covers the whole time since the previous read.
TEST_F(GpuProcessesTest, DeviceUtilizationCountsABurstThatEndedBeforeTheRead) {
  ASSERT_FALSE(sampler_->DeviceUtilization(uuid_).status().code() == absl::StatusCode::kNotFound);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fake::Execute(0, fake::MonoNs(), 300'000'000);  // 300 ms of GPU work, from now
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  // The read covers from the end of the record at the first read to the end of the last whole
  // period now: 1.03 to 1.37 s, of which 300 ms busy.
  absl::StatusOr<uint32_t> busy = sampler_->DeviceUtilization(uuid_);
  ASSERT_TRUE(busy.ok()) << busy.status();
  EXPECT_GE(*busy, 200u);
  EXPECT_LE(*busy, 330u);
}

}  // namespace
}  // namespace tessera::agent
