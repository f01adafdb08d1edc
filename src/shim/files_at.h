// Files in directories that a container may be able to write. Every open, create, chmod, unlink
// and rename the agent (or its DRA plugin) does under such a directory goes through a descriptor
// of the directory and never follows a symlink, so that a name planted there (a symlink to
// /etc/shadow, a hard link, a directory where a file was) is never opened, truncated, chmodded
// or descended into by root. What is opened is checked (fstat): a directory or a regular file,
// owned by this process's user.
//
// The paths handed to MakeDirs are the agent's own (/run/tessera/pods/<UID>): their ancestors are
// trusted and looked up by path; the names below them are not.
//
// Example (a pod's ledger directory, made or reopened):
//   absl::StatusOr<Fd> pod = MakeDirs("/run/tessera/pods/8d1c...", 0755);
//   absl::StatusOr<Fd> ledger = MakeDirAt(pod->get(), "ledger", 0755, "/run/.../ledger");
//   ... Ledger::CreateAt(ledger->get(), "<UUID>.ledger", ...);
//   at pod end: RemoveTree("/run/tessera/pods/8d1c...").
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::shim {

// An owned file descriptor (closed on destruction).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd();
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// The directory `name` in `parent_fd`: never through a symlink, and only a directory owned by
// this process's user (`display` names it in errors).
absl::StatusOr<Fd> OpenDirAt(int parent_fd, const std::string& name, const std::string& display);
// The same, made first if it is missing; its mode is set to `mode` (through the descriptor).
absl::StatusOr<Fd> MakeDirAt(int parent_fd, const std::string& name, mode_t mode,
                             const std::string& display);
// `path`, made with its missing ancestors (0755); the last component as MakeDirAt.
absl::StatusOr<Fd> MakeDirs(const std::string& path, mode_t mode);

// The regular file `name` in `dir_fd`, opened with `flags` plus O_NOFOLLOW and O_CLOEXEC, and
// accepted only if it is a regular file owned by this process's user with one link.
absl::StatusOr<Fd> OpenFileAt(int dir_fd, const std::string& name, int flags,
                              const std::string& display);

// Writes `content` to `name` in `dir_fd` atomically (a new file with a random name, then
// renameat over `name`) unless `name` already holds exactly that; `mode` through the descriptor.
absl::Status WriteFileAt(int dir_fd, const std::string& name, const std::string& content,
                         mode_t mode, const std::string& display);

// Makes the directory `name` of `parent_fd` a tmpfs of at most `bytes` (nosuid, nodev, noexec,
// mode 0755), unless it is a mount point already; mounted through the directory's descriptor
// (/proc/self/fd), never a path a symlink could redirect. What is written there then fills that
// tmpfs, never the filesystem of the parent (the host's /run). Needs CAP_SYS_ADMIN.
absl::Status MountSizedTmpfsAt(int parent_fd, const std::string& name, uint64_t bytes,
                               const std::string& display);
// True when the directory `name` of `parent_fd` is a mount point (another filesystem).
bool IsMountPointAt(int parent_fd, const std::string& name);
// Unmounts it (lazily: containers holding files of it keep them) if it is a mount point.
absl::Status UnmountAt(int parent_fd, const std::string& name, const std::string& display);

// Removes the entry `name` of `parent_fd` and, if it is a directory, everything in it: through
// descriptors, never following a symlink (a symlink is removed, not its target) and never
// crossing into another filesystem (a mount below is an error: unmount it first). Missing is
// not an error.
absl::Status RemoveTreeAt(int parent_fd, const std::string& name, const std::string& display);
// The same for a path whose ancestors are trusted.
absl::Status RemoveTree(const std::string& path);

}  // namespace tessera::shim
