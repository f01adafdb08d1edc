#include "shim/real_driver.h"

#include <dlfcn.h>

#include <string>

#include "shim/contract.h"
#include "shim/glibc_compat.h"

namespace tessera::shim {
namespace {

// The shim's DT_NEEDED entries loaded these already: RTLD_NOLOAD finds them by the names the
// shim asked for. Without them (the shim loaded some other way), load them by name.
void* OpenReal(const char* name) {
  void* h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h == nullptr) h = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
  return h;
}

}  // namespace

bool LoadRealDriver(RealDriver* real, std::string* error) {
#if defined(TESSERA_SHIM_PART_CUDA)
  real->cuda_handle = OpenReal(contract::kRealCudaLibrary);
  if (real->cuda_handle == nullptr) {
    const char* why = ::dlerror();
    *error = std::string("cannot load the real driver ") + contract::kRealCudaLibrary + ": " +
             (why ? why : "not found");
    return false;
  }
#define TESSERA_LOAD(name, type, ...) \
  real->name = reinterpret_cast<type>(::dlsym(real->cuda_handle, #name));
  TESSERA_CUDA_HOOKS(TESSERA_LOAD)
  TESSERA_CUDA_USED(TESSERA_LOAD)
#undef TESSERA_LOAD
#elif defined(TESSERA_SHIM_PART_NVML)
  real->nvml_handle = OpenReal(contract::kRealNvmlLibrary);
  if (real->nvml_handle == nullptr) {
    const char* why = ::dlerror();
    *error = std::string("cannot load the real NVML ") + contract::kRealNvmlLibrary + ": " +
             (why ? why : "not found");
    return false;
  }
#define TESSERA_LOAD(name, type, ...) \
  real->name = reinterpret_cast<type>(::dlsym(real->nvml_handle, #name));
  TESSERA_NVML_HOOKS(TESSERA_LOAD)
  TESSERA_NVML_USED(TESSERA_LOAD)
#undef TESSERA_LOAD
#else
#error "build the shim as TESSERA_SHIM_PART_CUDA or TESSERA_SHIM_PART_NVML"
#endif
  ::dlerror();
  return true;
}

}  // namespace tessera::shim
