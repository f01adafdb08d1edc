#include "agent/doctor/node_checks.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "agent/discovery/fake_discovery.h"
#include "agent/discovery/nvml_discovery.h"
#include "agent/pods/container_edits.h"
#include "common/strings.h"
#include "fmt/format.h"

namespace tessera::agent {
namespace {

using k8s::Finding;
using k8s::Severity;

constexpr long kCgroup2Magic = 0x63677270;  // CGROUP2_SUPER_MAGIC (linux/magic.h)

Finding Ok(std::string check, std::string object, std::string what) {
  return Finding{std::move(check), Severity::kOk, std::move(object), std::move(what), "", ""};
}

// The GPUs the agent would discover, or the finding that says why it cannot.
Finding CheckGpus(const NodeCheckOptions& o, NodeGpus* found) {
  std::unique_ptr<GpuDiscovery> d;
  if (!o.gpus_file.empty()) {
    d = std::make_unique<FakeDiscovery>(o.gpus_file);
  } else {
    absl::StatusOr<std::unique_ptr<NvmlDiscovery>> nvml = NvmlDiscovery::Open(o.nvml_library);
    if (!nvml.ok()) {
      return Finding{"gpus",
                     Severity::kError,
                     o.nvml_library,
                     StrCat("NVML cannot be used: ", nvml.status().message()),
                     "the agent discovers the GPUs through NVML; without it the node publishes no "
                     "inventory and tessera places nothing there",
                     "install the NVIDIA driver on the node (or the GPU operator's driver "
                     "container), or point --nvml-library at its libnvidia-ml.so.1 (e.g. "
                     "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1)"};
    }
    d = *std::move(nvml);
  }
  absl::StatusOr<NodeGpus> gpus = d->Discover();
  if (!gpus.ok()) {
    return Finding{"gpus",
                   Severity::kError,
                   d->Describe(),
                   StrCat("GPU discovery failed: ", gpus.status().message()),
                   "the agent publishes no inventory while discovery fails",
                   "check the driver with `nvidia-smi`; the agent's log says the same"};
  }
  *found = *std::move(gpus);
  std::string models;
  for (const DiscoveredGpu& g : found->gpus) {
    if (models.find(g.spec.model) == std::string::npos) {
      StrAppend(&models, models.empty() ? "" : ", ", g.spec.model);
    }
  }
  return Ok(
      "gpus", d->Describe(),
      StrCat(found->gpus.size(), " GPUs (", models, ")",
             found->driver_version.empty() ? "" : StrCat(", driver ", found->driver_version)));
}

void CheckDeviceNodes(const NodeCheckOptions& o, const NodeGpus& gpus, std::vector<Finding>* out) {
  std::vector<std::string> missing;
  std::vector<std::string> paths = {o.dev_dir + "/nvidiactl", o.dev_dir + "/nvidia-uvm"};
  for (const DiscoveredGpu& g : gpus.gpus) {
    if (g.minor >= 0) paths.push_back(StrCat(o.dev_dir, "/nvidia", g.minor));
  }
  for (const std::string& p : paths) {
    if (absl::StatusOr<DeviceNumber> n = StatDevice(p); !n.ok()) {
      missing.push_back(std::string(n.status().message()));
    }
  }
  if (missing.empty()) {
    out->push_back(Ok("device-nodes", o.dev_dir, StrCat(paths.size(), " device nodes present")));
    return;
  }
  out->push_back(Finding{
      "device-nodes", Severity::kError, o.dev_dir, StrJoin(missing, "; "),
      "containers are given these device nodes; a GPU container on this node fails to start",
      StrCat("load the driver's devices (`nvidia-modprobe -u -c=0`, or run `nvidia-smi` once), "
             "or pass the agent --dev-dir where the host's /dev is mounted")});
}

Finding CheckDriverLibraries(const NodeCheckOptions& o) {
  std::vector<std::string> notes;
  const DriverLibraries libs = FindDriverLibraries(o.driver, &notes);
  const std::vector<std::string> dirs =
      o.driver.driver_lib_dirs.empty() ? DefaultDriverLibDirs() : o.driver.driver_lib_dirs;
  if (!libs.cuda.host_path.empty() && !libs.nvml.host_path.empty()) {
    return Ok("driver-libraries", "",
              StrCat(libs.cuda.host_path, ", ", libs.nvml.host_path, " (", libs.others.size(),
                     " more driver libraries)"));
  }
  return Finding{
      "driver-libraries",
      Severity::kError,
      StrJoin(dirs, ":"),
      notes.empty() ? "the driver's libraries are missing" : notes.front(),
      "GPU containers get libcuda.so.1 and libnvidia-ml.so.1 from here; shares are "
      "enforced by the CUDA shim in front of them",
      StrCat("pass the agent --driver-lib-dir with the folder that holds "
             "libcuda.so.1 (`ldconfig -p | grep libcuda`), and --host-root if the "
             "agent sees the host under a prefix",
             o.driver.host_root.empty() ? "" : StrCat(" (now ", o.driver.host_root, ")"))};
}

Finding CheckKubeletPlugins(const std::string& kubelet_dir) {
  const std::string registry = kubelet_dir + "/plugins_registry";
  struct stat st {};
  if (::stat(registry.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Ok("kubelet-plugins", registry, "the kubelet's plugin registry is there");
  }
  return Finding{"kubelet-plugins",
                 Severity::kError,
                 registry,
                 StrCat(registry, " does not exist"),
                 "in DRA mode the agent registers its kubelet plugin there; without it no claim "
                 "is prepared on this node",
                 "pass the agent --kubelet-dir with the kubelet's --root-dir (default "
                 "/var/lib/kubelet), mounted into the agent's pod"};
}

}  // namespace

Finding CheckNriSocket(const std::string& socket) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket.size() >= sizeof(addr.sun_path)) {
    return Finding{"nri-socket", Severity::kError,
                   socket,       "the socket path is too long",
                   "",           "use a shorter --nri-socket path"};
  }
  std::memcpy(addr.sun_path, socket.c_str(), socket.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int err = 0;
  if (fd < 0) {
    err = errno;
  } else {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) err = errno;
    ::close(fd);
  }
  if (fd >= 0 && err == 0) return Ok("nri-socket", socket, "the runtime's NRI socket answers");
  const bool absent = err == ENOENT;
  return Finding{
      "nri-socket",
      Severity::kError,
      socket,
      absent ? StrCat(socket, " does not exist: NRI is off in the container runtime")
             : StrCat("cannot connect to ", socket, ": ", std::strerror(err)),
      "in classic mode the agent puts each tessera pod's GPUs into its containers through NRI; "
      "without it GPU containers fail to start (delivery fails closed)",
      absent ? "enable NRI: containerd 1.7 `[plugins.\"io.containerd.nri.v1.nri\"] disable = "
               "false` in /etc/containerd/config.toml (on by default in containerd 2.x), CRI-O "
               "`[crio.nri] enable_nri = true`; restart the runtime; mount /var/run/nri into the "
               "agent's pod"
             : "check that the runtime runs and that the agent may open the socket (it runs as "
               "root with /var/run/nri mounted)"};
}

