#include "records/move.h"

#include "absl/time/time.h"
#include "common/strings.h"
#include "records/condition_message.h"
#include "records/gpu_indices.h"

namespace tessera::records {
namespace {

constexpr std::string_view kPrefix = "moved for ";
constexpr std::string_view kTo = "; to node ";
constexpr std::string_view kGpus = " GPUs ";
constexpr std::string_view kUntil = "; held until ";
constexpr char kTimeFormat[] = "%Y-%m-%dT%H:%M:%SZ";

absl::Status Bad(std::string_view message, std::string_view why) {
  return BadConditionMessage(kMovingCondition, message, why);
}

}  // namespace

std::string MovingMessage(const MoveRecord& record) {
  return StrCat(
      kPrefix, record.for_what, kTo, record.node, kGpus,
      record.gpus.empty() ? std::string("none") : GpuIndicesText(record.gpus), kUntil,
      absl::FormatTime(kTimeFormat, absl::FromUnixSeconds(record.until_unix), absl::UTCTimeZone()));
}

absl::StatusOr<MoveRecord> ParseMovingMessage(std::string_view message) {
  if (!message.starts_with(kPrefix)) {
    return Bad(message, StrCat("does not start \"", kPrefix, "\""));
  }
  std::string_view rest = message.substr(kPrefix.size());
  const size_t to = rest.find(kTo);
  if (to == 0 || to == std::string_view::npos)
    return Bad(message, "no destination (\"; to node\")");
  MoveRecord r;
  r.for_what = std::string(rest.substr(0, to));
  rest.remove_prefix(to + kTo.size());
  const size_t gpus = rest.find(kGpus);
  if (gpus == 0 || gpus == std::string_view::npos) return Bad(message, "no node or no \" GPUs \"");
  r.node = std::string(rest.substr(0, gpus));
  rest.remove_prefix(gpus + kGpus.size());
  const size_t until = rest.find(kUntil);
  if (until == std::string_view::npos) return Bad(message, "no \"; held until\"");
  std::string_view list = rest.substr(0, until);
  if (list != "none") {
    absl::StatusOr<std::vector<int32_t>> indices = ParseGpuIndices(list);
    if (!indices.ok()) return Bad(message, FromAbsl(indices.status().message()));
    r.gpus = *std::move(indices);
  }
  rest.remove_prefix(until + kUntil.size());
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(kTimeFormat, std::string(rest), absl::UTCTimeZone(), &t, &error)) {
    return Bad(message, StrCat("the time \"", rest, "\" is not RFC 3339 UTC"));
  }
  r.until_unix = absl::ToUnixSeconds(t);
  return r;
}

}  // namespace tessera::records
