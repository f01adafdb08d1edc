// A real Kubernetes control plane for tessera's end-to-end tests.
//
// ControlPlane starts etcd and kube-apiserver (and on request the stock kube-scheduler and
// kube-controller-manager) on 127.0.0.1 with TLS, through test/controlplane/cluster.sh, using the
// binaries that test/controlplane/build.sh built from the Kubernetes Go modules. There is no
// kubelet: Nodes are plain API objects whose status the test writes.
//
// Most tests do not start one themselves. A test registered with `tessera_e2e_test(...)` in CMake
// gets one control plane for the whole test binary, started before the first test and stopped
// after the last, and reaches it with ControlPlane::Shared():
//
//   TEST(Client, ListsNodes) {
//     auto& cp = tessera::e2e::ControlPlane::Shared();
//     auto out = cp.KubectlOk({"get", "nodes", "-o", "json"});
//     ASSERT_TRUE(out.ok()) << out.status();
//     // A C++ client connects to cp.server() with cp.ca_file(), cp.client_cert_file(),
//     // cp.client_key_file(), or reads cp.kubeconfig().
//   }
//
// Every control plane is stopped by its destructor or Stop(), and, should the test binary crash
// or be killed first, by a watchdog that cluster.sh leaves beside it, which notices that the
// owning process is gone. A stop kills exactly the processes that start recorded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace tessera::e2e {

// The outcome of a finished command. exit_code is the process's exit status, 128 + the signal
// number if a signal ended it, or -1 if it could not be started or timed out (err says which).
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  bool ok() const { return exit_code == 0; }
};

struct CommandOptions {
  std::string stdin_data;                                // written to the command's stdin
  std::vector<std::pair<std::string, std::string>> env;  // added to (or replacing) environ
  std::chrono::seconds timeout{300};                     // then SIGKILL, exit_code -1
};

// Runs argv (argv[0] is looked up in PATH) and waits for it, capturing stdout and stderr.
CommandResult RunCommand(const std::vector<std::string>& argv, const CommandOptions& options = {});

struct ControlPlaneOptions {
  bool with_scheduler = false;           // the stock kube-scheduler (QPS 5000, burst 10000)
  bool with_controller_manager = false;  // kube-controller-manager (no node lifecycle)
  std::string dir;                       // empty: a new folder under $TMPDIR (or /tmp)
  pid_t owner_pid = 0;                   // the watchdog stops the plane when it exits; 0: us
  bool keep_dir = false;                 // keep dir (certificates, logs) after a clean stop
};

class ControlPlane {
 public:
  // Starts a control plane and waits until the API server is ready, the `default` namespace
  // exists and the requested components are healthy. Fails with the tail of the logs if a
  // component dies, and with instructions if test/controlplane/build.sh has not been run.
  static absl::StatusOr<std::unique_ptr<ControlPlane>> Start(const ControlPlaneOptions& options);

  // The control plane that the main of a `tessera_e2e_test` started for this test binary.
  // Calling it in a test binary not built with tessera_e2e_test is a fatal error.
  static ControlPlane& Shared();

  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;
  ~ControlPlane();  // Stop()s if still running.

  // Stops every process that start recorded (SIGTERM, SIGKILL after a grace period) and checks
  // that none is left. Removes dir() unless keep_dir was set or a test has failed. Idempotent.
  absl::Status Stop();

  const std::string& dir() const { return dir_; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  const std::string& server() const { return server_; }  // https://127.0.0.1:PORT
  const std::string& ca_file() const { return ca_file_; }
  const std::string& client_cert_file() const { return client_cert_file_; }  // system:masters
  const std::string& client_key_file() const { return client_key_file_; }
  const std::string& bin_dir() const { return bin_dir_; }  // etcd, kube-*, kubectl
  std::string kubectl_path() const { return bin_dir_ + "/kubectl"; }
  double start_seconds() const { return start_seconds_; }  // start to healthy, as cluster.sh saw
  // The processes that start recorded: ("etcd", pid), ("kube-apiserver", pid), ...
  const std::vector<std::pair<std::string, pid_t>>& recorded_pids() const { return pids_; }

  // Runs kubectl against this control plane (--kubeconfig is added).
  CommandResult Kubectl(const std::vector<std::string>& args,
                        std::string_view stdin_data = {}) const;
  // Same, for commands that must succeed: stdout, or an error with the command and its stderr.
  absl::StatusOr<std::string> KubectlOk(const std::vector<std::string>& args,
                                        std::string_view stdin_data = {}) const;

  // Live processes of this control plane: any process (zombies aside) with an argument that is
  // dir() or a path inside it. Empty after a successful Stop().
  std::vector<pid_t> RunningProcesses() const;

 private:
  ControlPlane() = default;

  std::string dir_, kubeconfig_, server_, ca_file_, client_cert_file_, client_key_file_, bin_dir_;
  double start_seconds_ = 0;
  std::vector<std::pair<std::string, pid_t>> pids_;
  bool keep_dir_ = false;
  bool running_ = false;
};

// The path of cluster.sh in this source tree.
std::string ClusterScript();

// True if pid names a live process (not a zombie).
bool ProcessAlive(pid_t pid);

// Starts one control plane for the test binary (SetUp), puts its kubectl first on PATH and sets
// KUBECONFIG for the tests and their children, and stops it (TearDown). tessera_e2e_test's main
// registers it; a test binary with its own main can do the same with
// ::testing::AddGlobalTestEnvironment(new ControlPlaneEnvironment(options)).
class ControlPlaneEnvironment : public ::testing::Environment {
 public:
  explicit ControlPlaneEnvironment(ControlPlaneOptions options) : options_(std::move(options)) {}
  void SetUp() override;
  void TearDown() override;

 private:
  ControlPlaneOptions options_;
};

}  // namespace tessera::e2e
