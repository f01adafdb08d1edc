// Kubernetes' protobuf wire as the API server's answers bring it (k8s/client/protobuf_wire.h): the
// envelope, the PodList and NodeList decoders, the single objects (Pod, Node, Status: a watch
// event's object), the continue-token peek and the error Status, on
// arbitrary bytes. They never crash, and a page whose continue token the peek reads and the
// decoder accepts says the same token in both (ReadSnapshot checks the same at run time).
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "k8s/client/protobuf_wire.h"

namespace {

void Check(std::string_view body) {
  absl::StatusOr<nlohmann::json> list = tessera::k8s::ProtobufListToJson(body);
  const std::optional<std::string> peeked = tessera::k8s::PeekProtobufContinue(body);
  (void)tessera::k8s::ProtobufStatusAsJson(body);
  if (list.ok()) (void)list->dump();
  absl::StatusOr<nlohmann::json> object = tessera::k8s::ProtobufObjectToJson(body);
  if (object.ok()) (void)object->dump();
  (void)peeked;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  Check(body);
  // With the envelope's magic in front, so that most mutations reach the protobuf parser.
  Check(std::string("k8s\0", 4) + std::string(body));
  return 0;
}
