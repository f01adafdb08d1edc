#include "sim/cluster_file.h"

#include <algorithm>
#include <set>

#include "common/strings.h"
#include "core/model/mig.h"
#include "core/model/profiles.h"
#include "core/topology/topo_text.h"
#include "sim/yaml_util.h"

namespace tessera::sim {
namespace {

constexpr int64_t kMaxNodesPerEntry = 100'000;

absl::StatusOr<std::vector<core::GpuSpec>> ReadGpus(const YamlContext& ctx, const YAML::Node& g,
                                                    core::LinkMatrix* links) {
  TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(g, "gpus"));
  TESSERA_RETURN_IF_ERROR(
      ctx.OnlyKeys(g, "gpus", {"model", "count", "memory", "interconnect", "sm"}));
  if (!g["model"]) return ctx.Error(g, "gpus: missing \"model\" (e.g. A100-80GB)");
  if (!g["count"]) return ctx.Error(g, "gpus: missing \"count\"");
  TESSERA_ASSIGN_OR_RETURN(std::string model, ctx.String(g["model"], "gpus.model"));
  if (model.empty()) return ctx.Error(g["model"], "gpus.model: must not be empty");
  TESSERA_ASSIGN_OR_RETURN(int64_t count,
                           ctx.Int(g["count"], "gpus.count", 0, core::kMaxGpusPerNode));
  int64_t memory = core::KnownGpuMemoryMiB(model);
  if (g["memory"]) {
    TESSERA_ASSIGN_OR_RETURN(memory, ctx.MemoryMiB(g["memory"], "gpus.memory", true));
    if (memory <= 0) return ctx.Error(g["memory"], "gpus.memory: must be positive");
  } else if (memory == 0 && count > 0) {
    return ctx.Error(g, StrCat("gpus: missing \"memory\" (tessera does not know how much memory a ",
                               model, " has; write e.g. memory: 80Gi)"));
  }
  int64_t sm = core::KnownSmCount(model);
  if (g["sm"]) {
    TESSERA_ASSIGN_OR_RETURN(sm, ctx.Int(g["sm"], "gpus.sm", 1, 10'000));
  }
  std::string interconnect = "pcie";
  if (g["interconnect"]) {
    TESSERA_ASSIGN_OR_RETURN(interconnect, ctx.String(g["interconnect"], "gpus.interconnect"));
    if (interconnect != "pcie" && interconnect != "nvswitch") {
      return ctx.Error(g["interconnect"], StrCat("gpus.interconnect: \"", interconnect,
                                                 "\" is not one of: nvswitch, pcie"));
    }
  }
  std::vector<core::GpuSpec> gpus;
  const int n = static_cast<int>(count);
  for (int i = 0; i < n; ++i) {
    core::GpuSpec spec;
    spec.index = i;
    spec.model = model;
    spec.memory_mib = memory;
    spec.sm_count = static_cast<int32_t>(sm);
    spec.numa_node = n >= 4 ? (i < n / 2 ? 0 : 1) : 0;
    gpus.push_back(std::move(spec));
  }
  *links = interconnect == "nvswitch"
               ? core::LinkMatrix::AllNvLink(n, core::KnownNvSwitchLanes(model))
               : core::LinkMatrix::Pcie(n, 2, n >= 4 ? (n + 3) / 4 : 1);
  return gpus;
}

// `mig: true` or `mig: {gpus: all | [indices], layout: [PROFILE[@START], ...]}`.
absl::Status ReadMig(const YamlContext& ctx, const YAML::Node& m, core::NodeSpec* node) {
  uint64_t gpus = node->all_gpus_mask();
  std::vector<std::string> layout;
  std::vector<YAML::Node> layout_nodes;
  if (m.IsScalar()) {
    if (m.Scalar() == "false") return absl::OkStatus();
    if (m.Scalar() != "true") {
      return ctx.Error(m, "mig: expected true, false, or {gpus: ..., layout: [...]}");
    }
  } else {
    TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(m, "mig"));
    TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(m, "mig", {"gpus", "layout"}));
    if (m["gpus"]) {
      const YAML::Node& g = m["gpus"];
      if (g.IsScalar() && g.Scalar() == "all") {
        // every GPU
      } else {
        TESSERA_RETURN_IF_ERROR(ctx.ExpectSequence(g, "mig.gpus (all, or a list of indices)"));
        gpus = 0;
        for (const YAML::Node& i : g) {
          TESSERA_ASSIGN_OR_RETURN(int64_t idx,
                                   ctx.Int(i, "mig.gpus", 0, std::max(0, node->gpu_count() - 1)));
          gpus |= 1ULL << idx;
        }
      }
    }
    if (m["layout"]) {
      TESSERA_RETURN_IF_ERROR(ctx.ExpectSequence(m["layout"], "mig.layout"));
      for (const YAML::Node& l : m["layout"]) {
        TESSERA_ASSIGN_OR_RETURN(std::string entry, ctx.String(l, "mig.layout"));
        layout.push_back(entry);
        layout_nodes.push_back(l);
      }
    }
  }
  if (node->gpus.empty()) return ctx.Error(m, "mig: the node has no GPUs");
  for (uint64_t a = gpus; a; a &= a - 1) {
    core::GpuSpec& g = node->gpus[__builtin_ctzll(a)];
    const core::MigModel* model = core::FindMigModel(g.model);
    if (!model) {
      return ctx.Error(m, StrCat("mig: tessera has no MIG profiles for ", g.model,
                                 " (it has: ", StrJoin(core::MigModelNames(), ", "), ")"));
    }
    g.mig_enabled = true;
    g.mig_layout.clear();
    uint8_t used = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
      const std::string& entry = layout[i];
      const size_t at = entry.find('@');
      const std::string name = entry.substr(0, at);
      const int profile = model->Find(name);
      if (profile < 0) {
        return ctx.Error(layout_nodes[i],
                         StrCat("mig.layout: \"", name, "\" is not a ", model->model,
                                " MIG profile (", StrJoin(model->ProfileNames(), ", "), ")"));
      }
      const core::MigProfile& prof = model->profiles[profile];
      int start = -1;
      if (at != std::string::npos) {
        const std::string digits = entry.substr(at + 1);
        if (digits.size() != 1 || digits[0] < '0' || digits[0] > '7') {
          return ctx.Error(layout_nodes[i], StrCat("mig.layout: \"", entry,
                                                   "\": the start after @ is a slice 0..7"));
        }
        start = digits[0] - '0';
      } else {
        for (int s = 0; s < core::kMigSlots && start < 0; ++s) {
          if (prof.may_start_at(s) && !(prof.slots(s) & used)) start = s;
        }
        if (start < 0) {
          return ctx.Error(layout_nodes[i], StrCat("mig.layout: no free start left for ", name,
                                                   " after the instances before it"));
        }
      }
      used |= prof.may_start_at(start) ? prof.slots(start) : 0;
      g.mig_layout.push_back(
          core::MigPlacement{static_cast<int8_t>(profile), static_cast<int8_t>(start)});
    }
    absl::Status valid = core::ValidateMigInstances(*model, g.mig_layout, "mig.layout");
    if (!valid.ok()) return ctx.Error(m, FromAbsl(valid.message()));
  }
  return absl::OkStatus();
}

