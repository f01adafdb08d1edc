// The subset of CEL that DRA device selectors use, evaluated against one device.
//
// What real DeviceClasses and claims write (NVIDIA's, Intel's and the Kubernetes examples):
//   device.driver == "gpu.tessera.dev"
//   device.attributes["gpu.tessera.dev"].model == "H100-80GB" && device.allowMultipleAllocations
//   device.capacity["gpu.tessera.dev"].memory.compareTo(quantity("40Gi")) >= 0
//   device.attributes["gpu.tessera.dev"].index in [0, 1] || !has(device.attributes["x"].y)
//   cel.bind(g, device.attributes["gpu.tessera.dev"], g.numaNode == 0 && g.migCapable)
//   device.attributes["gpu.tessera.dev"].driverVersion.isGreaterThan(semver("550.0.0"))
//
// Supported: literals (int, string with ' or ", true/false/null, lists), ==, !=, <, <=, >, >=,
// &&, ||, !, in, ?:, + - * / % on integers, string +; field and index access on `device`, its
// maps and bound variables; has(); cel.bind(); size(); string startsWith, endsWith, contains,
// lowerAscii, upperAscii; quantity(), isQuantity() and a quantity's compareTo, isGreaterThan,
// isLessThan, isInteger, asInteger, add, sub, sign; semver(), isSemver() and a version's
// compareTo, isGreaterThan, isLessThan, major, minor, patch; int() and string() conversions.
// Anything else (regular expressions, list macros such as exists/all/map/filter, doubles,
// unsigned and bytes literals, map literals, other libraries) is refused when the expression is
// compiled, with a message that names the construct and its column: an allocator must never
// guess what a selector means.
//
// Semantics are CEL's, as kube-scheduler evaluates them (k8s.io/dynamic-resource-allocation/cel):
// a missing domain in device.attributes / device.capacity is an empty map; a missing key in it is
// a runtime error ("no such key"); && and || absorb an error when the other side decides the
// result (false && error == false); == between different types is false; the result must be a
// bool. A runtime error on a device fails the allocation attempt with that error, as in
// kube-scheduler, rather than being read as "no match".
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "k8s/dra/objects.h"

namespace tessera::k8s::dra {

// What a selector sees of a device.
struct CelDevice {
  std::string_view driver;
  const Device* device = nullptr;
};

class CelProgram {
 public:
  // Compiles `expression`. Unimplemented: a construct outside the subset (the message names it
  // and where it is); InvalidArgument: a syntax error.
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<const CelProgram>> Compile(
      std::string_view expression);

  // True or false for this device; an error (a runtime error, or a result that is not a bool)
  // says what went wrong.
  [[nodiscard]] absl::StatusOr<bool> Matches(const CelDevice& device) const;

  const std::string& expression() const { return expression_; }

  struct Node;  // the syntax tree (cel.cc)
  ~CelProgram();

 private:
  CelProgram() = default;
  std::string expression_;
  std::unique_ptr<Node> root_;
};

}  // namespace tessera::k8s::dra
