#include "controlplane/controlplane.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

extern char** environ;

namespace tessera::e2e {
namespace {

std::string ErrnoText(const std::string& what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// The last `lines` lines of text, for error messages.
std::string Tail(std::string_view text, int lines) {
  size_t pos = text.size();
  while (lines-- > 0 && pos > 0) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string_view::npos) return std::string(text);
  }
  return std::string(text.substr(pos == 0 ? 0 : pos + 1));
}

ControlPlane* g_shared = nullptr;

// KEY=VALUE lines of a file (cluster.env, node.env).
std::map<std::string, std::string> ReadKeyValues(const std::string& path) {
  std::map<std::string, std::string> kv;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) kv[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return kv;
}

int ToInt(const std::string& s) {
  int v = 0;
  return absl::SimpleAtoi(s, &v) ? v : 0;
}

absl::StatusOr<Node> ReadNode(const std::string& dir, const std::string& name) {
  const std::string path = absl::StrCat(dir, "/nodes/", name, "/node.env");
  std::map<std::string, std::string> kv = ReadKeyValues(path);
  if (kv["name"] != name) return absl::InternalError(absl::StrCat("cannot read ", path));
  Node n;
  n.name = name;
  n.dir = kv["dir"];
  n.kubelet_root_dir = kv["kubelet_root_dir"];
  n.device_plugin_dir = kv["device_plugin_dir"];
  n.plugins_registry_dir = kv["plugins_registry_dir"];
  n.plugins_dir = kv["plugins_dir"];
  n.pod_resources_socket = kv["pod_resources_socket"];
  n.cdi_dir = kv["cdi_dir"];
  n.cdi_static_dir = kv["cdi_static_dir"];
  n.nri_socket = kv["nri_socket"];
  n.containerd_socket = kv["containerd_socket"];
  n.fake_gpus = kv["fake_gpus"];
  n.dev_dir = kv["dev_dir"];
  n.cgroup_root = kv["cgroup_root"];
  n.bridge = kv["bridge"];
  n.subnet = kv["subnet"];
  n.kubelet_port = ToInt(kv["kubelet_port"]);
  n.kubelet_healthz_port = ToInt(kv["kubelet_healthz_port"]);
  return n;
}

absl::Status FromCommand(const CommandResult& r, const std::vector<std::string>& argv) {
  if (r.ok()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(absl::StrJoin(argv, " "), " (exit ", r.exit_code,
                                          "): ", Tail(r.out + r.err, 20)));
}

}  // namespace

absl::StatusOr<std::vector<NodeOptions>> ParseNodeArgs(const std::vector<std::string>& args) {
  std::vector<NodeOptions> nodes;
  size_t group_begin = 0;  // --gpus and --label apply to nodes[group_begin..]
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    size_t eq = flag.find('=');
    if (flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    }
    if (flag == "--nodes") {
      int count = 0;
      if (!absl::SimpleAtoi(value, &count) || count < 0) {
        return absl::InvalidArgumentError(absl::StrCat("--nodes needs a number, got ", value));
      }
      group_begin = nodes.size();
      for (int k = 0; k < count; ++k) nodes.push_back({});
    } else if (flag == "--node") {
      group_begin = nodes.size();
      nodes.push_back({.name = value});
    } else if (flag == "--gpus" || flag == "--label") {
      if (group_begin == nodes.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " applies to nodes: put it after --node or --nodes"));
      }
      size_t kv = value.find('=');
      if (flag == "--label" && (kv == std::string::npos || kv == 0)) {
        return absl::InvalidArgumentError(absl::StrCat("--label needs KEY=VALUE, got ", value));
      }
      for (size_t k = group_begin; k < nodes.size(); ++k) {
        if (flag == "--gpus") {
          nodes[k].fake_gpus = value;
        } else {
          nodes[k].labels.emplace_back(value.substr(0, kv), value.substr(kv + 1));
        }
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown node option ", flag));
    }
  }
  for (size_t k = 0; k < nodes.size(); ++k) {
    if (nodes[k].name.empty()) nodes[k].name = absl::StrCat("node-", k + 1);
  }
  return nodes;
}

std::vector<std::string> NodeArgs(const std::vector<NodeOptions>& nodes) {
  std::vector<std::string> args;
  for (size_t k = 0; k < nodes.size(); ++k) {
    const NodeOptions& n = nodes[k];
    args.insert(args.end(), {"--node", n.name.empty() ? absl::StrCat("node-", k + 1) : n.name});
    if (!n.fake_gpus.empty()) args.insert(args.end(), {"--gpus", n.fake_gpus});
    for (const auto& [key, value] : n.labels) {
      args.insert(args.end(), {"--label", absl::StrCat(key, "=", value)});
    }
  }
  return args;
}

