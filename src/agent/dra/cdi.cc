#include "agent/dra/cdi.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/status.h"
#include "common/strings.h"

namespace tessera::agent::dra {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json EditsToJson(const CdiEdits& e) {
  json out = json::object();
  if (!e.env.empty()) out["env"] = e.env;
  if (!e.device_nodes.empty()) {
    json nodes = json::array();
    for (const CdiDeviceNode& n : e.device_nodes) {
      json node = {{"path", n.path}};
      if (!n.host_path.empty()) node["hostPath"] = n.host_path;
      node["type"] = std::string(1, n.type);
      node["major"] = n.major;
      node["minor"] = n.minor;
      if (!n.permissions.empty()) node["permissions"] = n.permissions;
      nodes.push_back(std::move(node));
    }
    out["deviceNodes"] = std::move(nodes);
  }
  if (!e.mounts.empty()) {
    json mounts = json::array();
    for (const CdiMount& m : e.mounts) {
      json mount = {{"hostPath", m.host_path}, {"containerPath", m.container_path}};
      if (!m.options.empty()) mount["options"] = m.options;
      mounts.push_back(std::move(mount));
    }
    out["mounts"] = std::move(mounts);
  }
  return out;
}

absl::StatusOr<CdiEdits> EditsFromJson(const json& j, const std::string& where) {
  CdiEdits e;
  if (j.is_null()) return e;
  if (!j.is_object()) return absl::InvalidArgumentError(StrCat(where, ": not an object"));
  try {
    if (j.contains("env")) e.env = j.at("env").get<std::vector<std::string>>();
    for (const json& n : j.value("deviceNodes", json::array())) {
      CdiDeviceNode node;
      node.path = n.at("path").get<std::string>();
      node.host_path = n.value("hostPath", "");
      const std::string type = n.value("type", "c");
      node.type = type.empty() ? 'c' : type[0];
      node.major = n.value("major", int64_t{0});
      node.minor = n.value("minor", int64_t{0});
      node.permissions = n.value("permissions", "");
      e.device_nodes.push_back(std::move(node));
    }
    for (const json& m : j.value("mounts", json::array())) {
      CdiMount mount;
      mount.host_path = m.at("hostPath").get<std::string>();
      mount.container_path = m.at("containerPath").get<std::string>();
      if (m.contains("options")) mount.options = m.at("options").get<std::vector<std::string>>();
      e.mounts.push_back(std::move(mount));
    }
  } catch (const json::exception& ex) {
    return absl::InvalidArgumentError(StrCat(where, ": ", ex.what()));
  }
  return e;
}

}  // namespace

std::string CdiSpec::QualifiedName(std::string_view device) const {
  return StrCat(vendor, "/", cls, "=", device);
}

json CdiSpecToJson(const CdiSpec& spec) {
  json out = {{"cdiVersion", kCdiVersion}, {"kind", spec.kind()}};
  if (!spec.annotations.empty()) out["annotations"] = spec.annotations;
  json devices = json::array();
  for (const CdiDevice& d : spec.devices) {
    devices.push_back({{"name", d.name}, {"containerEdits", EditsToJson(d.edits)}});
  }
  out["devices"] = std::move(devices);
  if (!spec.edits.empty()) out["containerEdits"] = EditsToJson(spec.edits);
  return out;
}

