// The protobuf wire format (proto3), the little of it NRI's messages need: varints, 64-bit and
// 32-bit fixed values, and length-delimited fields (strings, bytes, nested messages, packed
// repeated scalars). Written by hand instead of linking libprotobuf: a dozen messages are encoded
// and decoded in agent/nri/nri_api.cc, field by field, from NRI's api.proto.
//
// Encoding follows proto3 as Go's generated code writes it: fields in ascending number order,
// scalar fields with their default value (0, "", false) left out, repeated fields element by
// element. Decoding accepts fields in any order, skips fields it does not know (wire types 0, 1,
// 2, 5), and rejects truncated input and the deprecated group wire types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera::agent::protowire {

enum WireType : uint8_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// Appends fields to a buffer.
class Writer {
 public:
  // Scalars are written only when not zero (proto3 defaults).
  void Varint(int field, uint64_t value);
  void Int64(int field, int64_t value) { Varint(field, static_cast<uint64_t>(value)); }
  void Int32(int field, int32_t value) {  // negative int32 is sign-extended to 10 bytes
    Varint(field, static_cast<uint64_t>(static_cast<int64_t>(value)));
  }
  void Bool(int field, bool value) { Varint(field, value ? 1 : 0); }
  void String(int field, std::string_view value);  // skipped when empty
  // A nested message or bytes, written even when empty (a present, empty message).
  void Bytes(int field, std::string_view value);
  // A map<string, string> entry: a nested message {key = 1; value = 2}.
  void MapEntry(int field, std::string_view key, std::string_view value);

  const std::string& data() const { return out_; }
  std::string Take() { return std::move(out_); }

  static void AppendVarint(std::string* out, uint64_t v);

 private:
  void Tag(int field, WireType type);
  std::string out_;
};

// Reads the fields of one message, in order.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}

  // Advances to the next field; false at the end of the message. After an error (status() is
  // not OK) it returns false.
  bool Next();
  int field() const { return field_; }
  WireType type() const { return type_; }
  uint64_t varint() const { return varint_; }        // kVarint, kFixed64, kFixed32
  std::string_view bytes() const { return bytes_; }  // kLengthDelimited
  const absl::Status& status() const { return status_; }

 private:
  bool ReadVarint(uint64_t* v);
  void Fail(std::string_view what);

  std::string_view data_;
  size_t pos_ = 0;
  int field_ = 0;
  WireType type_ = kVarint;
  uint64_t varint_ = 0;
  std::string_view bytes_;
  absl::Status status_;
};

}  // namespace tessera::agent::protowire
