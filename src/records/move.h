// The pod condition `tessera.dev/Moving`: the scheduler moved this pod for defragmentation and
// holds its destination for the replacement its controller makes (k8s/scheduler/move_holds.h).
//
// Written by the scheduler on the moved pod through pods/status just before its eviction,
// status True, with this message (one line):
//
//   moved for pod ns/big; to node gpu-1 GPUs 3; held until 2026-12-05T10:45:00Z
//
// naming what the move makes room for ("pod ns/name" or "gang ns/gang"), the destination (node
// and GPU indices, "GPUs none" for a pod without GPUs) and when the hold ends. A scheduler that
// starts while the moved pod is still there (terminating) reads it back and holds the destination
// again until then. MovingMessage and ParseMovingMessage are the message's only writer and reader.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::records {

inline constexpr std::string_view kMovingCondition = "tessera.dev/Moving";

struct MoveRecord {
  std::string for_what;       // "pod ns/big", "gang ns/train"
  std::string node;           // the destination's node
  std::vector<int32_t> gpus;  // and GPUs, ascending (empty: none)
  int64_t until_unix = 0;     // when the hold ends
  bool operator==(const MoveRecord&) const = default;
};

std::string MovingMessage(const MoveRecord& record);
// Reads a message MovingMessage wrote; InvalidArgument naming the part it cannot read.
[[nodiscard]] absl::StatusOr<MoveRecord> ParseMovingMessage(std::string_view message);

}  // namespace tessera::records
