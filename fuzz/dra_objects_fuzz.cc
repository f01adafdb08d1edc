// DRA objects as the API server sends them (ResourceSlices, DeviceClasses, ResourceClaims and the
// claims and extended resources of Pods): decoding any JSON never throws or crashes; what cannot
// be read lands in the object's error, and an accepted class's selectors compile or fail cleanly.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "k8s/client/watch.h"
#include "k8s/dra/cel.h"
#include "k8s/dra/objects.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nlohmann::json> j = tessera::k8s::ParseApiJson(text, /*drop_managed_fields=*/true);
  if (!j.ok()) return 0;
  namespace dra = tessera::k8s::dra;
  auto slice = dra::DecodeSlice(*j);
  if (slice == nullptr) std::abort();
  auto device_class = dra::DecodeClass(*j);
  if (device_class == nullptr) std::abort();
  for (const std::string& selector : device_class->selectors) {
    auto program = dra::CelProgram::Compile(selector);
    if (program.ok() && !slice->devices.empty()) {
      (void)(*program)->Matches({slice->driver, &slice->devices.front()});
    }
  }
  auto claim = dra::DecodeClaim(*j);
  if (claim == nullptr) std::abort();
  (void)dra::DecodePodClaims(*j);
  (void)dra::DecodePodExtended(*j);
  return 0;
}
