// Declarations of every function the shim exports under a driver or NVML name, generated from
// the lists in real_driver.h. Each definition in cuda_hooks.cc / nvml_hooks.cc must match its
// PFN type exactly, or the build fails: the ABI of every hook is checked by the compiler.
#pragma once

#include <type_traits>

#include "shim/real_driver.h"

#define TESSERA_DECLARE_HOOK(name, type, ...) std::remove_pointer_t<type> name;
extern "C" {
TESSERA_CUDA_HOOKS(TESSERA_DECLARE_HOOK)
TESSERA_NVML_HOOKS(TESSERA_DECLARE_HOOK)
}
#undef TESSERA_DECLARE_HOOK

namespace tessera::shim {

// The hook that stands for `real_fn`, a pointer the real driver handed out (from
// cuGetProcAddress); `real_fn` itself when the shim does not intercept it.
void* HookFor(void* real_fn);
// The exported name of a hook, or null when `fn` is not one of the shim's hooks.
const char* HookName(const void* fn);

// What the shim answers for cuGetProcAddress(symbol, version, flags) after the driver answered
// `fn`: the hook for exactly that variant (found by the pointer's identity, or, when the driver
// returned an entry point the shim does not know, by the variant the version and stream flag
// select); `fn` itself for a symbol the shim does not intercept; or a refusal (CUDA_ERROR_NOT_
// FOUND) when the shim cannot stand in for the variant asked for on a shared GPU. An intercepted
// symbol never resolves to a pointer that bypasses the shim.
struct ProcAddressAnswer {
  void* fn;
  bool refused;
};
ProcAddressAnswer ResolveProcAddress(const char* symbol, void* fn, int version, cuuint64_t flags);

}  // namespace tessera::shim
