#include "k8s/snapshot/snapshot.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/json_fields.h"
#include "common/status.h"
#include "common/strings.h"
#include "k8s/client/protobuf_value.h"
#include "k8s/client/protobuf_wire.h"
#include "k8s/client/watch.h"
#include "records/gpu_indices.h"
#include "records/names.h"
#include "records/queue.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

template <typename J>
bool NodeReady(const J& node) {
  const auto& conditions = JsonField(JsonField(node, "status"), "conditions");
  if (!conditions.is_array()) return false;
  for (const auto& c : conditions) {
    if (JsonStringField(c, "type") == "Ready") return JsonStringField(c, "status") == "True";
  }
  return false;
}

}  // namespace

std::optional<std::string> PeekContinue(std::string_view body) {
  // A list's JSON as the API server writes it: kind, apiVersion, metadata, then items. Only the
  // part before "items" is searched; metadata holds no strings of users.
  const size_t items = body.find("\"items\":");
  if (items == std::string_view::npos) return std::nullopt;
  const std::string_view head = body.substr(0, items);
  if (head.find("\"metadata\":{") == std::string_view::npos) return std::nullopt;
  constexpr std::string_view kKey = "\"continue\":\"";
  const size_t at = head.find(kKey);
  if (at == std::string_view::npos) return std::string();
  const size_t from = at + kKey.size();
  const size_t to = head.find('"', from);
  if (to == std::string_view::npos) return std::nullopt;
  const std::string_view token = head.substr(from, to - from);
  if (token.find('\\') != std::string_view::npos) return std::nullopt;  // escaped: parse it
  return std::string(token);
}

namespace {

// Fetches the pages of one list on a thread of its own, a page ahead of the reader, so that the
// API server serves page N+1 while this process parses and decodes page N. The next page's
// continue token is read from the page's metadata, which the API server writes before the items
// (PeekContinue); when it cannot be read there, the fetcher waits for the reader's (Continue).
// At most kQueued pages wait in memory.
class ListPager {
 public:
  struct Page {
    HttpRequest request;
    HttpResponse response;
    std::optional<std::string> peeked;  // the next page's token as read ahead; "" on the last
    bool later = false;                 // not the first page (a 410 there: the token expired)
    bool end = false;                   // no more pages
  };

  ListPager(ApiClient& client, std::string path, const SnapshotOptions& options)
      : connection_(client.NewConnection()), path_(std::move(path)), options_(options) {
    thread_ = std::thread([this] { Fetch(); });
  }
  ~ListPager() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Page Next() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty(); });
    Page page = std::move(queue_.front());
    queue_.pop_front();
    cv_.notify_all();
    return page;
  }
  // The next page's token, parsed by the reader from a page whose token could not be peeked.
  void Continue(std::string token) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      token_ = std::move(token);
    }
    cv_.notify_all();
  }

 private:
  static constexpr size_t kQueued = 3;

  void Fetch() {
    std::string cont;
    for (bool later = false;; later = true) {
      const char sep = path_.find('?') == std::string::npos ? '?' : '&';
      Page page;
      page.later = later;
      page.request =
          HttpRequest{"GET", StrCat(path_, std::string(1, sep), "limit=", options_.page_size), "",
                      "", options_.page_timeout};
      if (options_.protobuf) page.request.accept = std::string(kAcceptProtobuf);
      if (!cont.empty()) StrAppend(&page.request.path, "&continue=", QueryEscape(cont));
      // Transient failures (no answer, 429, 5xx) are retried as ApiClient retries them.
      for (int tries = 0;; ++tries) {
        page.response = connection_->Do(page.request);
        if (!IsTransient(page.response) || tries >= 4) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200 << tries));
      }
      // An error in protobuf reads as the JSON one would (StatusFromResponse's reason/message).
      if (page.response.status != 200) {
        if (std::optional<std::string> j = ProtobufStatusAsJson(page.response.body)) {
          page.response.body = std::move(*j);
        }
      }
      const bool ok = page.response.status == 200;
      if (ok) {
        page.peeked = IsProtobufEnvelope(page.response.body)
                          ? PeekProtobufContinue(page.response.body)
                          : PeekContinue(page.response.body);
      }
      const std::optional<std::string> peeked = page.peeked;
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || queue_.size() < kQueued; });
      if (stop_) return;
      queue_.push_back(std::move(page));
      cv_.notify_all();
      if (!ok) return;  // the reader reports it (or restarts the list)
      if (peeked.has_value()) {
        cont = *peeked;
      } else {
        cv_.wait(lock, [this] { return stop_ || token_.has_value(); });
        if (stop_) return;
        cont = *std::exchange(token_, std::nullopt);
      }
      if (cont.empty()) {
        Page end;
        end.end = true;
        queue_.push_back(std::move(end));
        cv_.notify_all();
        return;
      }
    }
  }

  std::unique_ptr<Connection> connection_;
  const std::string path_;
  const SnapshotOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Page> queue_;
  std::optional<std::string> token_;
  bool stop_ = false;
  std::thread thread_;
};

