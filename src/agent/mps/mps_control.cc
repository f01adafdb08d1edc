#include "agent/mps/mps_control.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "shim/files_at.h"

extern char** environ;

namespace tessera::agent::mps {
namespace {

int64_t NowMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1'000'000;
}

absl::Status MakeDirs(const std::string& path, mode_t mode) {
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create ", partial, ": ", std::strerror(errno)));
    }
  }
  ::chmod(path.c_str(), mode);
  return absl::OkStatus();
}

void RemoveTree(const std::string& path) {
  std::vector<std::string> argv = {"rm", "-rf", "--one-file-system", path};
  RunProgram(argv, {}, "", 10'000);
}

std::vector<std::string> Substitute(const std::vector<std::string>& argv, const std::string& uuid) {
  std::vector<std::string> out;
  for (const auto& a : argv) out.push_back(absl::StrReplaceAll(a, {{"{uuid}", uuid}}));
  return out;
}

std::string Trim(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); }

}  // namespace

RunResult RunProgram(const std::vector<std::string>& argv,
                     const std::vector<std::pair<std::string, std::string>>& env,
                     const std::string& input, int timeout_ms, const std::string& private_shm,
                     const std::string& output_file) {
  RunResult result;
  if (argv.empty()) return result;
  int out_fd = -1;
  if (!output_file.empty()) {
    out_fd = ::open(output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (out_fd < 0) {
      result.err = "cannot open " + output_file + ": " + std::strerror(errno);
      return result;
    }
  }
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    result.err = std::string("pipe: ") + std::strerror(errno);
    return result;
  }
  // The child's environment: ours, with `env` replacing or adding.
  std::vector<std::string> envs;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (const auto& [k, v] : env) replaced |= kv.rfind(k + "=", 0) == 0;
    if (!replaced) envs.push_back(kv);
  }
  for (const auto& [k, v] : env) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    result.err = std::string("fork: ") + std::strerror(errno);
    return result;
  }
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out_fd >= 0 ? out_fd : out[1], 1);
    ::dup2(out_fd >= 0 ? out_fd : err[1], 2);
    ::setpgid(0, 0);
    if (!private_shm.empty()) {
      // A mount namespace of its own, not propagating back, with the directory over /dev/shm.
      if (::unshare(CLONE_NEWNS) != 0 ||
          ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
          ::mount(private_shm.c_str(), "/dev/shm", nullptr, MS_BIND, nullptr) != 0) {
        std::string msg = std::string("cannot give the MPS daemon a private /dev/shm (") +
                          std::strerror(errno) + "; needs CAP_SYS_ADMIN)\n";
        ssize_t ignored = ::write(2, msg.data(), msg.size());
        (void)ignored;
        ::_exit(126);
      }
    }
    ::execvpe(cargv[0], cargv.data(), cenv.data());
    std::string msg = std::string("cannot run ") + argv[0] + ": " + std::strerror(errno) + "\n";
    ssize_t ignored = ::write(2, msg.data(), msg.size());
    (void)ignored;
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  if (out_fd >= 0) {
    // A daemon's starter: its output goes to the file; a daemon child may keep the file open,
    // so wait for the starter's exit only.
    ::close(out_fd);
    ::close(in[1]);
    ::close(out[0]);
    ::close(err[0]);
    const int64_t deadline = NowMs() + timeout_ms;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (NowMs() >= deadline) {
        ::kill(-pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        result.err = absl::StrCat(argv[0], " did not finish within ", timeout_ms, " ms");
        return result;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
  }
  if (!input.empty()) {
    // A program that exits without reading its input must not kill the agent with SIGPIPE:
    // block it for this thread around the write and consume it if it came.
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t ignored = ::write(in[1], input.data(), input.size());
    (void)ignored;
    timespec zero{};
    sigtimedwait(&pipe_set, nullptr, &zero);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
  }
  ::close(in[1]);
  const int64_t deadline = NowMs() + timeout_ms;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  bool timed_out = false;
  while (open > 0) {
    int64_t left = deadline - NowMs();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left)) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[4096];
      ssize_t n = ::read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  if (timed_out) ::kill(-pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out) {
    result.err += absl::StrCat(argv[0], " did not finish within ", timeout_ms, " ms");
    result.exit_code = -1;
  } else {
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return result;
}

absl::StatusOr<std::unique_ptr<MpsDaemon>> MpsDaemon::Start(const std::string& gpu_uuid,
                                                            const MpsOptions& options) {
  if (gpu_uuid.empty() || gpu_uuid.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("GPU UUID '", gpu_uuid, "' is not usable"));
  }
  std::unique_ptr<MpsDaemon> d(new MpsDaemon());
  d->gpu_uuid_ = gpu_uuid;
  d->dir_ = absl::StrCat(options.root, "/", gpu_uuid);
  d->options_ = options;
  // Clients of any user reach the daemon through the pipe and shm directories.
  for (const auto& [dir, mode] : {std::pair<std::string, mode_t>{d->pipe_dir(), 0777},
                                  {d->log_dir(), 0755},
                                  {d->shm_dir(), 01777}}) {
    if (absl::Status s = MakeDirs(dir, mode); !s.ok()) return s;
  }
  // The daemon's /dev/shm is a tmpfs of its own size (the clients share it; none of them fills
  // the host's /run through it), unmounted again if the daemon does not start.
  bool mounted = false;
  if (options.private_shm) {
    absl::StatusOr<shim::Fd> gpu_dir = shim::MakeDirs(d->dir_, 0755);
    if (!gpu_dir.ok()) return gpu_dir.status();
    mounted = !shim::IsMountPointAt(gpu_dir->get(), "shm");
    if (absl::Status s =
            shim::MountSizedTmpfsAt(gpu_dir->get(), "shm", options.shm_bytes, d->shm_dir());
        !s.ok()) {
      return s;
    }
    ::chmod(d->shm_dir().c_str(), 01777);
  }
  if (d->Command("get_default_active_thread_percentage").ok()) {
    d->adopted_ = true;
    return d;
  }
  absl::StatusOr<std::unique_ptr<MpsDaemon>> started = d->StartDaemon();
  if (!started.ok() && mounted) {  // nothing left mounted by a failed start
    if (shim::Fd gpu_dir(::open(d->dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        gpu_dir.valid()) {
      (void)shim::UnmountAt(gpu_dir.get(), "shm", d->shm_dir());
    }
  }
  return started;
}

absl::StatusOr<std::unique_ptr<MpsDaemon>> MpsDaemon::StartDaemon() {
  std::unique_ptr<MpsDaemon> d(new MpsDaemon(*this));
  const MpsOptions& options = options_;
  const std::string& gpu_uuid = gpu_uuid_;
  if (!options.exclusive_command.empty()) {
    RunResult r = RunProgram(Substitute(options.exclusive_command, gpu_uuid), {}, "",
                             options.command_timeout_ms);
    if (r.exit_code != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot put ", gpu_uuid, " in EXCLUSIVE_PROCESS mode (",
                       absl::StrJoin(options.exclusive_command, " "), "): ", Trim(r.err + r.out)));
    }
  }
  // The daemon's own output goes to a file in its log directory (it outlives the starter).
  const std::string start_log = d->log_dir() + "/start.log";
  RunResult started =
      RunProgram({options.control, "-d"}, d->DaemonEnv(), "", options.command_timeout_ms,
                 options.private_shm ? d->shm_dir() : "", start_log);
  if (started.exit_code != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot start the MPS control daemon for ", gpu_uuid, " (", options.control, " -d, exit ",
        started.exit_code, "): ", Trim(started.err), " (see ", start_log, ")"));
  }
  // -d returns when it has forked; the daemon answers once it listens.
  const int64_t deadline = NowMs() + options.command_timeout_ms;
  absl::StatusOr<std::string> ready = d->Command("get_default_active_thread_percentage");
  while (!ready.ok() && NowMs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ready = d->Command("get_default_active_thread_percentage");
  }
  if (!ready.ok()) {
    return absl::UnavailableError(absl::StrCat("the MPS control daemon for ", gpu_uuid,
                                               " does not answer: ", ready.status().message(),
                                               " (see ", d->log_dir(), "/control.log)"));
  }
  return d;
}

