// The pod condition `tessera.dev/Reserved`: the scheduler's word that room is reserved for a
// waiting pod or gang (core/reservations), read back by `tessera status`.
//
// Written by the scheduler (k8s/scheduler/reservation_answer.h) on every waiting pod of the owner
// through pods/status, as it writes PodScheduled: status True while the room is held, with
// lastTransitionTime the time the reservation was made (or last moved) and this message:
//
//   room reserved for gang ns/train: node gpu-1 GPUs 0,1,2,3; node gpu-2 GPUs 0,1; expected
//   start 2026-12-05T10:40:00Z
//
// (one line), naming the owner ("pod ns/name" or "gang ns/gang"), the GPUs held per node, and
// when they are expected to be free. It is rewritten when the room moves or the expected start
// moves by a minute or more, and set False (reason Released) when the room is no longer held
// while the pod still waits; a bound pod's condition is stale by definition and is not read.
//
// The message is for people (kubectl describe) and for machines: ReservationMessage and
// ParseReservationMessage are its only writer and reader. Reading follows the convention for
// machine-written records: parts it does not know ("; ..." not starting "node " or "expected
// start ") are ignored; what it cannot interpret is an error naming the part.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tessera::records {

inline constexpr std::string_view kReservedCondition = "tessera.dev/Reserved";

struct ReservationRecord {
  bool gang = false;  // the owner is a gang ("gang ns/g"), else a pod ("pod ns/name")
  std::string owner;  // "ns/name" or "ns/gang"
  struct Site {
    std::string node;
    std::vector<int32_t> gpus;  // GPU indices, ascending
    bool operator==(const Site&) const = default;
  };
  std::vector<Site> sites;  // at least one
  int64_t expected_start_unix = 0;
  bool operator==(const ReservationRecord&) const = default;
};

// The condition's message for `record` (one line, as above).
std::string ReservationMessage(const ReservationRecord& record);
// Reads a message ReservationMessage wrote; InvalidArgument naming the part it cannot read.
[[nodiscard]] absl::StatusOr<ReservationRecord> ParseReservationMessage(std::string_view message);

}  // namespace tessera::records
