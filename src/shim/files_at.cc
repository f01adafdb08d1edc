#include "shim/files_at.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "shim/ledger.h"

namespace tessera::shim {
namespace {

// Deep enough for anything the agent makes; a deeper tree was made by someone else.
constexpr int kMaxDepth = 32;

absl::Status Errno(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status CheckOwner(const struct stat& st, const std::string& display) {
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(absl::StrCat(display, " is owned by uid ", st.st_uid,
                                                      ", not by this process's ", ::geteuid()));
  }
  return absl::OkStatus();
}

absl::Status RemoveTreeAtDepth(int parent_fd, const std::string& name, const std::string& display,
                               int depth) {
  struct stat st {};
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("cannot stat", display);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(parent_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return Errno("cannot remove", display);
    }
    return absl::OkStatus();
  }
  if (depth >= kMaxDepth) {
    return absl::FailedPreconditionError(
        absl::StrCat(display, " is nested more than ", kMaxDepth, " folders deep"));
  }
  struct stat parent {};
  if (::fstat(parent_fd, &parent) != 0) return Errno("cannot stat the folder of", display);
  if (st.st_dev != parent.st_dev) {
    return absl::FailedPreconditionError(
        absl::StrCat(display, " is a mount point: it is unmounted before it is removed"));
  }
  Fd dir(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return errno == ENOENT ? absl::OkStatus() : Errno("cannot open", display);
  struct stat opened {};
  if (::fstat(dir.get(), &opened) != 0 || opened.st_dev != st.st_dev ||
      opened.st_ino != st.st_ino) {
    return absl::FailedPreconditionError(absl::StrCat(display, " changed while it was removed"));
  }
  std::vector<std::string> names;
  {
    int listing = ::dup(dir.get());
    DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
    if (d == nullptr) {
      if (listing >= 0) ::close(listing);
      return Errno("cannot list", display);
    }
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names.emplace_back(e->d_name);
      }
    }
    ::closedir(d);
  }
  for (const std::string& child : names) {
    absl::Status s =
        RemoveTreeAtDepth(dir.get(), child, absl::StrCat(display, "/", child), depth + 1);
    if (!s.ok()) return s;
  }
  if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    return Errno("cannot remove", display);
  }
  return absl::OkStatus();
}

// "/a/b/c" -> ("/a/b", "c"); "c" -> (".", "c").
std::pair<std::string, std::string> SplitLast(const std::string& path) {
  std::string trimmed = path;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  const size_t slash = trimmed.rfind('/');
  if (slash == std::string::npos) return {".", trimmed};
  return {slash == 0 ? "/" : trimmed.substr(0, slash), trimmed.substr(slash + 1)};
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<Fd> OpenDirAt(int parent_fd, const std::string& name, const std::string& display) {
  Fd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(display, " does not exist"));
    if (errno == ENOTDIR || errno == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrCat(display, " is not a folder (a symlink or a file is in its place)"));
    }
    return Errno("cannot open", display);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot stat", display);
  if (absl::Status s = CheckOwner(st, display); !s.ok()) return s;
  return fd;
}

absl::StatusOr<Fd> MakeDirAt(int parent_fd, const std::string& name, mode_t mode,
                             const std::string& display) {
  if (::mkdirat(parent_fd, name.c_str(), mode) != 0 && errno != EEXIST) {
    return Errno("cannot create", display);
  }
  absl::StatusOr<Fd> fd = OpenDirAt(parent_fd, name, display);
  if (!fd.ok()) return fd.status();
  if (::fchmod(fd->get(), mode) != 0) return Errno("cannot set the mode of", display);
  return fd;
}

absl::StatusOr<Fd> MakeDirs(const std::string& path, mode_t mode) {
  auto [parent, name] = SplitLast(path);
  if (name.empty() || name == "." || name == "..") {
    return absl::InvalidArgumentError(absl::StrCat("\"", path, "\" names no folder to make"));
  }
  for (size_t pos = parent.find('/', 1); pos != std::string::npos;
       pos = parent.find('/', pos + 1)) {
    const std::string ancestor = parent.substr(0, pos);
    if (::mkdir(ancestor.c_str(), 0755) != 0 && errno != EEXIST) {
      return Errno("cannot create", ancestor);
    }
  }
  if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return Errno("cannot create", parent);
  Fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) return Errno("cannot open", parent);
  return MakeDirAt(parent_fd.get(), name, mode, path);
}

