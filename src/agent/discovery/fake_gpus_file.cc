#include "agent/discovery/fake_gpus_file.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <initializer_list>
#include <set>
#include <utility>

#include "agent/discovery/json_lines.h"
#include "agent/discovery/model_names.h"
#include "agent/discovery/numa.h"
#include "agent/discovery/xid.h"
#include "common/hash.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/mig.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

bool IsUuidBody(std::string_view s) {
  static constexpr int kGroups[] = {8, 4, 4, 4, 12};
  size_t pos = 0;
  for (int g = 0; g < 5; ++g) {
    if (g > 0) {
      if (pos >= s.size() || s[pos] != '-') return false;
      ++pos;
    }
    for (int k = 0; k < kGroups[g]; ++k, ++pos) {
      if (pos >= s.size() || !IsHex(s[pos])) return false;
    }
  }
  return pos == s.size();
}

// A value of the document with its JSON pointer (for the line) and its path (for people).
class Field {
 public:
  Field(const JsonWithLines& doc, std::string_view source, const json& value, std::string pointer,
        std::string path)
      : doc_(doc),
        source_(source),
        v_(value),
        pointer_(std::move(pointer)),
        path_(std::move(path)) {}

  const json& value() const { return v_; }
  const std::string& path() const { return path_; }

  absl::Status Error(std::string_view what) const {
    const int line = doc_.LineOf(pointer_);
    return absl::InvalidArgumentError(
        StrCat(source_, ":", line, ": ", path_.empty() ? "the document" : path_, ": ", what));
  }
  bool Has(std::string_view key) const { return v_.is_object() && v_.contains(key); }
  Field Child(std::string_view key) const {
    static const json kNull;
    const json& c = Has(key) ? v_.at(std::string(key)) : kNull;
    return Field(doc_, source_, c, StrCat(pointer_, "/", key),
                 path_.empty() ? std::string(key) : StrCat(path_, ".", key));
  }
  Field Element(size_t i) const {
    return Field(doc_, source_, v_.at(i), StrCat(pointer_, "/", i), StrCat(path_, "[", i, "]"));
  }

