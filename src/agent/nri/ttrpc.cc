#include "agent/nri/ttrpc.h"

#include "agent/nri/big_endian.h"
#include "agent/nri/protowire.h"
#include "common/strings.h"

namespace tessera::agent::ttrpc {
std::string EncodeFrame(uint32_t stream_id, MessageType type, std::string_view data,
                        uint8_t flags) {
  std::string out;
  out.reserve(kHeaderSize + data.size());
  PutBigEndian32(&out, static_cast<uint32_t>(data.size()));
  PutBigEndian32(&out, stream_id);
  out.push_back(static_cast<char>(type));
  out.push_back(static_cast<char>(flags));
  out.append(data);
  return out;
}

absl::StatusOr<std::optional<Frame>> FrameDecoder::Next() {
  if (buffer_.size() < kHeaderSize) return std::nullopt;
  const uint32_t length = BigEndian32(buffer_);
  if (length > kMaxDataSize) {
    return absl::ResourceExhaustedError(
        StrCat("ttrpc: a frame of ", length, " bytes; at most ", kMaxDataSize));
  }
  if (buffer_.size() < kHeaderSize + length) return std::nullopt;
  Frame f;
  f.stream_id = BigEndian32(std::string_view(buffer_).substr(4));
  f.type = static_cast<uint8_t>(buffer_[8]);
  f.flags = static_cast<uint8_t>(buffer_[9]);
  f.data = buffer_.substr(kHeaderSize, length);
  buffer_.erase(0, kHeaderSize + length);
  return f;
}

std::string EncodeRequest(const Request& r) {
  protowire::Writer w;
  w.String(1, r.service);
  w.String(2, r.method);
  if (!r.payload.empty()) w.Bytes(3, r.payload);
  w.Int64(4, r.timeout_nano);
  for (const auto& [key, value] : r.metadata) w.MapEntry(5, key, value);
  return w.Take();
}

absl::StatusOr<Request> DecodeRequest(std::string_view data) {
  Request r;
  protowire::Reader reader(data);
  while (reader.Next()) {
    switch (reader.field()) {
      case 1:
        r.service = reader.bytes();
        break;
      case 2:
        r.method = reader.bytes();
        break;
      case 3:
        r.payload = reader.bytes();
        break;
      case 4:
        r.timeout_nano = static_cast<int64_t>(reader.varint());
        break;
      case 5: {
        protowire::Reader kv(reader.bytes());
        std::pair<std::string, std::string> entry;
        while (kv.Next()) {
          if (kv.field() == 1) entry.first = kv.bytes();
          if (kv.field() == 2) entry.second = kv.bytes();
        }
        if (!kv.status().ok()) return kv.status();
        r.metadata.push_back(std::move(entry));
        break;
      }
      default:
        break;
    }
  }
  if (!reader.status().ok()) return reader.status();
  return r;
}

std::string EncodeResponse(const Response& r) {
  protowire::Writer w;
  if (r.code != kOk) {
    protowire::Writer status;
    status.Int32(1, r.code);
    status.String(2, r.message);
    w.Bytes(1, status.data());
  }
  if (!r.payload.empty()) w.Bytes(2, r.payload);
  return w.Take();
}

absl::StatusOr<Response> DecodeResponse(std::string_view data) {
  Response r;
  protowire::Reader reader(data);
  while (reader.Next()) {
    if (reader.field() == 1 && reader.type() == protowire::kLengthDelimited) {
      protowire::Reader status(reader.bytes());
      while (status.Next()) {
        if (status.field() == 1) r.code = static_cast<int32_t>(status.varint());
        if (status.field() == 2) r.message = status.bytes();
      }
      if (!status.status().ok()) return status.status();
    } else if (reader.field() == 2) {
      r.payload = reader.bytes();
    }
  }
  if (!reader.status().ok()) return reader.status();
  return r;
}

}  // namespace tessera::agent::ttrpc
