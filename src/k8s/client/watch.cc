#include "k8s/client/watch.h"

#include <vector>

#include "common/status.h"
#include "common/strings.h"
#include "k8s/client/protobuf_wire.h"

namespace tessera::k8s {

std::string_view WatchEventTypeName(WatchEventType type) {
  switch (type) {
    case WatchEventType::kAdded:
      return "ADDED";
    case WatchEventType::kModified:
      return "MODIFIED";
    case WatchEventType::kDeleted:
      return "DELETED";
    case WatchEventType::kBookmark:
      return "BOOKMARK";
    case WatchEventType::kError:
      return "ERROR";
  }
  return "?";
}

absl::StatusOr<nlohmann::json> ParseApiJson(std::string_view text, bool drop_managed_fields) {
  try {
    if (!drop_managed_fields) return nlohmann::json::parse(text.begin(), text.end());
    // The last key seen at each depth, so that only metadata.managedFields is skipped (not a
    // label or annotation that happens to be called so).
    std::vector<std::string> keys;
    nlohmann::json::parser_callback_t skip = [&keys](int depth, nlohmann::json::parse_event_t event,
                                                     nlohmann::json& parsed) {
      if (event != nlohmann::json::parse_event_t::key || !parsed.is_string()) return true;
      const std::string& key = parsed.get_ref<const std::string&>();
      if (keys.size() <= static_cast<size_t>(depth)) keys.resize(depth + 1);
      keys[depth] = key;
      return !(key == "managedFields" && depth >= 1 && keys[depth - 1] == "metadata");
    };
    return nlohmann::json::parse(text.begin(), text.end(), skip);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(StrCat("not JSON (", e.what(), "): ", text.substr(0, 120)));
  }
}

namespace {

// SAX reader of a list's top-level metadata; it stops at the top-level "items".
class ListHeadReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool string(string_t& value) override {
    if (in_metadata_ && depth_ == 2) {
      if (key_ == "resourceVersion") head_.resource_version = value;
      if (key_ == "continue") head_.continue_token = value;
    }
    return true;
  }
  bool start_object(std::size_t) override {
    ++depth_;
    if (depth_ == 2 && key_ == "metadata") in_metadata_ = true;
    return true;
  }
  bool key(string_t& k) override {
    if (depth_ == 1 && k == "items") return false;  // done: the rest is the items
    if (depth_ <= 2) key_ = k;
    return true;
  }
  bool end_object() override {
    if (depth_ == 2 && in_metadata_) {
      in_metadata_ = false;
      metadata_done_ = true;
    }
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

  std::optional<ListHead> head() const {
    if (!metadata_done_) return std::nullopt;
    return head_;
  }

 private:
  int depth_ = 0;
  std::string key_;
  bool in_metadata_ = false;
  bool metadata_done_ = false;
  ListHead head_;
};

}  // namespace

std::optional<ListHead> ReadListHead(std::string_view body) {
  ListHeadReader reader;
  (void)nlohmann::json::sax_parse(body.begin(), body.end(), &reader);
  return reader.head();
}

absl::StatusOr<WatchEvent> DecodeWatchLine(std::string_view line, bool drop_managed_fields) {
  absl::StatusOr<nlohmann::json> parsed = ParseApiJson(line, drop_managed_fields);
  if (!parsed.ok())
    return absl::DataLossError(StrCat("watch: a line is ", parsed.status().message()));
  return DecodeWatchEvent(std::move(*parsed), line);
}

absl::StatusOr<WatchEvent> DecodeWatchEvent(nlohmann::json&& j, std::string_view source) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::DataLossError(StrCat("watch: an event has no \"type\": ", source.substr(0, 120)));
  }
  const std::string& type = j["type"].get_ref<const std::string&>();
  WatchEvent e;
  if (type == "ADDED") {
    e.type = WatchEventType::kAdded;
  } else if (type == "MODIFIED") {
    e.type = WatchEventType::kModified;
  } else if (type == "DELETED") {
    e.type = WatchEventType::kDeleted;
  } else if (type == "BOOKMARK") {
    e.type = WatchEventType::kBookmark;
  } else if (type == "ERROR") {
    e.type = WatchEventType::kError;
  } else {
    return absl::DataLossError(StrCat("watch: unknown event type \"", type, "\""));
  }
  auto it = j.find("object");
  if (it == j.end() || !it->is_object()) {
    return absl::DataLossError(StrCat("watch: a ", type, " event has no object"));
  }
  e.object = std::move(*it);
  return e;
}

