// Kubernetes quantity strings ("4Gi", "500m", "1.5", "2e3") parsed exactly into tessera's integer
// units. No floating point: the mantissa is kept as an integer and a decimal exponent, and every
// conversion rounds in the direction that is safe for its use (requests up, capacities down).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera::core {

enum class Rounding { kUp, kDown };

// Bytes-valued quantity (memory) to MiB. "4Gi" -> 4096, "1G" -> 954 (up) or 953 (down).
[[nodiscard]] absl::StatusOr<int64_t> ParseMemoryMiB(std::string_view text,
                                                     Rounding rounding = Rounding::kUp);
// Cores-valued quantity to milli-cores. "500m" -> 500, "2" -> 2000, "0.25" -> 250.
[[nodiscard]] absl::StatusOr<int64_t> ParseCpuMilli(std::string_view text,
                                                    Rounding rounding = Rounding::kUp);
// Plain non-negative integer quantity ("8", "8k" is rejected unless exact). For GPU counts.
[[nodiscard]] absl::StatusOr<int64_t> ParseCount(std::string_view text);

// Human-readable memory: 81920 -> "80Gi", 1536 -> "1.5Gi", 300 -> "300Mi".
std::string FormatMiB(int64_t mib);

}  // namespace tessera::core