std::string ClusterScript() { return TESSERA_CONTROLPLANE_SCRIPT; }

bool ProcessAlive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  size_t close = line.rfind(')');
  // The state letter follows "pid (comm) ".
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

CommandResult RunCommand(const std::vector<std::string>& argv, const CommandOptions& options) {
  CommandResult result;
  if (argv.empty()) {
    result.err = "RunCommand: empty argv";
    return result;
  }
  // stdin is a socket so that writing to a command that does not read it gives EPIPE, not
  // SIGPIPE (send with MSG_NOSIGNAL); stdout and stderr are pipes. All close on exec in here.
  int in[2], out[2], err[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in) != 0) {
    result.err = ErrnoText("socketpair");
    return result;
  }
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    result.err = ErrnoText("pipe2");
    return result;
  }

  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string_view::npos) env[std::string(kv.substr(0, eq))] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : options.env) env[k] = v;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[1], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err[1], 2);
  pid_t pid = 0;
  int rc;
  {
    // posix_spawnp searches the caller's PATH; resolve against the child's instead.
    std::string program = argv[0];
    if (program.find('/') == std::string::npos && env.count("PATH")) {
      std::stringstream dirs(env["PATH"]);
      std::string d;
      while (std::getline(dirs, d, ':')) {
        std::string candidate = (d.empty() ? "." : d) + "/" + program;
        if (access(candidate.c_str(), X_OK) == 0) {
          program = candidate;
          break;
        }
      }
    }
    rc = posix_spawn(&pid, program.c_str(), &actions, nullptr, args.data(), envp.data());
  }
  posix_spawn_file_actions_destroy(&actions);
  close(in[1]);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(in[0]);
    close(out[0]);
    close(err[0]);
    result.err = absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc));
    return result;
  }

  size_t written = 0;
  int in_fd = in[0];
  if (options.stdin_data.empty()) {
    shutdown(in_fd, SHUT_WR);
  }
  fcntl(in_fd, F_SETFL, fcntl(in_fd, F_GETFL) | O_NONBLOCK);
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  bool out_open = true, err_open = true, in_open = !options.stdin_data.empty();
  bool timed_out = false;
  char buf[65536];
  while (out_open || err_open) {
    std::vector<pollfd> fds;
    if (out_open) fds.push_back({out[0], POLLIN, 0});
    if (err_open) fds.push_back({err[0], POLLIN, 0});
    if (in_open) fds.push_back({in_fd, POLLOUT, 0});
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    int n = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    for (const auto& p : fds) {
      if (p.revents == 0) continue;
      if (p.fd == in_fd) {
        ssize_t w = send(in_fd, options.stdin_data.data() + written,
                         options.stdin_data.size() - written, MSG_NOSIGNAL);
        if (w > 0) written += w;
        if (w < 0 && errno != EAGAIN && errno != EINTR) written = options.stdin_data.size();
        if (written == options.stdin_data.size()) {
          shutdown(in_fd, SHUT_WR);
          in_open = false;
        }
        continue;
      }
      ssize_t r = read(p.fd, buf, sizeof(buf));
      if (r > 0) {
        (p.fd == out[0] ? result.out : result.err).append(buf, r);
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        (p.fd == out[0] ? out_open : err_open) = false;
      }
    }
  }
  close(in_fd);
  close(out[0]);
  close(err[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    result.exit_code = -1;
    result.err += absl::StrCat("\n", argv[0], " timed out after ", options.timeout.count(),
                               "s and was killed");
  } else if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

absl::StatusOr<std::unique_ptr<ControlPlane>> ControlPlane::Start(
    const ControlPlaneOptions& options) {
  std::string dir = options.dir;
  if (dir.empty()) {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/tessera-cp-XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(ErrnoText("mkdtemp " + pattern));
    }
    dir = pattern;
  }
  pid_t owner = options.owner_pid != 0 ? options.owner_pid : getpid();
  std::vector<std::string> argv = {ClusterScript(), "start", dir, "--owner-pid",
                                   std::to_string(owner)};
  if (options.with_scheduler) argv.push_back("--with-scheduler");
  if (options.with_controller_manager) argv.push_back("--with-controller-manager");
  if (options.with_service_accounts) argv.push_back("--with-service-accounts");
  if (options.with_workloads) argv.push_back("--with-workloads");
  if (options.with_job_workloads) argv.push_back("--with-job-workloads");
  for (std::string& a : NodeArgs(options.nodes)) argv.push_back(std::move(a));

  CommandOptions run;
  run.timeout = std::chrono::seconds(300);
  CommandResult r = RunCommand(argv, run);
  if (!r.ok()) {
    // cluster.sh stops what it started when it fails; not when it was killed (the timeout).
    CommandResult stop = RunCommand({ClusterScript(), "stop", dir});
    return absl::UnavailableError(absl::StrCat(
        "control plane did not start (", absl::StrJoin(argv, " "), ", exit ", r.exit_code, "):\n",
        r.out, r.err, stop.ok() ? "" : "\ncluster.sh stop: " + stop.out + stop.err));
  }

  std::unique_ptr<ControlPlane> cp(new ControlPlane());
  cp->dir_ = dir;
  cp->keep_dir_ = options.keep_dir;
  cp->running_ = true;
  std::map<std::string, std::string> kv = ReadKeyValues(dir + "/cluster.env");
  cp->server_ = kv["server"];
  cp->kubeconfig_ = kv["kubeconfig"];
  cp->ca_file_ = kv["ca_file"];
  cp->client_cert_file_ = kv["client_cert_file"];
  cp->client_key_file_ = kv["client_key_file"];
  cp->bin_dir_ = kv["bin_dir"];
  cp->pod_api_host_ = kv["pod_api_host"];
  cp->pod_api_port_ = std::atoi(kv["pod_api_port"].c_str());
  cp->start_seconds_ = kv.count("start_seconds") ? std::atof(kv["start_seconds"].c_str()) : 0;
  std::ifstream pids(dir + "/pids");
  std::string name;
  pid_t pid;
  while (pids >> name >> pid) cp->pids_.emplace_back(name, pid);
  if (cp->server_.empty() || cp->kubeconfig_.empty() || cp->pids_.empty()) {
    absl::Status stop = cp->Stop();
    return absl::InternalError(absl::StrCat("cluster.sh start left no usable ", dir,
                                            "/cluster.env or pids; stop: ", stop.ToString()));
  }
  for (absl::string_view node_name : absl::StrSplit(kv["nodes"], ' ', absl::SkipEmpty())) {
    absl::StatusOr<Node> node = ReadNode(dir, std::string(node_name));
    if (!node.ok()) {
      absl::Status stop = cp->Stop();
      return absl::InternalError(
          absl::StrCat(node.status().message(), "; stop: ", stop.ToString()));
    }
    cp->nodes_.push_back(*std::move(node));
  }
  if (cp->nodes_.size() != options.nodes.size()) {
    absl::Status stop = cp->Stop();
    return absl::InternalError(absl::StrCat("cluster.sh start reported ", cp->nodes_.size(),
                                            " nodes, not ", options.nodes.size(),
                                            "; stop: ", stop.ToString()));
  }
  return cp;
}

