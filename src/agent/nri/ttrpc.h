// ttrpc, containerd's lightweight RPC protocol (github.com/containerd/ttrpc, PROTOCOL.md), as NRI
// speaks it: unary calls only.
//
// A frame is a 10-byte header, big endian: data length (uint32, at most 4 MiB), stream id
// (uint32; odd for streams the client opens), message type (1 request, 2 response, 3 data),
// flags; then the data. A request's data is the protobuf ttrpc.Request {service = 1, method = 2,
// payload = 3, timeout_nano = 4, metadata = 5 (KeyValue {key = 1, value = 2})}; a response's is
// ttrpc.Response {status = 1 (google.rpc.Status {code = 1, message = 2}), payload = 2}, where no
// status means OK. Payloads are the method's protobuf messages (nri_api.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::agent::ttrpc {

inline constexpr size_t kHeaderSize = 10;
inline constexpr uint32_t kMaxDataSize = 4u << 20;

enum MessageType : uint8_t { kRequest = 1, kResponse = 2, kData = 3 };

struct Frame {
  uint32_t stream_id = 0;
  uint8_t type = 0;
  uint8_t flags = 0;
  std::string data;
};

std::string EncodeFrame(uint32_t stream_id, MessageType type, std::string_view data,
                        uint8_t flags = 0);

// Reassembles frames from a byte stream that may arrive in pieces of any size.
class FrameDecoder {
 public:
  void Feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next complete frame, nullopt when more bytes are needed, an error for a frame longer
  // than kMaxDataSize (the stream cannot be trusted after it).
  absl::StatusOr<std::optional<Frame>> Next();

 private:
  std::string buffer_;
};

struct Request {
  std::string service;  // "nri.pkg.api.v1alpha1.Plugin"
  std::string method;   // "CreateContainer"
  std::string payload;
  int64_t timeout_nano = 0;
  std::vector<std::pair<std::string, std::string>> metadata;
};
std::string EncodeRequest(const Request& request);
[[nodiscard]] absl::StatusOr<Request> DecodeRequest(std::string_view data);

// gRPC status codes used here.
inline constexpr int32_t kOk = 0;
inline constexpr int32_t kInvalidArgument = 3;
inline constexpr int32_t kNotFound = 5;
inline constexpr int32_t kFailedPrecondition = 9;
inline constexpr int32_t kUnimplemented = 12;
inline constexpr int32_t kInternal = 13;

struct Response {
  int32_t code = kOk;
  std::string message;
  std::string payload;
};
std::string EncodeResponse(const Response& response);
[[nodiscard]] absl::StatusOr<Response> DecodeResponse(std::string_view data);

}  // namespace tessera::agent::ttrpc
