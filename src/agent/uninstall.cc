#include "agent/uninstall.h"

#include <unistd.h>

#include <filesystem>
#include <thread>

#include "agent/publish/advertisement.h"
#include "common/json_fields.h"
#include "common/strings.h"
#include "shim/files_at.h"
#include "shim/segments.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string LabelSelector(const json& match_labels) {
  std::vector<std::string> parts;
  if (match_labels.is_object()) {
    for (const auto& [k, v] : match_labels.items()) {
      if (v.is_string()) parts.push_back(StrCat(k, "=", v.get<std::string>()));
    }
  }
  return StrJoin(parts, ",");
}

// A folder the agent may remove whole: absolute, at least two levels deep (never /, /run, /var).
absl::Status CheckRemovable(const std::string& path) {
  const fs::path p = fs::path(path).lexically_normal();
  int depth = 0;
  for (const fs::path& part : p.relative_path()) depth += part.empty() ? 0 : 1;
  if (!p.is_absolute() || depth < 2) {
    return absl::InvalidArgumentError(
        StrCat("refusing to remove \"", path, "\": not an absolute folder two levels deep"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> DaemonSetLeaving(k8s::ApiClient& client, const std::string& ns,
                                      const std::string& name) {
  absl::StatusOr<json> ds =
      client.Get(StrCat("/apis/apps/v1/namespaces/", ns, "/daemonsets/", name));
  if (!ds.ok()) {
    if (ds.status().code() == absl::StatusCode::kNotFound) return true;
    return ds.status();
  }
  return JsonField(JsonField(*ds, "metadata"), "deletionTimestamp").is_string();
}

absl::Status WithdrawNodeObject(k8s::ApiClient& client, const std::string& node,
                                std::vector<std::string>* changes) {
  const std::string path = StrCat("/api/v1/nodes/", node);
  absl::StatusOr<json> object = client.Get(path);
  if (!object.ok()) {
    return object.status().code() == absl::StatusCode::kNotFound ? absl::OkStatus()
                                                                 : object.status();
  }
  NodePatches p = WithdrawNode(*object);
  if (!p.metadata.is_null()) {
    absl::StatusOr<json> r = client.Patch(path, k8s::PatchType::kMerge, p.metadata);
    if (!r.ok()) return r.status();
  }
  if (!p.status.is_null()) {
    absl::StatusOr<json> r = client.Patch(path + "/status", k8s::PatchType::kMerge, p.status);
    if (!r.ok()) return r.status();
  }
  for (const std::string& c : p.changes) changes->push_back(StrCat("node/", node, ": ", c));
  return absl::OkStatus();
}

absl::StatusOr<int> DeleteDriverSlices(k8s::ApiClient& client, const std::string& driver,
                                       const std::string& node) {
  std::string selector = StrCat("spec.driver=", driver);
  if (!node.empty()) StrAppend(&selector, ",spec.nodeName=", node);
  const std::string base = "/apis/resource.k8s.io/v1/resourceslices";
  absl::StatusOr<json> list =
      client.Get(StrCat(base, "?fieldSelector=", k8s::QueryEscape(selector)));
  if (!list.ok()) {
    // A cluster without DRA has no slices to delete.
    if (list.status().code() == absl::StatusCode::kNotFound) return 0;
    return list.status();
  }
  int deleted = 0;
  for (const json& item : list->value("items", json::array())) {
    const std::string name = JsonStringField(JsonField(item, "metadata"), "name");
    absl::StatusOr<json> r = client.Delete(StrCat(base, "/", name));
    if (!r.ok() && r.status().code() != absl::StatusCode::kNotFound) return r.status();
    ++deleted;
  }
  return deleted;
}

absl::Status RemoveHostFootprint(const HostFootprint& footprint,
                                 std::vector<std::string>* removed) {
  std::error_code ec;
  for (const std::string& dir : footprint.dirs) {
    if (dir.empty()) continue;
    if (absl::Status s = CheckRemovable(dir); !s.ok()) return s;
    if (!fs::exists(fs::symlink_status(dir, ec))) continue;
    // A pod's (or a DRA claim's) folder may hold its ledger folder as a tmpfs of its own
    // (shim/segments.h): each is unmounted with its segments first, as at the pod's end; then
    // the tree, through descriptors, never following a symlink a container may have planted and
    // never crossing into a mount left (shim/files_at.h).
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
      if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
      if (absl::Status s = shim::RemovePodSegments(e.path().string()); !s.ok()) return s;
    }
    if (absl::Status s = shim::RemoveTree(dir); !s.ok()) return s;
    removed->push_back(dir);
  }
  // Folders left empty above them (a node's own folder under agent.runDir) go too: rmdir only
  // removes an empty folder, and fails on a mount point (the hostPath itself), where it stops.
  for (const std::string& dir : footprint.dirs) {
    if (dir.empty()) continue;
    for (fs::path p = fs::path(dir).lexically_normal().parent_path();
         CheckRemovable(p.string()).ok() && fs::is_directory(p, ec) && ::rmdir(p.c_str()) == 0;
         p = p.parent_path()) {
      removed->push_back(p.string());
    }
  }
  if (!footprint.cdi_dir.empty() && !footprint.cdi_prefix.empty()) {
    for (const fs::directory_entry& e : fs::directory_iterator(footprint.cdi_dir, ec)) {
      if (!e.path().filename().string().starts_with(footprint.cdi_prefix)) continue;
      std::error_code rec;
      fs::remove(e.path(), rec);
      if (rec)
        return absl::InternalError(StrCat("removing ", e.path().string(), ": ", rec.message()));
      removed->push_back(e.path().string());
    }
  }
  for (const std::string& file : footprint.files) {
    if (fs::remove(file, ec)) removed->push_back(file);
  }
  return absl::OkStatus();
}

absl::StatusOr<UninstallReport> UninstallAgents(
    k8s::ApiClient& client, const UninstallOptions& o,
    const std::function<void(const std::string&)>& log) {
  UninstallReport report;
  const std::string ds_path =
      StrCat("/apis/apps/v1/namespaces/", o.ns, "/daemonsets/", o.daemonset);
  absl::StatusOr<json> ds = client.Get(ds_path);
  if (!ds.ok() && ds.status().code() != absl::StatusCode::kNotFound) return ds.status();
  if (ds.ok()) {
    const std::string selector =
        LabelSelector(JsonField(JsonField(JsonField(*ds, "spec"), "selector"), "matchLabels"));
    auto agent_pods = [&]() -> absl::StatusOr<int> {
      absl::StatusOr<json> pods = client.Get(
          StrCat("/api/v1/namespaces/", o.ns, "/pods?labelSelector=", k8s::QueryEscape(selector)));
      if (!pods.ok()) return pods.status();
      return static_cast<int>(pods->value("items", json::array()).size());
    };
    absl::StatusOr<int> before = agent_pods();
    if (!before.ok()) return before.status();
    report.pods_waited = *before;
    log(StrCat("deleting daemonset ", o.ns, "/", o.daemonset, " (", *before,
               " agent pod(s); each removes what it made on its node as it stops)"));
    absl::StatusOr<json> deleted = client.Delete(
        ds_path,
        {{"apiVersion", "v1"}, {"kind", "DeleteOptions"}, {"propagationPolicy", "Foreground"}});
    if (!deleted.ok() && deleted.status().code() != absl::StatusCode::kNotFound) {
      return deleted.status();
    }
    const auto deadline = std::chrono::steady_clock::now() + o.timeout;
    while (true) {
      absl::StatusOr<int> left = agent_pods();
      if (!left.ok()) return left.status();
      if (*left == 0) {
        report.pods_gone = true;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        log(StrCat(*left, " agent pod(s) still running after ", o.timeout.count() / 1000,
                   " s: their nodes' host files may remain (docs/operations.md, \"Uninstall\")"));
        break;
      }
      std::this_thread::sleep_for(o.poll);
    }
  }
  absl::StatusOr<json> nodes = client.Get("/api/v1/nodes");
  if (!nodes.ok()) return nodes.status();
  for (const json& n : nodes->value("items", json::array())) {
    const std::string name = JsonStringField(JsonField(n, "metadata"), "name");
    if (WithdrawNode(n).changes.empty()) continue;
    absl::Status s = WithdrawNodeObject(client, name, &report.node_changes);
    if (!s.ok()) return s;
  }
  for (const std::string& c : report.node_changes) log(StrCat("left by an agent: ", c));
  if (o.driver.empty()) return report;
  absl::StatusOr<int> slices = DeleteDriverSlices(client, o.driver, "");
  if (!slices.ok()) return slices.status();
  report.slices_deleted = *slices;
  if (*slices > 0) log(StrCat("deleted ", *slices, " ResourceSlice(s) of ", o.driver));
  return report;
}

}  // namespace tessera::agent
