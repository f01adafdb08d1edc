// A node's GPUs named by index, as the records write them: "0,1,3". One reader and one writer for
// every record that carries such a list: the Reserved and Moving conditions' messages
// (reservation.h, move.h) and the node annotation tessera.dev/spare-gpus.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::records {

// "0,1,3" -> {0, 1, 3}. Ascending, each a GPU index (0 to core::kMaxGpusPerNode - 1), at least
// one. InvalidArgument saying which rule the text breaks, for the caller to put in context.
absl::StatusOr<std::vector<int32_t>> ParseGpuIndices(std::string_view text);

// {0, 1, 3} -> "0,1,3" (empty for none).
std::string GpuIndicesText(const std::vector<int32_t>& gpus);

// A node's GPUs as the engine names them (a mask, bit i = GPU i) and as the records list them
// (ascending indices): 0b1011 <-> {0, 1, 3}.
std::vector<int32_t> GpuIndicesOfMask(uint64_t mask);
uint64_t GpuMaskOf(const std::vector<int32_t>& gpus);

}  // namespace tessera::records
