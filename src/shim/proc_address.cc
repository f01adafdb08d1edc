// The table that maps the real driver's entry points to the shim's hooks (for cuGetProcAddress),
// and the shim's own diagnostic exports.
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "shim/hooks.h"
#include "shim/shim_state.h"

namespace tessera::shim {
namespace {

struct HookEntry {
  const char* name;
  void* hook;
  void* real;
};

// This library's hooks: the driver's in libtessera-cuda.so, NVML's in libtessera-nvml.so.
#if defined(TESSERA_SHIM_PART_CUDA)
#define TESSERA_PART_HOOKS TESSERA_CUDA_HOOKS
#else
#define TESSERA_PART_HOOKS TESSERA_NVML_HOOKS
#endif

#define TESSERA_ENTRY(name, type) {#name, reinterpret_cast<void*>(&::name), nullptr},
HookEntry g_hooks[] = {TESSERA_PART_HOOKS(TESSERA_ENTRY)};
#undef TESSERA_ENTRY

void FillTable() {
  static const bool filled = [] {
    const RealDriver& real = Shim::Get().real;
    size_t i = 0;
#define TESSERA_REAL_PTR(name, type) g_hooks[i++].real = reinterpret_cast<void*>(real.name);
    TESSERA_PART_HOOKS(TESSERA_REAL_PTR)
#undef TESSERA_REAL_PTR
    return true;
  }();
  (void)filled;
}

// "cuMemAlloc_v2" -> "cuMemAlloc": the name a caller passes to cuGetProcAddress.
std::string BaseName(const char* name) {
  std::string s = name;
  for (const char* suffix : {"_ptsz", "_ptds", "_v2", "_v3", "_v4"}) {
    size_t n = std::strlen(suffix);
    if (s.size() > n && s.compare(s.size() - n, n, suffix) == 0) s.resize(s.size() - n);
  }
  return s;
}

}  // namespace

void* HookFor(void* real_fn) {
  FillTable();
  for (const auto& e : g_hooks) {
    if (e.real == real_fn && e.real != nullptr) return e.hook;
  }
  return real_fn;
}

const char* HookName(const void* fn) {
  for (const auto& e : g_hooks) {
    if (e.hook == fn) return e.name;
  }
  return nullptr;
}

// A symbol the shim intercepts resolved to a function it does not know: calls through it would
// not be enforced. Said once per symbol.
void NoteProcAddress(const char* symbol, void* fn) {
  if (symbol == nullptr || fn == nullptr || HookName(fn) != nullptr) return;
  static std::mutex mu;
  static std::set<std::string> warned;
  const std::string base = BaseName(symbol);
  for (const auto& e : g_hooks) {
    if (BaseName(e.name) != base) continue;
    std::lock_guard<std::mutex> lock(mu);
    if (warned.insert(symbol).second) {
      Log(0,
          "cuGetProcAddress(\"%s\") returned a function the shim does not know; calls "
          "through it are not enforced",
          symbol);
    }
    return;
  }
}

}  // namespace tessera::shim

extern "C" {

// The exported name of `fn` if it is one of the shim's hooks, else null. For tests and the GPU
// check: it tells whether a pointer from dlsym or cuGetProcAddress reaches the shim.
__attribute__((visibility("default"))) const char* tessera_shim_hook_name(const void* fn) {
  return tessera::shim::HookName(fn);
}

// The shim's view as JSON (shares, limits, usage); returns the length it needs.
__attribute__((visibility("default"))) size_t tessera_shim_status(char* buf, size_t len) {
  std::string s = tessera::shim::Shim::Get().StatusJson();
  if (buf != nullptr && len > 0) {
    size_t n = std::min(len - 1, s.size());
    std::memcpy(buf, s.data(), n);
    buf[n] = '\0';
  }
  return s.size() + 1;
}

}  // extern "C"
