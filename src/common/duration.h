// Durations as tessera's flags, configuration and chart write them: a whole number with a unit,
// ms, s, m or h ("500ms", "15s", "30m", "2h"), or a bare "0" (nothing: a rule turned off). The
// one reader for `tessera agent`'s duration flags and the scheduler's configuration file, so that
// what one accepts the other does too.
#pragma once

#include <chrono>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera {

// The duration `text` says, or InvalidArgument naming it and what is accepted. At most 12 digits
// (a 999,999,999,999 h duration still fits in milliseconds).
[[nodiscard]] absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text);

}  // namespace tessera
