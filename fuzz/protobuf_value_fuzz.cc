// A list page in Kubernetes' protobuf read in place (k8s/client/protobuf_value.h, issue 33
// "decode once"), on arbitrary bytes: it never crashes; it accepts exactly the pages that
// ProtobufListToJson (libprotobuf) accepts, with the same error; every item answers as the JSON
// ProtobufListToJson makes of it (unless two map keys read alike, where that JSON depends on
// protobuf's map order); and DecodePod / DecodeNode of an item read in place ask what they ask of
// that JSON. Seeds: fuzz/corpus/protobuf_wire (lists from a real API server).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "k8s/client/protobuf_value.h"
#include "k8s/client/protobuf_wire.h"
#include "k8s/scheduler/objects.h"

namespace {

void Check(const std::string& body) {
  absl::StatusOr<tessera::k8s::ProtobufList> list =
      tessera::k8s::ReadProtobufList(std::make_shared<const std::string>(body));
  absl::StatusOr<nlohmann::json> json = tessera::k8s::ProtobufListToJson(body);
  if (list.ok() != json.ok()) std::abort();
  if (!list.ok()) {
    if (list.status() != json.status()) std::abort();
    return;
  }
  const nlohmann::json& items = (*json)["items"];
  if (items.size() != list->items.size()) std::abort();
  const bool pods = list->kind == "PodList";
  for (size_t i = 0; i < items.size(); ++i) {
    const tessera::k8s::ProtobufValue& item = list->items[i];
    bool ambiguous = false;
    const nlohmann::json in_place = tessera::k8s::ProtobufValueToJson(item, &ambiguous);
    if (ambiguous) continue;
    if (in_place != items[i]) std::abort();
    if (pods) {
      auto a = tessera::k8s::DecodePod(item);
      auto b = tessera::k8s::DecodePod(items[i]);
      if (a->key != b->key || !a->SameAsk(*b) || a->node_name != b->node_name ||
          a->created_unix != b->created_unix || a->assignment_error != b->assignment_error ||
          a->labels != b->labels || a->unschedulable_message != b->unschedulable_message) {
        std::abort();
      }
    } else {
      auto a = tessera::k8s::DecodeNode(item);
      auto b = tessera::k8s::DecodeNode(items[i]);
      if (a->name != b->name || a->fingerprint != b->fingerprint ||
          a->inventory_error != b->inventory_error || a->capacity_error != b->capacity_error) {
        std::abort();
      }
    }
  }
  const nlohmann::json& meta = (*json)["metadata"];
  if (list->continue_token != meta.value("continue", "") ||
      list->resource_version != meta.value("resourceVersion", "")) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  Check(body);
  // With the envelope's magic in front, so that most mutations reach the list.
  Check(std::string("k8s\0", 4) + body);
  return 0;
}
