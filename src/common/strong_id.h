// Strong integer ids, so that a node index can never be passed where a GPU index is expected.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace tessera {

template <typename Tag>
class StrongId {
 public:
  constexpr StrongId() = default;
  constexpr explicit StrongId(int32_t value) : value_(value) {}
  constexpr int32_t value() const { return value_; }
  constexpr bool valid() const { return value_ >= 0; }
  constexpr auto operator<=>(const StrongId&) const = default;

  template <typename H>
  friend H AbslHashValue(H h, StrongId id) {
    return H::combine(std::move(h), id.value_);
  }

 private:
  int32_t value_ = -1;
};

}  // namespace tessera

template <typename Tag>
struct std::hash<tessera::StrongId<Tag>> {
  size_t operator()(tessera::StrongId<Tag> id) const { return std::hash<int32_t>()(id.value()); }
};
