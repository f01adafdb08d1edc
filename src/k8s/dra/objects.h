// Dynamic Resource Allocation objects (resource.k8s.io/v1, Kubernetes 1.37) as the allocator needs
// them, decoded once from their API objects (on the watch thread) into immutable values:
// ResourceSlices (the devices a driver publishes), DeviceClasses, ResourceClaims (what pods ask,
// and what was allocated), and a pod's references to its claims.
//
// Decoding never fails and never throws (STYLE.md "Conventions"): machine-written objects are read
// leniently (unknown fields ignored, as Kubernetes readers do), and what cannot be understood is
// kept with the field that is wrong (`error`), so that the scheduler can tell the pod's owner and
// carry on. Field names are those of k8s.io/api/resource/v1/types.go at v0.37.2.
//
// Quantities (capacities, capacity requests, consumed capacity) are kept as exact integers in
// milli-units ("80Gi" -> 85,899,345,920,000; "25" -> 25,000): enough for any device capacity up to
// about 9 PB, and what DRA's own arithmetic uses for fractional ranges.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "k8s/client/protobuf_value.h"
#include "k8s/taints/taints.h"
#include "nlohmann/json.hpp"
#include "records/dra_allocation.h"

namespace tessera::k8s::dra {

// resource.kubernetes.io/delete-protection: the finalizer an allocator adds before it writes an
// allocation, removed by the resourceclaim controller once the claim is deallocated.
inline constexpr std::string_view kClaimFinalizer = "resource.kubernetes.io/delete-protection";
inline constexpr std::string_view kResourceApi = "/apis/resource.k8s.io/v1";
// DRAExtendedResource: the claim a scheduler makes for a pod's extended resources served by a
// DeviceClass carries this annotation ("true") and the pod as its controlling owner; a class
// without spec.extendedResourceName serves `kImplicitExtendedPrefix<class name>`.
inline constexpr std::string_view kExtendedResourceClaimAnnotation =
    "resource.kubernetes.io/extended-resource-claim";
inline constexpr std::string_view kImplicitExtendedPrefix = "deviceclass.resource.kubernetes.io/";

// --- quantities --------------------------------------------------------------------------------

// Quantities in milli-units, exactly, as the DRA contract reads them (records/dra_allocation.h).
using records::dra::FormatMilli;
using records::dra::LocalCapacityName;
using records::dra::ParseMilli;

// --- devices -----------------------------------------------------------------------------------

// One attribute value: exactly one of int, bool, string, version (semver text). List-typed
// attributes (DRAListTypeAttributes, alpha) are kept as kList and never match anything.
struct AttributeValue {
  enum class Kind : uint8_t { kInt, kBool, kString, kVersion, kList };
  Kind kind = Kind::kString;
  int64_t i = 0;
  bool b = false;
  std::string s;  // string or version text
  bool operator==(const AttributeValue&) const = default;
  std::string DebugString() const;
};

// A capacity's request policy (DRAConsumableCapacity): what a request is rounded up to.
struct RequestPolicy {
  std::optional<int64_t> default_milli;
  std::vector<int64_t> valid_values;  // ascending
  std::optional<int64_t> min, max, step;
  bool has_range = false;
  bool operator==(const RequestPolicy&) const = default;
};

struct DeviceCapacity {
  int64_t value = 0;  // milli-units
  std::optional<RequestPolicy> policy;
  bool operator==(const DeviceCapacity&) const = default;
};

// A device's taint (effect NoSchedule, NoExecute or None) and a request's toleration: the same
// shapes, and the same matching, as a Node's (k8s/taints/taints.h).
using DeviceTaint = Taint;

// Attributes and capacities keyed by (domain, id): names without a domain are in the driver's.
using AttributeMap = std::map<std::string, std::map<std::string, AttributeValue>>;
using CapacityMap = std::map<std::string, std::map<std::string, DeviceCapacity>>;

struct Device {
  std::string name;
  AttributeMap attributes;
  CapacityMap capacity;
  // The capacities by the name the slice spells them ("memory", "gpu.tessera.dev/memory"): a
  // claim's capacity requests must spell them the same way (kube-scheduler matches them so).
  std::map<std::string, DeviceCapacity> capacity_by_name;
  bool allow_multiple_allocations = false;
  bool consumes_counters = false;   // a partitionable device (MIG)
  bool binding_conditions = false;  // needs DRADeviceBindingConditions: not allocated here
  bool per_device_node = false;     // its own nodeName / nodeSelector / allNodes
  std::vector<DeviceTaint> taints;

