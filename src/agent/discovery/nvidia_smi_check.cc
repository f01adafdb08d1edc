#include "agent/discovery/nvidia_smi_check.h"

#include <charconv>

#include "agent/discovery/fake_gpus_file.h"
#include "agent/discovery/model_names.h"
#include "common/strings.h"

namespace tessera::agent {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

absl::Status Error(int line, std::string_view what) {
  return absl::InvalidArgumentError(StrCat("nvidia-smi -q, line ", line, ": ", what));
}

std::string Known(const std::string& s) { return s.empty() ? "(unknown)" : s; }

}  // namespace

absl::StatusOr<SmiLog> ParseNvidiaSmiQ(std::string_view text) {
  SmiLog log;
  bool header_seen = false;
  // Section headers by indentation level (level 1 = directly under "GPU ...").
  std::vector<std::string> sections;
  SmiGpu* gpu = nullptr;
  int line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view raw = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
    if (Trim(raw).empty()) {
      if (end == text.size()) break;
      continue;
    }
    if (!header_seen) {
      if (raw.find("NVSMI LOG") != std::string_view::npos) {
        header_seen = true;
        continue;
      }
      if (raw.front() == '#') continue;
      return Error(line_no,
                   "expected the \"==============NVSMI LOG==============\" header that "
                   "`nvidia-smi -q` prints first");
    }
    size_t indent = 0;
    while (indent < raw.size() && raw[indent] == ' ') ++indent;
    const int level = static_cast<int>(indent / 4);
    std::string_view body = raw.substr(indent);
    const size_t colon = body.find(" : ");
    std::string key(Trim(colon == std::string_view::npos ? body : body.substr(0, colon)));
    std::string value(colon == std::string_view::npos ? "" : Trim(body.substr(colon + 3)));
    if (colon == std::string_view::npos && !body.empty() && body.back() == ':') {
      key = std::string(Trim(body.substr(0, body.size() - 1)));  // "Key :" with an empty value
    }
    if (level == 0) {
      sections.clear();
      if (key.rfind("GPU ", 0) == 0 && colon == std::string_view::npos) {
        log.gpus.push_back(SmiGpu{});
        gpu = &log.gpus.back();
        gpu->line = line_no;
        gpu->bus_id = key.substr(4);
      } else if (key == "Driver Version") {
        log.driver_version = value;
      } else if (key == "CUDA Version") {
        log.cuda_version = value;
      } else if (key == "Attached GPUs") {
        int n = -1;
        auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || p != value.data() + value.size() || n < 0) {
          return Error(line_no, StrCat("Attached GPUs: \"", value, "\" is not a number"));
        }
        log.attached = n;
      }
      continue;
    }
    if (!gpu) continue;  // e.g. "Timestamp" lines are level 0; nothing else comes before a GPU
    if (colon == std::string_view::npos) {  // a section header
      sections.resize(static_cast<size_t>(level - 1));
      sections.push_back(key);
      continue;
    }
    sections.resize(static_cast<size_t>(std::max(0, level - 1)));
    const std::string section = sections.empty() ? "" : sections.front();
    const std::string sub = sections.size() >= 2 ? sections[1] : "";
    if (level == 1) {
      if (key == "Product Name") gpu->product_name = value;
      if (key == "GPU UUID") gpu->uuid = value;
      if (key == "Minor Number") gpu->minor = value;
    } else if (level == 2 && section == "FB Memory Usage" && key == "Total") {
      if (value == "N/A") continue;
      int64_t mib = -1;
      auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), mib);
      if (ec != std::errc() || std::string_view(p) != " MiB") {
        return Error(line_no,
                     StrCat("FB Memory Usage / Total: \"", value, "\" is not \"<n> MiB\""));
      }
      gpu->fb_total_mib = mib;
    } else if (level == 2 && section == "MIG Mode" && key == "Current") {
      gpu->mig_current = value;
    } else if (level == 2 && section == "Fabric") {
      if (key == "State") gpu->fabric_state = value;
      if (key == "CliqueId") gpu->fabric_clique = value;
      if (key == "ClusterUUID") gpu->fabric_cluster = value;
    } else if (level == 2 && section == "PCI" && key == "Bus Id" && sub.empty()) {
      if (NormalizePciBusId(value) != NormalizePciBusId(gpu->bus_id)) {
        return Error(line_no, StrCat("PCI / Bus Id ", value,
                                     " differs from the block's header GPU ", gpu->bus_id));
      }
    }
  }
  if (!header_seen)
    return Error(line_no, "no \"NVSMI LOG\" header: is this `nvidia-smi -q` output?");
  for (const SmiGpu& g : log.gpus) {
    if (g.uuid.empty()) return Error(g.line, StrCat("GPU ", g.bus_id, " has no \"GPU UUID\""));
  }
  if (log.attached >= 0 && log.attached != static_cast<int>(log.gpus.size())) {
    return Error(line_no, StrCat("\"Attached GPUs\" says ", log.attached, " but ", log.gpus.size(),
                                 " GPU blocks follow"));
  }
  return log;
}

