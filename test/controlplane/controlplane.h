// A real Kubernetes cluster for tessera's end-to-end tests.
//
// ControlPlane starts etcd and kube-apiserver (and on request the stock kube-scheduler and
// kube-controller-manager) on 127.0.0.1 with TLS, through test/controlplane/cluster.sh, using the
// binaries that test/controlplane/build.sh built from the Kubernetes Go modules. On request it
// also starts nodes (ControlPlaneOptions::nodes): per node a real kubelet and containerd (runc,
// CNI bridge) in a mount namespace of its own, with fake GPUs if asked; see Node. Without nodes,
// Nodes are plain API objects whose status the test writes.
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
// owning process is gone. A stop kills exactly the processes that start recorded, and for nodes
// everything in their cgroups; it removes their bridges and cgroups, and the last harness
// instance on the host to stop restores the sysctls the kubelets changed (README.md).
//
// A test with nodes (tessera_e2e_test(... NODES 2) in CMake, or options.nodes):
//
//   auto& cp = tessera::e2e::ControlPlane::Shared();
//   const tessera::e2e::Node& node = cp.nodes()[0];
//   // create a pod with nodeName node.name, image ControlPlane::kTestImage,
//   // imagePullPolicy Never; read status.containerStatuses[0].state.terminated.message
//   auto pid = cp.NodeSpawn(node.name, "agent", {"/path/to/tessera", "agent"});
#pragma once

#include <signal.h>
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

// One test node to start (ControlPlaneOptions::nodes).
struct NodeOptions {
  std::string name;       // empty: node-<position in the list, from 1>
  std::string fake_gpus;  // a fake-GPU description file (README.md); empty: no GPUs
  std::vector<std::pair<std::string, std::string>> labels;  // Node labels
};

// Parses cluster.sh's node options (--nodes N, --node NAME, --gpus FILE, --label K=V; --gpus and
// --label apply to the nodes of the last --node/--nodes), as test mains get them.
absl::StatusOr<std::vector<NodeOptions>> ParseNodeArgs(const std::vector<std::string>& args);
// The inverse: cluster.sh arguments for these nodes.
std::vector<std::string> NodeArgs(const std::vector<NodeOptions>& nodes);

struct ControlPlaneOptions {
  bool with_scheduler = false;           // the stock kube-scheduler (QPS 5000, burst 10000)
  bool with_controller_manager = false;  // kube-controller-manager (no node lifecycle)
  // Pods as in-cluster API clients (a Helm install's scheduler and agent): ServiceAccount
  // admission on (projected pod-bound tokens, kube-root-ca.crt), kube-controller-manager (implied),
  // and the API server also on the host's address (pod_api_host(), pod_api_port()).
  bool with_service_accounts = false;
  // The Workload and PodGroup APIs (scheduling.k8s.io/v1beta1): feature gates GenericWorkload and
  // TopologyAwareWorkloadScheduling on every component and the API version on (all off by
  // default in Kubernetes 1.37).
  bool with_workloads = false;
  // with_workloads plus the Job controller's own Workloads and PodGroups: feature gate
  // WorkloadWithJob (alpha) on every component, and kube-controller-manager (implied).
  bool with_job_workloads = false;
  std::vector<NodeOptions> nodes;  // real nodes (kubelet + containerd); needs root
  std::string dir;                 // empty: a new folder under $TMPDIR (or /tmp)
  pid_t owner_pid = 0;             // the watchdog stops the plane when it exits; 0: us
  bool keep_dir = false;           // keep dir (certificates, logs) after a clean stop
};

