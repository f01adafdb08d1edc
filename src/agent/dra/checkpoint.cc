#include "agent/dra/checkpoint.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "agent/dra/cdi.h"
#include "common/status.h"
#include "common/strings.h"

namespace tessera::agent::dra {
namespace {

using nlohmann::json;

// Reads a field of a machine-written record: missing fields take the default, a wrong type is an
// error naming it.
template <typename T>
absl::Status Read(const json& j, const char* key, const std::string& where, T* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return absl::InvalidArgumentError(StrCat(where, ".", key, ": wrong type (", it->dump(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string PreparedClaim::Describe() const { return StrCat(ns, "/", name, " (", uid, ")"); }

json PreparedClaimToJson(const PreparedClaim& c) {
  json devices = json::array();
  for (const PreparedDevice& d : c.devices) {
    json dev = {{"request", d.request},       {"pool", d.pool},
                {"device", d.device},         {"gpu_uuid", d.gpu_uuid},
                {"gpu_index", d.gpu_index},   {"exclusive", d.exclusive},
                {"memory_mib", d.memory_mib}, {"compute_percent", d.compute_percent},
                {"cdi_ids", d.cdi_ids}};
    if (!d.share_id.empty()) dev["share_id"] = d.share_id;
    if (d.mig) {
      dev["mig"] = true;
      dev["mig_profile"] = d.mig_profile;
      dev["mig_start"] = d.mig_start;
      if (!d.mig_uuid.empty()) dev["mig_uuid"] = d.mig_uuid;
      if (d.mig_created) dev["mig_created"] = true;
    }
    devices.push_back(std::move(dev));
  }
  json pods = json::array();
  for (const ClaimConsumer& p : c.pods) pods.push_back({{"name", p.name}, {"uid", p.uid}});
  json out = {{"uid", c.uid},       {"namespace", c.ns}, {"name", c.name},
              {"devices", devices}, {"pods", pods},      {"cdi_file", c.cdi_file}};
  if (!c.share_dir.empty()) out["share_dir"] = c.share_dir;
  if (c.deletion_reported) out["deletion_reported"] = true;
  return out;
}

absl::StatusOr<PreparedClaim> PreparedClaimFromJson(const json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("a prepared claim is a JSON object");
  PreparedClaim c;
  const auto uid = j.find("uid");
  const std::string where =
      StrCat("claim ", uid != j.end() && uid->is_string() ? uid->get<std::string>() : "?");
  TESSERA_RETURN_IF_ERROR(Read(j, "uid", where, &c.uid));
  TESSERA_RETURN_IF_ERROR(Read(j, "namespace", where, &c.ns));
  TESSERA_RETURN_IF_ERROR(Read(j, "name", where, &c.name));
  TESSERA_RETURN_IF_ERROR(Read(j, "cdi_file", where, &c.cdi_file));
  TESSERA_RETURN_IF_ERROR(Read(j, "share_dir", where, &c.share_dir));
  TESSERA_RETURN_IF_ERROR(Read(j, "deletion_reported", where, &c.deletion_reported));
  if (c.uid.empty()) return absl::InvalidArgumentError(StrCat(where, ": no uid"));
  const json devices = j.value("devices", json::array());
  if (!devices.is_array()) return absl::InvalidArgumentError(StrCat(where, ".devices: not a list"));
  for (size_t i = 0; i < devices.size(); ++i) {
    const std::string w = StrCat(where, ".devices[", i, "]");
    const json& dj = devices[i];
    if (!dj.is_object()) return absl::InvalidArgumentError(StrCat(w, ": not an object"));
    PreparedDevice d;
    TESSERA_RETURN_IF_ERROR(Read(dj, "request", w, &d.request));
    TESSERA_RETURN_IF_ERROR(Read(dj, "pool", w, &d.pool));
    TESSERA_RETURN_IF_ERROR(Read(dj, "device", w, &d.device));
    TESSERA_RETURN_IF_ERROR(Read(dj, "share_id", w, &d.share_id));
    TESSERA_RETURN_IF_ERROR(Read(dj, "gpu_uuid", w, &d.gpu_uuid));
    TESSERA_RETURN_IF_ERROR(Read(dj, "gpu_index", w, &d.gpu_index));
    TESSERA_RETURN_IF_ERROR(Read(dj, "mig", w, &d.mig));
    TESSERA_RETURN_IF_ERROR(Read(dj, "mig_profile", w, &d.mig_profile));
    TESSERA_RETURN_IF_ERROR(Read(dj, "mig_start", w, &d.mig_start));
    TESSERA_RETURN_IF_ERROR(Read(dj, "mig_uuid", w, &d.mig_uuid));
    TESSERA_RETURN_IF_ERROR(Read(dj, "mig_created", w, &d.mig_created));
    TESSERA_RETURN_IF_ERROR(Read(dj, "exclusive", w, &d.exclusive));
    TESSERA_RETURN_IF_ERROR(Read(dj, "memory_mib", w, &d.memory_mib));
    TESSERA_RETURN_IF_ERROR(Read(dj, "compute_percent", w, &d.compute_percent));
    TESSERA_RETURN_IF_ERROR(Read(dj, "cdi_ids", w, &d.cdi_ids));
    if (!d.mig) {  // an instance's fields mean nothing without "mig" (and are never written then)
      d.mig_profile.clear();
      d.mig_start = -1;
      d.mig_uuid.clear();
      d.mig_created = false;
    }
    c.devices.push_back(std::move(d));
  }
  const json pods = j.value("pods", json::array());
  for (size_t i = 0; i < pods.size() && pods.is_array(); ++i) {
    ClaimConsumer p;
    TESSERA_RETURN_IF_ERROR(Read(pods[i], "name", StrCat(where, ".pods[", i, "]"), &p.name));
    TESSERA_RETURN_IF_ERROR(Read(pods[i], "uid", StrCat(where, ".pods[", i, "]"), &p.uid));
    c.pods.push_back(std::move(p));
  }
  return c;
}

absl::StatusOr<CheckpointState> Checkpoint::Load(const std::string& node) const {
  CheckpointState state;
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    if (errno == ENOENT) return state;
    return absl::UnavailableError(StrCat(path_, ": ", std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError(
        StrCat(path_, ": not a JSON object (", text.str().size(), " bytes): the file is damaged"));
  }
  // Whatever the file holds (a crash mid-write, another version): a type the reader does not
  // expect is an error naming the field, never an exception.
  const auto version = j.find("version");
  if (version == j.end() || !version->is_number_integer() ||
      version->get<int64_t>() != kCheckpointVersion) {
    return absl::DataLossError(StrCat(path_, ": version ",
                                      version == j.end() ? "(none)" : version->dump(), " is not ",
                                      kCheckpointVersion, " (written by another tessera?)"));
  }
  std::string written_for;
  if (absl::Status read = Read(j, "node", path_, &written_for); !read.ok()) {
    return absl::DataLossError(read.message());
  }
  if (written_for != node) {
    return absl::DataLossError(
        StrCat(path_, ": written for node \"", written_for, "\", this is node \"", node, "\""));
  }
  const json list = j.value("claims", json::array());
  if (!list.is_array()) return absl::DataLossError(StrCat(path_, ": claims is not a list"));
  for (const json& c : list) {
    absl::StatusOr<PreparedClaim> claim = PreparedClaimFromJson(c);
    if (!claim.ok()) return absl::DataLossError(StrCat(path_, ": ", claim.status().message()));
    state.claims[claim->uid] = std::move(*claim);
  }
  const json owned = j.value("mig_instances", json::array());
  if (!owned.is_array()) return absl::DataLossError(StrCat(path_, ": mig_instances is not a list"));
  for (size_t i = 0; i < owned.size(); ++i) {
    const std::string w = StrCat(path_, ": mig_instances[", i, "]");
    OwnedMigInstance m;
    absl::Status read = Read(owned[i], "gpu", w, &m.gpu_uuid);
    if (read.ok()) read = Read(owned[i], "profile", w, &m.profile);
    if (read.ok()) read = Read(owned[i], "start", w, &m.start);
    if (!read.ok()) return absl::DataLossError(read.message());
    state.mig_instances.push_back(std::move(m));
  }
  absl::Status modes = Read(j, "mig_mode_gpus", path_, &state.mig_mode_gpus);
  if (!modes.ok()) return absl::DataLossError(modes.message());
  return state;
}

absl::Status Checkpoint::Save(const std::string& node, const CheckpointState& state) const {
  json list = json::array();
  for (const auto& [uid, c] : state.claims) list.push_back(PreparedClaimToJson(c));
  json owned = json::array();
  for (const OwnedMigInstance& m : state.mig_instances) {
    owned.push_back({{"gpu", m.gpu_uuid}, {"profile", m.profile}, {"start", m.start}});
  }
  json doc = {{"version", kCheckpointVersion},
              {"node", node},
              {"claims", list},
              {"mig_instances", owned},
              {"mig_mode_gpus", state.mig_mode_gpus}};
  return WriteFileAtomic(path_, doc.dump(1) + "\n");
}

}  // namespace tessera::agent::dra
