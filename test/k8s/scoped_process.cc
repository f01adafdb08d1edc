#include "scoped_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace tessera::e2e {

absl::StatusOr<std::unique_ptr<ScopedProcess>> ScopedProcess::Start(
    const std::vector<std::string>& argv, const std::string& log_path) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return absl::InternalError("cannot open " + log_path);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    close(log);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(log, 1);
    dup2(log, 2);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    execv(args[0], args.data());
    _exit(127);
  }
  close(log);
  std::unique_ptr<ScopedProcess> p(new ScopedProcess());
  p->pid_ = pid;
  p->log_path_ = log_path;
  return p;
}

ScopedProcess::~ScopedProcess() {
  if (!reaped_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(10));
  }
}

void ScopedProcess::Signal(int sig) {
  if (!reaped_ && pid_ > 0) kill(pid_, sig);
}

int ScopedProcess::Wait(std::chrono::milliseconds timeout) {
  if (reaped_) return status_;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int st = 0;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

bool ScopedProcess::Running() { return Wait(std::chrono::milliseconds(0)) == -1; }

std::string ScopedProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool ScopedProcess::WaitForLog(const std::string& text, std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Log().find(text) != std::string::npos;
}

}  // namespace tessera::e2e
