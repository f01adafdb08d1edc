// A ResourceClaim's status (resource.k8s.io/v1) as both sides of the DRA contract read it: which
// devices of which driver were allocated, in which pool, with what consumed capacity, bound to
// which node, with what opaque configuration, and whom the claim is reserved for. One decoder for
// tessera's scheduler (src/k8s/dra/objects.h, which keeps every claim it watches) and the DRA
// driver's kubelet plugin (src/agent/dra/driver.h, which prepares the claims of its node), so that
// the two can never read one allocation two ways.
//
// Decoding never throws and never fails (STYLE.md "Conventions"): machine-written objects are read
// leniently (unknown fields ignored, as Kubernetes readers do), and a value that cannot be
// understood is left out and named, with its field, in `error`; the caller decides what it means
// (the scheduler reports the claim, the driver refuses to prepare it). Field names are those of
// k8s.io/api/resource/v1/types.go at v0.37.2.
//
// Quantities (consumed capacity) are exact integers in milli-units: "4Gi" -> 4,294,967,296,000,
// "25" -> 25,000. Example: a result {"device": "gpu-0", "consumedCapacity": {"memory": "4Gi",
// "compute": "25"}} of driver gpu.tessera.dev is a share of GPU 0: Consumed(kCapMemory) is
// 4,294,967,296,000 milli-bytes (MemoryMib: 4096), Consumed(kCapCompute) 25,000 (25 percent).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::records::dra {

// A Kubernetes quantity in milli-units, exactly ("4Gi" -> 4294967296000). Errors name the text.
[[nodiscard]] absl::StatusOr<int64_t> ParseMilli(std::string_view text);
// A quantity as the API sends it ("80Gi", or a JSON integer) in milli-units; errors say the value
// and why (`"lots": ...`).
[[nodiscard]] absl::StatusOr<int64_t> ParseMilliValue(const nlohmann::json& v);
// Back to a quantity string the API server accepts, exactly: "80Gi", "10Mi", "25", "250m".
std::string FormatMilli(int64_t milli);
// Memory in milli-units of bytes as MiB, rounded up (a share never gets less than it took).
int64_t MemoryMib(int64_t milli);
// A capacity's (or attribute's) name without the driver's domain: "gpu.tessera.dev/memory" ->
// "memory" for driver gpu.tessera.dev; names in other domains stay as they are.
std::string LocalCapacityName(std::string_view name, std::string_view driver);

// One allocated device (status.allocation.devices.results[]).
struct AllocatedDevice {
  std::string request;  // "<request>" or "<request>/<subrequest>"
  std::string driver, pool, device;
  std::string share_id;
  std::map<std::string, int64_t> consumed;  // consumedCapacity, milli-units, by name as written
  // A consumed capacity that is not a quantity: `consumedCapacity.memory "lots": why`.
  std::string error;
  bool operator==(const AllocatedDevice&) const = default;

  // The consumed capacity `capacity` (its local name, kCapMemory) of driver `driver`, spelled
  // with or without the driver's domain; nullopt when the result has none.
  std::optional<int64_t> Consumed(std::string_view capacity, std::string_view driver) const;
};

// One entry of status.allocation.devices.config: opaque configuration for a driver.
struct AllocationConfig {
  std::string source;  // FromClass | FromClaim
  std::string driver;  // opaque.driver
  std::vector<std::string> requests;
  bool operator==(const AllocationConfig&) const = default;
};

struct Allocation {
  std::vector<AllocatedDevice> results;
  std::vector<AllocationConfig> config;
  // The node the allocation is bound to (nodeSelector: matchFields metadata.name In [node]);
  // empty when the selector is absent or selects otherwise.
  std::string node;
  nlohmann::json raw;  // status.allocation as the API server has it
};

// One entry of status.reservedFor.
struct ConsumerRef {
  std::string api_group, resource, name, uid;
  bool operator==(const ConsumerRef&) const = default;
};

struct ClaimStatus {
  std::optional<Allocation> allocation;  // nullopt: not allocated
  std::vector<ConsumerRef> reserved_for;
  // The first value that could not be read, with its path:
  // `status.allocation.devices.results[0].consumedCapacity.memory "lots": why`.
  std::string error;
};

// `status` is the claim's status object (absent or not an object: not allocated).
ClaimStatus DecodeClaimStatus(const nlohmann::json& status);
// One element of status.allocation.devices.results.
AllocatedDevice DecodeAllocatedDevice(const nlohmann::json& result);

}  // namespace tessera::records::dra
