// Quantity parsing never crashes, and what it accepts is consistent: rounding up is never below
// rounding down, and the two differ by at most one unit.
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/model/quantity.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  using tessera::core::Rounding;
  auto up = tessera::core::ParseMemoryMiB(text, Rounding::kUp);
  auto down = tessera::core::ParseMemoryMiB(text, Rounding::kDown);
  if (up.ok() != down.ok()) std::abort();
  if (up.ok() && (*up < *down || *up - *down > 1)) std::abort();
  auto cpu = tessera::core::ParseCpuMilli(text);
  auto count = tessera::core::ParseCount(text);
  // Whole counts read the same as cores (unless milli-cores overflow int64).
  if (count.ok() && cpu.ok() && *cpu != *count * 1000) std::abort();
  if (count.ok() && !cpu.ok() && *count < INT64_MAX / 1000) std::abort();
  if (up.ok()) (void)tessera::core::FormatMiB(*up);
  return 0;
}
