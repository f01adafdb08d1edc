// Unsigned 32-bit integers in network byte order, as the ttrpc frame header and the NRI
// multiplexer's frame header carry them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::agent {

inline void PutBigEndian32(std::string* out, uint32_t v) {
  out->push_back(static_cast<char>(v >> 24));
  out->push_back(static_cast<char>(v >> 16));
  out->push_back(static_cast<char>(v >> 8));
  out->push_back(static_cast<char>(v));
}

// The first four bytes of `s`, which the caller has checked are there.
inline uint32_t BigEndian32(std::string_view s) {
  return (static_cast<uint32_t>(static_cast<uint8_t>(s[0])) << 24) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 16) |
         (static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 8) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[3]));
}

}  // namespace tessera::agent