const Node* ControlPlane::FindNode(std::string_view name) const {
  for (const Node& n : nodes_) {
    if (n.name == name) return &n;
  }
  return nullptr;
}

CommandResult ControlPlane::NodeExec(const std::string& node, const std::vector<std::string>& argv,
                                     const CommandOptions& options) const {
  std::vector<std::string> full = {ClusterScript(), "node-exec", dir_, node};
  for (const auto& [k, v] : options.env) full.push_back(absl::StrCat("--env=", k, "=", v));
  full.push_back("--");
  full.insert(full.end(), argv.begin(), argv.end());
  CommandOptions run = options;
  run.env.clear();
  return RunCommand(full, run);
}

absl::StatusOr<pid_t> ControlPlane::NodeSpawn(
    const std::string& node, const std::string& name, const std::vector<std::string>& argv,
    const std::vector<std::pair<std::string, std::string>>& env) const {
  std::vector<std::string> full = {ClusterScript(), "node-spawn", dir_, node, name};
  for (const auto& [k, v] : env) full.push_back(absl::StrCat("--env=", k, "=", v));
  full.push_back("--");
  full.insert(full.end(), argv.begin(), argv.end());
  CommandOptions run;
  run.timeout = std::chrono::seconds(60);
  CommandResult r = RunCommand(full, run);
  if (absl::Status s = FromCommand(r, full); !s.ok()) return s;
  pid_t pid = 0;
  std::string out(absl::StripAsciiWhitespace(r.out));
  if (!absl::SimpleAtoi(out, &pid)) {
    return absl::InternalError(absl::StrCat("node-spawn printed no pid: ", r.out));
  }
  return pid;
}

absl::Status ControlPlane::NodeKill(const std::string& node, const std::string& name,
                                    int signal) const {
  std::vector<std::string> argv = {ClusterScript(), "node-kill",           dir_, node, name,
                                   "--signal",      std::to_string(signal)};
  return FromCommand(RunCommand(argv), argv);
}

absl::Status ControlPlane::NodeRestart(const std::string& node, const std::string& name) const {
  std::vector<std::string> argv = {ClusterScript(), "node-restart", dir_, node, name};
  return FromCommand(RunCommand(argv), argv);
}

