#include "agent/discovery/json_lines.h"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <vector>

#include "common/strings.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

// An input iterator over the text that publishes how far it has been advanced.
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const { return *p_; }
  TrackingIterator& operator++() {
    ++p_;
    if (p_ > *furthest_) *furthest_ = p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator old = *this;
    ++*this;
    return old;
  }
  bool operator==(const TrackingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const TrackingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char** furthest_;
};

std::string EscapePointerToken(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Builds the DOM and the line table. The parser has read up to `*furthest` when an event comes:
// the token itself and at most one character of look-ahead (a number's terminator), so the
// token's last character is the last non-space character before that point.
class Handler {
 public:
  Handler(std::string_view text, const char** furthest, JsonWithLines* out)
      : text_(text), furthest_(furthest), out_(out) {}

  bool null() { return Value(json(nullptr)); }
  bool boolean(bool v) { return Value(json(v)); }
  bool number_integer(json::number_integer_t v) { return Value(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return Value(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return Value(json(v)); }
  bool string(std::string& v) { return Value(json(std::move(v))); }
  bool binary(json::binary_t&) { return false; }
  bool start_object(std::size_t) { return Open(json::object()); }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(json::array()); }
  bool end_array() { return Close(); }
  bool key(std::string& k) {
    if (!stack_.empty() && stack_.back().node->contains(k)) {
      error_ = StrCat("duplicate key \"", k, "\"");
      return false;
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    json* node;
    std::string pointer;
  };

  int CurrentLine() const {
    const char* end = *furthest_;
    const char* begin = text_.data();
    while (end > begin &&
           (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' || end[-1] == '\r')) {
      --end;
    }
    int line = 1;
    for (const char* p = begin; p < end; ++p) line += *p == '\n';
    return line;
  }

  // Places `v` where the parser is (the root, the next array element or the current key) and
  // returns it with its pointer.
  std::pair<json*, std::string> Place(json v) {
    if (stack_.empty()) {
      out_->value = std::move(v);
      return {&out_->value, ""};
    }
    Frame& top = stack_.back();
    if (top.node->is_array()) {
      std::string pointer = StrCat(top.pointer, "/", top.node->size());
      top.node->push_back(std::move(v));
      return {&top.node->back(), std::move(pointer)};
    }
    std::string pointer = StrCat(top.pointer, "/", EscapePointerToken(key_));
    json& slot = (*top.node)[key_];
    slot = std::move(v);
    return {&slot, std::move(pointer)};
  }

  bool Value(json v) {
    auto [node, pointer] = Place(std::move(v));
    out_->lines[pointer] = CurrentLine();
    return true;
  }
  bool Open(json v) {
    auto [node, pointer] = Place(std::move(v));
    out_->lines[pointer] = CurrentLine();
    stack_.push_back(Frame{node, std::move(pointer)});
    return true;
  }
  bool Close() {
    stack_.pop_back();
    return true;
  }

  std::string_view text_;
  const char** furthest_;
  JsonWithLines* out_;
  std::vector<Frame> stack_;
  std::string key_;
  std::string error_;
};

}  // namespace

int JsonWithLines::LineOf(std::string_view pointer) const {
  std::string p(pointer);
  while (true) {
    auto it = lines.find(p);
    if (it != lines.end()) return it->second;
    if (p.empty()) return 0;
    p.resize(p.rfind('/'));
  }
}

absl::StatusOr<JsonWithLines> ParseJsonWithLines(std::string_view text, std::string_view source) {
  JsonWithLines out;
  const char* furthest = text.data();
  Handler handler(text, &furthest, &out);
  TrackingIterator first(text.data(), &furthest);
  TrackingIterator last(text.data() + text.size(), &furthest);
  bool ok = false;
  try {
    ok = json::sax_parse(first, last, &handler);
  } catch (const json::exception& e) {  // e.g. a number out of range
    return absl::InvalidArgumentError(StrCat(source, ": not valid JSON: ", e.what()));
  }
  if (!ok) {
    // The offending character is the last one the parser read.
    const size_t offset = static_cast<size_t>(furthest - text.data());
    const size_t at = offset > 0 ? std::min(offset, text.size()) - 1 : 0;
    int line = 1, column = 1;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string what = handler.error();
    // nlohmann's message repeats its own position ("syntax error while parsing ... - ..."):
    // keep what comes after the last " - ".
    if (size_t dash = what.rfind(" - "); dash != std::string::npos) what = what.substr(dash + 3);
    return absl::InvalidArgumentError(
        StrCat(source, ":", line, ":", column, ": not valid JSON: ", what));
  }
  return out;
}

}  // namespace tessera::agent
