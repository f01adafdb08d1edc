// `promtool check metrics` on a /metrics body, for tests: every exposition the tests render or
// scrape goes through Prometheus' own parser and linter (promlint: counters end in _total, base
// units, no type suffixes on gauges, ...). promtool is extracted from Debian's `prometheus`
// package by scripts/setup.sh; CMake finds it (TESSERA_PROMTOOL, a compile definition of the
// tests that link tessera_promtool_testing).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "common/strings.h"

namespace tessera::testing {

// OK when promtool finds nothing to say about `metrics_text`; otherwise its findings.
inline absl::Status PromtoolCheckMetrics(const std::string& metrics_text) {
  const std::string promtool = TESSERA_PROMTOOL;
  if (promtool.empty() || !std::filesystem::exists(promtool)) {
    return absl::FailedPreconditionError(
        "promtool not found when the build was configured: run scripts/setup.sh, then cmake "
        "--preset dev again");
  }
  char path[] = "/tmp/tessera-promtool-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) return absl::InternalError("mkstemp failed");
  ::close(fd);
  std::ofstream(path) << metrics_text;
  FILE* p = ::popen(StrCat(promtool, " check metrics < ", path, " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; p != nullptr && (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = p == nullptr ? -1 : ::pclose(p);
  std::filesystem::remove(path);
  if (status == 0 && out.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("promtool check metrics (exit ", WEXITSTATUS(status), "):\n", out));
}

// The same, for tests that scrape /metrics many times (in wait loops): promtool runs once per
// distinct shape of the text (every line with its sample value cut off: the families, their types
// and help, every series' name and labels), which is what its checks are about.
inline absl::Status PromtoolCheckMetricsOnce(const std::string& metrics_text) {
  std::string shape;
  std::istringstream in(metrics_text);
  for (std::string line; std::getline(in, line);) {
    shape += line[0] == '#' ? line : line.substr(0, line.rfind(' '));
    shape += '\n';
  }
  static std::mutex mu;
  static std::set<size_t> seen;
  const size_t key = std::hash<std::string>()(shape);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (seen.contains(key)) return absl::OkStatus();
  }
  absl::Status s = PromtoolCheckMetrics(metrics_text);
  if (s.ok()) {
    std::lock_guard<std::mutex> lock(mu);
    seen.insert(key);
  }
  return s;
}

}  // namespace tessera::testing
