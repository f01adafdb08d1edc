// For tests of code that mounts (a pod's sized ledger folder, shim/files_at.h): the test process
// moves into a mount namespace of its own, with nothing propagating back to the host, so whatever
// a test mounts disappears with the process, even when it fails. Call it at namespace scope (static
// initialisation, while the process has one thread: unshare(CLONE_NEWNS) refuses threaded ones):
//   const bool kPrivateMounts = tessera::shim::EnterPrivateMountNamespace();
// False (and nothing changed) without the privilege; such a test then mounts nothing.
// RemoveTestTree(dir) removes a test's folder after unmounting what was mounted under it (a pod
// left prepared keeps its ledger folder's tmpfs, which a plain remove_all cannot take away).
#pragma once

#include <sched.h>
#include <sys/mount.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessera::shim {

inline bool EnterPrivateMountNamespace() {
  if (::unshare(CLONE_NEWNS) != 0) return false;
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

inline void RemoveTestTree(const std::filesystem::path& dir) {
  std::vector<std::string> mounts;
  std::ifstream in("/proc/self/mounts");
  for (std::string device, target, rest; in >> device >> target && std::getline(in, rest);) {
    if (target.rfind(dir.string() + "/", 0) == 0) mounts.push_back(target);
  }
  for (auto it = mounts.rbegin(); it != mounts.rend(); ++it)
    (void)::umount2(it->c_str(), MNT_DETACH);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace tessera::shim
