#include "records/gpu_indices.h"

#include <charconv>

#include "common/strings.h"
#include "core/model/node.h"

namespace tessera::records {

absl::StatusOr<std::vector<int32_t>> ParseGpuIndices(std::string_view text) {
  std::vector<int32_t> out;
  if (text.empty()) return absl::InvalidArgumentError("no GPU index");
  while (true) {
    const size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    int32_t v = -1;
    auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size() || v < 0 ||
        v >= core::kMaxGpusPerNode || (!out.empty() && v <= out.back())) {
      return absl::InvalidArgumentError(StrCat("GPU indices must be ascending integers 0-",
                                               core::kMaxGpusPerNode - 1, " separated by commas"));
    }
    out.push_back(v);
    if (comma == std::string_view::npos) return out;
    text.remove_prefix(comma + 1);
    if (text.empty()) return absl::InvalidArgumentError("a GPU index is missing after a comma");
  }
}

std::string GpuIndicesText(const std::vector<int32_t>& gpus) { return StrJoin(gpus, ","); }

std::vector<int32_t> GpuIndicesOfMask(uint64_t mask) {
  std::vector<int32_t> out;
  for (; mask; mask &= mask - 1) out.push_back(__builtin_ctzll(mask));
  return out;
}

uint64_t GpuMaskOf(const std::vector<int32_t>& gpus) {
  uint64_t mask = 0;
  for (int32_t g : gpus) mask |= uint64_t{1} << g;
  return mask;
}

}  // namespace tessera::records