absl::StatusOr<Fd> OpenFileAt(int dir_fd, const std::string& name, int flags,
                              const std::string& display) {
  Fd fd(::openat(dir_fd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(display, " does not exist"));
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(display, " is a symlink"));
    }
    return Errno("cannot open", display);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Errno("cannot stat", display);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(display, " is not a regular file"));
  }
  if (absl::Status s = CheckOwner(st, display); !s.ok()) return s;
  if (st.st_nlink != 1) {
    return absl::FailedPreconditionError(absl::StrCat(display, " has ", st.st_nlink, " links"));
  }
  return fd;
}

absl::Status WriteFileAt(int dir_fd, const std::string& name, const std::string& content,
                         mode_t mode, const std::string& display) {
  if (absl::StatusOr<Fd> existing = OpenFileAt(dir_fd, name, O_RDONLY, display); existing.ok()) {
    std::string have(content.size() + 1, '\0');
    size_t got = 0;
    while (got < have.size()) {
      ssize_t n = ::read(existing->get(), have.data() + got, have.size() - got);
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    if (got == content.size() && have.compare(0, got, content) == 0) return absl::OkStatus();
  }
  std::string tmp;
  Fd fd(CreateUniqueAt(dir_fd, "." + name + ".tmp.", 0600, &tmp));
  if (!fd.valid()) return Errno("cannot create a temporary file for", display);
  size_t written = 0;
  while (written < content.size()) {
    ssize_t n = ::write(fd.get(), content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  if (written != content.size() || ::fchmod(fd.get(), mode) != 0 ||
      ::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    absl::Status s = Errno("cannot write", display);
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return s;
  }
  return absl::OkStatus();
}

bool IsMountPointAt(int parent_fd, const std::string& name) {
  struct stat parent {
  }, dir{};
  return ::fstat(parent_fd, &parent) == 0 &&
         ::fstatat(parent_fd, name.c_str(), &dir, AT_SYMLINK_NOFOLLOW) == 0 &&
         S_ISDIR(dir.st_mode) && dir.st_dev != parent.st_dev;
}

absl::Status MountSizedTmpfsAt(int parent_fd, const std::string& name, uint64_t bytes,
                               const std::string& display) {
  if (IsMountPointAt(parent_fd, name)) return absl::OkStatus();
  absl::StatusOr<Fd> dir = OpenDirAt(parent_fd, name, display);
  if (!dir.ok()) return dir.status();
  const std::string target = absl::StrCat("/proc/self/fd/", dir->get());
  const std::string data = absl::StrCat("size=", bytes, ",nr_inodes=64,mode=0755");
  if (::mount("tessera", target.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, data.c_str()) !=
      0) {
    return absl::InternalError(absl::StrCat("cannot mount a tmpfs of ", bytes, " bytes on ",
                                            display, ": ", std::strerror(errno),
                                            " (the agent needs CAP_SYS_ADMIN)"));
  }
  return absl::OkStatus();
}

absl::Status UnmountAt(int parent_fd, const std::string& name, const std::string& display) {
  if (!IsMountPointAt(parent_fd, name)) return absl::OkStatus();
  Fd dir(::openat(parent_fd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return Errno("cannot open", display);
  const std::string target = absl::StrCat("/proc/self/fd/", dir.get());
  if (::umount2(target.c_str(), MNT_DETACH) != 0 && errno != EINVAL) {
    return Errno("cannot unmount", display);
  }
  return absl::OkStatus();
}

absl::Status RemoveTreeAt(int parent_fd, const std::string& name, const std::string& display) {
  return RemoveTreeAtDepth(parent_fd, name, display, 0);
}

absl::Status RemoveTree(const std::string& path) {
  auto [parent, name] = SplitLast(path);
  Fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent_fd.valid()) return errno == ENOENT ? absl::OkStatus() : Errno("cannot open", parent);
  return RemoveTreeAt(parent_fd.get(), name, path);
}

}  // namespace tessera::shim
