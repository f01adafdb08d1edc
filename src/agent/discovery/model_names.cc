#include "agent/discovery/model_names.h"

#include <cctype>

namespace tessera::agent {
namespace {

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool Has(const std::string& upper, std::string_view part) {
  return upper.find(part) != std::string::npos;
}

}  // namespace

std::string LabelSafe(std::string_view value) {
  std::string out;
  for (char c : value) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '-');
  }
  if (out.size() > 63) out.resize(63);
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  size_t begin = 0;
  while (begin < out.size() && !alnum(out[begin])) ++begin;
  size_t end = out.size();
  while (end > begin && !alnum(out[end - 1])) --end;
  return out.substr(begin, end - begin);
}

std::string ModelFromProductName(std::string_view product_name) {
  const std::string p = Upper(product_name);
  const bool pcie = Has(p, "PCIE");
  const bool nvl = Has(p, " NVL") || Has(p, "-NVL");
  // Data-center GPUs tessera has facts for (core/model/profiles.cc), by the names nvidia-smi
  // prints: "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB",
  // "NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA GB200", "NVIDIA B200", "NVIDIA L40S",
  // "NVIDIA L4", "Tesla T4", "Tesla V100-SXM2-32GB".
  if (Has(p, "A100")) {
    if (Has(p, "80GB")) return pcie ? "A100-PCIE-80GB" : "A100-80GB";
    return "A100-40GB";
  }
  if (Has(p, "GH200")) return LabelSafe(std::string(product_name).substr(p.find("GH200")));
  if (Has(p, "H100") && Has(p, "80GB") && !pcie && !nvl) return "H100-80GB";
  if (Has(p, "H200") && !nvl) return "H200-141GB";
  if (Has(p, "GB200")) return "GB200";
  if (Has(p, "B200") && !Has(p, "GB")) return "B200";
  if (Has(p, "L40S")) return "L40S-48GB";
  if (p == "NVIDIA L4" || p == "L4") return "L4";
  if (Has(p, "T4") && Has(p, "TESLA")) return "T4";
  if (Has(p, "V100")) return Has(p, "32GB") ? "V100-32GB" : "V100-16GB";
  // Anything else keeps its product name, without the vendor prefix.
  std::string_view rest = product_name;
  for (std::string_view prefix : {"NVIDIA ", "Tesla ", "Quadro "}) {
    if (rest.substr(0, prefix.size()) == prefix) rest.remove_prefix(prefix.size());
  }
  std::string out = LabelSafe(rest);
  return out.empty() ? "unknown" : out;
}

}  // namespace tessera::agent
