// MPS, the second way tessera enforces a share (src/shim is the first; README "Sharing a GPU"):
// the agent runs NVIDIA's MPS control daemon for a GPU whose pods opted in
// (tessera.dev/gpu-sharing: mps) and gives each client container its active-thread percentage
// (an SM cap applied by the hardware scheduler, CUDA graphs included) and its pinned device
// memory limit.
//
// Per GPU, under <root>/<GPU UUID>/ on the host:
//   pipe/  CUDA_MPS_PIPE_DIRECTORY of the daemon; mounted read-only into every client container
//          at container_pipe_dir (clients find the daemon through it: connecting to a socket or
//          opening a named pipe works on a read-only mount; creating a name does not, so a client
//          can neither plant a symlink there nor fill the host's /run through it)
//   log/   CUDA_MPS_LOG_DIRECTORY (control.log, server.log)
//   shm/   the daemon's /dev/shm (a private mount namespace), mounted at /dev/shm in the clients:
//          MPS clients and server share memory there, and no one else's /dev/shm is involved; a
//          tmpfs of shm_bytes, so a client filling it fills that and not the host's /run
// The daemon sees only its GPU (CUDA_VISIBLE_DEVICES=<UUID>), and the GPU is put in
// EXCLUSIVE_PROCESS compute mode first (only the MPS server opens it), DEFAULT again at Stop.
//
// Per-client limits are environment variables of the client (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE,
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), which a client can only use to lower the daemon's defaults:
// SetCeilings sets those defaults to the largest share on the GPU, so that a client that drops its
// environment gets no more than the largest grant. Limits are per process, not per pod (NVIDIA
// k8s-device-plugin #594), and MPS reports the whole GPU's memory: the shim is the tool for a
// memory cap shared by a pod's processes and a device that reports the share.
//
// Worked example (two pods, 30% + 4 GiB and 70% + 8 GiB, on one GPU):
//   auto d = MpsDaemon::Start("GPU-6f1c...", options);     // nvidia-cuda-mps-control -d
//   d->SetCeilings(70, 8192);                              // defaults: the largest share
//   d->EditsFor({30, 4096})  -> CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30,
//                               CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M, the pipe and shm mounts
//   ... when the last MPS pod on the GPU ends: d->Stop().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::agent::mps {

struct MpsOptions {
  std::string control =
      "nvidia-cuda-mps-control";          // the control program: a path, or a name in PATH
  std::string root = "/run/tessera/mps";  // host directory for the GPUs' daemons
  // Run before the daemon starts and after it stops ({uuid}: the GPU); empty: leave the mode.
  std::vector<std::string> exclusive_command = {"nvidia-smi", "-i", "{uuid}", "-c",
                                                "EXCLUSIVE_PROCESS"};
  std::vector<std::string> restore_command = {"nvidia-smi", "-i", "{uuid}", "-c", "DEFAULT"};
  // Give the daemon a private /dev/shm (needs CAP_SYS_ADMIN, as the agent has); false: the host's.
  bool private_shm = true;
  // The size of the daemon's /dev/shm (a tmpfs, with private_shm).
  uint64_t shm_bytes = 1ull << 30;
  std::string container_pipe_dir = "/tmp/nvidia-mps";
  int command_timeout_ms = 10'000;
};

// What one MPS client container gets.
struct ClientShare {
  int active_thread_percentage = 100;  // 1..100
  uint64_t pinned_memory_mib = 0;      // 0: no pinned-memory limit
  int device_index = 0;                // the GPU's index inside the container
};

struct Mount {
  std::string host_path;
  std::string container_path;
  bool read_only = false;
};

struct ContainerEdits {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<Mount> mounts;
};

// The control daemon of one GPU.
class MpsDaemon {
 public:
  // Starts `<control> -d` for the GPU and waits until it answers. A daemon already answering on
  // the GPU's pipe directory (the agent restarted) is adopted instead.
  static absl::StatusOr<std::unique_ptr<MpsDaemon>> Start(const std::string& gpu_uuid,
                                                          const MpsOptions& options);

  // One command to the daemon (`<control>` in client mode); its output.
  absl::StatusOr<std::string> Command(const std::string& command) const;

  // The daemon's defaults: the largest share of the GPU's MPS pods (see the file comment).
  absl::Status SetCeilings(int active_thread_percentage, uint64_t pinned_memory_mib,
                           int device_index = 0);

  // The environment and mounts of a client container.
  ContainerEdits EditsFor(const ClientShare& share) const;

  // Quits the daemon, restores the compute mode, removes the pipe and shm directories (the log
  // stays). After Stop the object only answers errors.
  absl::Status Stop();

  bool adopted() const { return adopted_; }
  const std::string& gpu_uuid() const { return gpu_uuid_; }
  std::string pipe_dir() const { return dir_ + "/pipe"; }
  std::string log_dir() const { return dir_ + "/log"; }
  std::string shm_dir() const { return dir_ + "/shm"; }

 private:
  MpsDaemon() = default;
  MpsDaemon(const MpsDaemon&) = default;
  // Start's second half: the compute mode, `<control> -d`, and the wait until it answers.
  absl::StatusOr<std::unique_ptr<MpsDaemon>> StartDaemon();
  std::vector<std::pair<std::string, std::string>> DaemonEnv() const;

  std::string gpu_uuid_;
  std::string dir_;
  MpsOptions options_;
  bool adopted_ = false;
  bool stopped_ = false;
};

// A program's outcome (for the daemon's commands; exposed for tests).
struct RunResult {
  int exit_code = -1;  // -1: did not run or timed out
  std::string out;
  std::string err;
};
// Runs argv[0] (searched in PATH) with the agent's environment plus `env`, `input` on stdin,
// killing it after timeout_ms. `private_shm`: a private mount namespace with that directory
// bound over /dev/shm. `output_file`: stdout and stderr go there (appended) and only the
// program's own exit is waited for (a daemon's starter).
RunResult RunProgram(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& env,
                     const std::string& input, int timeout_ms, const std::string& private_shm = "",
                     const std::string& output_file = "");

}  // namespace tessera::agent::mps
