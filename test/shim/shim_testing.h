// Test fixtures for the shim: a fake GPU machine, a pod's segments, the library layouts a
// container would have (the shim as libcuda.so.1 over the fake driver, or the fake driver
// alone), and CUDA client processes driven over pipes.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "fake_cuda/fake_machine.h"
#include "gtest/gtest.h"
#include "shim/contract.h"
#include "shim/segments.h"

namespace tessera::shim::testing {

inline constexpr uint64_t kMiB = 1ULL << 20;
inline constexpr uint64_t kGiB = 1ULL << 30;

// A temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/tessera-shim-test-XXXXXX";
    path_ = ::mkdtemp(tmpl) != nullptr ? tmpl : "";
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (!path_.empty()) {
      std::string cmd = "rm -rf '" + path_ + "'";
      if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "cannot remove %s\n", path_.c_str());
    }
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A node with fake GPUs and the directories a pod's containers would see. The shim's libraries
// are symlinked the way the agent mounts them (contract.h):
//   shim/   libcuda.so.1 -> libtessera-cuda.so, libnvidia-ml.so.1 -> libtessera-nvml.so;
//           libtessera-real-cuda.so.1, libtessera-real-nvml.so.1 -> the fake driver
//   plain/  libcuda.so.1, libnvidia-ml.so.1 -> the fake driver (no shim: the baseline)
class Node {
 public:
  explicit Node(int gpus = 1, uint64_t gpu_bytes = 80 * kGiB) {
    machine_ = dir_.path() + "/machine";
    std::string error = fake::CreateMachine(machine_, fake::Devices(gpus, gpu_bytes));
    EXPECT_TRUE(error.empty()) << error;
    m_ = fake::MapMachine(machine_, &error);
    EXPECT_NE(m_, nullptr) << error;
    root_ = dir_.path() + "/run-tessera";
    ::mkdir(root_.c_str(), 0755);
    Link("shim/libcuda.so.1", TESSERA_SHIM_LIBRARY);
    Link("shim/libnvidia-ml.so.1", TESSERA_SHIM_NVML_LIBRARY);
    Link(std::string("shim/") + contract::kRealCudaLibrary, TESSERA_FAKE_CUDA);
    Link(std::string("shim/") + contract::kRealNvmlLibrary, TESSERA_FAKE_NVML);
    Link("plain/libcuda.so.1", TESSERA_FAKE_CUDA);
    Link("plain/libnvidia-ml.so.1", TESSERA_FAKE_NVML);
  }

  static std::string Uuid(int i) { return fake::Devices(i + 1, 1)[i].uuid; }

  // A share of GPU `gpu` for pod `pod`: creates its segment under the pod's dir. The pod's
  // containers see that dir as TESSERA_SHIM_ROOT.
  Segment& Share(const std::string& pod, int gpu, uint64_t memory, uint32_t compute_permille = 0,
                 ComputeMode mode = ComputeMode::kHardCap, uint32_t slots = 64,
                 uint32_t period_us = 0) {
    SegmentOptions o;
    o.pod_uid = pod;
    o.limits.memory_limit_bytes = memory;
    o.limits.compute_limit_permille = compute_permille;
    o.limits.compute_mode = mode;
    o.limits.period_us = period_us;
    o.slots = slots;
    auto seg = Segment::Create(PodDir(pod), Uuid(gpu), o);
    EXPECT_TRUE(seg.ok()) << seg.status();
    segments_.push_back(std::move(*seg));
    return *segments_.back();
  }

  std::string PodDir(const std::string& pod) const { return root_ + "/" + pod; }
  const std::string& machine() const { return machine_; }
  std::string lib_dir(bool shim) const { return dir_.path() + (shim ? "/shim" : "/plain"); }
  const std::string& dir() const { return dir_.path(); }

  // Bytes the fake driver says live processes hold on a GPU (the physical ledger).
  uint64_t PhysicalBytes(int gpu) const { return fake::LiveBytes(*m_, gpu); }
  uint64_t PhysicalBytesOf(uint32_t pid, int gpu) const { return fake::ProcBytes(*m_, pid, gpu); }
  const fake::FakeMachine& machine_state() const { return *m_; }