  // The attribute `name` as matchAttribute / distinctAttribute look it up: a fully qualified
  // name, whose domain may be the driver's (kube-scheduler's lookupAttribute).
  const AttributeValue* Attribute(std::string_view qualified, std::string_view driver) const;
};

struct SliceInfo {
  std::string name;
  std::string resource_version;
  std::string driver;
  std::string pool;
  int64_t generation = 0;
  int64_t slice_count = 1;
  std::string node_name;  // empty for slices of network-attached devices (not used here)
  std::vector<Device> devices;
  std::string error;  // non-empty: the slice is unusable, and why
};
std::shared_ptr<const SliceInfo> DecodeSlice(const nlohmann::json& slice);

// --- device classes ----------------------------------------------------------------------------

struct ClassInfo {
  std::string name;
  std::string resource_version;
  std::vector<std::string> selectors;  // CEL expressions, all must be true
  std::vector<nlohmann::json> config;  // spec.config[].opaque entries, as written
  std::string extended_resource_name;  // spec.extendedResourceName, when set
};
std::shared_ptr<const ClassInfo> DecodeClass(const nlohmann::json& device_class);

// --- claims ------------------------------------------------------------------------------------

using DeviceToleration = Toleration;

// One way to satisfy a request: spec.devices.requests[].exactly, or one of its firstAvailable
// entries.
struct ExactRequest {
  std::string name;  // the request's name ("gpu"), or "<request>/<subrequest>"
  std::string device_class;
  std::vector<std::string> selectors;
  std::string allocation_mode = "ExactCount";  // or "All"
  int64_t count = 1;
  bool admin_access = false;
  std::vector<DeviceToleration> tolerations;
  std::map<std::string, int64_t> capacity;  // capacity.requests, milli-units, by name as spelled
  bool operator==(const ExactRequest&) const = default;
};

struct ClaimRequest {
  std::string name;
  std::vector<ExactRequest> alternatives;  // exactly: one; firstAvailable: in order
  bool first_available = false;
  bool operator==(const ClaimRequest&) const = default;
};

struct ClaimConstraint {
  std::vector<std::string> requests;  // empty: every request
  std::string match_attribute;        // fully qualified, or empty
  std::string distinct_attribute;     // fully qualified, or empty
  bool operator==(const ClaimConstraint&) const = default;
};

// A claim's allocation and consumers, decoded by the DRA contract's one decoder
// (records/dra_allocation.h), which the DRA driver's kubelet plugin uses too.
using AllocatedDevice = records::dra::AllocatedDevice;
using Allocation = records::dra::Allocation;
using ConsumerRef = records::dra::ConsumerRef;

struct ClaimInfo {
  std::string ns, name, uid, key;  // key: "ns/name"
  std::string resource_version;
  std::vector<std::string> finalizers;
  bool deleting = false;
  // The pod that owns it (a claim made from a template: ownerReferences, controller, kind Pod).
  std::string owner_pod_uid;
  std::string owner_pod_name;
  bool extended_resource = false;  // annotated kExtendedResourceClaimAnnotation: "true"

  std::vector<ClaimRequest> requests;
  std::vector<ClaimConstraint> constraints;
  nlohmann::json config = nlohmann::json::array();  // spec.devices.config, as written

  std::optional<Allocation> allocation;
  std::vector<ConsumerRef> reserved_for;

  // "<field>: <what is wrong>" when the spec cannot be used (kept, reported, never guessed).
  std::string error;

  bool ReservedFor(std::string_view pod_uid) const;
  const ClaimRequest* FindRequest(std::string_view name) const;
  // The ExactRequest a result's request name ("gpu" or "gpu/small") refers to.
  const ExactRequest* FindExact(std::string_view result_request) const;
};
std::shared_ptr<const ClaimInfo> DecodeClaim(const nlohmann::json& claim);

// --- pods --------------------------------------------------------------------------------------

// One entry of a pod's spec.resourceClaims, with the claim's name resolved: resourceClaimName
// directly, or, for a template, the name the resourceclaim controller recorded in
// status.resourceClaimStatuses (empty until it has).
struct PodClaimRef {
  std::string name;           // the pod's name for it (spec.resourceClaims[].name)
  std::string claim;          // the ResourceClaim's name; empty: not created yet
  std::string template_name;  // resourceClaimTemplateName, when from a template
  // A template whose claim the controller decided not to create (status entry with no name).
  bool not_needed = false;
  bool operator==(const PodClaimRef&) const = default;
  bool from_template() const { return !template_name.empty(); }
};

// The pod's claims (spec.resourceClaims and status.resourceClaimStatuses); `error` names a field
// that cannot be read.
struct PodClaims {
  std::vector<PodClaimRef> refs;
  std::string error;
  bool operator==(const PodClaims&) const = default;
  bool empty() const { return refs.empty(); }
};
PodClaims DecodePodClaims(const nlohmann::json& pod);
PodClaims DecodePodClaims(const ProtobufValue& pod);  // a protobuf Pod read in place

// One container's request of an extended resource (a name with a domain other than
// kubernetes.io), as DRAExtendedResource maps it to a device request: containers are numbered
// over initContainers then containers, and the request by the name's place among the container's
// sorted resources.requests names ("container-<index>-request-<place>").
struct ExtendedRequest {
  int container_index = 0;
  std::string container;
  std::string resource;  // "tessera.dev/gpu"
  int request_index = 0;
  int64_t count = 0;
  bool short_lived = false;  // an init container that is not a sidecar
  bool operator==(const ExtendedRequest&) const = default;
};

// What a pod asks of extended resources, and the claim a scheduler made for them
// (status.extendedResourceClaimStatus.resourceClaimName; empty until recorded).
struct PodExtended {
  std::vector<ExtendedRequest> requests;
  std::string claim;
  std::string error;  // a quantity that is not a whole number
  bool operator==(const PodExtended&) const = default;
};
PodExtended DecodePodExtended(const nlohmann::json& pod);
PodExtended DecodePodExtended(const ProtobufValue& pod);

}  // namespace tessera::k8s::dra
