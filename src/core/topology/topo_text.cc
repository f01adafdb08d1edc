#include "core/topology/topo_text.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>

#include "common/strings.h"

namespace tessera::core {
namespace {

struct Token {
  std::string text;  // header tokens may be merged ("CPU Affinity"), so owned
  int column;        // 1-based character position of the token's first character
};

// Splits a line on spaces, tabs and CRs. ANSI escape sequences (ESC '[' ... final letter), which
// nvidia-smi uses to underline the header on a terminal, separate tokens like whitespace.
std::vector<Token> Tokenize(std::string_view line) {
  std::vector<Token> out;
  size_t i = 0;
  const size_t n = line.size();
  while (i < n) {
    char c = line[i];
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '\x1b') {
      ++i;
      if (i < n && line[i] == '[') {
        ++i;
        while (i < n &&
               !((line[i] >= 'A' && line[i] <= 'Z') || (line[i] >= 'a' && line[i] <= 'z'))) {
          ++i;
        }
        if (i < n) ++i;
      }
      continue;
    }
    size_t start = i;
    while (i < n && line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\x1b') ++i;
    out.push_back({std::string(line.substr(start, i - start)), static_cast<int>(start) + 1});
  }
  return out;
}

bool ParseIndex(std::string_view s, std::string_view prefix, int* out) {
  if (s.size() <= prefix.size() || s.substr(0, prefix.size()) != prefix) return false;
  std::string_view digits = s.substr(prefix.size());
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
  return ec == std::errc() && end == digits.data() + digits.size() && *out >= 0;
}

absl::Status Error(int line, int column, std::string_view what) {
  return absl::InvalidArgumentError(
      StrCat("nvidia-smi topo text, line ", line, ", column ", column, ": ", what));
}

enum class Affinity { kCpu, kNuma, kGpuNumaId };

std::string_view AffinityName(Affinity a) {
  switch (a) {
    case Affinity::kCpu:
      return "CPU Affinity";
    case Affinity::kNuma:
      return "NUMA Affinity";
    case Affinity::kGpuNumaId:
      return "GPU NUMA ID";
  }
  return "?";
}

// Merges the multi-word affinity headers into single tokens.
std::vector<Token> MergeHeader(std::vector<Token> tokens) {
  std::vector<Token> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    auto next_is = [&](size_t k, std::string_view w) {
      return i + k < tokens.size() && tokens[i + k].text == w;
    };
    if ((tokens[i].text == "CPU" || tokens[i].text == "NUMA") && next_is(1, "Affinity")) {
      out.push_back({tokens[i].text + " Affinity", tokens[i].column});
      ++i;
    } else if (tokens[i].text == "GPU" && next_is(1, "NUMA") && next_is(2, "ID")) {
      out.push_back({"GPU NUMA ID", tokens[i].column});
      i += 2;
    } else {
      out.push_back(std::move(tokens[i]));
    }
  }
  return out;
}

std::optional<Affinity> AffinityOf(std::string_view s) {
  if (s == "CPU Affinity") return Affinity::kCpu;
  if (s == "NUMA Affinity") return Affinity::kNuma;
  if (s == "GPU NUMA ID") return Affinity::kGpuNumaId;
  return std::nullopt;
}

// "0-47,96-143", "7", "0-1": digits with ',' and '-' between them.
bool IsNumberList(std::string_view s) {
  if (s.empty()) return false;
  bool want_digit = true;
  for (char c : s) {
    if (c >= '0' && c <= '9') {
      want_digit = false;
    } else if ((c == ',' || c == '-') && !want_digit) {
      want_digit = true;
    } else {
      return false;
    }
  }
  return !want_digit;
}

absl::StatusOr<Link> ParseCell(std::string_view text) {
  if (text == "SOC") return Link{LinkKind::kSys, 0};  // pre-2017 drivers' name for SYS
  return ParseLinkName(text);
}

}  // namespace