struct PageCounts {
  int64_t pages = 0;
  int64_t protobuf = 0;  // of which answered in protobuf
};

// Lists `path` page by page, handing each item to `on_item`: a page in JSON parsed, a page in
// protobuf read in place (protobuf_value.h: no tree in between). A continue token that expired
// (HTTP 410 on a later page: the list took longer than etcd keeps its revision) restarts the list
// from the beginning, at most twice; `reset` is called before each restart.
absl::Status ListAll(ApiClient& client, const std::string& path, std::string_view what,
                     const SnapshotOptions& options, const std::function<void()>& reset,
                     const std::function<void(json&&)>& on_item,
                     const std::function<void(const ProtobufValue&)>& on_protobuf_item,
                     PageCounts* pages) {
  for (int attempt = 0;; ++attempt) {
    ListPager pager(client, path, options);
    bool expired = false;
    for (;;) {
      ListPager::Page page = pager.Next();
      if (page.end) break;
      ++pages->pages;
      if (page.response.status == 410 && page.later && attempt < 2) {
        expired = true;
        break;
      }
      absl::Status status = StatusFromResponse(page.request, page.response);
      if (!status.ok()) {
        return absl::Status(status.code(), StrCat("list ", what, ": ", FromAbsl(status.message())));
      }
      const bool protobuf = IsProtobufEnvelope(page.response.body);
      pages->protobuf += protobuf ? 1 : 0;
      auto check_continue = [&](const std::string& cont) -> absl::Status {
        if (!page.peeked.has_value()) {
          pager.Continue(cont);
        } else if (*page.peeked != cont) {
          return absl::InternalError(StrCat("list ", what, ": the continue token read ahead (",
                                            *page.peeked, ") is not the page's (", cont, ")"));
        }
        return absl::OkStatus();
      };
      if (protobuf) {
        absl::StatusOr<ProtobufList> list =
            ReadProtobufList(std::make_shared<const std::string>(std::move(page.response.body)));
        if (!list.ok()) {
          return absl::DataLossError(StrCat(
              "list ", what,
              ": the answer is not a list in protobuf: ", FromAbsl(list.status().message())));
        }
        TESSERA_RETURN_IF_ERROR(check_continue(list->continue_token));
        for (const ProtobufValue& item : list->items) on_protobuf_item(item);
        continue;
      }
      absl::StatusOr<json> parsed = ParseApiJson(page.response.body, /*drop_managed_fields=*/true);
      if (!parsed.ok()) {
        return absl::DataLossError(StrCat(
            "list ", what, ": the answer is not JSON: ", FromAbsl(parsed.status().message())));
      }
      page.response.body.clear();
      page.response.body.shrink_to_fit();
      const json& next = JsonField(JsonField(*parsed, "metadata"), "continue");
      TESSERA_RETURN_IF_ERROR(check_continue(next.is_string() ? next.get<std::string>() : ""));
      json& items = (*parsed)["items"];
      if (items.is_array()) {
        for (json& item : items) on_item(std::move(item));
      }
    }
    if (!expired) return absl::OkStatus();
    reset();
  }
}

}  // namespace

namespace {

template <typename J>
SnapshotNode DecodeSnapshotNodeOf(const J& node) {
  SnapshotNode n;
  n.info = DecodeNode(node);
  n.ready = NodeReady(node);
  // Health is only in the record when some GPU is unhealthy; DecodeNode keeps only what placing
  // needs, so it is read here, from the same annotation, when it is there at all.
  if (n.info->inventory_error.empty() && n.info->has_inventory) {
    const auto& text = JsonField(JsonField(JsonField(node, "metadata"), "annotations"),
                                 records::kInventoryAnnotation);
    if (text.is_string()) {
      const std::string inventory_text = text.template get<std::string>();
      if (inventory_text.find("\"health\"") != std::string::npos) {
        absl::StatusOr<records::Inventory> inventory = records::InventoryFromJson(inventory_text);
        if (inventory.ok()) n.health = std::move(inventory->health);
      }
    }
  }
  return n;
}

}  // namespace

SnapshotNode DecodeSnapshotNode(const json& node) { return DecodeSnapshotNodeOf(node); }
SnapshotNode DecodeSnapshotNode(const ProtobufValue& node) { return DecodeSnapshotNodeOf(node); }