  absl::Status ExpectObject(std::initializer_list<std::string_view> keys) const {
    if (!v_.is_object()) return Error(StrCat("expected an object, found ", Kind()));
    for (auto it = v_.begin(); it != v_.end(); ++it) {
      bool known = false;
      for (std::string_view k : keys) known = known || it.key() == k;
      if (!known) {
        return Child(it.key()).Error(
            StrCat("unknown field (known here: ", StrJoin(keys, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> Int() const {
    if (!v_.is_number_integer()) return Error(StrCat("expected an integer, found ", Kind()));
    if (v_.is_number_unsigned() && v_.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Error("is too large");
    }
    return v_.get<int64_t>();
  }
  absl::StatusOr<std::string> String() const {
    if (!v_.is_string()) return Error(StrCat("expected a string, found ", Kind()));
    return v_.get<std::string>();
  }
  absl::StatusOr<bool> Bool() const {
    if (!v_.is_boolean()) return Error(StrCat("expected true or false, found ", Kind()));
    return v_.get<bool>();
  }
  absl::Status ExpectArray() const {
    if (!v_.is_array()) return Error(StrCat("expected an array, found ", Kind()));
    return absl::OkStatus();
  }
  std::string Kind() const {
    if (v_.is_null()) return "null";
    if (v_.is_object()) return "an object";
    if (v_.is_array()) return "an array";
    std::string text = v_.dump();
    if (text.size() > 40) text = text.substr(0, 37) + "...";
    return text;
  }
  // A required field: an error names it when missing.
  absl::StatusOr<Field> Required(std::string_view key, std::string_view expected) const {
    if (!Has(key)) return Error(StrCat("missing field \"", key, "\" (", expected, ")"));
    return Child(key);
  }

 private:
  const JsonWithLines& doc_;
  std::string_view source_;
  const json& v_;
  std::string pointer_;
  std::string path_;
};

absl::Status ReadMig(const Field& f, DiscoveredGpu* gpu) {
  core::GpuSpec* spec = &gpu->spec;
  TESSERA_RETURN_IF_ERROR(f.ExpectObject({"capable", "enabled", "instances"}));
  const core::MigModel* model = core::FindMigModel(spec->model);
  bool capable = model != nullptr;
  if (f.Has("capable")) {
    TESSERA_ASSIGN_OR_RETURN(capable, f.Child("capable").Bool());
    if (capable && !model) {
      return f.Child("capable").Error(StrCat("tessera has no MIG profiles for ", spec->model,
                                             " (it has: ", StrJoin(core::MigModelNames(), ", "),
                                             ")"));
    }
  }
  if (f.Has("enabled")) {
    TESSERA_ASSIGN_OR_RETURN(spec->mig_enabled, f.Child("enabled").Bool());
    if (spec->mig_enabled && !capable) {
      return f.Child("enabled").Error(StrCat(spec->model, " is not MIG-capable here"));
    }
  }
  if (!f.Has("instances")) return absl::OkStatus();
  Field instances = f.Child("instances");
  TESSERA_RETURN_IF_ERROR(instances.ExpectArray());
  if (instances.value().empty()) return absl::OkStatus();  // (a GPU without MIG profiles too)
  if (!spec->mig_enabled) {
    return instances.Error("instances are configured only when enabled is true");
  }
  if (instances.value().empty()) return absl::OkStatus();  // also for GPUs without a MIG table
  for (size_t k = 0; k < instances.value().size(); ++k) {
    Field inst = instances.Element(k);
    TESSERA_RETURN_IF_ERROR(inst.ExpectObject({"profile", "start", "uuid"}));
    TESSERA_ASSIGN_OR_RETURN(Field pf, inst.Required("profile", "a MIG profile such as 1g.10gb"));
    TESSERA_ASSIGN_OR_RETURN(std::string profile, pf.String());
    const int found = model->Find(profile);
    if (found < 0) {
      return pf.Error(StrCat("\"", profile, "\" is not a ", model->model, " MIG profile (",
                             StrJoin(model->ProfileNames(), ", "), ")"));
    }
    TESSERA_ASSIGN_OR_RETURN(Field sf, inst.Required("start", "the first memory slice, 0..7"));
    TESSERA_ASSIGN_OR_RETURN(int64_t start, sf.Int());
    if (start < 0 || start >= core::kMigSlots) return sf.Error("must be 0..7");
    spec->mig_layout.push_back(
        core::MigPlacement{static_cast<int8_t>(found), static_cast<int8_t>(start)});
    // The device's identity: as written, else the one the fake driver gives it.
    std::string uuid = FakeMigUuid(spec->uuid, profile, static_cast<int>(start));
    if (inst.Has("uuid")) {
      TESSERA_ASSIGN_OR_RETURN(uuid, inst.Child("uuid").String());
      if (!IsMigUuid(uuid)) {
        return inst.Child("uuid").Error(
            StrCat("\"", uuid, "\" is not a MIG device UUID (MIG- then 8-4-4-4-12 hex digits)"));
      }
    }
    gpu->mig_uuids.push_back(uuid);
  }
  absl::Status valid = core::ValidateMigInstances(*model, spec->mig_layout, "");
  if (!valid.ok()) {
    std::string_view message = FromAbsl(valid.message());
    while (!message.empty() && (message.front() == ':' || message.front() == ' ')) {
      message.remove_prefix(1);
    }
    return instances.Error(message);
  }
  return absl::OkStatus();
}

absl::Status ReadHealth(const Field& gpu, std::string_view source, DiscoveredGpu* out) {
  std::vector<int32_t> critical;
  if (gpu.Has("xid")) {
    Field xids = gpu.Child("xid");
    TESSERA_RETURN_IF_ERROR(xids.ExpectArray());
    for (size_t k = 0; k < xids.value().size(); ++k) {
      TESSERA_ASSIGN_OR_RETURN(int64_t xid, xids.Element(k).Int());
      if (xid <= 0 || xid > 100'000) return xids.Element(k).Error("is not an XID number");
      if (IsCriticalXid(static_cast<int32_t>(xid))) critical.push_back(static_cast<int32_t>(xid));
    }
  }
  bool healthy = critical.empty();
  if (gpu.Has("healthy")) {
    TESSERA_ASSIGN_OR_RETURN(healthy, gpu.Child("healthy").Bool());
    if (healthy && !critical.empty()) {
      return gpu.Child("healthy").Error(
          StrCat("is true, but ", XidText(critical.front()), " marks a GPU unhealthy (xid)"));
    }
  }
  std::vector<GpuCondition>& conditions = out->conditions;
  if (!healthy) {
    std::vector<std::string> texts;
    FaultEffect effect = critical.empty() ? FaultEffect::kFail : FaultEffect::kDrain;
    for (int32_t x : critical) {
      texts.push_back(XidText(x));
      effect = std::max(effect, ClassifyXid(x).effect);
    }
    GpuCondition c = Condition(
        HealthCondition::kMarkedUnhealthy,
        texts.empty() ? StrCat("marked unhealthy in ", source) : StrJoin(texts, "; "), critical);
    c.effect = effect;
    conditions.push_back(std::move(c));
  }
  // What NVML would report of the GPU now (xid.h HealthCondition).
  if (gpu.Has("lost")) {
    TESSERA_ASSIGN_OR_RETURN(bool lost, gpu.Child("lost").Bool());
    if (lost) {
      conditions.push_back(
          Condition(HealthCondition::kGpuLost, StrCat(XidText(79), " (", source, ": lost)"), {79}));
    }
  }
  if (gpu.Has("recovery_action")) {
    Field f = gpu.Child("recovery_action");
    TESSERA_ASSIGN_OR_RETURN(std::string action, f.String());
    static constexpr std::pair<std::string_view, uint32_t> kActions[] = {
        {"none", 0}, {"reset", 1}, {"reboot", 2}, {"drain-p2p", 3}, {"drain-and-reset", 4}};
    bool known = false;
    for (const auto& [name, value] : kActions) {
      if (name != action) continue;
      known = true;
      HealthCondition c;
      if (RecoveryActionCondition(value, &c)) {
        conditions.push_back(
            Condition(c, StrCat(ClassifyCondition(c).text, " (recovery action ", action, ")")));
      }
    }
    if (!known) {
      return f.Error(StrCat("\"", action,
                            "\" is not a recovery action (none, reset, reboot, drain-p2p, "
                            "drain-and-reset)"));
    }
  }
  if (gpu.Has("row_remap")) {
    Field f = gpu.Child("row_remap");
    TESSERA_RETURN_IF_ERROR(f.ExpectObject({"pending", "failure"}));
    bool pending = false, failure = false;
    if (f.Has("pending")) {
      TESSERA_ASSIGN_OR_RETURN(pending, f.Child("pending").Bool());
    }
    if (f.Has("failure")) {
      TESSERA_ASSIGN_OR_RETURN(failure, f.Child("failure").Bool());
    }
    if (pending) conditions.push_back(Condition(HealthCondition::kRowRemapPending, ""));
    if (failure) conditions.push_back(Condition(HealthCondition::kRowRemapFailure, ""));
  }
  if (gpu.Has("retired_pages_pending")) {
    TESSERA_ASSIGN_OR_RETURN(bool pending, gpu.Child("retired_pages_pending").Bool());
    if (pending) conditions.push_back(Condition(HealthCondition::kRetiredPagesPending, ""));
  }
  out->health = HealthFromConditions(conditions);
  out->fault = out->health.healthy ? FaultEffect::kNone : StrongestEffect(conditions);
  return absl::OkStatus();
}

absl::StatusOr<DiscoveredGpu> ReadGpu(const Field& g, size_t i, std::string_view source) {
  TESSERA_RETURN_IF_ERROR(
      g.ExpectObject({"index", "minor", "uuid", "model", "name", "memory_mib", "sm_count",
                      "pci_bus_id", "numa_node", "cpu_affinity", "mig", "healthy", "xid", "lost",
                      "recovery_action", "row_remap", "retired_pages_pending"}));
  DiscoveredGpu gpu;
  core::GpuSpec& spec = gpu.spec;
  TESSERA_ASSIGN_OR_RETURN(Field fi, g.Required("index", "its position in the list"));
  TESSERA_ASSIGN_OR_RETURN(int64_t index, fi.Int());
  if (index != static_cast<int64_t>(i)) {
    return fi.Error(StrCat("is ", index, ", expected ", i, " (GPUs are listed in index order)"));
  }
  spec.index = static_cast<int32_t>(index);
  gpu.minor = spec.index;
  if (g.Has("minor")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t minor, g.Child("minor").Int());
    if (minor < 0 || minor > 254) {
      return g.Child("minor").Error("must be 0..254 (/dev/nvidia255 is nvidiactl)");
    }
    gpu.minor = static_cast<int32_t>(minor);
  }
  TESSERA_ASSIGN_OR_RETURN(Field fu, g.Required("uuid", "GPU-<8-4-4-4-12 hex digits>"));
  TESSERA_ASSIGN_OR_RETURN(spec.uuid, fu.String());
  if (!IsGpuUuid(spec.uuid)) {
    return fu.Error(StrCat("\"", spec.uuid,
                           "\" is not a GPU UUID (GPU- then 8-4-4-4-12 hex digits, as "
                           "nvidia-smi -L prints)"));
  }
  TESSERA_ASSIGN_OR_RETURN(Field fm, g.Required("model", "tessera's model name, e.g. H100-80GB"));
  TESSERA_ASSIGN_OR_RETURN(spec.model, fm.String());
  if (spec.model.empty() || LabelSafe(spec.model) != spec.model) {
    return fm.Error(StrCat("\"", spec.model,
                           "\" must be a label value: letters, digits, '.', '_', '-', starting "
                           "and ending with a letter or digit, at most 63"));
  }
  if (g.Has("name")) {
    TESSERA_ASSIGN_OR_RETURN(gpu.product_name, g.Child("name").String());
  }
  TESSERA_ASSIGN_OR_RETURN(Field fmem, g.Required("memory_mib", "device memory in MiB"));
  TESSERA_ASSIGN_OR_RETURN(spec.memory_mib, fmem.Int());
  if (spec.memory_mib <= 0) return fmem.Error("must be positive");
  if (g.Has("sm_count")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t sm, g.Child("sm_count").Int());
    if (sm < 0 || sm > 100'000) return g.Child("sm_count").Error("must be 0..100000");
    spec.sm_count = static_cast<int32_t>(sm);
  }
  if (g.Has("pci_bus_id")) {
    TESSERA_ASSIGN_OR_RETURN(std::string bus, g.Child("pci_bus_id").String());
    spec.pci_bus_id = NormalizePciBusId(bus);
    if (spec.pci_bus_id.empty()) {
      return g.Child("pci_bus_id")
          .Error(StrCat("\"", bus, "\" is not a PCI bus id (domain:bus:device.function, e.g. ",
                        "00000000:18:00.0)"));
    }
  }
  if (g.Has("numa_node")) {
    TESSERA_ASSIGN_OR_RETURN(int64_t numa, g.Child("numa_node").Int());
    if (numa < -1 || numa > 1023) return g.Child("numa_node").Error("must be -1..1023");
    spec.numa_node = static_cast<int32_t>(numa);
  }
  if (g.Has("cpu_affinity")) {
    TESSERA_ASSIGN_OR_RETURN(spec.cpu_affinity, g.Child("cpu_affinity").String());
    if (!IsCpuList(spec.cpu_affinity)) {
      return g.Child("cpu_affinity")
          .Error(StrCat("\"", spec.cpu_affinity, "\" is not a CPU list such as 0-55,112-167"));
    }
  }
  if (g.Has("mig")) TESSERA_RETURN_IF_ERROR(ReadMig(g.Child("mig"), &gpu));
  TESSERA_RETURN_IF_ERROR(ReadHealth(g, source, &gpu));
  return gpu;
}

// A link matrix field (`links`, `pcie_links`): n x n names as nvidia-smi topo -m prints them,
// symmetric, X on the diagonal.
absl::StatusOr<core::LinkMatrix> ReadMatrix(const Field& links, int n) {
  core::LinkMatrix out(n);
  TESSERA_RETURN_IF_ERROR(links.ExpectArray());
  if (links.value().size() != static_cast<size_t>(n)) {
    return links.Error(StrCat("has ", links.value().size(), " rows for ", n, " GPUs"));
  }
  std::vector<std::vector<core::Link>> rows(n);
  for (int i = 0; i < n; ++i) {
    Field row = links.Element(i);
    TESSERA_RETURN_IF_ERROR(row.ExpectArray());
    if (row.value().size() != static_cast<size_t>(n)) {
      return row.Error(StrCat("has ", row.value().size(), " cells for ", n, " GPUs"));
    }
    for (int k = 0; k < n; ++k) {
      Field cell = row.Element(k);
      TESSERA_ASSIGN_OR_RETURN(std::string name, cell.String());
      absl::StatusOr<core::Link> link = core::ParseLinkName(name);
      if (!link.ok()) return cell.Error(FromAbsl(link.status().message()));
      if ((i == k) != (link->kind == core::LinkKind::kSelf)) {
        return cell.Error(i == k ? "expected X on the diagonal" : "X is only for the diagonal");
      }
      rows[i].push_back(*link);
    }
  }
  for (int i = 0; i < n; ++i) {
    for (int k = i + 1; k < n; ++k) {
      if (!(rows[i][k] == rows[k][i])) {
        return links.Element(k).Element(i).Error(
            StrCat("is ", core::LinkName(rows[k][i]), " but ", links.path(), "[", i, "][", k,
                   "] is ", core::LinkName(rows[i][k]), " (the matrix must be symmetric)"));
      }
      out.Set(i, k, rows[i][k]);
    }
  }
  return out;
}

absl::Status ReadLinks(const Field& root, NodeGpus* out) {
  const int n = static_cast<int>(out->gpus.size());
  out->links = core::LinkMatrix(n);
  if (!root.Has("links")) {
    if (n == 1) return absl::OkStatus();
    return root.Error(StrCat("missing field \"links\" (the ", n, " x ", n,
                             " link matrix, as nvidia-smi topo -m prints it)"));
  }
  TESSERA_ASSIGN_OR_RETURN(out->links, ReadMatrix(root.Child("links"), n));
  // NVLinks that are down: the pair is joined by what lies under its NVLinks (pcie_links, SYS
  // when not given), as NVML's discovery finds it when the links are inactive.
  if (!root.Has("nvlink_down")) {
    if (root.Has("pcie_links"))
      TESSERA_RETURN_IF_ERROR(ReadMatrix(root.Child("pcie_links"), n).status());
    return absl::OkStatus();
  }
  core::LinkMatrix under(n);
  if (root.Has("pcie_links")) {
    TESSERA_ASSIGN_OR_RETURN(under, ReadMatrix(root.Child("pcie_links"), n));
    for (int i = 0; i < n; ++i) {
      for (int k = i + 1; k < n; ++k) {
        if (under.at(i, k).kind == core::LinkKind::kNvLink) {
          return root.Child("pcie_links")
              .Element(i)
              .Element(k)
              .Error("is an NVLink; pcie_links is the PCIe relation under the NVLinks");
        }
      }
    }
  }
  Field down = root.Child("nvlink_down");
  TESSERA_RETURN_IF_ERROR(down.ExpectArray());
  for (size_t p = 0; p < down.value().size(); ++p) {
    Field pair = down.Element(p);
    TESSERA_RETURN_IF_ERROR(pair.ExpectArray());
    if (pair.value().size() != 2) return pair.Error("expected a pair of GPU indices [i, k]");
    TESSERA_ASSIGN_OR_RETURN(int64_t i, pair.Element(0).Int());
    TESSERA_ASSIGN_OR_RETURN(int64_t k, pair.Element(1).Int());
    if (i < 0 || k < 0 || i >= n || k >= n || i == k) {
      return pair.Error(StrCat("must name two different GPUs of 0..", n - 1));
    }
    if (out->links.at(static_cast<int>(i), static_cast<int>(k)).kind != core::LinkKind::kNvLink) {
      return pair.Error(StrCat("GPUs ", i, " and ", k, " are not joined by NVLink (links)"));
    }
    out->links.Set(static_cast<int>(i), static_cast<int>(k),
                   under.at(static_cast<int>(i), static_cast<int>(k)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string FakeXidEventsPath(std::string_view path) { return StrCat(path, ".events"); }
std::string FakeGpusLockPath(std::string_view path) { return StrCat(path, ".lock"); }

absl::StatusOr<HealthEvent> ParseFakeXidEvent(std::string_view line, const NodeGpus& gpus) {
  json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(StrCat("\"", line, "\" is not a JSON object"));
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() != "gpu" && it.key() != "xid" && it.key() != "mig") {
      return absl::InvalidArgumentError(
          StrCat("\"", line, "\": unknown field \"", it.key(), "\" (known: gpu, xid, mig)"));
    }
  }
  const json& gpu = j.contains("gpu") ? j["gpu"] : json();
  const json& xid = j.contains("xid") ? j["xid"] : json();
  if (!gpu.is_number_integer() || gpu.get<int64_t>() < 0 ||
      gpu.get<int64_t>() >= static_cast<int64_t>(gpus.gpus.size())) {
    return absl::InvalidArgumentError(
        StrCat("\"", line, "\": gpu must be a GPU index of 0..", gpus.gpus.size() - 1));
  }
  if (!xid.is_number_integer() || xid.get<int64_t>() <= 0 || xid.get<int64_t>() > 100'000) {
    return absl::InvalidArgumentError(StrCat("\"", line, "\": xid must be an XID number"));
  }
  std::string mig;
  if (j.contains("mig")) {
    if (!j["mig"].is_string()) {
      return absl::InvalidArgumentError(StrCat("\"", line, "\": mig must be \"profile@start\""));
    }
    mig = j["mig"].get<std::string>();
  }
  const DiscoveredGpu& g = gpus.gpus[gpu.get<size_t>()];
  return XidEvent(g.spec.index, g.spec.uuid, xid.get<int32_t>(), std::move(mig));
}

bool IsGpuUuid(std::string_view uuid) {
  return uuid.substr(0, 4) == "GPU-" && IsUuidBody(uuid.substr(4));
}

std::string FakeMigUuid(std::string_view gpu_uuid, std::string_view profile, int start) {
  const std::string key = StrCat(gpu_uuid, "/", profile, "@", start);
  const uint64_t a = Fnv1a(key);
  const uint64_t b = Fnv1a("#", a);
  char buf[33];
  std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(a),
                static_cast<unsigned long long>(b));
  const std::string hex(buf, 32);
  return StrCat("MIG-", hex.substr(0, 8), "-", hex.substr(8, 4), "-", hex.substr(12, 4), "-",
                hex.substr(16, 4), "-", hex.substr(20, 12));
}

bool IsMigUuid(std::string_view uuid) {
  return uuid.substr(0, 4) == "MIG-" && IsUuidBody(uuid.substr(4));
}

bool IsCpuList(std::string_view list) { return ParseCpuRanges(list, 1'000'000).has_value(); }

std::string NormalizePciBusId(std::string_view id) {
  // domain:bus:device.function with a 4- or 8-digit domain, 2-digit bus, 2-digit device, 1 digit
  // function.
  const size_t colon = id.find(':');
  if (colon == std::string_view::npos || (colon != 4 && colon != 8)) return "";
  const std::string_view domain = id.substr(0, colon);
  const std::string_view rest = id.substr(colon + 1);
  if (rest.size() != 7 || rest[2] != ':' || rest[5] != '.') return "";
  for (size_t i : {0, 1, 3, 4, 6}) {
    if (!IsHex(rest[i])) return "";
  }
  for (char c : domain) {
    if (!IsHex(c)) return "";
  }
  std::string out(8 - domain.size(), '0');
  out += domain;
  out += ':';
  out += rest;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

absl::StatusOr<NodeGpus> ParseFakeGpusFile(std::string_view text, std::string_view source) {
  TESSERA_ASSIGN_OR_RETURN(JsonWithLines doc, ParseJsonWithLines(text, source));
  Field root(doc, source, doc.value, "", "");
  TESSERA_RETURN_IF_ERROR(root.ExpectObject({"version", "driver_version", "cuda_version", "gpus",
                                             "links", "fabric", "nvlink_down", "pcie_links"}));
  TESSERA_ASSIGN_OR_RETURN(Field fv, root.Required("version", "1"));
  TESSERA_ASSIGN_OR_RETURN(int64_t version, fv.Int());
  if (version != 1) {
    return fv.Error(
        StrCat("version ", version, " is not supported (this tessera reads version 1)"));
  }
  NodeGpus out;
  if (root.Has("driver_version")) {
    TESSERA_ASSIGN_OR_RETURN(out.driver_version, root.Child("driver_version").String());
  }
  if (root.Has("cuda_version")) {
    TESSERA_ASSIGN_OR_RETURN(out.cuda_version, root.Child("cuda_version").String());
  }
  TESSERA_ASSIGN_OR_RETURN(Field gpus, root.Required("gpus", "the list of GPUs"));
  TESSERA_RETURN_IF_ERROR(gpus.ExpectArray());
  if (gpus.value().empty()) {
    return gpus.Error("is empty: a node without GPUs needs no tessera agent");
  }
  if (gpus.value().size() > static_cast<size_t>(core::kMaxGpusPerNode)) {
    return gpus.Error(StrCat("lists ", gpus.value().size(), " GPUs; at most ",
                             core::kMaxGpusPerNode, " per node"));
  }
  std::set<std::string> uuids, buses;
  std::set<int32_t> minors;
  for (size_t i = 0; i < gpus.value().size(); ++i) {
    Field g = gpus.Element(i);
    TESSERA_ASSIGN_OR_RETURN(DiscoveredGpu gpu, ReadGpu(g, i, source));
    if (!uuids.insert(gpu.spec.uuid).second) {
      return g.Child("uuid").Error(StrCat("\"", gpu.spec.uuid, "\" is already another GPU's"));
    }
    if (!gpu.spec.pci_bus_id.empty() && !buses.insert(gpu.spec.pci_bus_id).second) {
      return g.Child("pci_bus_id")
          .Error(StrCat("\"", gpu.spec.pci_bus_id, "\" is already another GPU's"));
    }
    if (!minors.insert(gpu.minor).second) {
      return (g.Has("minor") ? g.Child("minor") : g.Child("index"))
          .Error(StrCat("/dev/nvidia", gpu.minor, " is already another GPU's (set minor)"));
    }
    out.gpus.push_back(std::move(gpu));
  }
  TESSERA_RETURN_IF_ERROR(ReadLinks(root, &out));
  if (root.Has("fabric")) {
    Field f = root.Child("fabric");
    TESSERA_RETURN_IF_ERROR(f.ExpectObject({"cluster_uuid", "clique_id"}));
    FabricInfo fabric;
    TESSERA_ASSIGN_OR_RETURN(Field fc, f.Required("cluster_uuid", "the fabric's cluster UUID"));
    TESSERA_ASSIGN_OR_RETURN(fabric.cluster_uuid, fc.String());
    if (!IsUuidBody(fabric.cluster_uuid)) {
      return fc.Error(StrCat("\"", fabric.cluster_uuid,
                             "\" is not a UUID (8-4-4-4-12 hex digits, as nvidia-smi -q prints "
                             "ClusterUUID)"));
    }
    TESSERA_ASSIGN_OR_RETURN(Field fq, f.Required("clique_id", "the NVLink clique number"));
    TESSERA_ASSIGN_OR_RETURN(int64_t clique, fq.Int());
    if (clique < 0 || clique > UINT32_MAX) return fq.Error("must be 0..4294967295");
    fabric.clique_id = static_cast<uint32_t>(clique);
    for (DiscoveredGpu& g : out.gpus) {
      g.has_fabric = true;
      g.fabric = fabric;
    }
  }
  return out;
}

}  // namespace tessera::agent
