#include "k8s/doctor/cluster_checks.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "common/json_fields.h"
#include "common/strings.h"
#include "k8s/scheduler/objects.h"
#include "records/inventory.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

// DRA features tessera uses, what each gives, and the kube-apiserver/kube-scheduler/kubelet flag.
struct Gate {
  const char* name;
  const char* gives;
};
constexpr Gate kDraGates[] = {
    {"DRAConsumableCapacity", "shares of a GPU through claims (capacity requests)"},
    {"DRAPartitionableDevices", "MIG partitions through claims"},
    {"DRAExtendedResource",
     "pods asking tessera.dev/gpu in resources.limits served by a DeviceClass"},
};

// Labels that mark a node as having NVIDIA GPUs: tessera's agent selector, NFD's PCI vendor label
// (10de is NVIDIA), the GPU operator's.
constexpr const char* kGpuNodeLabels[] = {"tessera.dev/gpu-node",
                                          "feature.node.kubernetes.io/pci-10de.present",
                                          "nvidia.com/gpu.present"};

Finding Ok(std::string check, std::string object, std::string what) {
  return Finding{std::move(check), Severity::kOk, std::move(object), std::move(what), "", ""};
}

// (major, minor) of "v1.37.2"; nullopt when unreadable.
std::optional<std::pair<int, int>> MinorVersion(const std::string& v) {
  int major = 0, minor = 0;
  if (std::sscanf(v.c_str(), "v%d.%d", &major, &minor) != 2) return std::nullopt;
  return std::make_pair(major, minor);
}

std::string NodeName(const json& node) {
  return JsonStringField(JsonField(node, "metadata"), "name");
}

// The first container's role: "scheduler" or "agent" (tessera's subcommand), "" otherwise.
std::string Role(const json& pod) {
  const json& cs = JsonField(JsonField(pod, "spec"), "containers");
  if (!cs.is_array()) return "";
  for (const json& c : cs) {
    for (const char* field : {"args", "command"}) {
      const json& a = JsonField(c, field);
      if (!a.is_array()) continue;
      for (const json& v : a) {
        if (v == "scheduler" || v == "agent") return v.get<std::string>();
      }
    }
  }
  return "";
}

std::string Image(const json& pod) {
  const json& cs = JsonField(JsonField(pod, "spec"), "containers");
  return cs.is_array() && !cs.empty() ? JsonStringField(cs[0], "image") : "";
}

bool Running(const json& pod) {
  return JsonStringField(JsonField(pod, "status"), "phase") == "Running";
}

std::string ResolveMode(const ClusterFacts& f, const ClusterCheckOptions& o) {
  if (o.mode != "auto") return o.mode;
  const bool classes = std::find(f.device_classes.begin(), f.device_classes.end(), o.driver) !=
                       f.device_classes.end();
  return classes || !f.slice_nodes.empty() ? "dra" : "classic";
}

void CheckVersion(const ClusterFacts& f, const std::string& mode, std::vector<Finding>* out) {
  const int need = mode == "dra" ? 34 : 30;
  std::optional<std::pair<int, int>> v = MinorVersion(f.version);
  if (!v) {
    out->push_back(Finding{"kubernetes-version", Severity::kWarning, "",
                           StrCat("the API server's version cannot be read (\"", f.version, "\")"),
                           StrCat(mode, " mode needs Kubernetes 1.", need, " or newer"),
                           "check `kubectl version`"});
    return;
  }
  if (v->first > 1 || v->second >= need) {
    out->push_back(
        Ok("kubernetes-version", "", StrCat(f.version, " (", mode, " mode needs 1.", need, "+)")));
    return;
  }
  out->push_back(
      Finding{"kubernetes-version", Severity::kError, "", StrCat("Kubernetes ", f.version),
              mode == "dra" ? "DRA mode needs resource.k8s.io/v1, served from Kubernetes 1.34"
                            : "classic mode is tested on Kubernetes 1.30 and newer",
              mode == "dra" ? "upgrade the control plane to 1.34+, or install classic mode "
                              "(--set dra.enabled=false)"
                            : "upgrade the control plane to 1.30+"});
}