ClusterSnapshot::ClusterSnapshot(std::vector<SnapshotNode> nodes,
                                 std::vector<std::shared_ptr<const PodInfo>> pods)
    : nodes_(std::move(nodes)), pods_(std::move(pods)) {
  std::stable_sort(nodes_.begin(), nodes_.end(), [](const SnapshotNode& a, const SnapshotNode& b) {
    return a.name() < b.name();
  });
  nodes_.erase(std::unique(nodes_.begin(), nodes_.end(),
                           [](const SnapshotNode& a, const SnapshotNode& b) {
                             return a.name() == b.name();
                           }),
               nodes_.end());
  std::erase_if(pods_, [](const std::shared_ptr<const PodInfo>& p) { return p->terminal(); });
  std::stable_sort(pods_.begin(), pods_.end(),
                   [](const auto& a, const auto& b) { return a->key < b->key; });
  pods_.erase(std::unique(pods_.begin(), pods_.end(),
                          [](const auto& a, const auto& b) { return a->key == b->key; }),
              pods_.end());
}

ClusterSnapshot ClusterSnapshot::FromObjects(const std::vector<json>& nodes,
                                             const std::vector<json>& pods) {
  std::vector<SnapshotNode> n;
  n.reserve(nodes.size());
  for (const json& j : nodes) n.push_back(DecodeSnapshotNode(j));
  std::vector<std::shared_ptr<const PodInfo>> p;
  p.reserve(pods.size());
  for (const json& j : pods) p.push_back(DecodePod(j));
  return ClusterSnapshot(std::move(n), std::move(p));
}

const SnapshotNode* ClusterSnapshot::FindNode(std::string_view name) const {
  auto it =
      std::lower_bound(nodes_.begin(), nodes_.end(), name,
                       [](const SnapshotNode& n, std::string_view v) { return n.name() < v; });
  return it != nodes_.end() && it->name() == name ? &*it : nullptr;
}

std::vector<const PodInfo*> ClusterSnapshot::BoundPods() const {
  std::vector<const PodInfo*> out;
  for (const auto& p : pods_) {
    if (p->bound()) out.push_back(p.get());
  }
  return out;
}

std::vector<const PodInfo*> ClusterSnapshot::PendingPods(std::string_view scheduler_name) const {
  std::vector<const PodInfo*> out;
  for (const auto& p : pods_) {
    if (!p->bound() && !p->deleting && p->scheduler_name == scheduler_name) out.push_back(p.get());
  }
  return out;
}

std::unique_ptr<ClusterLedger> ClusterSnapshot::Ledger(
    const LedgerOptions& options, std::vector<SnapshotProblem>* problems) const {
  auto on_blocked = [problems](const std::string& key, const std::string& node,
                               const std::string& why) {
    if (problems != nullptr) {
      problems->push_back(
          SnapshotProblem{StrCat("pod/", key), node,
                          StrCat(why, "; node ", node, " takes no GPU pods while it is there")});
    }
  };
  auto ledger = std::make_unique<ClusterLedger>(options, nullptr, on_blocked);
  for (const SnapshotNode& n : nodes_) {
    ledger->OnNode(Change::kAdded, n.info);
    if (problems != nullptr && !n.info->inventory_error.empty()) {
      problems->push_back(SnapshotProblem{
          StrCat("node/", n.name()), n.name(),
          StrCat("annotation ", records::kInventoryAnnotation,
                 " is unusable, so none of its GPUs are used: ", n.info->inventory_error)});
    }
  }
  ledger->Sync();
  for (const auto& p : pods_) {
    if (p->bound()) ledger->Hold(p->key, Holding::OfBoundPod(*p), /*bound=*/true);
  }
  return ledger;
}

void ReadQueues(ApiClient& client, std::optional<std::vector<core::QueueSpec>>* out,
                std::vector<std::pair<std::string, std::string>>* errors,
                std::vector<records::QueueUsageStatus>* usage) {
  absl::StatusOr<json> list = client.Get(std::string(records::kQueuesPath));
  if (!list.ok() || !JsonField(*list, "items").is_array()) return;
  std::vector<core::QueueSpec> specs;
  for (const json& item : (*list)["items"]) {
    absl::StatusOr<core::QueueSpec> spec = records::QueueFromObject(item);
    if (usage != nullptr) {
      absl::StatusOr<std::optional<records::QueueUsageStatus>> used =
          records::QueueUsageFromObject(item);
      if (used.ok() && used->has_value()) usage->push_back(**std::move(used));
    }
    if (spec.ok()) {
      specs.push_back(*std::move(spec));
    } else {
      std::string name = JsonStringField(JsonField(item, "metadata"), "name");
      errors->emplace_back(name.empty() ? "?" : name, std::string(spec.status().message()));
    }
  }
  *out = std::move(specs);
}