Finding CheckCdiDir(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Finding{"cdi-dir",
                   Severity::kError,
                   dir,
                   StrCat(dir, " does not exist"),
                   "in DRA mode the agent writes each prepared claim's CDI spec there and the "
                   "runtime reads it to give the container its GPUs",
                   StrCat("create it (`mkdir -p ", dir,
                          "`), check that containerd's cdi_spec_dirs (or CRI-O's cdi_spec_dirs) "
                          "lists it, and pass the agent --cdi-dir ",
                          dir)};
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return Finding{"cdi-dir",
                   Severity::kError,
                   dir,
                   StrCat(dir, " is not writable: ", std::strerror(errno)),
                   "the agent cannot write CDI specs there: claims cannot be prepared",
                   StrCat("run the agent as root with ", dir, " mounted read-write")};
  }
  return Ok("cdi-dir", dir, "exists and is writable");
}

Finding CheckCgroup(const std::string& cgroup_root) {
  struct statfs fs {};
  if (::statfs(cgroup_root.c_str(), &fs) != 0) {
    return Finding{"cgroup",
                   Severity::kError,
                   cgroup_root,
                   StrCat("cannot read ", cgroup_root, ": ", std::strerror(errno)),
                   "the kubelet and the runtime need a cgroup hierarchy",
                   "mount cgroup2 at /sys/fs/cgroup (systemd does with "
                   "systemd.unified_cgroup_hierarchy=1)"};
  }
  if (static_cast<long>(fs.f_type) == kCgroup2Magic) {
    return Ok("cgroup", cgroup_root, "cgroup v2 (unified)");
  }
  // A warning, not an error: a kubelet with failCgroupV1: false runs on cgroup v1 (or hybrid), as
  // the project's own test nodes do (test/controlplane/node.sh); only the kubelet's setting,
  // which this check cannot read, decides whether it starts.
  return Finding{
      "cgroup",
      Severity::kWarning,
      cgroup_root,
      StrCat(cgroup_root, " is not cgroup v2 (filesystem type 0x",
             fmt::format("{:x}", static_cast<unsigned long>(fs.f_type)), "): cgroup v1 or hybrid"),
      "kubelet 1.35+ refuses to start on cgroup v1 unless its KubeletConfiguration "
      "sets failCgroupV1: false (true by default), and cgroup v1 is deprecated in "
      "Kubernetes and containerd",
      "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2), then restart the "
      "kubelet and the runtime; or keep cgroup v1 with failCgroupV1: false in the "
      "kubelet's configuration"};
}

k8s::DoctorReport CheckNode(const NodeCheckOptions& o) {
  k8s::DoctorReport r;
  r.scope = "node";
  r.target = o.node_name.empty() ? "this node" : o.node_name;
  NodeGpus gpus;
  r.findings.push_back(CheckGpus(o, &gpus));
  if (r.findings.back().severity == Severity::kOk) CheckDeviceNodes(o, gpus, &r.findings);
  r.findings.push_back(CheckDriverLibraries(o));
  if (o.mode == "dra") {
    r.findings.push_back(CheckCdiDir(o.cdi_dir));
    r.findings.push_back(CheckKubeletPlugins(o.kubelet_dir));
  } else if (!o.no_nri) {
    r.findings.push_back(CheckNriSocket(o.nri_socket));
  }
  r.findings.push_back(CheckCgroup(o.cgroup_root));
  return r;
}

}  // namespace tessera::agent
