#include "records/dra_names.h"

#include <cctype>

#include "common/strings.h"

namespace tessera::records::dra {
namespace {

constexpr std::string_view kGpuPrefix = "gpu-";
constexpr std::string_view kMigInfix = "-mig-";

std::string DnsProfile(std::string_view profile) {
  std::string out;
  for (char c : profile) {
    out.push_back(std::isalnum(static_cast<unsigned char>(c))
                      ? static_cast<char>(std::tolower(static_cast<unsigned char>(c)))
                      : '-');
  }
  return out;
}

}  // namespace

std::string GpuDeviceName(int index) { return StrCat(kGpuPrefix, index); }

std::string MigDeviceName(int index, std::string_view profile, int start) {
  return StrCat(kGpuPrefix, index, kMigInfix, DnsProfile(profile), "-", start);
}

std::string CounterSetName(int index) { return StrCat(kGpuPrefix, index); }

std::optional<DeviceNameParts> ParseDeviceName(std::string_view name) {
  if (!name.starts_with(kGpuPrefix)) return std::nullopt;
  name.remove_prefix(kGpuPrefix.size());
  size_t digits = 0;
  while (digits < name.size() && std::isdigit(static_cast<unsigned char>(name[digits]))) ++digits;
  if (digits == 0 || digits > 3) return std::nullopt;
  const std::string_view rest = name.substr(digits);
  if (!rest.empty() && !rest.starts_with(kMigInfix)) return std::nullopt;
  DeviceNameParts parts;
  parts.gpu_index = std::stoi(std::string(name.substr(0, digits)));
  parts.whole = rest.empty();
  return parts;
}

}  // namespace tessera::records::dra