void CheckDra(const ClusterFacts& f, const ClusterCheckOptions& o, std::vector<Finding>* out) {
  if (!f.dra_v1_served) {
    out->push_back(Finding{"dra-api", Severity::kError, "resource.k8s.io/v1",
                           "the API server does not serve resource.k8s.io/v1",
                           "DRA mode allocates ResourceClaims of resource.k8s.io/v1",
                           "on 1.34+ it is on by default: check kube-apiserver's "
                           "--runtime-config (resource.k8s.io/v1=true); or install classic mode"});
    return;
  }
  out->push_back(Ok("dra-api", "resource.k8s.io/v1", "served"));
  if (!f.feature_gates) {
    out->push_back(Finding{
        "feature-gates", Severity::kWarning, "kube-apiserver",
        StrCat("the API server's feature gates cannot be read (", f.feature_gates_error, ")"),
        "shares, MIG and tessera.dev/gpu pods through DRA each need a feature gate",
        "run doctor with permission to GET /metrics (nonResourceURLs) to check them, or check "
        "kube-apiserver's --feature-gates"});
  } else {
    for (const Gate& g : kDraGates) {
      auto it = f.feature_gates->find(g.name);
      if (it != f.feature_gates->end() && it->second) {
        out->push_back(Ok("feature-gates", g.name, StrCat("on: ", g.gives)));
        continue;
      }
      out->push_back(
          Finding{"feature-gates", Severity::kWarning, g.name,
                  it == f.feature_gates->end() ? StrCat(g.name, " is not known to this API server")
                                               : StrCat(g.name, " is off"),
                  StrCat("without it, no ", g.gives),
                  StrCat("--feature-gates=", g.name,
                         "=true on kube-apiserver, kube-controller-manager and every kubelet")});
    }
  }
  std::vector<std::string> missing;
  for (const std::string& c :
       {o.driver, StrCat("gpu-share.", o.driver.substr(o.driver.find('.') + 1)),
        StrCat("mig.", o.driver.substr(o.driver.find('.') + 1))}) {
    if (std::find(f.device_classes.begin(), f.device_classes.end(), c) == f.device_classes.end()) {
      missing.push_back(c);
    }
  }
  if (missing.empty()) {
    out->push_back(Ok("device-classes", "", "tessera's DeviceClasses exist"));
  } else {
    out->push_back(Finding{"device-classes", Severity::kError, "",
                           StrCat("DeviceClass ", StrJoin(missing, ", "), " missing"),
                           "claims name these classes; without them no claim is allocated",
                           "kubectl apply -f deploy/dra-deviceclasses.yaml (or helm upgrade with "
                           "dra.enabled=true)"});
  }
}

void CheckNamespace(const ClusterFacts& f, const ClusterCheckOptions& o,
                    std::vector<Finding>* out) {
  const std::string object = StrCat("namespace/", o.ns);
  if (!f.tessera_namespace) {
    out->push_back(Finding{
        "namespace", Severity::kError, object, StrCat("namespace ", o.ns, " does not exist"),
        "the scheduler, the agent and the scheduler's Lease live there",
        StrCat("kubectl create namespace ", o.ns, "; kubectl label namespace ", o.ns,
               " pod-security.kubernetes.io/enforce=privileged; helm "
               "install tessera deploy/helm/tessera -n ",
               o.ns, " (or --namespace NAME if installed elsewhere)")});
    return;
  }
  const std::string level =
      JsonStringField(JsonField(JsonField(*f.tessera_namespace, "metadata"), "labels"),
                      "pod-security.kubernetes.io/enforce");
  const std::string fix = StrCat("kubectl label namespace ", o.ns,
                                 " pod-security.kubernetes.io/enforce=privileged --overwrite");
  if (level == "privileged") {
    out->push_back(Ok("pod-security", object, "enforce=privileged"));
  } else if (level.empty()) {
    out->push_back(
        Finding{"pod-security", Severity::kWarning, object,
                "no pod-security.kubernetes.io/enforce label: the cluster's default level applies",
                "the agent needs host paths and privileges; a cluster whose default is baseline or "
                "restricted rejects its pods",
                fix});
  } else {
    out->push_back(Finding{"pod-security", Severity::kError, object,
                           StrCat("pod-security.kubernetes.io/enforce=", level),
                           StrCat("the agent's pods need host paths and privileges, which level ",
                                  level, " rejects: the DaemonSet makes no pods"),
                           fix});
  }
}