absl::Status ReadNode(const YamlContext& ctx, const YAML::Node& entry, ClusterFile* file) {
  std::vector<core::NodeSpec>* out = &file->nodes;
  TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(entry, "node"));
  TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(entry, "a node",
                                       {"name", "count", "cpu", "memory", "labels", "gpus",
                                        "profile", "topology", "mig", "inventory", "cordoned"}));
  if (!entry["name"]) return ctx.Error(entry, "node: missing \"name\"");
  core::NodeSpec node;
  TESSERA_ASSIGN_OR_RETURN(node.name, ctx.String(entry["name"], "name"));
  if (node.name.empty()) return ctx.Error(entry["name"], "name: must not be empty");
  bool shared_domain = false;
  std::vector<records::GpuHealth> health;
  if (entry["profile"] && entry["gpus"]) {
    return ctx.Error(entry["gpus"], "give either \"profile\" or \"gpus\", not both");
  }
  if (entry["inventory"]) {
    for (const char* other : {"profile", "gpus", "topology", "mig"}) {
      if (entry[other]) {
        return ctx.Error(entry[other], StrCat("give either \"inventory\" or \"", other,
                                              "\", not both (the record has the GPUs, links "
                                              "and MIG instances)"));
      }
    }
    TESSERA_ASSIGN_OR_RETURN(std::string text, ctx.String(entry["inventory"], "inventory"));
    absl::StatusOr<records::Inventory> inv = records::InventoryFromJson(text);
    if (!inv.ok()) {
      return ctx.Error(entry["inventory"], StrCat("inventory: ", inv.status().message()));
    }
    node.gpus = std::move(inv->gpus);
    node.links = std::move(inv->links);
    node.nics = std::move(inv->nics);
    health = std::move(inv->health);
  } else if (entry["profile"]) {
    TESSERA_ASSIGN_OR_RETURN(std::string name, ctx.String(entry["profile"], "profile"));
    absl::StatusOr<core::Profile> p = core::FindProfile(name);
    if (!p.ok()) return ctx.Error(entry["profile"], FromAbsl(p.status().message()));
    node = core::NodeOfProfile(*p, std::move(node.name));
    shared_domain = p->shared_nvlink_domain;
  } else if (entry["gpus"]) {
    TESSERA_ASSIGN_OR_RETURN(node.gpus, ReadGpus(ctx, entry["gpus"], &node.links));
  }
  if (entry["cpu"]) {
    TESSERA_ASSIGN_OR_RETURN(node.cpu_milli, ctx.CpuMilli(entry["cpu"], "cpu", true));
  } else if (!entry["profile"]) {
    return ctx.Error(entry, StrCat("node ", node.name, ": missing \"cpu\" (e.g. cpu: 64)"));
  }
  if (entry["memory"]) {
    TESSERA_ASSIGN_OR_RETURN(node.memory_mib, ctx.MemoryMiB(entry["memory"], "memory", true));
  } else if (!entry["profile"]) {
    return ctx.Error(entry,
                     StrCat("node ", node.name, ": missing \"memory\" (e.g. memory: 512Gi)"));
  }
  if (entry["labels"]) {
    const YAML::Node& labels = entry["labels"];
    TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(labels, "labels"));
    for (auto it = labels.begin(); it != labels.end(); ++it) {
      TESSERA_ASSIGN_OR_RETURN(std::string k, ctx.String(it->first, "label key"));
      TESSERA_ASSIGN_OR_RETURN(std::string v, ctx.String(it->second, StrCat("label ", k)));
      node.labels[k] = v;
    }
  }
  if (entry["topology"]) {
    TESSERA_ASSIGN_OR_RETURN(std::string text, ctx.String(entry["topology"], "topology"));
    absl::StatusOr<core::ParsedTopology> topo = core::ParseNvidiaSmiTopo(text);
    if (!topo.ok()) {
      return ctx.Error(entry["topology"], StrCat("topology: ", topo.status().message(),
                                                 " (lines counted from the first line of the "
                                                 "topology block)"));
    }
    if (node.gpus.empty()) {
      return ctx.Error(entry["topology"],
                       "topology: give \"gpus\" or \"profile\" too (the matrix has no GPU models "
                       "or memory)");
    }
    if (topo->gpus.size() != node.gpus.size()) {
      return ctx.Error(entry["topology"], StrCat("topology: the matrix has ", topo->gpus.size(),
                                                 " GPUs but the node has ", node.gpus.size()));
    }
    node.links = topo->links;
    node.nics = topo->nics;
    for (size_t g = 0; g < node.gpus.size(); ++g) {
      if (topo->gpus[g].numa_node >= 0) node.gpus[g].numa_node = topo->gpus[g].numa_node;
      node.gpus[g].cpu_affinity = topo->gpus[g].cpu_affinity;
    }
  }
  if (entry["mig"]) TESSERA_RETURN_IF_ERROR(ReadMig(ctx, entry["mig"], &node));
  bool cordoned = false;
  if (entry["cordoned"]) {
    const YAML::Node& c = entry["cordoned"];
    if (!c.IsScalar() || (c.Scalar() != "true" && c.Scalar() != "false")) {
      return ctx.Error(c, "cordoned: expected true or false");
    }
    cordoned = c.Scalar() == "true";
  }
  int64_t count = 1;
  bool replicated = false;
  if (entry["count"]) {
    TESSERA_ASSIGN_OR_RETURN(count, ctx.Int(entry["count"], "count", 1, kMaxNodesPerEntry));
    replicated = true;
  }
  if (shared_domain && !node.labels.contains(std::string(core::kNvlinkDomainLabel))) {
    node.labels[std::string(core::kNvlinkDomainLabel)] = node.name;
  }
  for (int64_t i = 0; i < count; ++i) {
    core::NodeSpec copy = node;
    if (replicated) copy.name = StrCat(node.name, "-", i);
    if (cordoned) file->cordoned.push_back(copy.name);
    if (!health.empty()) file->health[copy.name] = health;
    out->push_back(std::move(copy));
  }
  return absl::OkStatus();
}

