#include "sim/trace/csv.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/strings.h"

namespace tessera::sim {

absl::StatusOr<CsvTable> CsvTable::Parse(std::string_view text, std::string source) {
  CsvTable table;
  table.source_ = std::move(source);
  std::vector<CsvRow> rows;
  size_t i = 0;
  int line = 1;
  const size_t n = text.size();
  while (i < n) {
    CsvRow row;
    row.line = line;
    std::string cell;
    bool any = false;  // the record has at least one character
    while (true) {
      if (i < n && text[i] == '"') {
        any = true;
        ++i;
        const int quote_line = line;
        bool closed = false;
        while (i < n) {
          char c = text[i];
          if (c == '"') {
            if (i + 1 < n && text[i + 1] == '"') {
              cell.push_back('"');
              i += 2;
              continue;
            }
            ++i;
            closed = true;
            break;
          }
          if (c == '\n') ++line;
          cell.push_back(c);
          ++i;
        }
        if (!closed) {
          return absl::InvalidArgumentError(
              StrCat(table.source_, ":", quote_line, ": a quoted cell is never closed"));
        }
        if (i < n && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
          return absl::InvalidArgumentError(
              StrCat(table.source_, ":", line, ": unexpected text after a quoted cell"));
        }
      }
      while (i < n && text[i] != ',' && text[i] != '\n') {
        if (text[i] == '\r' && (i + 1 == n || text[i + 1] == '\n')) {
          ++i;
          continue;
        }
        if (text[i] == '"') {
          return absl::InvalidArgumentError(
              StrCat(table.source_, ":", line,
                     ": a quote inside an unquoted cell (quote the whole cell)"));
        }
        cell.push_back(text[i]);
        any = true;
        ++i;
      }
      row.cells.push_back(std::move(cell));
      cell.clear();
      if (i < n && text[i] == ',') {
        any = true;
        ++i;
        continue;
      }
      break;  // end of line or of text
    }
    if (i < n && text[i] == '\n') {
      ++i;
      ++line;
    }
    if (!any) continue;  // a blank line
    rows.push_back(std::move(row));
  }
  if (rows.empty()) {
    return absl::InvalidArgumentError(
        StrCat(table.source_, ": the file is empty (expected a header line and rows)"));
  }
  table.header_ = std::move(rows.front().cells);
  for (std::string& h : table.header_) {
    // Tolerate a UTF-8 byte order mark and spaces around header names.
    if (&h == &table.header_.front() && h.rfind("\xEF\xBB\xBF", 0) == 0) h.erase(0, 3);
    while (!h.empty() && (h.back() == ' ' || h.back() == '\t')) h.pop_back();
    while (!h.empty() && (h.front() == ' ' || h.front() == '\t')) h.erase(h.begin());
  }
  for (size_t c = 0; c < table.header_.size(); ++c) {
    if (table.header_[c].empty()) {
      return absl::InvalidArgumentError(
          StrCat(table.source_, ":", rows.front().line, ": header column ", c + 1, " has no name"));
    }
    for (size_t d = 0; d < c; ++d) {
      if (table.header_[d] == table.header_[c]) {
        return absl::InvalidArgumentError(StrCat(table.source_, ":", rows.front().line, ": column ",
                                                 table.header_[c], " appears twice in the header"));
      }
    }
  }
  rows.erase(rows.begin());
  for (const CsvRow& r : rows) {
    if (r.cells.size() != table.header_.size()) {
      return absl::InvalidArgumentError(StrCat(table.source_, ":", r.line, ": ", r.cells.size(),
                                               " cells, but the header has ", table.header_.size(),
                                               " columns (", StrJoin(table.header_, ","), ")"));
    }
  }
  table.rows_ = std::move(rows);
  return table;
}

int CsvTable::Column(std::string_view name) const {
  for (size_t c = 0; c < header_.size(); ++c) {
    if (header_[c] == name) return static_cast<int>(c);
  }
  return -1;
}

absl::StatusOr<int> CsvTable::RequireColumn(std::string_view name) const {
  int c = Column(name);
  if (c < 0) {
    return absl::InvalidArgumentError(StrCat(source_, ":1: missing column ", name,
                                             " (the header has: ", StrJoin(header_, ","), ")"));
  }
  return c;
}

absl::Status CsvTable::CellError(const CsvRow& row, int column, std::string_view message) const {
  return absl::InvalidArgumentError(
      StrCat(source_, ":", row.line, ": column ", header_[column], ": ", message));
}

absl::StatusOr<int64_t> CsvTable::Int(const CsvRow& row, int column, int64_t min,
                                      int64_t max) const {
  const std::string& s = row.cells[column];
  int64_t value = 0;
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, value);
  if (s.empty()) return CellError(row, column, "empty, expected an integer");
  if (ec == std::errc::result_out_of_range) {
    return CellError(row, column, StrCat("\"", s, "\" is out of range"));
  }
  if (ec != std::errc() || ptr != end) {
    return CellError(row, column, StrCat("\"", s, "\" is not an integer"));
  }
  if (value < min || value > max) {
    return CellError(row, column, StrCat(value, " is out of range [", min, ", ", max, "]"));
  }
  return value;
}

absl::StatusOr<std::optional<int64_t>> CsvTable::OptionalInt(const CsvRow& row, int column,
                                                             int64_t min, int64_t max) const {
  if (row.cells[column].empty()) return std::optional<int64_t>();
  absl::StatusOr<int64_t> v = Int(row, column, min, max);
  if (!v.ok()) return v.status();
  return std::optional<int64_t>(*v);
}

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return absl::DataLossError(StrCat(path, ": read error"));
  return out.str();
}

}  // namespace tessera::sim
