// Definitions that keep the shim loadable on old glibc (glibc_compat.h). Both symbols are hidden
// by the version scripts: they serve only the C++ runtime linked into the shim.
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

extern "C" {

// glibc 2.32 publishes whether the process is single-threaded; the C++ runtime reads it to skip
// atomics. Always "no" here: atomics are always correct.
char __libc_single_threaded = 0;

// glibc 2.25 and 2.36 entry points std::random_device may call; the getrandom(2) system call
// (Linux 3.17) gives the same.
int getentropy(void* buffer, size_t length) {
  if (length > 256) {
    errno = EIO;
    return -1;
  }
  auto* p = static_cast<unsigned char*>(buffer);
  while (length > 0) {
    long n = ::syscall(SYS_getrandom, p, length, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += n;
    length -= static_cast<size_t>(n);
  }
  return 0;
}

ssize_t getrandom(void* buffer, size_t length, unsigned int flags) {
  return ::syscall(SYS_getrandom, buffer, length, flags);
}

uint32_t arc4random() {
  uint32_t v = 0;
  while (getentropy(&v, sizeof(v)) != 0) {
  }
  return v;
}

}  // extern "C"