 private:
  void Link(const std::string& rel, const std::string& target) {
    std::string path = dir_.path() + "/" + rel;
    ::mkdir(path.substr(0, path.rfind('/')).c_str(), 0755);
    EXPECT_EQ(::symlink(target.c_str(), path.c_str()), 0) << path;
  }
  TempDir dir_;
  std::string machine_, root_;
  fake::FakeMachine* m_ = nullptr;
  std::vector<std::unique_ptr<Segment>> segments_;
};

// How a client reaches the driver.
struct LoadMode {
  std::string binary = TESSERA_SHIM_CLIENT;  // dlopen + dlsym
  std::vector<std::string> args;
  std::string name = "dlopen";
  static LoadMode Linked() { return {TESSERA_SHIM_CLIENT_LINKED, {}, "linked"}; }
  static LoadMode Dlopen() { return {}; }
  static LoadMode ProcAddress(int version, bool ptsz) {
    std::string v = std::to_string(version) + (ptsz ? ",ptsz" : "");
    return {TESSERA_SHIM_CLIENT, {"--procaddr=" + v}, "procaddr-" + v};
  }
};

// One CUDA process of a pod, driven line by line.
class Client {
 public:
  Client(const Node& node, const std::string& pod, bool shim = true,
         const LoadMode& mode = LoadMode::Dlopen(), std::vector<std::string> extra_env = {}) {
    int in[2], out[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(out, O_CLOEXEC), 0);
    std::vector<std::string> env = {
        "LD_LIBRARY_PATH=" + node.lib_dir(shim),
        "TESSERA_FAKE_GPU_MACHINE=" + node.machine(),
        std::string(contract::kEnvRoot) + "=" + node.PodDir(pod),
        "PATH=/usr/bin:/bin",
    };
    for (const char* keep : {"ASAN_OPTIONS", "TSAN_OPTIONS", "UBSAN_OPTIONS", "TESSERA_SHIM_LOG"}) {
      if (const char* v = std::getenv(keep)) env.push_back(std::string(keep) + "=" + v);
    }
    for (auto& e : extra_env) env.push_back(e);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      std::vector<char*> argv = {const_cast<char*>(mode.binary.c_str())};
      for (auto& a : mode.args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      std::vector<char*> envp;
      for (auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
      envp.push_back(nullptr);
      ::execve(mode.binary.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    to_ = ::fdopen(in[1], "w");
    from_ = ::fdopen(out[0], "r");
  }
  ~Client() {
    if (pid_ > 0) {
      std::fprintf(to_, "exit\n");
      std::fflush(to_);
      Wait();
    }
    if (to_ != nullptr) std::fclose(to_);
    if (from_ != nullptr) std::fclose(from_);
  }

  // Sends one command and returns the answer line (without the newline).
  std::string Do(const std::string& command) {
    std::fprintf(to_, "%s\n", command.c_str());
    std::fflush(to_);
    return ReadLine();
  }
  // Do, but gives up after `seconds`: then kills the client and answers "(timed out)". For
  // tests that check that a process makes progress, with a deadline that catches only a hang.
  std::string DoWithin(const std::string& command, int seconds) {
    std::fprintf(to_, "%s\n", command.c_str());
    std::fflush(to_);
    pollfd p{::fileno(from_), POLLIN, 0};
    if (::poll(&p, 1, seconds * 1000) != 1) {
      Kill();
      return "(timed out)";
    }
    return ReadLine();
  }
  std::string ReadLine() {
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n = ::getline(&line, &cap, from_);
    std::string s = n > 0 ? std::string(line, static_cast<size_t>(n)) : "(client exited)";
    std::free(line);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  // The fields of an "ok a b c" answer.
  std::vector<uint64_t> Values(const std::string& command) {
    std::string answer = Do(command);
    EXPECT_EQ(answer.rfind("ok", 0), 0u) << command << " -> " << answer;
    std::istringstream in(answer.substr(std::min<size_t>(answer.size(), 2)));
    std::vector<uint64_t> v;
    for (uint64_t x; in >> x;) v.push_back(x);
    return v;
  }
  void Kill() {
    ::kill(pid_, SIGKILL);
    Wait();
  }
  int Wait() {
    int status = 0;
    if (pid_ > 0) ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

}  // namespace tessera::shim::testing
