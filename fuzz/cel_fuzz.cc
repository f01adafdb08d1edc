// DRA selectors are CEL that people write in DeviceClasses and ResourceClaims: compiling and
// evaluating any text never crashes, hangs or recurses without bound (cel.h: kMaxNesting), and
// an accepted program answers true, false or an error for a device, never anything else.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "k8s/dra/cel.h"

namespace {

const tessera::k8s::dra::Device& SampleDevice() {
  static const tessera::k8s::dra::Device* device = [] {
    using tessera::k8s::dra::AttributeValue;
    auto* d = new tessera::k8s::dra::Device();
    d->name = "gpu-0";
    auto& a = d->attributes["gpu.tessera.dev"];
    a["model"] = AttributeValue{AttributeValue::Kind::kString, 0, false, "H100-80GB"};
    a["index"] = AttributeValue{AttributeValue::Kind::kInt, 0, false, ""};
    a["migCapable"] = AttributeValue{AttributeValue::Kind::kBool, 0, true, ""};
    a["driverVersion"] = AttributeValue{AttributeValue::Kind::kVersion, 0, false, "550.54.15"};
    d->capacity["gpu.tessera.dev"]["memory"].value = 80LL * 1024 * 1024 * 1024 * 1000;
    d->allow_multiple_allocations = true;
    return d;
  }();
  return *device;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto program = tessera::k8s::dra::CelProgram::Compile(text);
  if (!program.ok()) return 0;
  if ((*program)->expression() != text) std::abort();
  auto match = (*program)->Matches({"gpu.tessera.dev", &SampleDevice()});
  (void)match;
  return 0;
}
