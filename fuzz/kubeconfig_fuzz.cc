// A kubeconfig (a file, or what an operator pastes into a Secret) never crashes the parser:
// errors name what is wrong.
#include <cstdint>
#include <string_view>

#include "k8s/client/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // Relative certificate paths resolve under a folder that does not exist: nothing is read.
  (void)tessera::k8s::ParseKubeconfig(text, "/nonexistent-tessera-fuzz", "fuzz");
  (void)tessera::k8s::ParseKubeconfig(text, "/nonexistent-tessera-fuzz", "fuzz", "other");
  return 0;
}
