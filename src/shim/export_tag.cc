#include "shim/export_tag.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "common/hash.h"

namespace tessera::shim {
namespace {

struct flock LockAt(short type, uint64_t key) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(kExportTagBase + (key & kExportKeyMask));
  fl.l_len = 1;
  return fl;
}

}  // namespace

uint64_t NewExportKey() {
  uint64_t key = 0;
#if defined(SYS_getrandom)
  // The system call, not glibc's getrandom() (2.25): the shim loads on glibc 2.17.
  if (::syscall(SYS_getrandom, &key, sizeof(key), 0) != static_cast<long>(sizeof(key))) key = 0;
#endif
  if (key == 0) {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    key = (uint64_t(ts.tv_nsec) << 20) ^ uint64_t(ts.tv_sec) ^ (uint64_t(::getpid()) << 40);
    key *= 0x9E3779B97F4A7C15ULL;
  }
  key &= kExportKeyMask;
  return key == 0 ? 1 : key;
}

bool TagDescriptor(int fd, uint64_t key) {
  struct flock fl = LockAt(F_RDLCK, key);
  return ::fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

uint64_t ReadExportTag(int fd) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
  int info = ::open(path, O_RDONLY | O_CLOEXEC);
  if (info < 0) return 0;
  char buf[4096];
  ssize_t n = ::read(info, buf, sizeof(buf) - 1);
  ::close(info);
  if (n <= 0) return 0;
  buf[n] = '\0';
  // "lock:\t1: OFDLCK ADVISORY  READ -1 00:06:3 <start> <end>", one line per lock this open
  // file description holds.
  for (char* line = buf; line != nullptr && *line != '\0';) {
    char* next = std::strchr(line, '\n');
    if (next != nullptr) *next++ = '\0';
    if (std::strncmp(line, "lock:", 5) == 0 && std::strstr(line, "OFDLCK") != nullptr) {
      char* last = std::strrchr(line, ' ');  // before <end>
      if (last != nullptr) {
        *last = '\0';
        char* start = std::strrchr(line, ' ');
        if (start != nullptr) {
          uint64_t at = std::strtoull(start + 1, nullptr, 10);
          if (at > kExportTagBase && at - kExportTagBase <= kExportKeyMask) {
            return at - kExportTagBase;
          }
        }
      }
    }
    line = next;
  }
  return 0;
}

int OpenProbe(int fd) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  return ::open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
}

bool ExportedDescriptorOpen(int probe, uint64_t key) {
  struct flock fl = LockAt(F_WRLCK, key);
  return ::fcntl(probe, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
}

uint64_t IpcHandleKey(const void* handle, size_t size) {
  const uint64_t h = Fnv1a(std::string_view(static_cast<const char*>(handle), size));
  return h | (uint64_t{1} << 63);
}

}  // namespace tessera::shim