absl::Status ReadRunning(const YamlContext& ctx, const YAML::Node& entry, ClusterFile* file) {
  TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(entry, "a running pod"));
  TESSERA_RETURN_IF_ERROR(
      ctx.OnlyKeys(entry, "a running pod", {"pod", "node", "cpu", "memory", "assignment"}));
  if (!entry["pod"] || !entry["node"]) {
    return ctx.Error(entry, "a running pod needs \"pod\" (its name) and \"node\"");
  }
  RunningPod pod;
  TESSERA_ASSIGN_OR_RETURN(pod.name, ctx.String(entry["pod"], "pod"));
  if (pod.name.empty()) return ctx.Error(entry["pod"], "pod: must not be empty");
  TESSERA_ASSIGN_OR_RETURN(std::string node, ctx.String(entry["node"], "node"));
  if (entry["cpu"]) {
    TESSERA_ASSIGN_OR_RETURN(pod.cpu_milli, ctx.CpuMilli(entry["cpu"], "cpu", false));
  }
  if (entry["memory"]) {
    TESSERA_ASSIGN_OR_RETURN(pod.memory_mib, ctx.MemoryMiB(entry["memory"], "memory", false));
  }
  if (entry["assignment"]) {
    TESSERA_ASSIGN_OR_RETURN(std::string text, ctx.String(entry["assignment"], "assignment"));
    absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(text);
    if (!a.ok()) return ctx.Error(entry["assignment"], FromAbsl(a.status().message()));
    if (a->node != node) {
      return ctx.Error(entry["assignment"], StrCat("assignment: names node \"", a->node,
                                                   "\" but the pod's node is \"", node, "\""));
    }
    pod.assignment = *std::move(a);
  }
  pod.assignment.node = node;
  file->running.push_back(std::move(pod));
  return absl::OkStatus();
}

