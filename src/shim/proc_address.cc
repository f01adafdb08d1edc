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
  int since;  // the CUDA version that introduced this variant (0: not a driver entry point)
  void* real;
};

// This library's hooks: the driver's in libtessera-cuda.so, NVML's in libtessera-nvml.so.
#if defined(TESSERA_SHIM_PART_CUDA)
#define TESSERA_PART_HOOKS TESSERA_CUDA_HOOKS
#else
#define TESSERA_PART_HOOKS TESSERA_NVML_HOOKS
#endif

#define TESSERA_ENTRY(name, type, since) {#name, reinterpret_cast<void*>(&::name), since, nullptr},
HookEntry g_hooks[] = {TESSERA_PART_HOOKS(TESSERA_ENTRY)};
#undef TESSERA_ENTRY

void FillTable() {
  static const bool filled = [] {
    const RealDriver& real = Shim::Get().real;
    size_t i = 0;
#define TESSERA_REAL_PTR(name, type, since) g_hooks[i++].real = reinterpret_cast<void*>(real.name);
    TESSERA_PART_HOOKS(TESSERA_REAL_PTR)
#undef TESSERA_REAL_PTR
    return true;
  }();
  (void)filled;
}

// ProcAddressName, and whether the variant is the per-thread-stream one.
std::string BaseName(const char* name, bool* per_thread) {
  const std::string s = name;
  *per_thread = s.size() > 5 && (s.compare(s.size() - 5, 5, "_ptsz") == 0 ||
                                 s.compare(s.size() - 5, 5, "_ptds") == 0);
  return ProcAddressName(s);
}

// Says something about `symbol` once.
void LogOnce(int level, const char* symbol, const char* format, const char* detail)
    __attribute__((format(printf, 3, 0)));
void LogOnce(int level, const char* symbol, const char* format, const char* detail) {
  static std::mutex mu;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!said.insert(symbol).second) return;
  }
  Log(level, format, symbol, detail);
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

ProcAddressAnswer ResolveProcAddress(const char* symbol, void* fn, int version, cuuint64_t flags) {
  if (symbol == nullptr || fn == nullptr) return {fn, false};
  if (HookName(fn) != nullptr) return {fn, false};
  void* known = HookFor(fn);
  if (known != fn) return {known, false};  // exactly the exported variant: its hook
  // The pointer is not one the shim knows. Which of this symbol's variants did the driver pick?
  // The one cuGetProcAddress's rules select (cudaTypedefs.h): the newest introduced at or
  // before `version`, the per-thread-stream one under that flag when it exists.
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const HookEntry* best = nullptr;
  const HookEntry* best_pt = nullptr;
  const HookEntry* exact = nullptr;
  bool intercepted = false;
  for (const auto& e : g_hooks) {
    if (std::strcmp(e.name, symbol) == 0) exact = &e;
    bool pt = false;
    if (e.since == 0 || BaseName(e.name, &pt) != symbol) continue;
    intercepted = true;
    if (e.since > version) continue;
    const HookEntry*& slot = pt ? best_pt : best;
    if (slot == nullptr || e.since > slot->since) slot = &e;
  }
  const HookEntry* chosen = (per_thread && best_pt != nullptr) ? best_pt : best;
  if (!intercepted && exact == nullptr) return {fn, false};  // not a function the shim enforces
  if (!intercepted) chosen = exact;                          // a variant asked for by its full name
  if (!Shim::Get().any_share()) return {fn, false};          // nothing to enforce in this container
  if (chosen != nullptr && chosen->real != nullptr) {
    LogOnce(1, symbol,
            "cuGetProcAddress(\"%s\") returned an entry point the shim does not know; %s, the "
            "shim's hook for the variant asked for, stands in for it",
            chosen->name);
    return {chosen->hook, false};
  }
  // The variant asked for is one the shim does not intercept (an ABI older than its hooks), or
  // the driver has no exported function to call behind the hook: refuse rather than hand out
  // an entry point that escapes the share.
  LogOnce(0, symbol, "cuGetProcAddress(\"%s\") refused on a shared GPU: %s",
          chosen == nullptr
              ? "the variant for that version is older than the shim's hooks, so calls through "
                "it would bypass the share"
              : "the driver returned an unknown entry point and exports no variant for the shim "
                "to call");
  return {nullptr, true};
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