bool IsTooOldStatus(const nlohmann::json& s) {
  if (!s.is_object()) return false;
  auto code = s.find("code");
  if (code != s.end() && code->is_number_integer() && code->get<int>() == 410) return true;
  auto reason = s.find("reason");
  return reason != s.end() && reason->is_string() && (*reason == "Expired" || *reason == "Gone");
}

bool IsTooOld(const WatchEvent& event) {
  return event.type == WatchEventType::kError && IsTooOldStatus(event.object);
}

absl::Status WatchDecoder::Feed(std::string_view bytes,
                                const std::function<void(WatchEvent&&)>& on_event) {
  if (wire_ == Wire::kUnknown && !bytes.empty()) {
    const char first = bytes.front();
    wire_ = !protobuf_allowed_ || first == '{' || first == ' ' || first == '\t' || first == '\r' ||
                    first == '\n'
                ? Wire::kJson
                : Wire::kProtobuf;
  }
  return wire_ == Wire::kProtobuf ? FeedFrames(bytes, on_event) : FeedLines(bytes, on_event);
}

absl::Status WatchDecoder::FeedLines(std::string_view bytes,
                                     const std::function<void(WatchEvent&&)>& on_event) {
  size_t start = 0;
  while (true) {
    size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) break;
    std::string_view piece = bytes.substr(start, nl - start);
    start = nl + 1;
    std::string line_storage;
    std::string_view line = piece;
    if (!buffer_.empty()) {
      buffer_.append(piece);
      line_storage.swap(buffer_);
      line = line_storage;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    TESSERA_ASSIGN_OR_RETURN(WatchEvent e, DecodeWatchLine(line, drop_managed_fields_));
    on_event(std::move(e));
  }
  buffer_.append(bytes.substr(start));
  return absl::OkStatus();
}

absl::Status WatchDecoder::FeedFrames(std::string_view bytes,
                                      const std::function<void(WatchEvent&&)>& on_event) {
  // Frames are read from `bytes` where they lie whole, from buffer_ where they were split (a
  // long frame grows there, each piece copied once).
  const bool buffered = !buffer_.empty();
  if (buffered) buffer_.append(bytes);
  const std::string_view data = buffered ? std::string_view(buffer_) : bytes;
  size_t pos = 0;
  while (data.size() - pos >= 4) {
    const auto* p = reinterpret_cast<const unsigned char*>(data.data() + pos);
    const size_t length = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
    if (length > kMaxProtobufWatchFrame) {
      return absl::DataLossError(StrCat("watch: a protobuf frame of ", length, " bytes (more than ",
                                        kMaxProtobufWatchFrame, ")"));
    }
    if (data.size() - pos - 4 < length) break;
    const std::string_view frame = data.substr(pos + 4, length);
    pos += 4 + length;
    absl::StatusOr<nlohmann::json> event = ProtobufWatchEventToJson(frame);
    if (!event.ok()) {
      return absl::DataLossError(StrCat("watch: ", FromAbsl(event.status().message())));
    }
    TESSERA_ASSIGN_OR_RETURN(WatchEvent e,
                             DecodeWatchEvent(std::move(*event), "(a protobuf frame)"));
    on_event(std::move(e));
  }
  if (buffered) {
    buffer_.erase(0, pos);
  } else {
    buffer_.assign(data.substr(pos));
  }
  return absl::OkStatus();
}

std::string ResourceVersionOf(const nlohmann::json& object) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  auto rv = m->find("resourceVersion");
  if (rv == m->end() || !rv->is_string()) return "";
  return rv->get<std::string>();
}

std::string KeyOf(const nlohmann::json& object) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  std::string name = m->value("name", "");
  std::string ns = m->value("namespace", "");
  return ns.empty() ? name : StrCat(ns, "/", name);
}

}  // namespace tessera::k8s