// yaml-cpp's emitter writes "~" for an empty string; quantities and names are never empty.
std::string CpuText(int64_t milli) {
  return milli % 1000 == 0 ? StrCat(milli / 1000) : StrCat(milli, "m");
}
std::string MemoryText(int64_t mib) { return StrCat(mib, "Mi"); }

}  // namespace

absl::StatusOr<ClusterFile> ParseClusterYaml(std::string_view text, std::string_view source) {
  TESSERA_ASSIGN_OR_RETURN(YAML::Node doc, ParseYaml(text, source));
  YamlContext ctx{std::string(source)};
  if (doc.IsNull()) return ctx.Error(doc, "the cluster file is empty (expected nodes: [...])");
  TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(doc, "the cluster file"));
  TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(doc, "the cluster file", {"nodes", "levels", "running"}));
  if (!doc["nodes"]) return ctx.Error(doc, "missing \"nodes\" (the list of nodes)");
  TESSERA_RETURN_IF_ERROR(ctx.ExpectSequence(doc["nodes"], "nodes"));
  ClusterFile file;
  for (const YAML::Node& entry : doc["nodes"]) {
    TESSERA_RETURN_IF_ERROR(ReadNode(ctx, entry, &file));
  }
  if (file.nodes.empty()) return ctx.Error(doc["nodes"], "nodes: the list is empty");
  if (doc["levels"]) {
    TESSERA_RETURN_IF_ERROR(ctx.ExpectSequence(doc["levels"], "levels"));
    for (const YAML::Node& l : doc["levels"]) {
      TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(l, "level"));
      TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(l, "a level", {"name", "label"}));
      if (!l["name"] || !l["label"]) return ctx.Error(l, "a level needs \"name\" and \"label\"");
      core::TopologyLevel level;
      TESSERA_ASSIGN_OR_RETURN(level.name, ctx.String(l["name"], "level name"));
      TESSERA_ASSIGN_OR_RETURN(level.label, ctx.String(l["label"], "level label"));
      file.levels.push_back(std::move(level));
    }
  } else {
    file.levels = core::DefaultTopologyLevels();
  }
  // Duplicate names are reported with the entry that introduced them.
  std::vector<std::string> names;
  for (const core::NodeSpec& n : file.nodes) names.push_back(n.name);
  std::sort(names.begin(), names.end());
  for (size_t i = 1; i < names.size(); ++i) {
    if (names[i] == names[i - 1]) {
      return ctx.Error(doc["nodes"], StrCat("two nodes are named \"", names[i],
                                            "\" (names must be unique; count: N makes NAME-0..)"));
    }
  }
  if (doc["running"]) {
    TESSERA_RETURN_IF_ERROR(ctx.ExpectSequence(doc["running"], "running"));
    std::set<std::string> pods;
    for (const YAML::Node& entry : doc["running"]) {
      TESSERA_RETURN_IF_ERROR(ReadRunning(ctx, entry, &file));
      const RunningPod& p = file.running.back();
      if (!std::binary_search(names.begin(), names.end(), p.assignment.node)) {
        return ctx.Error(entry["node"], StrCat("running pod ", p.name, ": node \"",
                                               p.assignment.node, "\" is not in nodes"));
      }
      if (!pods.insert(p.name).second) {
        return ctx.Error(entry["pod"], StrCat("two running pods are named \"", p.name, "\""));
      }
    }
  }
  return file;
}

