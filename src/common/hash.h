// FNV-1a, 64 bits (Fowler, Noll, Vo; the parameters of draft-eastlake-fnv): the one
// non-cryptographic string hash of ours, for names that must be short and stable across
// processes and releases (a ResourceSlice's name, a fake MIG device's UUID, a spec's digest) and
// for keys that need only spread (the shim's IPC handle keys).
//
// Stable means observable: slice names, attribute values and fake GPU UUIDs carry these hashes, so
// the function and every seed a caller passes never change.
//
// Example: Fnv1a("") == 0xcbf29ce484222325 (the offset basis), Fnv1a("a") == 0xaf63dc4c8601ec8c;
// Fnv1a("#", Fnv1a(key)) continues a hash over key + "#".
//
// Callers: agent/discovery/fake_gpus_file.cc (FakeMigUuid), agent/dra/slices.cc (SpecHash,
// SliceName) and agent/dra/pool.cc (long attribute values) with kFnv1aDraSeed, shim/export_tag.cc
// (IpcHandleKey). Header-only and free of every library: the CUDA shim, which links nothing of
// ours, includes it.
#pragma once

#include <cstdint>
#include <string_view>

namespace tessera {

inline constexpr uint64_t kFnv1aOffsetBasis = 0xcbf29ce484222325ULL;  // 14695981039346656037
inline constexpr uint64_t kFnv1aPrime = 0x100000001b3ULL;             // 1099511628211

// The seed the DRA driver's names have always used: 1469598103934665603, the offset basis with
// its last decimal digit dropped (a slip made when it was first written). Published slice names
// and attribute values depend on it, so it stays.
inline constexpr uint64_t kFnv1aDraSeed = 1469598103934665603ULL;

// FNV-1a of `bytes`, starting from `h` (the offset basis, or a previous hash to continue it).
constexpr uint64_t Fnv1a(std::string_view bytes, uint64_t h = kFnv1aOffsetBasis) {
  for (const char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= kFnv1aPrime;
  }
  return h;
}

}  // namespace tessera
