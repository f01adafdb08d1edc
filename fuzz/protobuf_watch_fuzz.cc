// A watch stream in Kubernetes' protobuf as the API server sends it (length-delimited frames of
// WatchEvents, k8s/client/watch.h WatchDecoder with protobuf allowed; protobuf_wire.h), on
// arbitrary bytes: it never crashes, and the events it finds do not depend on how the network cut
// the stream. The seeds are streams captured from a real API server.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/client/protobuf_wire.h"
#include "k8s/client/watch.h"

namespace {

std::vector<std::string> Decode(std::string_view stream, size_t piece, bool* failed) {
  tessera::k8s::WatchDecoder decoder(/*drop_managed_fields=*/true, /*protobuf=*/true);
  std::vector<std::string> events;
  *failed = false;
  for (size_t at = 0; at < stream.size() && !*failed; at += piece) {
    absl::Status st = decoder.Feed(stream.substr(at, piece), [&](tessera::k8s::WatchEvent&& e) {
      events.push_back(std::string(tessera::k8s::WatchEventTypeName(e.type)) + e.object.dump());
      (void)tessera::k8s::IsTooOld(e);
      (void)tessera::k8s::KeyOf(e.object);
    });
    *failed = !st.ok();
  }
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view stream(reinterpret_cast<const char*>(data), size);
  const size_t piece = 1 + size % 13;  // how the network cut the stream
  bool failed_whole = false, failed_pieces = false;
  const std::vector<std::string> whole = Decode(stream, stream.size() + 1, &failed_whole);
  const std::vector<std::string> pieces = Decode(stream, piece, &failed_pieces);
  if (failed_whole != failed_pieces) std::abort();
  if (!failed_whole && whole != pieces) std::abort();
  // The same bytes as one frame's WatchEvent, so that mutations that break the lengths still
  // reach the event and object decoders.
  absl::StatusOr<nlohmann::json> event = tessera::k8s::ProtobufWatchEventToJson(stream);
  if (event.ok()) (void)event->dump();
  if (size >= 4) {
    absl::StatusOr<nlohmann::json> frame = tessera::k8s::ProtobufWatchEventToJson(stream.substr(4));
    if (frame.ok()) (void)frame->dump();
  }
  return 0;
}
