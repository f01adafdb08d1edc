// CDI (Container Device Interface) spec files, as the kubelet plugin writes them for prepared
// claims: one transient spec per claim in the node's CDI directory (containerd's cdi_spec_dirs,
// /var/run/cdi by default), named as the CDI library names transient specs,
// "<vendor>-<class>_<id>.json". containerd refreshes its CDI registry before every injection, so
// a spec written during NodePrepareResources is seen by the containers created after it.
//
// The JSON follows tags.cncf.io/container-device-interface specs-go v1.1 (cdiVersion 0.6.0:
// device nodes with hostPath need 0.5.0, annotations 0.6.0). CDI readers refuse unknown fields,
// so only those fields are written. Files are written atomically (a temporary name the CDI
// registry ignores, fsync, rename).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::agent::dra {

inline constexpr char kCdiVersion[] = "0.6.0";

struct CdiDeviceNode {
  std::string path;       // in the container
  std::string host_path;  // on the host (the node's device node)
  char type = 'c';
  int64_t major = 0;
  int64_t minor = 0;
  std::string permissions = "rw";
};

struct CdiMount {
  std::string host_path;
  std::string container_path;
  std::vector<std::string> options;  // "ro", "rbind", "nosuid", "nodev", ...
};

struct CdiEdits {
  std::vector<std::string> env;  // "K=V"
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;
  bool empty() const { return env.empty() && device_nodes.empty() && mounts.empty(); }
};

struct CdiDevice {
  std::string name;  // [A-Za-z0-9] at both ends, [-_.:A-Za-z0-9] inside
  CdiEdits edits;
};

struct CdiSpec {
  std::string vendor;  // "k8s.gpu.tessera.dev"
  std::string cls;     // "gpu"
  std::map<std::string, std::string> annotations;
  std::vector<CdiDevice> devices;
  CdiEdits edits;  // applied once when any device of the spec is injected

  std::string kind() const { return vendor + "/" + cls; }
  // The fully qualified name of one of its devices: "k8s.gpu.tessera.dev/gpu=<name>".
  std::string QualifiedName(std::string_view device) const;
};

nlohmann::json CdiSpecToJson(const CdiSpec& spec);
// Reads back what CdiSpecToJson wrote (for the plugin's restart); errors name the field.
[[nodiscard]] absl::StatusOr<CdiSpec> CdiSpecFromJson(const nlohmann::json& j);

// Checks a device name against the CDI rule; empty when valid.
std::string CdiDeviceNameError(std::string_view name);

// "<vendor>-<class>_": what every transient spec file of this vendor and class starts with.
std::string TransientSpecFilePrefix(std::string_view vendor, std::string_view cls);
// "<vendor>-<class>_<id>.json" with '/' in the id replaced by '_'.
std::string TransientSpecFileName(std::string_view vendor, std::string_view cls,
                                  std::string_view id);
// The ids of the transient specs of this vendor and class in `dir` (from their file names).
std::vector<std::string> ListTransientSpecIds(const std::string& dir, std::string_view vendor,
                                              std::string_view cls);

// Atomic write of `spec` to dir/file (the directory is created if missing).
[[nodiscard]] absl::Status WriteCdiSpec(const std::string& dir, const std::string& file,
                                        const CdiSpec& spec);
[[nodiscard]] absl::StatusOr<CdiSpec> ReadCdiSpec(const std::string& path);
// Missing is not an error.
[[nodiscard]] absl::Status RemoveCdiSpec(const std::string& dir, const std::string& file);

// Writes `text` to `path` atomically and durably (temporary file, fsync, rename, fsync of the
// directory), creating the directory. Shared with the checkpoint.
[[nodiscard]] absl::Status WriteFileAtomic(const std::string& path, const std::string& text);

}  // namespace tessera::agent::dra
