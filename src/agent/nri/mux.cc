#include "agent/nri/mux.h"

#include "agent/nri/big_endian.h"
#include "common/strings.h"

namespace tessera::agent::nrimux {
// Why 4096-byte payloads always fit the Go reader (bufio.Reader of 4096 bytes over the mux
// connection, reading one ttrpc frame: io.ReadFull of the 10-byte header, then of the data):
// with nothing buffered, a read shorter than 4096 bytes reads into the whole 4096-byte buffer,
// and a longer one reads straight into the caller's slice, which is at least as long as what is
// left of the message and so at least as long as the next payload of it. A payload never holds
// the end of one message and the start of the next, so nothing is left buffered across messages.
std::string Encode(uint32_t conn, std::string_view data) {
  std::string out;
  out.reserve(data.size() + kHeaderSize * (data.size() / kMaxPayload + 1));
  size_t pos = 0;
  do {
    const size_t n = std::min(kMaxPayload, data.size() - pos);
    PutBigEndian32(&out, conn);
    PutBigEndian32(&out, static_cast<uint32_t>(n));
    out.append(data.substr(pos, n));
    pos += n;
  } while (pos < data.size());
  return out;
}

absl::StatusOr<std::optional<Payload>> Demux::Next() {
  if (buffer_.size() < kHeaderSize) return std::nullopt;
  const uint32_t conn = BigEndian32(buffer_);
  const uint32_t length = BigEndian32(std::string_view(buffer_).substr(4));
  if (conn == 0) return absl::InvalidArgumentError("NRI mux: a frame for connection id 0");
  if (length > kMaxAcceptedPayload) {
    return absl::ResourceExhaustedError(StrCat("NRI mux: a frame of ", length, " bytes"));
  }
  if (buffer_.size() < kHeaderSize + length) return std::nullopt;
  Payload p{conn, buffer_.substr(kHeaderSize, length)};
  buffer_.erase(0, kHeaderSize + length);
  return p;
}

}  // namespace tessera::agent::nrimux
