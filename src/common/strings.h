// String building on fmt. Debian's abseil is built with its own absl::string_view (not
// std::string_view), so absl::StrCat cannot take std::string_view; these can.
#pragma once

#include <iterator>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "fmt/format.h"
#include "fmt/ranges.h"

namespace tessera {

// For heterogeneous lookups in absl containers keyed by std::string.
inline absl::string_view ToAbsl(std::string_view s) { return {s.data(), s.size()}; }
// absl::Status::message() and friends return absl::string_view.
inline std::string_view FromAbsl(absl::string_view s) { return {s.data(), s.size()}; }

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", args), ...);
  return out;
}

template <typename... Args>
void StrAppend(std::string* out, const Args&... args) {
  (fmt::format_to(std::back_inserter(*out), "{}", args), ...);
}

template <typename Range>
std::string StrJoin(const Range& range, std::string_view separator) {
  return fmt::format("{}", fmt::join(range, separator));
}

}  // namespace tessera

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};
