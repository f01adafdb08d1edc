// The watch wire format: a chunked HTTP 200 stream of one JSON object per line,
// {"type": "ADDED"|"MODIFIED"|"DELETED"|"BOOKMARK"|"ERROR", "object": {...}}; or, for Pods and
// Nodes asked in protobuf, length-delimited protobuf frames that read as the same lines
// (protobuf_wire.h ProtobufWatchEventToJson).
//
// "Too old" (the resourceVersion a watch starts from was compacted away) arrives either as HTTP
// 410 on the watch request itself or, far more often, as HTTP 200 followed by an ERROR event
// whose object is a Status with code 410 (reason "Expired", or "Gone" before Kubernetes 1.18).
// Both mean: list again and watch from the new list's resourceVersion.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };
std::string_view WatchEventTypeName(WatchEventType type);

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  nlohmann::json object;
};

// Parses API JSON. With drop_managed_fields, every "managedFields" member is skipped while parsing
// (never built): it is most of a small object's size and nothing here reads it. client-go's
// informers in kube-scheduler strip it too.
[[nodiscard]] absl::StatusOr<nlohmann::json> ParseApiJson(std::string_view text,
                                                          bool drop_managed_fields);

// A list page's metadata, read from the head of its body without parsing the items.
struct ListHead {
  std::string resource_version;
  std::string continue_token;  // empty on the last page
};
// The list's metadata when its object closes before "items" begins (the API server writes
// kind, apiVersion, metadata, then items), so that the next page can be asked for while this one
// is parsed. nullopt when the body is not such a list (items first, no metadata, not JSON): the
// caller then reads the metadata from the whole parsed page.
std::optional<ListHead> ReadListHead(std::string_view body);

// One line of a watch stream (without the newline).
[[nodiscard]] absl::StatusOr<WatchEvent> DecodeWatchLine(std::string_view line,
                                                         bool drop_managed_fields = false);
// A watch event's JSON ({"type", "object"}), however it came (a line, a protobuf frame), as a
// WatchEvent: the one reading of an event. `source` is shown in errors (the line, the frame).
[[nodiscard]] absl::StatusOr<WatchEvent> DecodeWatchEvent(nlohmann::json&& event,
                                                          std::string_view source);

// True if `event` says the watch's resourceVersion is too old (ERROR with a Status of code 410).
bool IsTooOld(const WatchEvent& event);
// True for a Status object (the body of an HTTP 410, or an ERROR event's object) saying so.
bool IsTooOldStatus(const nlohmann::json& status);

// Splits the bytes of a watch stream, as they arrive in arbitrary pieces, into events.
//
// One stream is one wire. With `protobuf` allowed (the watch asked for protobuf, JSON accepted as
// the API server's fallback), its first byte says which: every JSON event starts with '{' (the
// API server writes no whitespace before it; blanks are taken as JSON too), a protobuf frame with
// the high byte of its 4-byte length (0 below 16 MiB, never '{' under the 16 MiB limit).
// Without it the stream is JSON lines, as before protobuf.
class WatchDecoder {
 public:
  explicit WatchDecoder(bool drop_managed_fields = false, bool protobuf = false)
      : drop_managed_fields_(drop_managed_fields), protobuf_allowed_(protobuf) {}
  // Calls on_event for every complete line or frame in `bytes` (and what was buffered before).
  // Blank lines are skipped. A line or frame that is not a watch event, or a frame longer than
  // kMaxProtobufWatchFrame, is an error; the caller restarts the watch.
  absl::Status Feed(std::string_view bytes, const std::function<void(WatchEvent&&)>& on_event);
  // Bytes of an incomplete last line or frame still waiting for the rest.
  size_t buffered() const { return buffer_.size(); }
  // Whether this stream came in protobuf (false until its first byte, and for JSON).
  bool protobuf() const { return wire_ == Wire::kProtobuf; }

 private:
  enum class Wire { kUnknown, kJson, kProtobuf };
  absl::Status FeedLines(std::string_view bytes, const std::function<void(WatchEvent&&)>& on_event);
  absl::Status FeedFrames(std::string_view bytes,
                          const std::function<void(WatchEvent&&)>& on_event);

  std::string buffer_;
  bool drop_managed_fields_;
  bool protobuf_allowed_;
  Wire wire_ = Wire::kUnknown;
};

// metadata.resourceVersion ("" when absent).
std::string ResourceVersionOf(const nlohmann::json& object);
// "namespace/name" for namespaced objects, "name" for cluster-scoped ones.
std::string KeyOf(const nlohmann::json& object);

}  // namespace tessera::k8s
