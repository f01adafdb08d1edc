#include "common/duration.h"

#include <cctype>
#include <cstdint>
#include <string>

#include "common/strings.h"

namespace tessera {

absl::StatusOr<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  auto invalid = [&] {
    return absl::InvalidArgumentError(StrCat(
        "\"", text, "\" is not a duration (a whole number with ms, s, m or h: 500ms, 15s, 2h)"));
  };
  if (text == "0") return std::chrono::milliseconds(0);
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 12) return invalid();
  const int64_t n = std::stoll(std::string(text.substr(0, i)));
  const std::string_view unit = text.substr(i);
  if (unit == "ms") return std::chrono::milliseconds(n);
  if (unit == "s") return std::chrono::milliseconds(n * 1000);
  if (unit == "m") return std::chrono::milliseconds(n * 60'000);
  if (unit == "h") return std::chrono::milliseconds(n * 3'600'000);
  return invalid();
}

}  // namespace tessera
