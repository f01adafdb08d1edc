// The NRI plugin's decoders of what the runtime sends never crash, and an adjustment that decodes
// encodes back to an equal one.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "agent/nri/mux.h"
#include "agent/nri/nri_api.h"
#include "agent/nri/ttrpc.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  using namespace tessera::agent;
  (void)nri::DecodeConfigureRequest(bytes);
  (void)nri::DecodeSynchronizeRequest(bytes);
  (void)nri::DecodePodContainerRequest(bytes);
  (void)nri::DecodePodContainerRequest(bytes, /*state_change=*/true);
  (void)ttrpc::DecodeRequest(bytes);
  (void)ttrpc::DecodeResponse(bytes);
  if (auto a = nri::DecodeContainerAdjustment(bytes); a.ok()) {
    auto again = nri::DecodeContainerAdjustment(nri::EncodeContainerAdjustment(*a));
    if (!again.ok() || again->env != a->env || again->devices != a->devices ||
        again->mounts != a->mounts || again->cdi_devices != a->cdi_devices ||
        again->annotations != a->annotations) {
      std::abort();
    }
  }
  // The byte stream of a connection: frames of the multiplexer and of ttrpc, in any pieces.
  nrimux::Demux demux;
  ttrpc::FrameDecoder frames;
  for (size_t i = 0; i < bytes.size(); i += 7) {
    demux.Feed(bytes.substr(i, 7));
    frames.Feed(bytes.substr(i, 7));
    while (true) {
      auto p = demux.Next();
      if (!p.ok() || !p->has_value()) break;
    }
    while (true) {
      auto f = frames.Next();
      if (!f.ok() || !f->has_value()) break;
    }
  }
  return 0;
}
