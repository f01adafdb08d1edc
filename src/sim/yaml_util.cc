#include "sim/yaml_util.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "core/model/quantity.h"

namespace tessera::sim {

absl::StatusOr<YAML::Node> ParseYaml(std::string_view text, std::string_view source) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": malformed YAML: ", e.msg));
  }
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat(path, ": cannot open (does the file exist?)"));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::DataLossError(StrCat(path, ": read error"));
  return ss.str();
}

absl::StatusOr<YAML::Node> LoadYamlFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseYaml(text, path);
}

absl::Status YamlContext::Error(const YAML::Node& at, std::string_view what) const {
  YAML::Mark m = at.IsDefined() ? at.Mark() : YAML::Mark::null_mark();
  if (m.is_null()) return absl::InvalidArgumentError(StrCat(source_, ": ", what));
  return absl::InvalidArgumentError(
      StrCat(source_, ":", m.line + 1, ":", m.column + 1, ": ", what));
}

absl::Status YamlContext::ExpectMap(const YAML::Node& n, std::string_view what) const {
  if (!n.IsMap()) return Error(n, StrCat(what, ": expected a mapping of key: value"));
  return absl::OkStatus();
}

absl::Status YamlContext::ExpectSequence(const YAML::Node& n, std::string_view what) const {
  if (!n.IsSequence()) return Error(n, StrCat(what, ": expected a list (- item ...)"));
  return absl::OkStatus();
}

absl::Status YamlContext::OnlyKeys(const YAML::Node& map, std::string_view what,
                                   std::initializer_list<std::string_view> keys) const {
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) return Error(it->first, StrCat(what, ": keys must be plain words"));
    const std::string& k = it->first.Scalar();
    bool known = false;
    for (std::string_view allowed : keys) known = known || k == allowed;
    if (!known) {
      return Error(it->first, StrCat("unknown key \"", k, "\" in ", what,
                                     " (expected one of: ", StrJoin(keys, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> YamlContext::String(const YAML::Node& n, std::string_view what) const {
  if (!n.IsScalar()) return Error(n, StrCat(what, ": expected a string"));
  return n.Scalar();
}

absl::StatusOr<int64_t> YamlContext::Int(const YAML::Node& n, std::string_view what, int64_t min,
                                         int64_t max) const {
  if (!n.IsScalar()) return Error(n, StrCat(what, ": expected a whole number"));
  const std::string& s = n.Scalar();
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Error(n, StrCat(what, ": \"", s, "\" is not a whole number"));
  }
  if (v < min || v > max) {
    return Error(n, StrCat(what, ": ", v, " is out of range (", min, "..", max, ")"));
  }
  return v;
}

absl::StatusOr<int64_t> YamlContext::CpuMilli(const YAML::Node& n, std::string_view what,
                                              bool capacity) const {
  if (!n.IsScalar()) return Error(n, StrCat(what, ": expected a CPU quantity such as 4 or 500m"));
  absl::StatusOr<int64_t> v =
      core::ParseCpuMilli(n.Scalar(), capacity ? core::Rounding::kDown : core::Rounding::kUp);
  if (!v.ok()) return Error(n, StrCat(what, ": ", v.status().message()));
  return *v;
}

absl::StatusOr<int64_t> YamlContext::MemoryMiB(const YAML::Node& n, std::string_view what,
                                               bool capacity) const {
  if (!n.IsScalar()) return Error(n, StrCat(what, ": expected a memory quantity such as 4Gi"));
  absl::StatusOr<int64_t> v =
      core::ParseMemoryMiB(n.Scalar(), capacity ? core::Rounding::kDown : core::Rounding::kUp);
  if (!v.ok()) return Error(n, StrCat(what, ": ", v.status().message()));
  return *v;
}

}  // namespace tessera::sim
