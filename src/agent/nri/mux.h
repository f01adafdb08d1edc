// NRI's connection multiplexer (github.com/containerd/nri pkg/net/multiplex): one unix socket
// (the "trunk") carries several logical connections. Each write on a logical connection becomes
// frames of an 8-byte header, big endian: connection id (uint32), payload length (uint32); then
// the payload. The receiver hands each payload to that connection's reader, which sees a byte
// stream (ttrpc frames on top may span several mux frames).
//
// NRI uses two logical connections: 1 carries the Plugin service (the runtime calls the plugin;
// the plugin serves ttrpc there), 2 the Runtime service (the plugin calls the runtime:
// RegisterPlugin, UpdateContainers).
//
// Frame size: NRI's Go reader hands one payload to one Read call of the ttrpc channel, which
// reads through a 4096-byte buffer and fails (ENOMEM) on a payload larger than the buffer space
// it offers. Payloads are therefore cut at kMaxPayload = 4096 bytes, and one payload never mixes
// two ttrpc messages, which always fits (see mux.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera::agent::nrimux {

inline constexpr uint32_t kPluginServiceConn = 1;
inline constexpr uint32_t kRuntimeServiceConn = 2;
inline constexpr size_t kHeaderSize = 8;
inline constexpr size_t kMaxPayload = 4096;
// What NRI's mux accepts at most (a ttrpc header and a 4 MiB message).
inline constexpr size_t kMaxAcceptedPayload = 10 + (4u << 20);

// `data` (one ttrpc frame) as mux frames for connection `conn`.
std::string Encode(uint32_t conn, std::string_view data);

struct Payload {
  uint32_t conn = 0;
  std::string data;
};

// Splits the trunk's byte stream into payloads.
class Demux {
 public:
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete payload, nullopt when more bytes are needed, an error for connection id 0
  // (reserved) or an oversized payload.
  absl::StatusOr<std::optional<Payload>> Next();

 private:
  std::string buffer_;
};

}  // namespace tessera::agent::nrimux
