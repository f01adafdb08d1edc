// A preloaded library that moves a process's wall clock: CLOCK_REALTIME (clock_gettime,
// gettimeofday, time) reads SOAK_CLOCK_SKEW_SECONDS ahead (or behind, when negative); the monotonic
// clocks are left alone. The soak runs a scheduler replica with it to renew its lease with a
// skewed clock (LD_PRELOAD=libsoak_clock_skew.so).
#include <dlfcn.h>
#include <sys/time.h>

#include <cstdlib>
#include <ctime>

namespace {

long long Skew() {
  static const long long skew = [] {
    const char* s = std::getenv("SOAK_CLOCK_SKEW_SECONDS");
    return s ? std::atoll(s) : 0LL;
  }();
  return skew;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int clock_gettime(clockid_t id,
                                                         struct timespec* ts) noexcept {
  using Fn = int (*)(clockid_t, struct timespec*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "clock_gettime"));
  const int r = real(id, ts);
  if (r == 0 && ts && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) ts->tv_sec += Skew();
  return r;
}

__attribute__((visibility("default"))) int gettimeofday(struct timeval* tv, void* tz) noexcept {
  using Fn = int (*)(struct timeval*, void*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "gettimeofday"));
  const int r = real(tv, tz);
  if (r == 0 && tv) tv->tv_sec += Skew();
  return r;
}

__attribute__((visibility("default"))) time_t time(time_t* out) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}

}  // extern "C"
