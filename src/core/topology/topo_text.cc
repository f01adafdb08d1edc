#include "core/topology/topo_text.h"

#include <cctype>
#include <charconv>
#include <algorithm>
#include <map>

#include "common/strings.h"

namespace tessera::core {
namespace {

struct Cell {
  std::string_view text;  // trimmed
  int column;             // 1-based position of the cell's first character
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// Splits on tabs; drops cells that are empty after trimming (alignment tabs).
std::vector<Cell> SplitCells(std::string_view line) {
  std::vector<Cell> cells;
  size_t start = 0;
  while (start <= line.size()) {
    size_t tab = line.find('\t', start);
    if (tab == std::string_view::npos) tab = line.size();
    std::string_view raw = line.substr(start, tab - start);
    std::string_view t = Trim(raw);
    if (!t.empty()) {
      int col = static_cast<int>(start + (t.data() - raw.data())) + 1;
      cells.push_back({t, col});
    }
    start = tab + 1;
  }
  return cells;
}

bool ParseIndex(std::string_view s, std::string_view prefix, int* out) {
  if (s.size() <= prefix.size() || s.substr(0, prefix.size()) != prefix) return false;
  std::string_view digits = s.substr(prefix.size());
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), *out);
  return ec == std::errc() && end == digits.data() + digits.size();
}

absl::Status Error(int line, int column, std::string_view what) {
  return absl::InvalidArgumentError(StrCat("nvidia-smi topo text, line ", line, ", column ",
                                           column, ": ", what));
}

bool IsAffinityHeader(std::string_view s) {
  return s == "CPU Affinity" || s == "NUMA Affinity" || s == "GPU NUMA ID";
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
  // The header: the first non-blank line; it must name GPU columns.
  size_t h = 0;
  while (h < lines.size() && Trim(lines[h]).empty()) ++h;
  if (h == lines.size()) return Error(1, 1, "empty input (expected the header row: GPU0 GPU1 ...)");
  std::vector<Cell> header = SplitCells(lines[h]);
  int header_line = static_cast<int>(h) + 1;
  int gpu_cols = 0;
  std::vector<std::string> nic_cols;
  std::vector<std::string> affinity_cols;
  for (const Cell& c : header) {
    int idx = 0;
    if (ParseIndex(c.text, "GPU", &idx)) {
      if (!nic_cols.empty() || !affinity_cols.empty() || idx != gpu_cols) {
        return Error(header_line, c.column,
                     StrCat("expected GPU", gpu_cols, " here, found \"", c.text, "\""));
      }
      ++gpu_cols;
    } else if (IsAffinityHeader(c.text)) {
      affinity_cols.emplace_back(c.text);
    } else {
      if (gpu_cols == 0) {
        return Error(header_line, c.column,
                     StrCat("expected the header row to start with GPU0, found \"", c.text, "\""));
      }
      if (!affinity_cols.empty()) {
        return Error(header_line, c.column,
                     StrCat("unexpected column \"", c.text, "\" after the affinity columns"));
      }
      nic_cols.emplace_back(c.text);
    }
  }
  if (gpu_cols == 0) return Error(header_line, 1, "no GPU columns in the header row");
  if (gpu_cols > kMaxGpusPerNode) {
    return Error(header_line, 1, StrCat("more than ", kMaxGpusPerNode, " GPUs"));
  }
  const int link_cols = gpu_cols + static_cast<int>(nic_cols.size());
  const int device_cols = link_cols;

  ParsedTopology out;
  out.links = LinkMatrix(gpu_cols);
  out.gpus.resize(gpu_cols);
  std::vector<bool> seen_gpu(gpu_cols, false);
  // The GPU-to-GPU cells of each GPU row, with where they were, for the symmetry check.
  std::vector<std::vector<Link>> rows(gpu_cols);
  std::vector<std::vector<int>> row_columns(gpu_cols);
  std::vector<int> row_lines(gpu_cols, 0);
  std::map<std::string, NicSpec> nic_rows;
  std::map<std::string, std::string> nic_devices;
  bool in_legend = false;
  for (size_t i = h + 1; i < lines.size(); ++i) {
    const int line_no = static_cast<int>(i) + 1;
    std::string_view line = lines[i];
    std::string_view trimmed = Trim(line);
    while (!trimmed.empty() && trimmed.front() == '\t') trimmed = Trim(trimmed.substr(1));
    if (trimmed.empty()) continue;
    if (trimmed.substr(0, 6) == "Legend" || trimmed.substr(0, 10) == "NIC Legend") {
      in_legend = true;
      continue;
    }
    if (in_legend) {
      // "  NIC0: mlx5_0"
      int idx = 0;
      size_t colon = trimmed.find(':');
      if (colon != std::string_view::npos && ParseIndex(Trim(trimmed.substr(0, colon)), "NIC", &idx)) {
        nic_devices[std::string(Trim(trimmed.substr(0, colon)))] =
            std::string(Trim(trimmed.substr(colon + 1)));
      }
      continue;
    }
    std::vector<Cell> cells = SplitCells(line);
    if (cells.empty()) continue;
    int gpu = -1;
    bool is_gpu = ParseIndex(cells[0].text, "GPU", &gpu);
    bool is_nic = !is_gpu && std::find(nic_cols.begin(), nic_cols.end(),
                                       std::string(cells[0].text)) != nic_cols.end();
    if (!is_gpu && !is_nic) {
      return Error(line_no, cells[0].column,
                   StrCat("expected a GPU or NIC row, found \"", cells[0].text, "\""));
    }
    if (static_cast<int>(cells.size()) < 1 + device_cols) {
      int col = cells.back().column + static_cast<int>(cells.back().text.size());
      return Error(line_no, col,
                   StrCat("row ", cells[0].text, " has ", cells.size() - 1, " cells, expected ",
                          device_cols, " link cells"));
    }
    std::vector<Link> links;
    for (int c = 0; c < link_cols; ++c) {
      const Cell& cell = cells[1 + c];
      absl::StatusOr<Link> link = ParseLinkName(cell.text);
      if (!link.ok()) return Error(line_no, cell.column, FromAbsl(link.status().message()));
      links.push_back(*link);
    }
    if (is_gpu) {
      if (gpu < 0 || gpu >= gpu_cols) {
        return Error(line_no, cells[0].column,
                     StrCat("GPU", gpu, " has no column in the header"));
      }
      if (seen_gpu[gpu]) return Error(line_no, cells[0].column, StrCat("GPU", gpu, " twice"));
      seen_gpu[gpu] = true;
      for (int c = 0; c < gpu_cols; ++c) {
        const bool self = c == gpu;
        if (self != (links[c].kind == LinkKind::kSelf)) {
          return Error(line_no, cells[1 + c].column,
                       self ? "expected X on the diagonal" : "X off the diagonal");
        }
      }
      GpuSpec& g = out.gpus[gpu];
      g.index = gpu;
      // Affinity columns, in header order.
      size_t extra = 1 + device_cols;
      for (size_t a = 0; a < affinity_cols.size() && extra + a < cells.size(); ++a) {
        const Cell& cell = cells[extra + a];
        if (affinity_cols[a] == "CPU Affinity") {
          g.cpu_affinity = std::string(cell.text);
        } else if (affinity_cols[a] == "NUMA Affinity") {
          if (cell.text != "N/A") {
            int numa = 0;
            auto [end, ec] =
                std::from_chars(cell.text.data(), cell.text.data() + cell.text.size(), numa);
            if (ec != std::errc() || end != cell.text.data() + cell.text.size()) {
              return Error(line_no, cell.column,
                           StrCat("NUMA Affinity \"", cell.text, "\" is not a number or N/A"));
            }
            g.numa_node = numa;
          }
        }
      }
      if (cells.size() > extra + affinity_cols.size()) {
        const Cell& cell = cells[extra + affinity_cols.size()];
        return Error(line_no, cell.column, StrCat("unexpected cell \"", cell.text, "\""));
      }
      rows[gpu].assign(links.begin(), links.begin() + gpu_cols);
      row_lines[gpu] = line_no;
      for (int c = 0; c < gpu_cols; ++c) row_columns[gpu].push_back(cells[1 + c].column);
      for (size_t n = 0; n < nic_cols.size(); ++n) {
        NicSpec& nic = nic_rows[nic_cols[n]];
        nic.name = nic_cols[n];
        nic.gpu_links.resize(gpu_cols);
        nic.gpu_links[gpu] = links[gpu_cols + n];
      }
    }
  }
  for (int g = 0; g < gpu_cols; ++g) {
    if (!seen_gpu[g]) return Error(header_line, 1, StrCat("no row for GPU", g));
  }
  // The matrix nvidia-smi prints is symmetric; a mismatch means a corrupted or edited paste.
  for (int a = 0; a < gpu_cols; ++a) {
    for (int b = a + 1; b < gpu_cols; ++b) {
      if (!(rows[a][b] == rows[b][a])) {
        return Error(row_lines[b], row_columns[b][a],
                     StrCat("GPU", b, " to GPU", a, " is ", LinkName(rows[b][a]),
                            " but GPU", a, " to GPU", b, " is ", LinkName(rows[a][b]),
                            " (the matrix must be symmetric)"));
      }
      out.links.Set(a, b, rows[a][b]);
    }
  }
  for (const std::string& name : nic_cols) {
    NicSpec nic = nic_rows[name];
    nic.name = name;
    auto dev = nic_devices.find(name);
    nic.device = dev != nic_devices.end() ? dev->second : (name.rfind("NIC", 0) == 0 ? "" : name);
    out.nics.push_back(std::move(nic));
  }
  return out;
}

}  // namespace tessera::core
