// List + watch of one resource, kept in a local cache (client-go's reflector and informer).
//
// ListWatch runs one thread: it lists (paginated, a consistent read), then watches from the
// list's resourceVersion with bookmarks on, and keeps the last resourceVersion it saw (events and
// bookmarks). A watch that ends cleanly (the server's timeoutSeconds, picked at random in
// [300, 600) s as client-go does) is resumed from that version at once; a broken one after a
// backoff (800 ms doubling to 30 s, jittered); a "too old" answer (HTTP 410, or an ERROR event
// with code 410) starts a new list. The thread only decodes and hands events on: it never
// touches the consumer's state (STYLE.md "Concurrency").
//
// A list is read page by page (`page_size` objects, limit/continue): each page is handed on as
// soon as it is decoded. A second thread fetches and parses: it reads page k's continue token
// from the head of the body (ReadListHead), and the next page is asked for at once, so that the
// API server prepares page k+1 and the second thread parses it while this thread decodes and
// hands on page k.
//
// With `protobuf` (Pods and Nodes only: built-in types), lists and watches ask Kubernetes'
// protobuf with JSON as the API server's fallback (protobuf_wire.h). An informer given a decoder
// of ProtobufValue (protobuf_value.h; DecodePod and DecodeNode have one: the same template as
// their JSON decoder) decodes a protobuf list page's items in place, straight into its records,
// without a JSON tree in between ("decode once", issue 33); otherwise, and for watch events, the
// answer is read into the same JSON shape, so the consumer's decoder is the same for both wires.
//
// Informer<T> decodes each object into an immutable T on that thread, keeps key -> T, and tells
// its handler what changed: Added / Updated per object as each page arrives, then, when the list
// is complete, Deleted for every object the list no longer holds, then Synced. So a consumer that
// applies events in order mirrors the server after every Synced (between a list's pages it holds
// the newer objects of the pages read so far and the older ones of the rest, as during a watch).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "common/backoff.h"
#include "common/strings.h"
#include "k8s/client/http.h"
#include "k8s/client/protobuf_value.h"
#include "k8s/client/watch.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

struct ListWatchOptions {
  std::string resource;        // for logs: "pods"
  std::string path;            // collection path: "/api/v1/pods"
  std::string label_selector;  // optional
  std::string field_selector;  // optional
  int page_size = 500;
  bool drop_managed_fields = true;  // see ParseApiJson
  // Ask lists and watches in protobuf (only for built-in types that have it: Pods, Nodes; a
  // resource without it is answered in JSON, which is read as well).
  bool protobuf = false;
  Backoff::Params backoff;  // client-go's reflector defaults
  int min_watch_seconds = 300;
  int max_watch_seconds = 600;
  uint64_t seed = 1;
  // A resource the API server may not serve (an API behind a feature gate, a CRD not installed):
  // when above zero, a list answered 404 counts as an empty list (the consumer is synced and holds
  // nothing), is logged once (and once more when the resource appears), and is asked again after
  // this long instead of backing off. Zero: a 404 is a failure like any other.
  std::chrono::milliseconds absent_retry{0};
  // Test hook: after the first list, watch from this resourceVersion instead of the list's, to
  // get a genuine "too old" answer from the server and exercise the relist.
  std::string first_watch_resource_version;
};

class ListWatch {
 public:
  ListWatch(ApiClient& client, ListWatchOptions options);
  virtual ~ListWatch();
  ListWatch(const ListWatch&) = delete;
  ListWatch& operator=(const ListWatch&) = delete;

  void Start();
  // Stops the thread (within about a second) and joins it. Idempotent. Subclasses call it in their
  // destructor, before their own members go.
  void Stop();

  bool synced() const { return lists_.load() > 0; }
  const ListWatchOptions& options() const { return options_; }
  // Counters for metrics and tests.
  int64_t lists() const { return lists_.load(); }
  int64_t too_old() const { return too_old_.load(); }
  int64_t watches() const { return watches_.load(); }
  int64_t failures() const { return failures_.load(); }
  int64_t events() const { return events_.load(); }
  // List pages and watches that came in protobuf (the rest came in JSON).
  int64_t protobuf_pages() const { return protobuf_pages_.load(); }
  int64_t protobuf_watches() const { return protobuf_watches_.load(); }

 protected:
  // A complete list (the first, or after "too old") replaces everything known: OnListBegin, then
  // OnListPage for each page in order, then OnListEnd. A list that fails part-way is started
  // again from OnListBegin.
  virtual void OnListBegin() = 0;
  virtual void OnListPage(std::vector<nlohmann::json>&& items) = 0;
  // A page in protobuf, read in place, for a consumer that decodes it so (ReadsProtobufInPlace).
  virtual bool ReadsProtobufInPlace() const { return false; }
  virtual void OnListPageProtobuf(ProtobufList&& /*page*/) {}
  virtual void OnListEnd() = 0;
  // ADDED, MODIFIED or DELETED.
  virtual void OnEvent(WatchEventType type, nlohmann::json&& object) = 0;

 private:
  enum class WatchEnd { kClosed, kTooOld, kFailed, kStopped };
  void Run();
  absl::Status List(std::string* resource_version);
  WatchEnd Watch(std::string* resource_version);
  // Sleeps unless stopped first; false when stopped.
  bool Sleep(std::chrono::milliseconds d);
  std::string Selectors() const;

