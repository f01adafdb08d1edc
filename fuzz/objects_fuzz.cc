// Pods and Nodes as the API server sends them (JSON from lists and watch events), decoded into
// the scheduler's PodInfo / NodeInfo: never a crash or an exception, whatever the object holds;
// what is wrong lands in input_error / inventory_error; the placement filters run on the result.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "k8s/client/watch.h"
#include "k8s/scheduler/objects.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<nlohmann::json> j = tessera::k8s::ParseApiJson(text, /*drop_managed_fields=*/true);
  if (!j.ok()) return 0;
  auto pod = tessera::k8s::DecodePod(*j);
  auto node = tessera::k8s::DecodeNode(*j);
  if (!pod->SameAsk(*pod)) std::abort();
  std::string why;
  (void)tessera::k8s::NodeAllows(*node, *pod, &why);
  if (!node->inventory_error.empty() && node->spec.gpu_count() != 0) std::abort();
  return 0;
}
