// The nvidia-smi topo parser never crashes; what it accepts is a symmetric matrix with X on the
// diagonal and one row per GPU.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/topology/topo_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto topo = tessera::core::ParseNvidiaSmiTopo(text);
  if (!topo.ok()) return 0;
  const int n = topo->links.size();
  if (static_cast<int>(topo->gpus.size()) != n) std::abort();
  for (int i = 0; i < n; ++i) {
    if (topo->links.at(i, i).kind != tessera::core::LinkKind::kSelf) std::abort();
    for (int j = 0; j < n; ++j) {
      if (!(topo->links.at(i, j) == topo->links.at(j, i))) std::abort();
    }
  }
  return 0;
}
