#include "agent/discovery/fake_discovery.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/discovery/fake_gpus_file.h"
#include "common/strings.h"

namespace tessera::agent {

std::string FakeDiscovery::Describe() const { return StrCat("GPU description file ", path_); }

std::string FakeDiscovery::Stamp() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return "";
  return StrCat(st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, "/", st.st_size, "/", st.st_ino);
}

absl::StatusOr<NodeGpus> FakeDiscovery::Discover() {
  seen_stamp_ = Stamp();
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return absl::FailedPreconditionError(
        StrCat("cannot read the GPU description file ", path_, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::FailedPreconditionError(
        StrCat("cannot read the GPU description file ", path_, ": ", std::strerror(errno)));
  }
  return ParseFakeGpusFile(text.str(), path_);
}

absl::StatusOr<WaitResult> FakeDiscovery::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  WaitResult result;
  while (true) {
    if (Stamp() != seen_stamp_) {
      result.changed = true;
      return result;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return result;
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
        std::chrono::milliseconds(100), deadline - now));
  }
}

}  // namespace tessera::agent
