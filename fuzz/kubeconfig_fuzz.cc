// A kubeconfig (a file, or what an operator pastes into a Secret) never crashes the parser:
// errors name what is wrong. Exec plugins are parsed, never run (that happens at the first
// request), and the same text twice exercises KUBECONFIG=a:b merging.
#include <cstdint>
#include <string_view>

#include "k8s/client/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // Relative certificate paths resolve under a folder that does not exist: nothing is read.
  (void)tessera::k8s::ParseKubeconfig(text, "/nonexistent-tessera-fuzz", "fuzz");
  (void)tessera::k8s::ParseKubeconfig(text, "/nonexistent-tessera-fuzz", "fuzz", "other");
  const tessera::k8s::KubeconfigText file{std::string(text), "/nonexistent-tessera-fuzz", "fuzz"};
  (void)tessera::k8s::ParseKubeconfigs({file, file});
  (void)tessera::k8s::ParseKubeconfigs({file, file}, "oidc");
  return 0;
}