std::string ClusterFileToYaml(const ClusterFile& file) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  const std::vector<core::TopologyLevel> defaults = core::DefaultTopologyLevels();
  const bool default_levels = file.levels.size() == defaults.size() &&
                              std::equal(file.levels.begin(), file.levels.end(), defaults.begin(),
                                         [](const auto& a, const auto& b) {
                                           return a.name == b.name && a.label == b.label;
                                         });
  if (!default_levels) {
    out << YAML::Key << "levels" << YAML::Value << YAML::BeginSeq;
    for (const core::TopologyLevel& l : file.levels) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << l.name
          << YAML::Key << "label" << YAML::Value << l.label << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  const std::set<std::string> cordoned(file.cordoned.begin(), file.cordoned.end());
  out << YAML::Key << "nodes" << YAML::Value << YAML::BeginSeq;
  for (const core::NodeSpec& n : file.nodes) {
    out << YAML::BeginMap;
    out << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << n.name;
    out << YAML::Key << "cpu" << YAML::Value << CpuText(n.cpu_milli);
    out << YAML::Key << "memory" << YAML::Value << MemoryText(n.memory_mib);
    if (!n.labels.empty()) {
      out << YAML::Key << "labels" << YAML::Value << YAML::BeginMap;
      for (const auto& [k, v] : n.labels) {
        out << YAML::Key << YAML::DoubleQuoted << k << YAML::Value << YAML::DoubleQuoted << v;
      }
      out << YAML::EndMap;
    }
    if (cordoned.contains(n.name)) out << YAML::Key << "cordoned" << YAML::Value << true;
    if (!n.gpus.empty()) {
      records::Inventory inv;
      inv.gpus = n.gpus;
      inv.links = n.links;
      inv.nics = n.nics;
      if (auto h = file.health.find(n.name); h != file.health.end()) inv.health = h->second;
      out << YAML::Key << "inventory" << YAML::Value << YAML::SingleQuoted
          << records::InventoryToJson(inv);
    }
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
  if (!file.running.empty()) {
    out << YAML::Key << "running" << YAML::Value << YAML::BeginSeq;
    for (const RunningPod& p : file.running) {
      out << YAML::BeginMap;
      out << YAML::Key << "pod" << YAML::Value << YAML::DoubleQuoted << p.name;
      out << YAML::Key << "node" << YAML::Value << YAML::DoubleQuoted << p.assignment.node;
      if (p.cpu_milli > 0) out << YAML::Key << "cpu" << YAML::Value << CpuText(p.cpu_milli);
      if (p.memory_mib > 0) {
        out << YAML::Key << "memory" << YAML::Value << MemoryText(p.memory_mib);
      }
      if (!p.assignment.gpus.empty()) {
        out << YAML::Key << "assignment" << YAML::Value << YAML::SingleQuoted
            << records::AssignmentToJson(p.assignment);
      }
      out << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
  return StrCat(out.c_str(), "\n");
}

absl::Status AddProfileNodes(ClusterFile* file, std::string_view profile, int count) {
  if (count < 1 || count > kMaxNodesPerEntry) {
    return absl::InvalidArgumentError(StrCat("add ", count, " nodes of ", profile,
                                             ": the count must be 1 to ", kMaxNodesPerEntry));
  }
  // Through the file's own reader, so that added nodes are exactly what `profile:` gives.
  YAML::Node entry;
  entry["name"] = std::string(profile);
  entry["profile"] = std::string(profile);
  ClusterFile added;
  YamlContext ctx{StrCat("--add-nodes ", profile)};
  TESSERA_RETURN_IF_ERROR(ReadNode(ctx, entry, &added));
  std::set<std::string> taken;
  for (const core::NodeSpec& n : file->nodes) taken.insert(n.name);
  int next = 0;
  for (int i = 0; i < count; ++i) {
    core::NodeSpec n = added.nodes.front();
    do {
      n.name = StrCat(profile, "-added-", next++);
    } while (taken.contains(n.name));
    // A profile whose GPUs share one NVLink domain labels it with the node's name.
    if (auto it = n.labels.find(std::string(core::kNvlinkDomainLabel));
        it != n.labels.end() && it->second == std::string(profile)) {
      it->second = n.name;
    }
    taken.insert(n.name);
    file->nodes.push_back(std::move(n));
  }
  return absl::OkStatus();
}

absl::StatusOr<StartState> ResolveStart(const core::Cluster& cluster, const ClusterFile& file) {
  StartState start;
  for (const std::string& name : file.cordoned) {
    const core::NodeId id = cluster.FindNode(name);
    if (!id.valid())
      return absl::NotFoundError(StrCat("cordoned node \"", name, "\" is not in the cluster"));
    start.cordoned.push_back(id);
  }
  for (const RunningPod& p : file.running) {
    core::Placement placement;
    if (!p.assignment.gpus.empty()) {
      absl::StatusOr<core::Placement> gpus = records::AssignmentToPlacement(cluster, p.assignment);
      if (!gpus.ok()) {
        return absl::InvalidArgumentError(
            StrCat("running pod ", p.name, ": ", FromAbsl(gpus.status().message())));
      }
      placement = *std::move(gpus);
    }
    placement.node = cluster.FindNode(p.assignment.node);
    if (!placement.node.valid()) {
      return absl::NotFoundError(StrCat("running pod ", p.name, ": node \"", p.assignment.node,
                                        "\" is not in the cluster"));
    }
    placement.cpu_milli = p.cpu_milli;
    placement.memory_mib = p.memory_mib;
    start.running.emplace_back(p.name, std::move(placement));
  }
  return start;
}

absl::StatusOr<ClusterFile> LoadClusterFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseClusterYaml(text, path);
}

}  // namespace tessera::sim
