#include "k8s/client/informer.h"

#include <future>

#include "common/strings.h"
#include "k8s/client/protobuf_wire.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

ListWatch::ListWatch(ApiClient& client, ListWatchOptions options)
    : client_(client),
      options_(std::move(options)),
      connection_(client.NewConnection()),
      backoff_(options_.backoff, options_.seed),
      random_(options_.seed) {}

ListWatch::~ListWatch() {
  // A subclass must have called Stop() already (its handlers are gone by now).
  Stop();
}

void ListWatch::Start() {
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void ListWatch::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ListWatch::Sleep(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stop_.load(); });
}

std::string ListWatch::Selectors() const {
  std::string q;
  if (!options_.label_selector.empty()) {
    StrAppend(&q, "&labelSelector=", QueryEscape(options_.label_selector));
  }
  if (!options_.field_selector.empty()) {
    StrAppend(&q, "&fieldSelector=", QueryEscape(options_.field_selector));
  }
  return q;
}

absl::Status ListWatch::List(std::string* resource_version) {
  using SteadyClock = std::chrono::steady_clock;
  const auto start = SteadyClock::now();
  SteadyClock::duration waited{}, parsed_in{}, handed_in{};
  size_t bytes = 0, n = 0;
  int pages = 0, protobuf_pages = 0;
  // No resourceVersion: a consistent read, as client-go relists after "too old".
  auto page_request = [this](const std::string& cont) {
    std::string path = StrCat(options_.path, "?limit=", options_.page_size, Selectors());
    if (!cont.empty()) StrAppend(&path, "&continue=", QueryEscape(cont));
    HttpRequest request{"GET", path, "", "", std::chrono::milliseconds(120'000)};
    if (options_.protobuf) request.accept = std::string(kAcceptProtobuf);
    return request;
  };
  // The page asked for ahead, on its own thread, which also parses it: while this thread decodes
  // and hands on one page, the next is fetched and parsed (the connection serves one request at
  // a time, and only that thread uses it until the future is read).
  struct Fetched {
    HttpResponse response;  // its body cleared once parsed
    std::optional<ListHead> head;
    absl::StatusOr<nlohmann::json> parsed = absl::UnknownError("not parsed");
    std::optional<ProtobufList> in_place;  // a protobuf page read in place (ReadsProtobufInPlace)
    SteadyClock::duration parse_time{};
    size_t bytes = 0;
    bool protobuf = false;
  };
  std::future<Fetched> ahead;
  const bool in_place = ReadsProtobufInPlace();
  auto fetch = [this, in_place](HttpRequest request) {
    return std::async(std::launch::async, [this, in_place, request = std::move(request)] {
      Fetched f;
      f.response = connection_->Do(request);
      if (!f.response.ok()) {
        // An error in protobuf reads as the JSON one would (StatusFromResponse).
        if (std::optional<std::string> j = ProtobufStatusAsJson(f.response.body)) {
          f.response.body = std::move(*j);
        }
        return f;
      }
      if (stop_) return f;
      f.bytes = f.response.body.size();
      const auto t = SteadyClock::now();
      f.protobuf = IsProtobufEnvelope(f.response.body);
      if (f.protobuf && in_place) {
        // Checked here (as libprotobuf would parse it), decoded item by item by the consumer.
        absl::StatusOr<ProtobufList> list =
            ReadProtobufList(std::make_shared<const std::string>(std::move(f.response.body)));
        f.response.body.clear();
        if (list.ok()) {
          f.head = ListHead{list->resource_version, list->continue_token};
          f.in_place = std::move(*list);
          f.parsed = nlohmann::json();
        } else {
          f.parsed = list.status();
        }
      } else if (f.protobuf) {
        if (std::optional<std::string> token = PeekProtobufContinue(f.response.body)) {
          f.head = ListHead{"", std::move(*token)};
        }
        f.parsed = ProtobufListToJson(f.response.body);
      } else {
        f.head = ReadListHead(f.response.body);
        f.parsed = ParseApiJson(f.response.body, options_.drop_managed_fields);
      }
      f.parse_time = SteadyClock::now() - t;
      if (f.parsed.ok()) {
        f.response.body.clear();
        f.response.body.shrink_to_fit();
      }
      return f;
    });
  };
  OnListBegin();
  HttpRequest request = page_request("");
  ahead = fetch(request);
  std::string rv;
  while (true) {
    auto t0 = SteadyClock::now();
    Fetched fetched = ahead.get();
    auto t1 = SteadyClock::now();
    waited += t1 - t0;
    if (stop_) return absl::CancelledError("stopped");
    absl::Status status = StatusFromResponse(request, fetched.response);
    if (!status.ok()) return status;
    bytes += fetched.bytes;
    parsed_in += fetched.parse_time;
    ++pages;
    protobuf_pages += fetched.protobuf ? 1 : 0;
    const std::optional<ListHead>& head = fetched.head;
    if (head && !head->continue_token.empty()) {
      request = page_request(head->continue_token);
      ahead = fetch(request);
    }
    if (!fetched.parsed.ok()) {
      return absl::DataLossError(
          StrCat("the answer does not read: ", FromAbsl(fetched.parsed.status().message())));
    }
    if (fetched.in_place) {
      auto t2 = SteadyClock::now();
      n += fetched.in_place->items.size();
      rv = fetched.in_place->resource_version;
      const std::string cont = fetched.in_place->continue_token;
      OnListPageProtobuf(std::move(*fetched.in_place));
      handed_in += SteadyClock::now() - t2;
      if (cont.empty()) break;
      continue;  // the next page was asked for above, with this page's token
    }
    nlohmann::json page = std::move(*fetched.parsed);
    auto t2 = SteadyClock::now();
    std::vector<nlohmann::json> items;
    if (auto it = page.find("items"); it != page.end() && it->is_array()) {
      items.reserve(it->size());
      for (nlohmann::json& item : *it) items.push_back(std::move(item));
    }
    n += items.size();
    OnListPage(std::move(items));
    handed_in += SteadyClock::now() - t2;
    const nlohmann::json& meta = page.value("metadata", nlohmann::json::object());
    rv = meta.value("resourceVersion", "");
    const std::string cont = meta.value("continue", "");
    if (cont.empty()) break;
    if (!head || head->continue_token != cont) {  // the head could not be read ahead
      if (ahead.valid()) (void)ahead.get();       // (a head the page contradicts: unused)
      request = page_request(cont);
      ahead = fetch(request);
    }
  }
  OnListEnd();
  const auto end = SteadyClock::now();
  *resource_version = rv;
  ++lists_;
  protobuf_pages_ += protobuf_pages;
  auto s = [](SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); };
  const std::string_view wire = protobuf_pages == 0       ? "JSON"
                                : protobuf_pages == pages ? "protobuf"
                                                          : "protobuf and JSON";
  spdlog::info(
      "{}: listed {} at resourceVersion {}: {} pages, {:.1f} MB of {} in {:.2f} s ({:.2f} s "
      "waiting for the next page, {:.2f} s parsing beside the decoding, {:.2f} s decoding and "
      "handing on)",
      options_.resource, n, rv, pages, bytes / 1e6, wire, s(end - start), s(waited), s(parsed_in),
      s(handed_in));
  return absl::OkStatus();
}

ListWatch::WatchEnd ListWatch::Watch(std::string* resource_version) {
  int timeout_s = options_.min_watch_seconds;
  if (options_.max_watch_seconds > options_.min_watch_seconds) {
    timeout_s +=
        static_cast<int>(random_.Uniform(options_.max_watch_seconds - options_.min_watch_seconds));
  }
  std::string path =
      StrCat(options_.path,
             "?watch=1&allowWatchBookmarks=true&resourceVersion=", QueryEscape(*resource_version),
             "&timeoutSeconds=", timeout_s, Selectors());
  HttpRequest request{"GET", path, "", "", std::chrono::milliseconds((timeout_s + 60) * 1000LL)};
  if (options_.protobuf) request.accept = std::string(kAcceptProtobuf);
  WatchDecoder decoder(options_.drop_managed_fields, options_.protobuf);
  bool too_old = false;
  absl::Status decode_error;
  auto start = std::chrono::steady_clock::now();
  ++watches_;
  auto on_data = [&](std::string_view bytes) {
    absl::Status s = decoder.Feed(bytes, [&](WatchEvent&& e) {
      if (too_old) return;
      switch (e.type) {
        case WatchEventType::kBookmark:
          if (std::string rv = ResourceVersionOf(e.object); !rv.empty()) *resource_version = rv;
          return;
        case WatchEventType::kError:
          if (IsTooOld(e)) {
            too_old = true;
          } else {
            decode_error = absl::UnavailableError(
                StrCat("watch ", options_.resource, ": ERROR event: ", e.object.dump()));
          }
          return;
        default: {
          std::string rv = ResourceVersionOf(e.object);
          ++events_;
          OnEvent(e.type, std::move(e.object));
          if (!rv.empty()) *resource_version = rv;
        }
      }
    });
    if (!s.ok()) decode_error = s;
    return !too_old && decode_error.ok() && !stop_;
  };
  HttpResponse response = connection_->Stream(request, on_data, [&] { return stop_.load(); });
  if (decoder.protobuf()) ++protobuf_watches_;
  if (std::optional<std::string> j = ProtobufStatusAsJson(response.body)) response.body = *j;
  if (stop_) return WatchEnd::kStopped;
  if (too_old) return WatchEnd::kTooOld;
  if (response.status == 410) return WatchEnd::kTooOld;
  if (!decode_error.ok()) {
    spdlog::warn("{}", FromAbsl(decode_error.message()));
    return WatchEnd::kFailed;
  }
  if (response.status == 200 && response.error.empty()) {
    // A clean end: the server's timeout. A watch closed very early counts as a failure so that a
    // server that keeps closing at once is not hammered.
    if (std::chrono::steady_clock::now() - start < std::chrono::seconds(1)) {
      return WatchEnd::kFailed;
    }
    return WatchEnd::kClosed;
  }
  absl::Status status = StatusFromResponse(request, response);
  if (response.status == 0) status = absl::UnavailableError(response.error);
  spdlog::warn("watch {}: {}", options_.resource, FromAbsl(status.message()));
  return WatchEnd::kFailed;
}

void ListWatch::Run() {
  bool need_list = true;
  std::string rv;
  while (!stop_) {
    if (need_list) {
      absl::Status s = List(&rv);
      if (stop_) return;
      if (s.code() == absl::StatusCode::kNotFound && options_.absent_retry.count() > 0) {
        if (!absent_) {
          spdlog::info(
              "list {}: the API server does not serve {} (404); none here, asking again "
              "every {} s",
              options_.resource, options_.path, options_.absent_retry.count() / 1000);
        }
        absent_ = true;
        OnListBegin();
        OnListEnd();
        ++lists_;
        if (!Sleep(options_.absent_retry)) return;
        continue;
      }
      if (s.ok() && absent_) {
        absent_ = false;
        spdlog::info("list {}: the API server serves {} now", options_.resource, options_.path);
      }
      if (!s.ok()) {
        ++failures_;
        auto d = backoff_.Next(std::chrono::steady_clock::now());
        spdlog::warn("list {}: {} (retrying in {} ms)", options_.resource, FromAbsl(s.message()),
                     d.count());
        if (!Sleep(d)) return;
        continue;
      }
      need_list = false;
      if (lists_ == 1 && !options_.first_watch_resource_version.empty()) {
        rv = options_.first_watch_resource_version;
      }
    }
    switch (Watch(&rv)) {
      case WatchEnd::kStopped:
        return;
      case WatchEnd::kClosed:
        backoff_.Reset();
        break;
      case WatchEnd::kTooOld:
        ++too_old_;
        spdlog::info("watch {}: resourceVersion {} is too old; listing again", options_.resource,
                     rv);
        need_list = true;
        break;
      case WatchEnd::kFailed: {
        ++failures_;
        auto d = backoff_.Next(std::chrono::steady_clock::now());
        if (!Sleep(d)) return;
        break;
      }
    }
  }
}

}  // namespace tessera::k8s
