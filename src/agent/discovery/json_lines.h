// JSON with the line of every value, for files people write (the GPU description file): an error
// can then say "gpus.json:14: gpus[1].memory_mib: must be positive" instead of a byte offset.
//
// The text is parsed once by nlohmann's SAX parser through an iterator that records how far the
// parser has read; each value's line is the line of its last character (a scalar's end, an
// object's or array's opening bracket). Values are addressed by JSON pointer
// ("/gpus/1/memory_mib").
#pragma once

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::agent {

struct JsonWithLines {
  nlohmann::json value;
  absl::flat_hash_map<std::string, int> lines;  // JSON pointer -> 1-based line

  // The line of the value at `pointer`, else of its nearest enclosing value (0 if none).
  int LineOf(std::string_view pointer) const;
};

// Syntax errors name the line and column: "<source>:3:17: syntax error: ...".
[[nodiscard]] absl::StatusOr<JsonWithLines> ParseJsonWithLines(std::string_view text,
                                                               std::string_view source);

}  // namespace tessera::agent
