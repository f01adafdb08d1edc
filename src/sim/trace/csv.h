// A small CSV reader that remembers where every cell came from, so that errors can name the file,
// the line and the column. RFC 4180 quoting ("a,b" and "" inside quotes) is understood; a
// carriage return before a newline is dropped. Blank lines are skipped.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::sim {

struct CsvRow {
  int line = 0;  // 1-based line of the row's first character
  std::vector<std::string> cells;
};

class CsvTable {
 public:
  // Parses `text`; `source` names it in errors ("nodes.csv"). The first non-blank line is the
  // header. An empty text (or one with only blank lines) is an error.
  [[nodiscard]] static absl::StatusOr<CsvTable> Parse(std::string_view text, std::string source);

  const std::string& source() const { return source_; }
  const std::vector<std::string>& header() const { return header_; }
  const std::vector<CsvRow>& rows() const { return rows_; }

  // Index of a column by header name, or -1.
  int Column(std::string_view name) const;
  // Like Column, but a missing column is an error naming the file and listing the header.
  [[nodiscard]] absl::StatusOr<int> RequireColumn(std::string_view name) const;

  // "file:line: column NAME: message".
  absl::Status CellError(const CsvRow& row, int column, std::string_view message) const;

  // Cell readers. Integers are plain decimal ("12", "-3"; no exponent, no fraction, no spaces).
  [[nodiscard]] absl::StatusOr<int64_t> Int(const CsvRow& row, int column, int64_t min,
                                            int64_t max) const;
  // An empty cell reads as nullopt.
  [[nodiscard]] absl::StatusOr<std::optional<int64_t>> OptionalInt(const CsvRow& row, int column,
                                                                   int64_t min, int64_t max) const;
  const std::string& Cell(const CsvRow& row, int column) const { return row.cells[column]; }

 private:
  std::string source_;
  std::vector<std::string> header_;
  std::vector<CsvRow> rows_;
};

// Reads a whole file. Errors name the path.
[[nodiscard]] absl::StatusOr<std::string> ReadTextFile(const std::string& path);

}  // namespace tessera::sim
