// Declarations of every function the shim exports under a driver or NVML name, generated from
// the lists in real_driver.h. Each definition in cuda_hooks.cc / nvml_hooks.cc must match its
// PFN type exactly, or the build fails: the ABI of every hook is checked by the compiler.
#pragma once

#include <type_traits>

#include "shim/real_driver.h"

#define TESSERA_DECLARE_HOOK(name, type) std::remove_pointer_t<type> name;
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
// Warns (once per symbol) when cuGetProcAddress resolved an intercepted symbol to a function
// that is not the shim's.
void NoteProcAddress(const char* symbol, void* fn);

}  // namespace tessera::shim
