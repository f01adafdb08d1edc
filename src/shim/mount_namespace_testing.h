// For tests of code that mounts (a pod's sized ledger folder, shim/files_at.h): the test process
// moves into a mount namespace of its own, with nothing propagating back to the host, so whatever
// a test mounts disappears with the process, even when it fails. Call it at namespace scope (static
// initialisation, while the process has one thread: unshare(CLONE_NEWNS) refuses threaded ones):
//   const bool kPrivateMounts = tessera::shim::EnterPrivateMountNamespace();
// False (and nothing changed) without the privilege; such a test then mounts nothing.
#pragma once

#include <sched.h>
#include <sys/mount.h>

namespace tessera::shim {

inline bool EnterPrivateMountNamespace() {
  if (::unshare(CLONE_NEWNS) != 0) return false;
  return ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
}

}  // namespace tessera::shim
