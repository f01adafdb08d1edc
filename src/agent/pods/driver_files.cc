#include "agent/pods/driver_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/strings.h"
#include "shim/contract.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;

// The driver libraries an application may load besides libcuda and NVML (the NVIDIA container
// toolkit's "compute" and "utility" sets, by soname).
constexpr const char* kOtherLibraries[] = {"libnvidia-ptxjitcompiler.so.1", "libnvidia-nvvm.so.4",
                                           "libcudadebugger.so.1"};

std::string ReadAll(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Copies `from` to `to` unless `to` already has the same content.
absl::Status Install(const std::string& from, const std::string& to) {
  bool have_from = false, have_to = false;
  const std::string content = ReadAll(from, &have_from);
  if (!have_from) return absl::NotFoundError(StrCat(from, ": ", std::strerror(errno)));
  if (ReadAll(to, &have_to) == content && have_to) return absl::OkStatus();
  const std::string tmp = to + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out.flush()) return absl::InternalError(StrCat("cannot write ", tmp));
  }
  ::chmod(tmp.c_str(), 0755);
  if (::rename(tmp.c_str(), to.c_str()) != 0) {
    return absl::InternalError(StrCat("cannot install ", to, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> DefaultDriverLibDirs() {
  return {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
          "/run/nvidia/driver/usr/lib/x86_64-linux-gnu", "/run/nvidia/driver/usr/lib64"};
}

absl::StatusOr<std::string> ResolveHostPath(const std::string& host_root, const std::string& path) {
  std::string current = path;
  for (int hops = 0; hops < 40; ++hops) {
    const std::string seen = host_root + current;
    struct stat st {};
    if (::lstat(seen.c_str(), &st) != 0) {
      return absl::NotFoundError(StrCat(seen, ": ", std::strerror(errno)));
    }
    if (!S_ISLNK(st.st_mode)) return current;
    char target[4096];
    const ssize_t n = ::readlink(seen.c_str(), target, sizeof(target) - 1);
    if (n < 0) return absl::InternalError(StrCat("readlink ", seen, ": ", std::strerror(errno)));
    const std::string t(target, static_cast<size_t>(n));
    current =
        t.starts_with("/") ? t : (fs::path(current).parent_path() / t).lexically_normal().string();
  }
  return absl::FailedPreconditionError(StrCat(path, ": too many levels of symbolic links"));
}

DriverLibraries FindDriverLibraries(const DriverFilesOptions& options,
                                    std::vector<std::string>* notes) {
  DriverLibraries d;
  d.container_lib_dir = options.container_lib_dir;
  const std::vector<std::string> dirs =
      options.driver_lib_dirs.empty() ? DefaultDriverLibDirs() : options.driver_lib_dirs;
  auto find = [&](const std::string& soname) -> std::string {
    for (const std::string& dir : dirs) {
      absl::StatusOr<std::string> p = ResolveHostPath(options.host_root, StrCat(dir, "/", soname));
      if (p.ok()) return *p;
    }
    return "";
  };
  d.cuda = LibraryFile{find("libcuda.so.1"), "libcuda.so.1"};
  d.nvml = LibraryFile{find("libnvidia-ml.so.1"), "libnvidia-ml.so.1"};
  if (d.cuda.host_path.empty() || d.nvml.host_path.empty()) {
    notes->push_back(StrCat(
        "the NVIDIA driver's ", d.cuda.host_path.empty() ? "libcuda.so.1" : "libnvidia-ml.so.1",
        " is not in ", StrJoin(dirs, ", "),
        options.host_root.empty() ? "" : StrCat(" (under ", options.host_root, ")"),
        ": containers get no driver libraries from tessera, and shares "
        "cannot be enforced by the CUDA shim"));
  }
  for (const char* soname : kOtherLibraries) {
    if (std::string p = find(soname); !p.empty()) d.others.push_back(LibraryFile{p, soname});
  }
  return d;
}

absl::StatusOr<DriverLibraries> PrepareDriverLibraries(const DriverFilesOptions& options,
                                                       std::vector<std::string>* notes) {
  DriverLibraries d = FindDriverLibraries(options, notes);
  if (options.shim_dir.empty()) {
    notes->push_back("no --shim-dir: shares cannot be enforced by the CUDA shim");
    return d;
  }
  const std::string cuda = StrCat(options.shim_dir, "/", shim::contract::kShimCudaLibrary);
  const std::string nvml = StrCat(options.shim_dir, "/", shim::contract::kShimNvmlLibrary);
  if (::access(cuda.c_str(), R_OK) != 0 || ::access(nvml.c_str(), R_OK) != 0) {
    notes->push_back(
        StrCat("the CUDA shim is not in ", options.shim_dir, " (", shim::contract::kShimCudaLibrary,
               ", ", shim::contract::kShimNvmlLibrary, "): shares cannot be enforced by it"));
    return d;
  }
  std::error_code ec;
  fs::create_directories(options.install_dir, ec);
  if (ec) {
    return absl::InternalError(
        StrCat("cannot create ", options.install_dir, " for the CUDA shim: ", ec.message()));
  }
  const std::string to_cuda = StrCat(options.install_dir, "/", shim::contract::kShimCudaLibrary);
  const std::string to_nvml = StrCat(options.install_dir, "/", shim::contract::kShimNvmlLibrary);
  if (absl::Status s = Install(cuda, to_cuda); !s.ok()) return s;
  if (absl::Status s = Install(nvml, to_nvml); !s.ok()) return s;
  d.shim_cuda = to_cuda;
  d.shim_nvml = to_nvml;
  return d;
}

}  // namespace tessera::agent
