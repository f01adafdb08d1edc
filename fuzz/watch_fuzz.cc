// The watch-stream decoder on arbitrary bytes from the API server: it never crashes, and the
// events it finds do not depend on how the stream was cut into pieces by the network.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "k8s/client/watch.h"

namespace {

std::vector<std::string> Decode(std::string_view stream, size_t piece, bool* failed) {
  tessera::k8s::WatchDecoder decoder(/*drop_managed_fields=*/true);
  std::vector<std::string> events;
  *failed = false;
  for (size_t at = 0; at < stream.size() && !*failed; at += piece) {
    absl::Status st = decoder.Feed(stream.substr(at, piece), [&](tessera::k8s::WatchEvent&& e) {
      events.push_back(std::string(tessera::k8s::WatchEventTypeName(e.type)) + e.object.dump());
      (void)tessera::k8s::IsTooOld(e);
      (void)tessera::k8s::ResourceVersionOf(e.object);
    });
    *failed = !st.ok();
  }
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = 1 + data[0] % 17;  // how the network cut the stream
  std::string_view stream(reinterpret_cast<const char*>(data) + 1, size - 1);
  bool failed_whole = false, failed_pieces = false;
  std::vector<std::string> whole = Decode(stream, stream.size() + 1, &failed_whole);
  std::vector<std::string> pieces = Decode(stream, piece, &failed_pieces);
  // Up to the first bad line both see the same events; a stream that decodes whole decodes in
  // pieces too.
  if (failed_whole != failed_pieces) std::abort();
  if (!failed_whole && whole != pieces) std::abort();
  return 0;
}
