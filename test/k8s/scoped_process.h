// A child process for end-to-end tests: started with fork/exec, output to a log file, killed
// (SIGKILL) and reaped when the object goes, and killed by the kernel if the test binary dies
// first (PR_SET_PDEATHSIG), so that no test leaves a process behind even when it fails.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::e2e {

class ScopedProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ScopedProcess>> Start(const std::vector<std::string>& argv,
                                                              const std::string& log_path);
  ~ScopedProcess();
  ScopedProcess(const ScopedProcess&) = delete;
  ScopedProcess& operator=(const ScopedProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_path_; }
  void Signal(int sig);
  // Waits for the process to end: its exit status, 128 + signal, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);
  bool Running();
  std::string Log() const;
  // Waits until the log contains `text`; true if it did within `timeout`.
  bool WaitForLog(const std::string& text, std::chrono::milliseconds timeout) const;

 private:
  ScopedProcess() = default;
  pid_t pid_ = -1;
  int status_ = -1;
  bool reaped_ = false;
  std::string log_path_;
};

}  // namespace tessera::e2e