namespace {
absl::StatusOr<CdiSpec> CdiSpecFromObject(const json& j) {
  CdiSpec spec;
  const auto kind_field = j.find("kind");
  if (kind_field != j.end() && !kind_field->is_string()) {
    return absl::InvalidArgumentError("kind: expected a string");
  }
  const std::string kind = kind_field != j.end() ? kind_field->get<std::string>() : "";
  const size_t slash = kind.find('/');
  if (slash == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("kind: \"", kind, "\" is not vendor/class"));
  }
  spec.vendor = kind.substr(0, slash);
  spec.cls = kind.substr(slash + 1);
  try {
    if (j.contains("annotations")) {
      spec.annotations = j.at("annotations").get<std::map<std::string, std::string>>();
    }
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat("annotations: ", e.what()));
  }
  const json devices = j.value("devices", json::array());
  if (!devices.is_array()) return absl::InvalidArgumentError("devices: expected a list");
  for (size_t i = 0; i < devices.size(); ++i) {
    if (!devices[i].is_object() ||
        (devices[i].contains("name") && !devices[i].at("name").is_string())) {
      return absl::InvalidArgumentError(
          StrCat("devices[", i, "]: expected an object with a string name"));
    }
    CdiDevice d;
    d.name = devices[i].value("name", "");
    TESSERA_ASSIGN_OR_RETURN(d.edits, EditsFromJson(devices[i].value("containerEdits", json()),
                                                    StrCat("devices[", i, "].containerEdits")));
    spec.devices.push_back(std::move(d));
  }
  TESSERA_ASSIGN_OR_RETURN(spec.edits,
                           EditsFromJson(j.value("containerEdits", json()), "containerEdits"));
  return spec;
}
}  // namespace

absl::StatusOr<CdiSpec> CdiSpecFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("a CDI spec is a JSON object");
  // A file truncated by a crash or written by another version: wrong types are errors that name
  // the field, never exceptions.
  try {
    return CdiSpecFromObject(j);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat("not a CDI spec this plugin wrote: ", e.what()));
  }
}

std::string CdiDeviceNameError(std::string_view name) {
  auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
  if (name.empty()) return "empty CDI device name";
  if (!alnum(name.front()) || !alnum(name.back())) {
    return StrCat("CDI device name \"", name, "\" must start and end with a letter or digit");
  }
  for (char c : name) {
    if (!alnum(c) && c != '-' && c != '_' && c != '.' && c != ':') {
      return StrCat("CDI device name \"", name, "\" has '", std::string(1, c), "'");
    }
  }
  return "";
}

std::string TransientSpecFilePrefix(std::string_view vendor, std::string_view cls) {
  return StrCat(vendor, "-", cls, "_");
}

std::string TransientSpecFileName(std::string_view vendor, std::string_view cls,
                                  std::string_view id) {
  std::string safe(id);
  for (char& c : safe) {
    if (c == '/') c = '_';
  }
  return StrCat(TransientSpecFilePrefix(vendor, cls), safe, ".json");
}

std::vector<std::string> ListTransientSpecIds(const std::string& dir, std::string_view vendor,
                                              std::string_view cls) {
  const std::string prefix = TransientSpecFilePrefix(vendor, cls);
  std::vector<std::string> ids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > prefix.size() + 5 && name.rfind(prefix, 0) == 0 &&
        name.compare(name.size() - 5, 5, ".json") == 0) {
      ids.push_back(name.substr(prefix.size(), name.size() - prefix.size() - 5));
    }
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& text) {
  const fs::path p(path);
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot create ", p.parent_path().string(), ": ", ec.message()));
  }
  const std::string tmp = StrCat(path, ".tmp");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError(StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      return absl::InternalError(StrCat("cannot write ", tmp, ": ", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(StrCat("cannot write ", tmp, ": ", std::strerror(err)));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(
        StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  const int dfd = ::open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteCdiSpec(const std::string& dir, const std::string& file, const CdiSpec& spec) {
  for (const CdiDevice& d : spec.devices) {
    if (std::string error = CdiDeviceNameError(d.name); !error.empty()) {
      return absl::InvalidArgumentError(error);
    }
  }
  return WriteFileAtomic((fs::path(dir) / file).string(), CdiSpecToJson(spec).dump(2) + "\n");
}

absl::StatusOr<CdiSpec> ReadCdiSpec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat(path, ": ", std::strerror(errno)));
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(StrCat(path, ": not JSON"));
  absl::StatusOr<CdiSpec> spec = CdiSpecFromJson(j);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

absl::Status RemoveCdiSpec(const std::string& dir, const std::string& file) {
  std::error_code ec;
  fs::remove(fs::path(dir) / file, ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot remove ", (fs::path(dir) / file).string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace tessera::agent::dra