void CountQueues(const ClusterSnapshot& snapshot, const ClusterLedger& ledger,
                 std::string_view scheduler_name, QueueBook* book) {
  const core::Engine& engine = ledger.engine();
  book->SetCluster(engine.cluster());
  for (const PodInfo* p : snapshot.BoundPods()) {
    const Holding* h = ledger.Find(p->key);
    if (h == nullptr || h->gpus.gpus.empty()) continue;
    const core::Placement* placed = ledger.Accounted(p->key) ? engine.Find(p->key) : nullptr;
    book->Held(p->key, p->queue,
               placed ? core::UsageOf(engine.cluster(), *placed) : core::QueueResources{});
  }
  for (const PodInfo* p : snapshot.PendingPods(scheduler_name)) {
    if (!p->input_error.empty() || p->gated || p->deleting ||
        p->request.gpu.kind == core::GpuAsk::Kind::kNone) {
      continue;
    }
    book->Waiting(p->key, p->queue, &p->request);
  }
}

int SparesPerDomainShown(const ClusterSnapshot& snapshot, const ClusterLedger& ledger) {
  const core::Engine& engine = ledger.engine();
  std::map<std::string, int> per_domain;
  int most = 0;
  for (const SnapshotNode& n : snapshot.nodes()) {
    if (n.info->spare_gpus.empty()) continue;
    absl::StatusOr<std::vector<int32_t>> spares = records::ParseGpuIndices(n.info->spare_gpus);
    const core::NodeId id = engine.cluster().FindNode(n.name());
    if (!spares.ok() || !id.valid()) continue;
    for (int32_t g : *spares) {
      if (g >= engine.cluster().node(id).gpu_count()) continue;
      // A GPU joined to no other by NVLink is its own domain.
      const std::string domain =
          engine.domains().NvlinkDomainOf(id, g).value_or(StrCat(n.name(), "/gpu", g));
      most = std::max(most, ++per_domain[domain]);
    }
  }
  return most;
}

absl::StatusOr<ClusterSnapshot> ReadSnapshot(ApiClient& client, const SnapshotOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const auto taken_at = std::chrono::system_clock::now();
  std::vector<SnapshotNode> nodes;
  std::vector<std::shared_ptr<const PodInfo>> pods;
  PageCounts node_pages, pod_pages;
  absl::Status node_status;
  // Nodes on a second thread while this one lists pods (each with its own connection).
  std::thread node_thread([&] {
    node_status = ListAll(
        client,
        options.node_selector.empty()
            ? std::string("/api/v1/nodes")
            : StrCat("/api/v1/nodes?labelSelector=", QueryEscape(options.node_selector)),
        "nodes", options, [&] { nodes.clear(); },
        [&](json&& item) { nodes.push_back(DecodeSnapshotNode(item)); },
        [&](const ProtobufValue& item) { nodes.push_back(DecodeSnapshotNode(item)); }, &node_pages);
  });
  const std::string pods_path =
      options.pod_namespace.empty()
          ? std::string("/api/v1/pods")
          : StrCat("/api/v1/namespaces/", QueryEscape(options.pod_namespace), "/pods");
  absl::Status pod_status = ListAll(
      client,
      StrCat(pods_path,
             "?fieldSelector=", QueryEscape("status.phase!=Succeeded,status.phase!=Failed")),
      "pods", options, [&] { pods.clear(); }, [&](json&& item) { pods.push_back(DecodePod(item)); },
      [&](const ProtobufValue& item) { pods.push_back(DecodePod(item)); }, &pod_pages);
  node_thread.join();
  std::string nodes_error;
  if (!node_status.ok() && options.nodes_optional &&
      node_status.code() == absl::StatusCode::kPermissionDenied) {
    nodes_error = std::string(FromAbsl(node_status.message()));
    nodes.clear();
  } else if (!node_status.ok()) {
    return node_status;
  }
  if (!pod_status.ok()) return pod_status;
  ClusterSnapshot snapshot(std::move(nodes), std::move(pods));
  snapshot.pod_namespace = options.pod_namespace;
  snapshot.nodes_error = std::move(nodes_error);
  snapshot.server = client.config().server;
  snapshot.taken_at = taken_at;
  snapshot.pages = node_pages.pages + pod_pages.pages;
  snapshot.protobuf_pages = node_pages.protobuf + pod_pages.protobuf;
  snapshot.read_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return snapshot;
}

}  // namespace tessera::k8s
