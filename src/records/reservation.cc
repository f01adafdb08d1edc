#include "records/reservation.h"

#include <algorithm>

#include "absl/time/time.h"
#include "common/strings.h"
#include "records/condition_message.h"
#include "records/gpu_indices.h"

namespace tessera::records {
namespace {

constexpr std::string_view kPrefix = "room reserved for ";
constexpr std::string_view kNode = "node ";
constexpr std::string_view kGpus = " GPUs ";
constexpr std::string_view kExpected = "expected start ";

absl::Status Bad(std::string_view part, std::string_view why) {
  return BadConditionMessage(kReservedCondition, part, why);
}

}  // namespace

std::string ReservationMessage(const ReservationRecord& record) {
  std::string out = StrCat(kPrefix, record.gang ? "gang " : "pod ", record.owner, ": ");
  for (const ReservationRecord::Site& s : record.sites) {
    StrAppend(&out, kNode, s.node, kGpus, GpuIndicesText(s.gpus), "; ");
  }
  StrAppend(
      &out, kExpected,
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixSeconds(record.expected_start_unix),
                       absl::UTCTimeZone()));
  return out;
}

absl::StatusOr<ReservationRecord> ParseReservationMessage(std::string_view message) {
  if (!message.starts_with(kPrefix))
    return Bad(message, StrCat("does not start \"", kPrefix, "\""));
  std::string_view rest = message.substr(kPrefix.size());
  ReservationRecord r;
  if (rest.starts_with("gang ")) {
    r.gang = true;
    rest.remove_prefix(5);
  } else if (rest.starts_with("pod ")) {
    rest.remove_prefix(4);
  } else {
    return Bad(message, "the owner is neither \"pod ...\" nor \"gang ...\"");
  }
  const size_t colon = rest.find(": ");
  if (colon == 0 || colon == std::string_view::npos ||
      rest.substr(0, colon).find_first_of(" ;") != std::string_view::npos) {
    return Bad(message, "the owner must be \"namespace/name\" followed by \": \"");
  }
  r.owner = std::string(rest.substr(0, colon));
  rest.remove_prefix(colon + 2);
  bool expected = false;
  while (!rest.empty()) {
    const size_t end = rest.find("; ");
    const std::string_view part = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 2);
    if (part.starts_with(kNode)) {
      const std::string_view body = part.substr(kNode.size());
      const size_t gpus = body.find(kGpus);
      if (gpus == 0 || gpus == std::string_view::npos ||
          body.substr(0, gpus).find(' ') != std::string_view::npos) {
        return Bad(part, "must be \"node <name> GPUs <i>,<j>,...\"");
      }
      absl::StatusOr<std::vector<int32_t>> indices =
          ParseGpuIndices(body.substr(gpus + kGpus.size()));
      if (!indices.ok()) return Bad(part, FromAbsl(indices.status().message()));
      r.sites.push_back({std::string(body.substr(0, gpus)), std::move(*indices)});
    } else if (part.starts_with(kExpected)) {
      absl::Time t;
      std::string error;
      if (!absl::ParseTime(absl::RFC3339_full, ToAbsl(part.substr(kExpected.size())), &t, &error)) {
        return Bad(part, StrCat("the time is not RFC 3339: ", error));
      }
      if (t < absl::UnixEpoch() || t >= absl::FromUnixSeconds(253402300800)) {  // 10000-01-01
        return Bad(part, "the time is not between 1970 and 9999");
      }
      r.expected_start_unix = absl::ToUnixSeconds(t);
      expected = true;
    }
    // Any other part: written by a newer scheduler; ignored.
  }
  if (r.sites.empty()) return Bad(message, "names no node");
  if (!expected) return Bad(message, "has no expected start");
  return r;
}

}  // namespace tessera::records