void CheckComponents(const ClusterFacts& f, const ClusterCheckOptions& o,
                     std::vector<Finding>* out) {
  if (!f.tessera_namespace) return;
  std::map<std::string, std::set<std::string>> images;  // role -> images
  std::map<std::string, int> running, total;
  for (const json& p : f.tessera_pods) {
    const std::string role = Role(p);
    if (role.empty()) continue;
    ++total[role];
    if (Running(p)) ++running[role];
    images[role].insert(Image(p));
  }
  for (const std::string role : {"scheduler", "agent"}) {
    const std::string object = StrCat(o.ns, "/tessera-", role);
    if (running[role] > 0) {
      out->push_back(Ok("components", object,
                        StrCat(running[role], " of ", total[role], " ", role, " pods running (",
                               StrJoin(images[role], ", "), ")")));
    } else {
      out->push_back(Finding{
          "components", Severity::kError, object,
          total[role] == 0 ? StrCat("no tessera ", role, " pod in namespace ", o.ns)
                           : StrCat("none of the ", total[role], " ", role, " pods is running"),
          role == "scheduler" ? "pods with schedulerName: tessera stay Pending"
                              : "no node publishes its GPUs, and GPU containers cannot start",
          total[role] == 0
              ? StrCat("helm install tessera deploy/helm/tessera -n ", o.ns)
              : StrCat("kubectl -n ", o.ns, " describe pods; kubectl -n ", o.ns, " logs <pod>")});
    }
  }
  std::set<std::string> all;
  for (const auto& [role, set] : images) all.insert(set.begin(), set.end());
  if (all.size() > 1) {
    out->push_back(Finding{
        "version-skew", Severity::kWarning, o.ns, StrCat("images differ: ", StrJoin(all, ", ")),
        "the scheduler and the agent share the records they write (inventory, assignment): "
        "mixed versions are supported one release apart, while an upgrade rolls",
        "finish the rollout (`kubectl -n " + o.ns +
            " rollout status deployment,daemonset`), or helm upgrade with one image.tag"});
  } else if (!all.empty()) {
    out->push_back(Ok("version-skew", o.ns, StrCat("one image: ", *all.begin())));
  }
}

void CheckNodes(const ClusterFacts& f, const std::string& mode, const ClusterCheckOptions& o,
                std::vector<Finding>* out) {
  std::set<std::string> agent_nodes;
  for (const json& p : f.tessera_pods) {
    if (Role(p) == "agent") agent_nodes.insert(JsonStringField(JsonField(p, "spec"), "nodeName"));
  }
  const std::set<std::string> sliced(f.slice_nodes.begin(), f.slice_nodes.end());
  int gpu_nodes = 0, published = 0;
  for (const json& node : f.nodes) {
    const std::string name = NodeName(node);
    const std::string object = StrCat("node/", name);
    std::shared_ptr<const NodeInfo> info = DecodeNode(node);
    const json& allocatable = JsonField(JsonField(node, "status"), "allocatable");
    const json& nvidia = JsonField(allocatable, "nvidia.com/gpu");
    const bool other_plugin = nvidia.is_string() && nvidia.get<std::string>() != "0";
    const bool has_inventory = mode == "dra" ? sliced.contains(name) : info->has_inventory;
    if (other_plugin && (has_inventory || agent_nodes.contains(name))) {
      out->push_back(Finding{
          "other-device-plugin", Severity::kError, object,
          StrCat("advertises nvidia.com/gpu: ", nvidia.get<std::string>(),
                 " beside tessera's GPUs"),
          "the NVIDIA device plugin hands out the same GPUs tessera grants: a GPU can be given "
          "to two pods at once",
          StrCat("kubectl label node ", name,
                 " nvidia.com/gpu.deploy.device-plugin=false (GPU operator), or keep the device "
                 "plugin's DaemonSet off tessera's nodes; DRA mode can serve nvidia.com/gpu pods "
                 "instead (a DeviceClass with extendedResourceName: nvidia.com/gpu)")});
    }
    if (!info->inventory_error.empty()) {
      out->push_back(Finding{"inventory", Severity::kError, object,
                             StrCat("its inventory cannot be read: ", info->inventory_error),
                             "none of its GPUs are used until it is fixed",
                             StrCat("kubectl -n ", o.ns,
                                    " logs the agent pod on it; a hand-written annotation: "
                                    "regenerate it with `tessera agent --print-inventory`")});
      continue;
    }
    const json& labels = JsonField(JsonField(node, "metadata"), "labels");
    bool labelled = false;
    for (const char* l : kGpuNodeLabels)
      labelled = labelled || JsonStringField(labels, l) == "true";
    const bool gpu_node = labelled || agent_nodes.contains(name) || has_inventory;
    if (!gpu_node) continue;
    ++gpu_nodes;
    if (has_inventory) {
      ++published;
      continue;
    }
    out->push_back(Finding{
        "inventory", Severity::kError, object,
        mode == "dra"
            ? StrCat("a GPU node without a ResourceSlice of ", o.driver)
            : StrCat("a GPU node without the ", records::kInventoryAnnotation, " annotation"),
        "tessera places no GPU pod on it",
        agent_nodes.contains(name)
            ? StrCat("the agent runs there but publishes nothing: kubectl -n ", o.ns,
                     " logs the agent pod on ", name,
                     " (tessera doctor node, run there, checks "
                     "the driver)")
            : StrCat("no agent runs there: kubectl label node ", name,
                     " tessera.dev/gpu-node=true (the agent DaemonSet's nodeSelector), and check "
                     "its tolerations")});
  }
  if (gpu_nodes > 0 && published == gpu_nodes) {
    out->push_back(Ok("inventory", "", StrCat(published, " GPU nodes publish their GPUs")));
  } else if (gpu_nodes == 0) {
    out->push_back(Finding{"inventory", Severity::kWarning, "",
                           "no node is labelled as a GPU node or publishes GPUs",
                           "tessera has no GPU to place",
                           "kubectl label node NODE tessera.dev/gpu-node=true on the GPU nodes"});
  }
}

}  // namespace