std::vector<std::pair<std::string, std::string>> MpsDaemon::DaemonEnv() const {
  return {{"CUDA_VISIBLE_DEVICES", gpu_uuid_},
          {"CUDA_MPS_PIPE_DIRECTORY", pipe_dir()},
          {"CUDA_MPS_LOG_DIRECTORY", log_dir()}};
}

absl::StatusOr<std::string> MpsDaemon::Command(const std::string& command) const {
  if (stopped_) return absl::FailedPreconditionError("the MPS daemon was stopped");
  RunResult r =
      RunProgram({options_.control}, DaemonEnv(), command + "\n", options_.command_timeout_ms);
  if (r.exit_code != 0) {
    return absl::UnavailableError(absl::StrCat("MPS command '", command, "' for ", gpu_uuid_,
                                               " failed (exit ", r.exit_code,
                                               "): ", Trim(r.err + r.out)));
  }
  return Trim(r.out);
}

absl::Status MpsDaemon::SetCeilings(int active_thread_percentage, uint64_t pinned_memory_mib,
                                    int device_index) {
  if (active_thread_percentage < 1 || active_thread_percentage > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("active thread percentage ", active_thread_percentage, " outside 1..100"));
  }
  if (auto r =
          Command(absl::StrCat("set_default_active_thread_percentage ", active_thread_percentage));
      !r.ok()) {
    return r.status();
  }
  if (pinned_memory_mib > 0) {
    if (auto r = Command(absl::StrCat("set_default_device_pinned_mem_limit ", device_index, " ",
                                      pinned_memory_mib, "M"));
        !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

ContainerEdits MpsDaemon::EditsFor(const ClientShare& share) const {
  ContainerEdits e;
  e.env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", options_.container_pipe_dir);
  e.env.emplace_back("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                     std::to_string(share.active_thread_percentage));
  if (share.pinned_memory_mib > 0) {
    e.env.emplace_back("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                       absl::StrCat(share.device_index, "=", share.pinned_memory_mib, "M"));
  }
  e.env.emplace_back("TESSERA_GPU_SHARING", "mps");
  e.mounts.push_back({pipe_dir(), options_.container_pipe_dir, true});
  e.mounts.push_back({options_.private_shm ? shm_dir() : "/dev/shm", "/dev/shm", false});
  return e;
}

absl::Status MpsDaemon::Stop() {
  if (stopped_) return absl::OkStatus();
  absl::Status status = absl::OkStatus();
  if (auto r = Command("quit"); !r.ok()) status = r.status();
  // Gone when it no longer answers.
  const int64_t deadline = NowMs() + options_.command_timeout_ms;
  while (Command("get_default_active_thread_percentage").ok() && NowMs() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stopped_ = true;
  if (!options_.restore_command.empty()) {
    RunResult r = RunProgram(Substitute(options_.restore_command, gpu_uuid_), {}, "",
                             options_.command_timeout_ms);
    if (r.exit_code != 0 && status.ok()) {
      status = absl::InternalError(absl::StrCat("cannot restore the compute mode of ", gpu_uuid_,
                                                ": ", Trim(r.err + r.out)));
    }
  }
  RemoveTree(pipe_dir());
  if (shim::Fd gpu_dir(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); gpu_dir.valid()) {
    if (absl::Status s = shim::UnmountAt(gpu_dir.get(), "shm", shm_dir()); !s.ok() && status.ok()) {
      status = s;
    }
  }
  RemoveTree(shm_dir());
  return status;
}

}  // namespace tessera::agent::mps