int CheckReport::mismatches() const {
  int n = 0;
  for (const CheckItem& i : items) n += i.ok ? 0 : 1;
  return n;
}

std::string CheckReport::ToMarkdown() const {
  std::string out = "| check | nvidia-smi | tessera agent | |\n|---|---|---|---|\n";
  for (const CheckItem& i : items) {
    StrAppend(&out, "| ", i.what, " | ", i.nvidia_smi, " | ", i.tessera, " | ",
              i.ok ? "ok" : "**MISMATCH**", " |\n");
  }
  StrAppend(&out, "\n", items.size(), " checks, ", mismatches(), " mismatches.\n");
  return out;
}

CheckReport CompareWithNvidiaSmi(const records::Inventory& inv, const SmiLog& smi,
                                 const core::ParsedTopology& topo) {
  CheckReport report;
  auto add = [&](std::string what, std::string nvidia_smi, std::string tessera) {
    const bool ok = nvidia_smi == tessera;
    report.items.push_back(
        CheckItem{std::move(what), std::move(nvidia_smi), std::move(tessera), ok});
  };
  const int n = static_cast<int>(inv.gpus.size());
  add("GPU count (nvidia-smi -q)", StrCat(smi.gpus.size()), StrCat(n));
  add("GPU count (nvidia-smi topo -m)", StrCat(topo.gpus.size()), StrCat(n));

  // nvidia-smi lists GPUs in the order NVML numbers them; the agent's index is NVML's.
  for (size_t q = 0; q < smi.gpus.size(); ++q) {
    const SmiGpu& s = smi.gpus[q];
    int found = -1;
    for (int i = 0; i < n; ++i) {
      if (inv.gpus[i].uuid == s.uuid) found = i;
    }
    const std::string who = StrCat("GPU ", q, " (", s.bus_id, ")");
    add(StrCat(who, " UUID"), s.uuid, found >= 0 ? s.uuid : "(not found)");
    if (found < 0) continue;
    const core::GpuSpec& g = inv.gpus[found];
    add(StrCat(who, " index"), StrCat(q), StrCat(found));
    add(StrCat(who, " PCI bus id"), NormalizePciBusId(s.bus_id), Known(g.pci_bus_id));
    add(StrCat(who, " memory (MiB)"), s.fb_total_mib >= 0 ? StrCat(s.fb_total_mib) : "N/A",
        StrCat(g.memory_mib));
    add(StrCat(who, " model"),
        StrCat(ModelFromProductName(s.product_name), " (", s.product_name, ")"),
        StrCat(g.model, " (", s.product_name, ")"));
    const std::string mig = s.mig_current == "Enabled" ? "enabled" : "disabled";
    add(StrCat(who, " MIG mode"), StrCat(mig, " (", Known(s.mig_current), ")"),
        StrCat(g.mig_enabled ? "enabled" : "disabled", " (", Known(s.mig_current), ")"));
  }
  for (int i = 0; i < n; ++i) {
    bool listed = false;
    for (const SmiGpu& s : smi.gpus) listed = listed || s.uuid == inv.gpus[i].uuid;
    if (!listed)
      add(StrCat("GPU ", i, " UUID (found by tessera)"), "(not listed)", inv.gpus[i].uuid);
  }
  // NUMA node and CPU affinity as topo -m prints them (when it does), by index.
  for (size_t i = 0; i < topo.gpus.size() && i < static_cast<size_t>(n); ++i) {
    const core::GpuSpec& t = topo.gpus[i];
    const core::GpuSpec& g = inv.gpus[i];
    if (t.numa_node >= 0)
      add(StrCat("GPU ", i, " NUMA node"), StrCat(t.numa_node), StrCat(g.numa_node));
    if (!t.cpu_affinity.empty() && t.cpu_affinity != "N/A") {
      add(StrCat("GPU ", i, " CPU affinity"), t.cpu_affinity, Known(g.cpu_affinity));
    }
  }
  // Links, pair by pair, as topo -m prints them.
  const int m = std::min(n, topo.links.size());
  for (int i = 0; i < m; ++i) {
    for (int k = i + 1; k < m; ++k) {
      add(StrCat("link GPU", i, "-GPU", k), core::LinkName(topo.links.at(i, k)),
          core::LinkName(inv.links.at(i, k)));
    }
  }
  return report;
}

}  // namespace tessera::agent