absl::StatusOr<ParsedTopology> ParseNvidiaSmiTopo(std::string_view text) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start <= text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  auto is_comment = [](const std::vector<Token>& t) { return !t.empty() && t[0].text[0] == '#'; };

  // The header: the first line with something other than a comment.
  size_t h = 0;
  std::vector<Token> header;
  for (; h < lines.size(); ++h) {
    header = Tokenize(lines[h]);
    if (!header.empty() && !is_comment(header)) break;
  }
  if (h == lines.size()) {
    return Error(1, 1,
                 "no header row (expected a line starting with GPU0, as nvidia-smi topo -m "
                 "prints)");
  }
  const int header_line = static_cast<int>(h) + 1;
  header = MergeHeader(std::move(header));
  int gpu_cols = 0;
  std::vector<std::string> dev_cols;
  std::vector<Affinity> affinity_cols;
  for (const Token& t : header) {
    int idx = 0;
    if (std::optional<Affinity> a = AffinityOf(t.text)) {
      if (gpu_cols == 0) {
        return Error(header_line, t.column,
                     StrCat("expected the header row to start with GPU0, found \"", t.text, "\""));
      }
      if (std::find(affinity_cols.begin(), affinity_cols.end(), *a) != affinity_cols.end()) {
        return Error(header_line, t.column, StrCat("column \"", t.text, "\" twice"));
      }
      affinity_cols.push_back(*a);
    } else if (ParseIndex(t.text, "GPU", &idx)) {
      if (!dev_cols.empty() || !affinity_cols.empty() || idx != gpu_cols) {
        return Error(header_line, t.column,
                     StrCat(dev_cols.empty() && affinity_cols.empty()
                                ? StrCat("expected GPU", gpu_cols)
                                : std::string("expected a device or affinity column"),
                            " here, found \"", t.text, "\""));
      }
      ++gpu_cols;
    } else {
      if (gpu_cols == 0) {
        return Error(header_line, t.column,
                     StrCat("expected the header row to start with GPU0, found \"", t.text, "\""));
      }
      if (!affinity_cols.empty()) {
        return Error(header_line, t.column,
                     StrCat("unexpected column \"", t.text, "\" after the affinity columns"));
      }
      if (std::find(dev_cols.begin(), dev_cols.end(), t.text) != dev_cols.end()) {
        return Error(header_line, t.column, StrCat("column \"", t.text, "\" twice"));
      }
      dev_cols.push_back(t.text);
    }
  }
  if (gpu_cols > kMaxGpusPerNode) {
    return Error(header_line, header[kMaxGpusPerNode].column,
                 StrCat("more than ", kMaxGpusPerNode, " GPUs"));
  }
  const int ndev = static_cast<int>(dev_cols.size());
  const int link_cols = gpu_cols + ndev;

  ParsedTopology out;
  out.links = LinkMatrix(gpu_cols);
  out.gpus.resize(gpu_cols);
  // Every row's link cells with where they were, for the agreement checks at the end.
  struct Row {
    int line = 0;
    std::vector<Link> links;
    std::vector<int> columns;
  };
  std::vector<Row> gpu_rows(gpu_cols);
  std::vector<Row> dev_rows(ndev);
  std::map<std::string, std::string> nic_legend;
  bool in_legend = false, in_nic_legend = false;
  for (size_t i = h + 1; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    std::vector<Token> cells = Tokenize(lines[i]);
    if (cells.empty()) continue;
    if (cells[0].text == "NIC" && cells.size() > 1 && cells[1].text == "Legend:") {
      in_legend = in_nic_legend = true;
      continue;
    }
    if (cells[0].text == "Legend:") {
      in_legend = true;
      in_nic_legend = false;
      continue;
    }
    if (in_legend) {
      // "  NIC0: mlx5_0"; other legend lines (and whatever follows the legend) are for people.
      int idx = 0;
      if (in_nic_legend && cells.size() == 2 && cells[0].text.back() == ':' &&
          ParseIndex(std::string_view(cells[0].text).substr(0, cells[0].text.size() - 1), "NIC",
                     &idx)) {
        nic_legend[cells[0].text.substr(0, cells[0].text.size() - 1)] = cells[1].text;
      }
      continue;
    }
    if (is_comment(cells)) continue;
    int gpu = -1;
    const bool is_gpu = ParseIndex(cells[0].text, "GPU", &gpu);
    int dev = -1;
    if (!is_gpu) {
      auto it = std::find(dev_cols.begin(), dev_cols.end(), cells[0].text);
      if (it != dev_cols.end()) dev = static_cast<int>(it - dev_cols.begin());
    }
    if (!is_gpu && dev < 0) {
      return Error(line_no, cells[0].column,
                   StrCat("expected a row of a GPU or of a device column (",
                          dev_cols.empty() ? std::string("GPU0..")
                                           : StrCat("GPU0.., ", StrJoin(dev_cols, ", ")),
                          "), found \"", cells[0].text, "\""));
    }
    if (is_gpu && gpu >= gpu_cols) {
      return Error(
          line_no, cells[0].column,
          StrCat("GPU", gpu, " has no column in the header (GPU0..GPU", gpu_cols - 1, ")"));
    }
    Row& row = is_gpu ? gpu_rows[gpu] : dev_rows[dev];
    if (row.line != 0) {
      return Error(line_no, cells[0].column,
                   StrCat(cells[0].text, " has a row already, on line ", row.line));
    }
    const int expected = link_cols + (is_gpu ? static_cast<int>(affinity_cols.size()) : 0);
    if (static_cast<int>(cells.size()) - 1 < link_cols) {
      const Token& last = cells.back();
      return Error(line_no, last.column + static_cast<int>(last.text.size()),
                   StrCat("row ", cells[0].text, " ends after ", cells.size() - 1,
                          " cells; expected ", link_cols,
                          " link cells (one per GPU and device "
                          "column)",
                          is_gpu && !affinity_cols.empty()
                              ? StrCat(" and ", affinity_cols.size(), " affinity values")
                              : std::string()));
    }
    if (static_cast<int>(cells.size()) - 1 > expected) {
      const Token& extra = cells[1 + expected];
      return Error(line_no, extra.column,
                   StrCat("unexpected cell \"", extra.text, "\": row ", cells[0].text, " has ",
                          cells.size() - 1, " cells, expected ", expected));
    }
    if (is_gpu && static_cast<int>(cells.size()) - 1 < expected) {
      const Token& last = cells.back();
      return Error(line_no, last.column + static_cast<int>(last.text.size()),
                   StrCat("row ", cells[0].text, " has ", cells.size() - 1 - link_cols,
                          " affinity values, expected ", affinity_cols.size(), " (",
                          StrJoin(
                              [&] {
                                std::vector<std::string_view> names;
                                for (Affinity a : affinity_cols) names.push_back(AffinityName(a));
                                return names;
                              }(),
                              ", "),
                          ")"));
    }
    row.line = line_no;
    const int self = is_gpu ? gpu : gpu_cols + dev;
    for (int c = 0; c < link_cols; ++c) {
      const Token& cell = cells[1 + c];
      absl::StatusOr<Link> link = ParseCell(cell.text);
      if (!link.ok()) return Error(line_no, cell.column, FromAbsl(link.status().message()));
      const bool diagonal = c == self;
      if (diagonal != (link->kind == LinkKind::kSelf)) {
        return Error(line_no, cell.column,
                     diagonal
                         ? StrCat("expected X where row ", cells[0].text,
                                  " meets its own column, found \"", cell.text, "\"")
                         : StrCat("X off the diagonal (row ", cells[0].text, ", column ",
                                  c < gpu_cols ? StrCat("GPU", c) : dev_cols[c - gpu_cols], ")"));
      }
      row.links.push_back(*link);
      row.columns.push_back(cell.column);
    }
    if (!is_gpu) continue;
    GpuSpec& g = out.gpus[gpu];
    g.index = gpu;
    for (size_t a = 0; a < affinity_cols.size(); ++a) {
      const Token& cell = cells[1 + link_cols + a];
      const bool na = cell.text == "N/A";
      if (!na && !IsNumberList(cell.text)) {
        return Error(line_no, cell.column,
                     StrCat(AffinityName(affinity_cols[a]), " \"", cell.text,
                            "\" is not N/A or a list of numbers such as 0-47,96-143"));
      }
      if (na) continue;
      switch (affinity_cols[a]) {
        case Affinity::kCpu:
          g.cpu_affinity = cell.text;
          break;
        case Affinity::kNuma: {
          int numa = -1;
          // A single node; a list ("0-1") means the GPU is near several: recorded as unknown.
          if (ParseIndex(cell.text, "", &numa)) g.numa_node = numa;
          break;
        }
        case Affinity::kGpuNumaId:
          break;  // the GPU's own memory NUMA node (Grace Hopper); not used by placement
      }
    }
  }
  for (int g = 0; g < gpu_cols; ++g) {
    if (gpu_rows[g].line == 0) {
      return Error(header_line, header[g].column, StrCat("no row for GPU", g));
    }
  }
  // nvidia-smi prints a symmetric matrix; a mismatch means a corrupted or hand-edited paste.
  auto mismatch = [&](const Row& row, int col, std::string_view row_name, std::string_view col_name,
                      Link here, Link there) {
    return Error(
        row.line, row.columns[col],
        StrCat(row_name, " to ", col_name, " is ", LinkName(here), " but ", col_name, " to ",
               row_name, " is ", LinkName(there), " (the matrix must be symmetric)"));
  };
  auto col_name = [&](int c) { return c < gpu_cols ? StrCat("GPU", c) : dev_cols[c - gpu_cols]; };
  for (int a = 0; a < gpu_cols; ++a) {
    for (int b = a + 1; b < gpu_cols; ++b) {
      if (!(gpu_rows[a].links[b] == gpu_rows[b].links[a])) {
        return mismatch(gpu_rows[b], a, col_name(b), col_name(a), gpu_rows[b].links[a],
                        gpu_rows[a].links[b]);
      }
      out.links.Set(a, b, gpu_rows[a].links[b]);
    }
  }
  for (int d = 0; d < ndev; ++d) {
    const Row& row = dev_rows[d];
    if (row.line == 0) continue;  // device rows are optional
    for (int c = 0; c < link_cols; ++c) {
      Link there = c < gpu_cols
                       ? gpu_rows[c].links[gpu_cols + d]
                       : (dev_rows[c - gpu_cols].line ? dev_rows[c - gpu_cols].links[gpu_cols + d]
                                                      : row.links[c]);
      if (!(row.links[c] == there)) {
        return mismatch(row, c, dev_cols[d], col_name(c), row.links[c], there);
      }
    }
  }
  for (int d = 0; d < ndev; ++d) {
    NicSpec nic;
    nic.name = dev_cols[d];
    auto legend = nic_legend.find(nic.name);
    int idx = 0;
    nic.device = legend != nic_legend.end()          ? legend->second
                 : ParseIndex(nic.name, "NIC", &idx) ? std::string()
                                                     : nic.name;
    for (int g = 0; g < gpu_cols; ++g) nic.gpu_links.push_back(gpu_rows[g].links[gpu_cols + d]);
    out.nics.push_back(std::move(nic));
  }
  return out;
}

}  // namespace tessera::core