std::map<std::string, bool> ParseFeatureGates(std::string_view metrics) {
  std::map<std::string, bool> out;
  constexpr std::string_view kMetric = "kubernetes_feature_enabled{";
  size_t at = 0;
  while ((at = metrics.find(kMetric, at)) != std::string_view::npos) {
    const size_t end = metrics.find('\n', at);
    const std::string_view line =
        metrics.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at);
    at = end == std::string_view::npos ? metrics.size() : end;
    const size_t n = line.find("name=\"");
    const size_t close = line.find('}');
    if (n == std::string_view::npos || close == std::string_view::npos || n > close) continue;
    const size_t q = line.find('"', n + 6);
    if (q == std::string_view::npos) continue;
    const std::string name(line.substr(n + 6, q - n - 6));
    std::string_view value = line.substr(close + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    out[name] = value.starts_with("1");
  }
  return out;
}

absl::StatusOr<ClusterFacts> GatherClusterFacts(ApiClient& client, const ClusterCheckOptions& o) {
  ClusterFacts f;
  f.server = client.config().server;
  // The API server must answer at all; the rest is best effort, with what failed kept.
  absl::StatusOr<json> version = client.Get("/version");
  if (!version.ok()) return version.status();
  f.version = JsonStringField(*version, "gitVersion");
  auto list = [&](const std::string& path, const char* what) -> std::vector<json> {
    std::vector<json> items;
    absl::StatusOr<json> got = client.Get(path);
    if (!got.ok()) {
      f.read_errors.push_back(StrCat(what, ": ", got.status().message()));
      return items;
    }
    if (const json& i = JsonField(*got, "items"); i.is_array()) {
      for (const json& item : i) items.push_back(item);
    }
    return items;
  };
  f.dra_v1_served = client.Get("/apis/resource.k8s.io/v1").ok();
  HttpResponse metrics = client.Call(HttpRequest{"GET", "/metrics"});
  if (metrics.ok()) {
    f.feature_gates = ParseFeatureGates(metrics.body);
  } else {
    f.feature_gates_error =
        metrics.status != 0 ? StrCat("GET /metrics: HTTP ", metrics.status) : metrics.error;
  }
  f.nodes = list("/api/v1/nodes", "nodes");
  if (absl::StatusOr<json> ns = client.Get(StrCat("/api/v1/namespaces/", o.ns)); ns.ok()) {
    f.tessera_namespace = *ns;
  } else if (ns.status().code() != absl::StatusCode::kNotFound) {
    f.read_errors.push_back(StrCat("namespace ", o.ns, ": ", ns.status().message()));
  }
  if (f.tessera_namespace)
    f.tessera_pods = list(StrCat("/api/v1/namespaces/", o.ns, "/pods"), "pods");
  if (f.dra_v1_served) {
    for (const json& c : list("/apis/resource.k8s.io/v1/deviceclasses", "deviceclasses")) {
      f.device_classes.push_back(JsonStringField(JsonField(c, "metadata"), "name"));
    }
    std::set<std::string> nodes;
    for (const json& s : list(StrCat("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=",
                                     QueryEscape(StrCat("spec.driver=", o.driver))),
                              "resourceslices")) {
      const std::string node = JsonStringField(JsonField(s, "spec"), "nodeName");
      if (!node.empty()) nodes.insert(node);
    }
    f.slice_nodes.assign(nodes.begin(), nodes.end());
  }
  return f;
}

DoctorReport CheckCluster(const ClusterFacts& f, const ClusterCheckOptions& o) {
  DoctorReport r;
  r.scope = "cluster";
  r.target = f.server;
  const std::string mode = ResolveMode(f, o);
  CheckVersion(f, mode, &r.findings);
  if (mode == "dra") CheckDra(f, o, &r.findings);
  CheckNamespace(f, o, &r.findings);
  CheckComponents(f, o, &r.findings);
  CheckNodes(f, mode, o, &r.findings);
  for (const std::string& e : f.read_errors) {
    r.findings.push_back(Finding{"access", Severity::kWarning, "", StrCat("cannot read ", e),
                                 "the checks that need it were made without it",
                                 "run doctor with a user that may list nodes and pods (e.g. "
                                 "cluster-admin, or the view ClusterRole)"});
  }
  return r;
}

}  // namespace tessera::k8s
