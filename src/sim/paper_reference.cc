#include "sim/paper_reference.h"

#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/status.h"
#include "common/strings.h"
#include "sim/trace/csv.h"

namespace tessera::sim {
namespace {

std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> out;
  for (absl::string_view c : absl::StrSplit(line, '|')) {
    c = absl::StripAsciiWhitespace(c);
    out.emplace_back(c.data(), c.size());
  }
  // "| a | b |" splits into "", a, b, "".
  if (!out.empty() && out.front().empty()) out.erase(out.begin());
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::string PolicyName(const std::string& column) {
  static const std::map<std::string, std::string> kNames = {
      {"Random", "random"},          {"DotProd", "dotprod"}, {"GpuClustering", "gpu-clustering"},
      {"GpuPacking", "gpu-packing"}, {"BestFit", "bestfit"}, {"FGD", "fgd"}};
  auto it = kNames.find(column);
  return it == kNames.end() ? column : it->second;
}

}  // namespace

absl::StatusOr<PaperTable> ParseFgdReference(const std::string& markdown,
                                             const std::string& source) {
  std::istringstream in(markdown);
  std::string line;
  int line_no = 0;
  std::vector<std::string> header;
  PaperTable table;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.rfind("|", 0) != 0) {
      if (!table.empty()) break;  // the first table only
      continue;
    }
    std::vector<std::string> cells = Cells(line);
    if (header.empty()) {
      if (cells.empty() || cells[0] != "workload") continue;
      header = cells;
      continue;
    }
    if (!cells.empty() && cells[0].find("---") != std::string::npos) continue;
    if (cells.size() != header.size()) {
      return absl::InvalidArgumentError(StrCat(source, ":", line_no, ": ", cells.size(),
                                               " cells, the header has ", header.size()));
    }
    for (size_t i = 1; i < cells.size(); ++i) {
      double v = 0;
      if (!absl::SimpleAtod(cells[i], &v)) {
        return absl::InvalidArgumentError(
            StrCat(source, ":", line_no, ": \"", cells[i], "\" is not a number"));
      }
      table[cells[0]][PolicyName(header[i])] = v;
    }
  }
  if (table.empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": no table with a \"workload\" column"));
  }
  return table;
}

absl::StatusOr<PaperTable> ReadFgdReference(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseFgdReference(text, path);
}

}  // namespace tessera::sim
