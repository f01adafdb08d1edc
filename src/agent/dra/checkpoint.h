// What the kubelet plugin has prepared on this node, and the checkpoint that keeps it across
// restarts of the agent.
//
// A claim is prepared when its CDI spec is written; the checkpoint records it in the same step
// (spec first, then the checkpoint; both atomic), so after a crash at any point:
//   - a claim in the checkpoint has its files (a missing CDI spec is written again from the
//     record on restart);
//   - files of a claim that is not in the checkpoint (a crash between the two writes, or a
//     claim unprepared while the checkpoint could not be written) are removed on restart, and
//     the kubelet, which never got an answer for it, prepares it again.
// Unprepare removes the checkpoint entry first, then the files (a crash between leaves files
// that the restart removes). The same record is kept in each claim's CDI spec (annotation
// gpu.tessera.dev/prepared-claim), so an unreadable checkpoint is rebuilt from the specs instead
// of forgetting what runs.
//
// MIG: the instances the driver created for claims are recorded before they are created
// ("mig_instances": a crash right after creating one leaves it recorded, and the restart
// destroys it if no claim holds it), and so are the GPUs it put into MIG mode ("mig_mode_gpus":
// turned off again when their last instance goes). Each MIG device of a claim also records its
// instance's identity (MIG-...) and whether the driver created it, so a rebuilt checkpoint knows.
//
// File: <kubelet dir>/plugins/gpu.tessera.dev/checkpoint.json, {"version": 1, "node": "...",
// "claims": [PreparedClaim...], "mig_instances": [{"gpu", "profile", "start"}...],
// "mig_mode_gpus": [GPU UUID...]}, written atomically and durably.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::agent::dra {

inline constexpr int kCheckpointVersion = 1;
inline constexpr char kPreparedClaimAnnotation[] = "gpu.tessera.dev/prepared-claim";

// One allocated device of a claim as prepared on this node.
struct PreparedDevice {
  std::string request;  // "gpu", or "gpu/sub" for a subrequest
  std::string pool;
  std::string device;    // "gpu-0"
  std::string share_id;  // set for allocations by consumable capacity
  std::string gpu_uuid;
  int32_t gpu_index = -1;
  bool mig = false;
  std::string mig_profile;
  int32_t mig_start = -1;
  std::string mig_uuid;         // the instance's identity ("MIG-..."), once it exists
  bool mig_created = false;     // the driver created the instance for this claim (and destroys it)
  bool exclusive = true;        // the whole device (no other claim may have it)
  int64_t memory_mib = 0;       // a share: its memory; exclusive: the device's
  int32_t compute_percent = 0;  // a share: its compute (0: time-sharing); exclusive: 100
  std::vector<std::string> cdi_ids;
  bool operator==(const PreparedDevice&) const = default;
};

// A pod the claim was reserved for when it was prepared.
struct ClaimConsumer {
  std::string name;
  std::string uid;
  bool operator==(const ClaimConsumer&) const = default;
};

struct PreparedClaim {
  std::string uid;
  std::string ns;
  std::string name;
  std::vector<PreparedDevice> devices;
  std::vector<ClaimConsumer> pods;
  std::string cdi_file;            // in the CDI directory
  std::string share_dir;           // the shim's segments (claims dir/<uid>), when it holds a share
  bool deletion_reported = false;  // the claim was found deleted while prepared; pods were told
  bool operator==(const PreparedClaim&) const = default;

  std::string Describe() const;  // "ns/name (uid)"
};

nlohmann::json PreparedClaimToJson(const PreparedClaim& c);
// Accepts fields it does not know (a newer agent may add some); errors name the field.
[[nodiscard]] absl::StatusOr<PreparedClaim> PreparedClaimFromJson(const nlohmann::json& j);

// A MIG instance the driver created (and destroys when no claim holds it any more).
struct OwnedMigInstance {
  std::string gpu_uuid;
  std::string profile;
  int32_t start = -1;
  bool operator==(const OwnedMigInstance&) const = default;
};

struct CheckpointState {
  std::map<std::string, PreparedClaim> claims;  // by claim UID
  std::vector<OwnedMigInstance> mig_instances;
  std::vector<std::string> mig_mode_gpus;  // GPU UUIDs the driver put into MIG mode
};

class Checkpoint {
 public:
  explicit Checkpoint(std::string path) : path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  // Missing file: no claims (a first start). Unreadable: an error naming the file and why.
  [[nodiscard]] absl::StatusOr<CheckpointState> Load(const std::string& node) const;
  [[nodiscard]] absl::Status Save(const std::string& node, const CheckpointState& state) const;

 private:
  std::string path_;
};

}  // namespace tessera::agent::dra
