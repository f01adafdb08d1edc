#include "agent/nri/protowire.h"

#include "common/strings.h"

namespace tessera::agent::protowire {

void Writer::AppendVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

void Writer::Tag(int field, WireType type) {
  AppendVarint(&out_, (static_cast<uint64_t>(field) << 3) | type);
}

void Writer::Varint(int field, uint64_t value) {
  if (value == 0) return;
  Tag(field, kVarint);
  AppendVarint(&out_, value);
}

void Writer::String(int field, std::string_view value) {
  if (value.empty()) return;
  Bytes(field, value);
}

void Writer::Bytes(int field, std::string_view value) {
  Tag(field, kLengthDelimited);
  AppendVarint(&out_, value.size());
  out_.append(value);
}

void Writer::MapEntry(int field, std::string_view key, std::string_view value) {
  Writer entry;
  entry.String(1, key);
  entry.String(2, value);
  Bytes(field, entry.data());
}

void Reader::Fail(std::string_view what) {
  status_ = absl::InvalidArgumentError(StrCat("protobuf: ", what, " at byte ", pos_));
}

bool Reader::ReadVarint(uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (pos_ >= data_.size()) {
      Fail("truncated varint");
      return false;
    }
    const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  Fail("varint longer than 10 bytes");
  return false;
}

bool Reader::Next() {
  if (!status_.ok() || pos_ >= data_.size()) return false;
  uint64_t tag = 0;
  if (!ReadVarint(&tag)) return false;
  field_ = static_cast<int>(tag >> 3);
  const uint64_t type = tag & 7;
  if (field_ <= 0 || (tag >> 3) > 0x1fffffff) {
    Fail("bad field number");
    return false;
  }
  switch (type) {
    case kVarint:
      type_ = kVarint;
      return ReadVarint(&varint_);
    case kFixed64:
    case kFixed32: {
      const size_t n = type == kFixed64 ? 8 : 4;
      if (data_.size() - pos_ < n) {
        Fail("truncated fixed value");
        return false;
      }
      varint_ = 0;
      for (size_t i = 0; i < n; ++i) {
        varint_ |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
      }
      pos_ += n;
      type_ = static_cast<WireType>(type);
      return true;
    }
    case kLengthDelimited: {
      uint64_t n = 0;
      if (!ReadVarint(&n)) return false;
      if (n > data_.size() - pos_) {
        Fail("length past the end of the message");
        return false;
      }
      bytes_ = data_.substr(pos_, n);
      pos_ += n;
      type_ = kLengthDelimited;
      return true;
    }
    default:
      Fail(StrCat("unsupported wire type ", type));
      return false;
  }
}

}  // namespace tessera::agent::protowire
