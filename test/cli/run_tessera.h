// Runs the `tessera` binary under test (TESSERA_BINARY) through the shell, as a user would, for
// the CLI tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace tessera::cli_testing {

// What happens to the binary's stderr.
enum class Stderr {
  kMerged,     // into `out`, interleaved with stdout (2>&1)
  kDiscarded,  // dropped
  kSeparate,   // kept apart: `out` is stdout alone, `all` is stdout then stderr
};

struct Output {
  int status = -1;  // exit status; -1 when it did not exit normally
  std::string out;  // stdout (and stderr with Stderr::kMerged)
  std::string all;  // everything captured: with kSeparate stdout then stderr, else `out`
};

inline Output RunTessera(const std::string& args, Stderr mode = Stderr::kMerged) {
  Output r;
  const std::string err = ::testing::TempDir() + "/tessera_cli_stderr";
  std::string redirect = mode == Stderr::kMerged      ? " 2>&1"
                         : mode == Stderr::kDiscarded ? " 2>/dev/null"
                                                      : " 2>" + err;
  const std::string cmd = std::string(TESSERA_BINARY) + " " + args + redirect;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int s = pclose(p);
  r.status = WIFEXITED(s) ? WEXITSTATUS(s) : -1;
  r.all = r.out;
  if (mode == Stderr::kSeparate) {
    std::ifstream e(err);
    r.all += std::string(std::istreambuf_iterator<char>(e), {});
  }
  return r;
}

// Writes `text` to a file named `name` in the test's temporary folder; returns its path.
inline std::string TempFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace tessera::cli_testing