absl::Status ControlPlane::WaitForNodeReady(const std::string& node,
                                            std::chrono::seconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string last;
  while (true) {
    CommandResult r = Kubectl(
        {"get", "node", node, "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"});
    last = r.ok() ? r.out : r.err;
    if (r.ok() && r.out == "True") return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat("node ", node, " not Ready after ",
                                                      timeout.count(), "s (Ready: ", last, ")"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

ControlPlane& ControlPlane::Shared() {
  if (g_shared == nullptr) {
    std::cerr << "ControlPlane::Shared(): no shared control plane in this test binary (build it "
                 "with tessera_e2e_test, or check that its start succeeded)\n";
    std::abort();
  }
  return *g_shared;
}

ControlPlane::~ControlPlane() {
  if (running_) {
    absl::Status s = Stop();
    if (!s.ok()) std::cerr << "ControlPlane: " << s << "\n";
  }
}

absl::Status ControlPlane::Stop() {
  if (!running_) return absl::OkStatus();
  CommandResult r = RunCommand({ClusterScript(), "stop", dir_});
  if (!r.ok()) {  // still running_: the destructor tries again
    return absl::InternalError(absl::StrCat("cluster.sh stop ", dir_, " failed (exit ", r.exit_code,
                                            "):\n", r.out, r.err));
  }
  std::vector<pid_t> left = RunningProcesses();
  if (!left.empty()) {
    return absl::InternalError(absl::StrCat("processes of the control plane in ", dir_,
                                            " still run after stop: ", absl::StrJoin(left, " ")));
  }
  running_ = false;
  const testing::TestInfo* test = testing::UnitTest::GetInstance()->current_test_info();
  bool failed =
      testing::UnitTest::GetInstance()->Failed() || (test != nullptr && test->result()->Failed());
  const char* keep_env = getenv("TESSERA_KEEP_CONTROLPLANE");
  bool keep = keep_dir_ || failed || (keep_env != nullptr && *keep_env && *keep_env != '0');
  if (keep) {
    std::cerr << "ControlPlane: certificates and logs kept in " << dir_ << "\n";
  } else {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  return absl::OkStatus();
}

CommandResult ControlPlane::Kubectl(const std::vector<std::string>& args,
                                    std::string_view stdin_data) const {
  std::vector<std::string> argv = {kubectl_path(), "--kubeconfig=" + kubeconfig_};
  argv.insert(argv.end(), args.begin(), args.end());
  CommandOptions options;
  options.stdin_data = std::string(stdin_data);
  options.timeout = std::chrono::seconds(120);
  // kubectl's discovery cache goes with the control plane, not to ~/.kube/cache/<host_port>.
  options.env = {{"KUBECACHEDIR", dir_ + "/kube-cache"}};
  return RunCommand(argv, options);
}

absl::StatusOr<std::string> ControlPlane::KubectlOk(const std::vector<std::string>& args,
                                                    std::string_view stdin_data) const {
  CommandResult r = Kubectl(args, stdin_data);
  if (!r.ok()) {
    return absl::InternalError(absl::StrCat("kubectl ", absl::StrJoin(args, " "), " (exit ",
                                            r.exit_code, "): ", Tail(r.err, 20)));
  }
  return std::move(r.out);
}

std::vector<pid_t> ControlPlane::RunningProcesses() const {
  std::vector<pid_t> found;
  const pid_t self = getpid();
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(name);
    if (pid == self) continue;
    std::ifstream cmdline(entry.path() / "cmdline", std::ios::binary);
    std::string arg;
    bool match = false;
    while (std::getline(cmdline, arg, '\0')) {
      if (arg == dir_ || arg.find(dir_ + "/") != std::string::npos) {
        match = true;
        break;
      }
    }
    if (match && ProcessAlive(pid)) found.push_back(pid);
  }
  return found;
}

void ControlPlaneEnvironment::SetUp() {
  auto cp = ControlPlane::Start(options_);
  ASSERT_TRUE(cp.ok()) << cp.status().message();
  g_shared = cp->release();
  std::cerr << "[controlplane] " << g_shared->server() << " ready in " << g_shared->start_seconds()
            << "s (dir " << g_shared->dir() << ")\n";
  const char* path = getenv("PATH");
  std::string new_path = g_shared->bin_dir() + (path && *path ? std::string(":") + path : "");
  setenv("PATH", new_path.c_str(), 1);
  setenv("KUBECONFIG", g_shared->kubeconfig().c_str(), 1);
  setenv("KUBECACHEDIR", (g_shared->dir() + "/kube-cache").c_str(), 1);
}

void ControlPlaneEnvironment::TearDown() {
  if (g_shared == nullptr) return;
  absl::Status s = g_shared->Stop();
  delete g_shared;
  g_shared = nullptr;
  EXPECT_TRUE(s.ok()) << s.message();
}

}  // namespace tessera::e2e