// A running test node: a real kubelet and containerd in a mount namespace of their own. The paths
// are host paths, usable from the test; inside the node's namespace (NodeExec, NodeSpawn) the
// same folders are also mounted at the standard places named in the comments, so a program run
// there with its defaults finds them. Every process of the node is in the cgroup cgroup_root.
struct Node {
  std::string name;
  std::string dir;                   // DIR/nodes/<name>: configuration, logs (<process>.log)
  std::string kubelet_root_dir;      // /var/lib/kubelet
  std::string device_plugin_dir;     // /var/lib/kubelet/device-plugins (kubelet.sock)
  std::string plugins_registry_dir;  // /var/lib/kubelet/plugins_registry (DRA, CSI)
  std::string plugins_dir;           // /var/lib/kubelet/plugins
  std::string pod_resources_socket;  // /var/lib/kubelet/pod-resources/kubelet.sock
  std::string cdi_dir;               // /var/run/cdi: where generated CDI specs go
  std::string cdi_static_dir;        // /etc/cdi (containerd reads both)
  std::string nri_socket;            // /var/run/nri/nri.sock: NRI plugins connect here
  std::string containerd_socket;     // /run/containerd/containerd.sock
  std::string fake_gpus;             // the node's copy of its GPU description; empty: none
  std::string dev_dir;               // nvidia<minor>, nvidiactl, nvidia-uvm(-tools): 1:3 nodes
  std::string cgroup_root;           // the kubelet's cgroupRoot, /tessera/<instance>/<name>
  std::string bridge;                // the CNI bridge (created with the first bridged pod)
  std::string subnet;                // the pods' subnet, 10.213.<n>.0/24
  int kubelet_port = 0;              // on 127.0.0.1
  int kubelet_healthz_port = 0;
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
  // With with_service_accounts: where pods reach the API server (the host's address, which the
  // serving certificate names); pods set KUBERNETES_SERVICE_HOST/PORT to these, as there is no
  // kube-proxy. Empty / 0 without.
  const std::string& pod_api_host() const { return pod_api_host_; }
  int pod_api_port() const { return pod_api_port_; }
  std::string kubectl_path() const { return bin_dir_ + "/kubectl"; }
  double start_seconds() const { return start_seconds_; }  // start to healthy, as cluster.sh saw
  // The processes that start recorded: ("etcd", pid), ("kube-apiserver", pid), ...
  const std::vector<std::pair<std::string, pid_t>>& recorded_pids() const { return pids_; }

  // The nodes, in the order of ControlPlaneOptions::nodes; all were Ready when Start returned.
  const std::vector<Node>& nodes() const { return nodes_; }
  const Node* FindNode(std::string_view name) const;  // nullptr if there is none
  // The images every node has (imported, never pulled; use imagePullPolicy: Never).
  static constexpr char kPauseImage[] = "tessera.local/pause:3.10.2";
  static constexpr char kTestImage[] = "tessera.local/busybox:1";  // static busybox, /bin/sh

  // Runs argv in the node's mount namespace and cgroup and waits for it. The environment is
  // ours plus the node's: NODE_NAME, TESSERA_NODE_DIR, TESSERA_FAKE_GPUS (the description file,
  // if any), TESSERA_FAKE_DEV_DIR, KUBECONFIG, CONTAINERD_ADDRESS, CONTAINERD_NAMESPACE=k8s.io,
  // and PATH with kubectl and ctr first; then options.env.
  CommandResult NodeExec(const std::string& node, const std::vector<std::string>& argv,
                         const CommandOptions& options = {}) const;
  // Starts a long-running argv the same way, recorded on the node as `name` (its output goes to
  // <node dir>/<name>.log); Stop() and the watchdog stop it with the node. Returns its pid.
  absl::StatusOr<pid_t> NodeSpawn(
      const std::string& node, const std::string& name, const std::vector<std::string>& argv,
      const std::vector<std::pair<std::string, std::string>>& env = {}) const;
  // Sends signal to the recorded process `name` of the node (also "kubelet", "containerd") and
  // waits until it is gone (SIGKILL after 5 s).
  absl::Status NodeKill(const std::string& node, const std::string& name,
                        int signal = SIGTERM) const;
  // Stops and starts `name` again with the same command (e.g. "kubelet", "containerd", or a
  // process from NodeSpawn). Returns once it runs (for containerd: answers); a restarted kubelet
  // reports Ready again within a few seconds (WaitForNodeReady).
  absl::Status NodeRestart(const std::string& node, const std::string& name) const;
  // Polls until the Node object reports Ready=True.
  absl::Status WaitForNodeReady(const std::string& node,
                                std::chrono::seconds timeout = std::chrono::seconds(60)) const;

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
  std::string pod_api_host_;
  int pod_api_port_ = 0;
  double start_seconds_ = 0;
  std::vector<std::pair<std::string, pid_t>> pids_;
  std::vector<Node> nodes_;
  bool keep_dir_ = false;
  bool running_ = false;
};

// The path of cluster.sh in this source tree.
std::string ClusterScript();

// True if pid names a live process (not a zombie).
bool ProcessAlive(pid_t pid);

// Starts one control plane for the test binary (SetUp), puts its kubectl first on PATH and sets
// KUBECONFIG (and KUBECACHEDIR, inside its folder) for the tests and their children, and stops it
// (TearDown). tessera_e2e_test's main registers it; a test binary with its own main can do the same
// with
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