  ApiClient& client_;
  ListWatchOptions options_;
  std::unique_ptr<Connection> connection_;
  Backoff backoff_;
  Random random_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int64_t> lists_{0}, too_old_{0}, watches_{0}, failures_{0}, events_{0};
  std::atomic<int64_t> protobuf_pages_{0}, protobuf_watches_{0};
  bool absent_ = false;  // the last list was answered 404 (absent_retry); Run's thread only
};

template <typename T>
class Informer final : public ListWatch {
 public:
  struct Event {
    enum Kind { kAdded, kUpdated, kDeleted, kSynced };
    Kind kind = kAdded;
    std::string key;
    std::shared_ptr<const T> old_object;  // Updated, Deleted
    std::shared_ptr<const T> object;      // Added, Updated; for Deleted the last state
  };
  using Decode = std::function<std::shared_ptr<const T>(const nlohmann::json&)>;
  using DecodeProtobuf = std::function<std::shared_ptr<const T>(const ProtobufValue&)>;
  using Handler = std::function<void(Event&&)>;

  Informer(ApiClient& client, ListWatchOptions options, Decode decode, Handler handler)
      : Informer(client, std::move(options), std::move(decode), nullptr, std::move(handler)) {}
  // With `decode_protobuf`, the items of a list page in protobuf are decoded in place by it.
  Informer(ApiClient& client, ListWatchOptions options, Decode decode,
           DecodeProtobuf decode_protobuf, Handler handler)
      : ListWatch(client, std::move(options)),
        decode_(std::move(decode)),
        decode_protobuf_(std::move(decode_protobuf)),
        handler_(std::move(handler)) {}
  ~Informer() override { Stop(); }

  std::shared_ptr<const T> Get(const std::string& key) const {
    std::lock_guard<std::mutex> lock(store_mu_);
    auto it = store_.find(key);
    return it == store_.end() ? nullptr : it->second;
  }
  std::vector<std::shared_ptr<const T>> List() const {
    std::lock_guard<std::mutex> lock(store_mu_);
    std::vector<std::shared_ptr<const T>> out;
    out.reserve(store_.size());
    for (const auto& [k, v] : store_) out.push_back(v);
    return out;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(store_mu_);
    return store_.size();
  }

 protected:
  void OnListBegin() override { listed_.clear(); }

  void OnListPage(std::vector<nlohmann::json>&& items) override {
    std::vector<Event> out;
    out.reserve(items.size());
    for (const nlohmann::json& item : items) {
      std::string key = KeyOf(item);
      out.push_back(Event{Event::kAdded, key, nullptr, decode_(item)});
      listed_.insert(std::move(key));
    }
    Listed(std::move(out));
  }

  bool ReadsProtobufInPlace() const override { return decode_protobuf_ != nullptr; }

  void OnListPageProtobuf(ProtobufList&& page) override {
    std::vector<Event> out;
    out.reserve(page.items.size());
    for (const ProtobufValue& item : page.items) {
      const ProtobufValue meta = item.Field("metadata");
      const std::string ns = meta.Field("namespace").String();
      std::string key =
          ns.empty() ? meta.Field("name").String() : StrCat(ns, "/", meta.Field("name").String());
      out.push_back(Event{Event::kAdded, key, nullptr, decode_protobuf_(item)});
      listed_.insert(std::move(key));
    }
    Listed(std::move(out));
  }

  // A page's objects, decoded: into the store, then to the handler.
  void Listed(std::vector<Event>&& out) {
    {
      std::lock_guard<std::mutex> lock(store_mu_);
      for (Event& e : out) {
        std::shared_ptr<const T>& slot = store_[e.key];
        if (slot) {
          e.kind = Event::kUpdated;
          e.old_object = std::move(slot);
        }
        slot = e.object;
      }
    }
    for (Event& e : out) handler_(std::move(e));
  }

  void OnListEnd() override {
    std::vector<Event> out;
    {
      std::lock_guard<std::mutex> lock(store_mu_);
      for (auto it = store_.begin(); it != store_.end();) {
        if (listed_.contains(it->first)) {
          ++it;
          continue;
        }
        out.push_back(Event{Event::kDeleted, it->first, it->second, it->second});
        store_.erase(it++);
      }
    }
    listed_.clear();
    for (Event& e : out) handler_(std::move(e));
    handler_(Event{Event::kSynced, "", nullptr, nullptr});
  }

  void OnEvent(WatchEventType type, nlohmann::json&& object) override {
    std::string key = KeyOf(object);
    std::shared_ptr<const T> obj = decode_(object);
    Event e;
    e.key = key;
    {
      std::lock_guard<std::mutex> lock(store_mu_);
      auto it = store_.find(key);
      std::shared_ptr<const T> old = it == store_.end() ? nullptr : it->second;
      if (type == WatchEventType::kDeleted) {
        if (it != store_.end()) store_.erase(it);
        e.kind = Event::kDeleted;
        e.old_object = old;
        e.object = obj;
      } else {
        e.kind = old ? Event::kUpdated : Event::kAdded;
        e.old_object = old;
        e.object = obj;
        store_[key] = obj;
      }
    }
    handler_(std::move(e));
  }

 private:
  Decode decode_;
  DecodeProtobuf decode_protobuf_;
  Handler handler_;
  mutable std::mutex store_mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<const T>> store_;
  absl::flat_hash_set<std::string> listed_;  // keys of the list being read (list thread only)
};

}  // namespace tessera::k8s
