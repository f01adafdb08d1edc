#include "records/move.h"

#include <charconv>

#include "absl/time/time.h"
#include "common/strings.h"

namespace tessera::records {
namespace {

constexpr std::string_view kPrefix = "moved for ";
constexpr std::string_view kTo = "; to node ";
constexpr std::string_view kGpus = " GPUs ";
constexpr std::string_view kUntil = "; held until ";
constexpr char kTimeFormat[] = "%Y-%m-%dT%H:%M:%SZ";

absl::Status Bad(std::string_view message, std::string_view why) {
  return absl::InvalidArgumentError(
      StrCat("condition ", kMovingCondition, " message \"", message, "\": ", why));
}

}  // namespace

std::string MovingMessage(const MoveRecord& record) {
  return StrCat(
      kPrefix, record.for_what, kTo, record.node, kGpus,
      record.gpus.empty() ? std::string("none") : StrJoin(record.gpus, ","), kUntil,
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
    while (true) {
      const size_t comma = list.find(',');
      const std::string_view item = list.substr(0, comma);
      int32_t v = -1;
      auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
      if (ec != std::errc() || end != item.data() + item.size() || v < 0 || v >= 64 ||
          (!r.gpus.empty() && v <= r.gpus.back())) {
        return Bad(message, "GPU indices must be ascending integers 0-63 separated by commas");
      }
      r.gpus.push_back(v);
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
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
