#include "k8s/client/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <map>
#include <thread>
#include <unordered_map>

#include "absl/strings/cord.h"
#include "common/random.h"
#include "common/status.h"
#include "common/strings.h"

namespace tessera::k8s {
namespace {

constexpr std::string_view kHttpStatusPayload = "tessera.dev/http-status";
constexpr std::string_view kReasonPayload = "tessera.dev/k8s-reason";

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<HttpResponse*>(user)->body.append(data, size * n);
  return size * n;
}

size_t ReadHeader(char* data, size_t size, size_t n, void* user) {
  std::string_view line(data, size * n);
  constexpr std::string_view kRetryAfter = "retry-after:";
  if (line.size() > kRetryAfter.size()) {
    std::string lower(line.substr(0, kRetryAfter.size()));
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower == kRetryAfter) {
      int v = std::atoi(std::string(line.substr(kRetryAfter.size())).c_str());
      if (v >= 0) static_cast<HttpResponse*>(user)->retry_after_s = v;
    }
  }
  return size * n;
}

void Finish(CURL* curl, CURLcode code, const char* errbuf, HttpResponse* out) {
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  out->status = code == CURLE_OK ? status : 0;
  if (code != CURLE_OK) {
    out->error = errbuf != nullptr && errbuf[0] != '\0' ? std::string(errbuf)
                                                        : std::string(curl_easy_strerror(code));
    if (status != 0) out->error += StrCat(" (after HTTP ", status, ")");
  }
}

std::chrono::milliseconds RetryDelay(const Backoff::Params& p, int attempt, int retry_after_s,
                                     Random& random) {
  if (retry_after_s >= 0) {
    return std::min(std::chrono::milliseconds(retry_after_s * 1000LL),
                    std::chrono::milliseconds(10'000));
  }
  return Backoff::Delay(p, attempt, random.UniformDouble());
}

}  // namespace

std::string_view ContentTypeOf(PatchType type) {
  switch (type) {
    case PatchType::kMerge:
      return "application/merge-patch+json";
    case PatchType::kStrategic:
      return "application/strategic-merge-patch+json";
    case PatchType::kJson:
      return "application/json-patch+json";
  }
  return "application/merge-patch+json";
}

bool IsTransient(const HttpResponse& r) {
  return (r.status == 0 && !r.permanent) || r.status == 429 || r.status == 500 || r.status == 502 ||
         r.status == 503 || r.status == 504;
}

absl::Status StatusFromResponse(const HttpRequest& request, const HttpResponse& response) {
  if (response.ok()) return absl::OkStatus();
  std::string where = StrCat(request.method, " ", request.path);
  if (response.status == 0) {
    return absl::UnavailableError(StrCat(where, ": ", response.error));
  }
  std::string reason;
  std::string message;
  try {
    nlohmann::json j = nlohmann::json::parse(response.body);
    if (j.is_object()) {
      if (j.contains("reason") && j["reason"].is_string()) reason = j["reason"];
      if (j.contains("message") && j["message"].is_string()) message = j["message"];
    }
  } catch (const nlohmann::json::exception&) {
    message = response.body.substr(0, 300);
  }
  std::string text = StrCat(where, ": HTTP ", response.status,
                            reason.empty() ? "" : StrCat(" ", reason), ": ", message);
  if (!response.error.empty()) StrAppend(&text, "; ", response.error);
  absl::StatusCode code;
  switch (response.status) {
    case 400:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case 401:
      code = absl::StatusCode::kUnauthenticated;
      break;
    case 403:
      code = absl::StatusCode::kPermissionDenied;
      break;
    case 404:
      code = absl::StatusCode::kNotFound;
      break;
    case 409:
      code =
          reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists : absl::StatusCode::kAborted;
      break;
    case 410:
      code = absl::StatusCode::kOutOfRange;
      break;
    case 422:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case 429:
      code = absl::StatusCode::kResourceExhausted;
      break;
    default:
      code = response.status >= 500 ? absl::StatusCode::kUnavailable : absl::StatusCode::kUnknown;
  }
  absl::Status status(code, text);
  status.SetPayload(ToAbsl(kHttpStatusPayload), absl::Cord(std::to_string(response.status)));
  if (!reason.empty()) status.SetPayload(ToAbsl(kReasonPayload), absl::Cord(reason));
  return status;
}

int HttpStatusOf(const absl::Status& status) {
  auto p = status.GetPayload(ToAbsl(kHttpStatusPayload));
  if (!p) return 0;
  return std::atoi(std::string(*p).c_str());
}

std::string ReasonOf(const absl::Status& status) {
  auto p = status.GetPayload(ToAbsl(kReasonPayload));
  return p ? std::string(*p) : std::string();
}

std::string QueryEscape(std::string_view value) {
  std::string out;
  for (unsigned char c : value) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

// --- Transport -------------------------------------------------------------------------------

absl::StatusOr<std::shared_ptr<Transport>> Transport::Create(ClientConfig config,
                                                             std::string user_agent) {
  GlobalInit();
  if (config.server.empty()) return absl::InvalidArgumentError("no API server address");
  if (!config.tls_server_name.empty()) {
    return absl::InvalidArgumentError(
        StrCat(config.source, ": tls-server-name is not supported by this client"));
  }
  std::shared_ptr<Transport> t(new Transport());
  t->tokens_ = std::make_unique<TokenSource>(config);
  // client-go's exec Authenticator steps aside when the config has its own credentials.
  const bool static_credentials =
      !config.bearer_token.empty() || !config.token_file.empty() || !config.client_cert_pem.empty();
  if (config.exec && !static_credentials) {
    t->exec_ = std::make_unique<ExecCredentialSource>(config);
  }
  t->config_ = std::move(config);
  t->user_agent_ = std::move(user_agent);
  CURLSH* share = curl_share_init();
  if (share == nullptr) return absl::InternalError("curl_share_init failed");
  curl_share_setopt(share, CURLSHOPT_LOCKFUNC, &Transport::Lock);
  curl_share_setopt(share, CURLSHOPT_UNLOCKFUNC, &Transport::Unlock);
  curl_share_setopt(share, CURLSHOPT_USERDATA, t.get());
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  curl_share_setopt(share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
  t->share_ = share;
  return t;
}

Transport::~Transport() {
  if (share_ != nullptr) curl_share_cleanup(static_cast<CURLSH*>(share_));
}

void Transport::Lock(void*, int data, int, void* user) {
  static_cast<Transport*>(user)->share_mu_[data & 7].lock();
}
void Transport::Unlock(void*, int data, void* user) {
  static_cast<Transport*>(user)->share_mu_[data & 7].unlock();
}

absl::StatusOr<std::shared_ptr<const Credentials>> Transport::Prepare(void* handle,
                                                                      const HttpRequest& r,
                                                                      curl_slist** headers) {
  std::shared_ptr<const Credentials> creds;
  if (exec_) {
    TESSERA_ASSIGN_OR_RETURN(creds, exec_->Get());
  }
  CURL* curl = static_cast<CURL*>(handle);
  std::string url = config_.server + r.path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_SHARE, share_);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, user_agent_.c_str());
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 10'000L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout.count()));
  // HTTP/1.1, not libcurl's default HTTP/2 over TLS (the asynchronous client sets its own): each
  // connection has its own socket either way, and kube-apiserver v1.37.2 sends a protobuf list
  // page faster over HTTP/1.1 (first pages of 500 pods, curl, load 5-6: 30-34 ms against 43-79 ms
  // over HTTP/2; JSON 57-81 ms on either; bench/results/startup.md).
  curl_easy_setopt(curl, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  if (r.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (r.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (r.method != "GET" && (!r.body.empty() || r.method == "POST")) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, r.body.c_str());
  }
  curl_slist* h = nullptr;
  h = curl_slist_append(
      h, StrCat("Accept: ", r.accept.empty() ? std::string("application/json") : r.accept).c_str());
  h = curl_slist_append(h, "Expect:");
  if (!r.content_type.empty()) {
    h = curl_slist_append(h, StrCat("Content-Type: ", r.content_type).c_str());
  }
  if (std::string token = creds ? creds->token : tokens_->Token(); !token.empty()) {
    h = curl_slist_append(h, StrCat("Authorization: Bearer ", token).c_str());
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
  *headers = h;
  if (config_.insecure_skip_tls_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  } else if (!config_.ca_pem.empty()) {
    curl_blob ca{const_cast<char*>(config_.ca_pem.data()), config_.ca_pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(curl, CURLOPT_CAINFO_BLOB, &ca);
  }
  // A certificate from the plugin replaces none of the config's (the plugin runs only without
  // one); curl keys connection reuse on it, so a renewed certificate gets new connections.
  const std::string& cert_pem = creds ? creds->client_cert_pem : config_.client_cert_pem;
  const std::string& key_pem = creds ? creds->client_key_pem : config_.client_key_pem;
  if (!cert_pem.empty()) {
    curl_blob cert{const_cast<char*>(cert_pem.data()), cert_pem.size(), CURL_BLOB_COPY};
    curl_blob key{const_cast<char*>(key_pem.data()), key_pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(curl, CURLOPT_SSLCERTTYPE, "PEM");
    curl_easy_setopt(curl, CURLOPT_SSLCERT_BLOB, &cert);
    curl_easy_setopt(curl, CURLOPT_SSLKEYTYPE, "PEM");
    curl_easy_setopt(curl, CURLOPT_SSLKEY_BLOB, &key);
  }
  return creds;
}

bool Transport::Reauthenticate(const std::shared_ptr<const Credentials>& used,
                               HttpResponse* response) {
  if (!exec_ || used == nullptr) return false;
  absl::StatusOr<bool> renewed = exec_->Rejected(used);
  if (!renewed.ok()) {
    response->error = StrCat("renewing the credentials after this answer failed: ",
                             FromAbsl(renewed.status().message()));
    return false;
  }
  return *renewed;
}

// --- Connection ------------------------------------------------------------------------------

Connection::Connection(std::shared_ptr<Transport> transport)
    : transport_(std::move(transport)), curl_(curl_easy_init()) {
  TESSERA_CHECK(curl_ != nullptr);
}

Connection::~Connection() { curl_easy_cleanup(static_cast<CURL*>(curl_)); }

HttpResponse Connection::Do(const HttpRequest& request) {
  return Stream(request, nullptr, nullptr);
}

namespace {

struct StreamState {
  CURL* curl;
  HttpResponse* response;
  const std::function<bool(std::string_view)>* on_data;
  const std::function<bool()>* stop;
};

size_t StreamBody(char* data, size_t size, size_t n, void* user) {
  auto* s = static_cast<StreamState*>(user);
  long status = 0;
  curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status);
  if (s->on_data == nullptr || !*s->on_data || status != 200) {
    s->response->body.append(data, size * n);
    return size * n;
  }
  return (*s->on_data)(std::string_view(data, size * n)) ? size * n : 0;
}

int StreamProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* s = static_cast<StreamState*>(user);
  return s->stop != nullptr && *s->stop && (*s->stop)() ? 1 : 0;
}

}  // namespace

HttpResponse Connection::Stream(const HttpRequest& request,
                                const std::function<bool(std::string_view)>& on_data,
                                const std::function<bool()>& stop) {
  return Stream(request, on_data, stop, /*reauthenticated=*/false);
}

HttpResponse Connection::Stream(const HttpRequest& request,
                                const std::function<bool(std::string_view)>& on_data,
                                const std::function<bool()>& stop, bool reauthenticated) {
  CURL* curl = static_cast<CURL*>(curl_);
  curl_easy_reset(curl);
  HttpResponse response;
  curl_slist* headers = nullptr;
  absl::StatusOr<std::shared_ptr<const Credentials>> creds =
      transport_->Prepare(curl, request, &headers);
  if (!creds.ok()) {
    response.error = StrCat("no credentials: ", FromAbsl(creds.status().message()));
    response.permanent = true;
    return response;
  }
  StreamState state{curl, &response, on_data ? &on_data : nullptr, stop ? &stop : nullptr};
  char errbuf[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &StreamBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &state);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &ReadHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response);
  if (stop) {
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &StreamProgress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &state);
  }
  CURLcode code = curl_easy_perform(curl);
  Finish(curl, code, errbuf, &response);
  transport_->requests().Count(request.method, response.status);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  // Refused with an exec plugin's credentials: once more with renewed ones (nothing was done).
  if (response.status == 401 && !reauthenticated && transport_->Reauthenticate(*creds, &response)) {
    return Stream(request, on_data, stop, /*reauthenticated=*/true);
  }
  return response;
}

// --- ApiClient -------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(ClientConfig config,
                                                             ApiClientOptions options) {
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<Transport> transport,
                           Transport::Create(std::move(config), options.user_agent));
  return std::unique_ptr<ApiClient>(new ApiClient(std::move(transport), std::move(options)));
}

std::unique_ptr<Connection> ApiClient::NewConnection() const {
  return std::make_unique<Connection>(transport_);
}

HttpResponse ApiClient::Call(const HttpRequest& request) {
  thread_local Random random(std::hash<std::thread::id>()(std::this_thread::get_id()));
  HttpResponse response;
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<Connection> conn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        conn = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!conn) conn = NewConnection();
    response = conn->Do(request);
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle_.push_back(std::move(conn));
    }
    if (!IsTransient(response) || attempt >= options_.max_attempts) return response;
    std::this_thread::sleep_for(
        RetryDelay(options_.backoff, attempt, response.retry_after_s, random));
  }
}

absl::StatusOr<nlohmann::json> ApiClient::JsonCall(HttpRequest request) {
  HttpResponse response = Call(request);
  TESSERA_RETURN_IF_ERROR(StatusFromResponse(request, response));
  if (response.body.empty()) return nlohmann::json();
  try {
    return nlohmann::json::parse(response.body);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(
        StrCat(request.method, " ", request.path, ": the answer is not JSON: ", e.what()));
  }
}

absl::StatusOr<nlohmann::json> ApiClient::Get(const std::string& path) {
  return JsonCall(HttpRequest{"GET", path, "", "", std::chrono::milliseconds(60'000)});
}

absl::StatusOr<nlohmann::json> ApiClient::Create(const std::string& path,
                                                 const nlohmann::json& object) {
  return JsonCall(HttpRequest{"POST", path, object.dump(), "application/json"});
}

absl::StatusOr<nlohmann::json> ApiClient::Update(const std::string& path,
                                                 const nlohmann::json& object) {
  return JsonCall(HttpRequest{"PUT", path, object.dump(), "application/json"});
}

absl::StatusOr<nlohmann::json> ApiClient::Patch(const std::string& path, PatchType type,
                                                const nlohmann::json& patch) {
  return JsonCall(HttpRequest{"PATCH", path, patch.dump(), std::string(ContentTypeOf(type))});
}

absl::StatusOr<nlohmann::json> ApiClient::Delete(const std::string& path,
                                                 const nlohmann::json& options) {
  HttpRequest r{"DELETE", path, "", ""};
  if (!options.is_null()) {
    r.body = options.dump();
    r.content_type = "application/json";
  }
  return JsonCall(std::move(r));
}

nlohmann::json BindingBody(std::string_view ns, std::string_view pod, std::string_view uid,
                           std::string_view node, const nlohmann::json& annotations) {
  nlohmann::json meta = {{"name", pod}, {"namespace", ns}};
  if (!uid.empty()) meta["uid"] = uid;
  if (annotations.is_object() && !annotations.empty()) meta["annotations"] = annotations;
  return {{"apiVersion", "v1"},
          {"kind", "Binding"},
          {"metadata", std::move(meta)},
          {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
}

absl::Status ApiClient::Bind(std::string_view ns, std::string_view pod, std::string_view uid,
                             std::string_view node, const nlohmann::json& annotations) {
  std::string path = StrCat("/api/v1/namespaces/", ns, "/pods/", pod, "/binding");
  return Create(path, BindingBody(ns, pod, uid, node, annotations)).status();
}

// --- AsyncClient -----------------------------------------------------------------------------

struct AsyncClient::Impl {
  struct Transfer {
    HttpRequest request;
    Done done;
    Lane lane = Lane::kFirst;
    int attempts = 0;
    std::shared_ptr<const Credentials> credentials;  // an exec plugin's, when one is used
    bool reauthenticated = false;                    // sent again once after a 401
    std::chrono::steady_clock::time_point ready_at;
    CURL* easy = nullptr;
    curl_slist* headers = nullptr;
    HttpResponse response;
    char errbuf[CURL_ERROR_SIZE] = {0};
  };

  std::shared_ptr<Transport> transport;
  AsyncClientOptions options;
  CURLM* multi = nullptr;
  Random random{0x5eed};

  mutable std::mutex mu;
  std::condition_variable drained;
  std::deque<std::unique_ptr<Transfer>> submitted;  // guarded by mu
  size_t pending = 0;                               // guarded by mu
  bool stop = false;                                // guarded by mu

  // Owned by the client's thread.
  std::deque<std::unique_ptr<Transfer>> ready;  // kFirst, in submission order
  std::deque<std::unique_ptr<Transfer>> next;   // kNext, in submission order; start first
  std::multimap<std::chrono::steady_clock::time_point, std::unique_ptr<Transfer>> delayed;
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> running;
  std::vector<CURL*> idle;
  std::thread thread;

  void Queue(std::unique_ptr<Transfer> t) {
    (t->lane == Lane::kNext ? next : ready).push_back(std::move(t));
  }

  void Complete(std::unique_ptr<Transfer> t) {
    t->done(t->response);
    std::lock_guard<std::mutex> lock(mu);
    --pending;
    if (pending == 0) drained.notify_all();
  }

  void Start(std::unique_ptr<Transfer> t) {
    CURL* easy;
    if (!idle.empty()) {
      easy = idle.back();
      idle.pop_back();
      curl_easy_reset(easy);
    } else {
      easy = curl_easy_init();
      TESSERA_CHECK(easy != nullptr);
    }
    t->response = HttpResponse{};
    t->errbuf[0] = '\0';
    ++t->attempts;
    absl::StatusOr<std::shared_ptr<const Credentials>> creds =
        transport->Prepare(easy, t->request, &t->headers);
    if (!creds.ok()) {
      idle.push_back(easy);
      t->response.error = StrCat("no credentials: ", FromAbsl(creds.status().message()));
      t->response.permanent = true;
      Complete(std::move(t));
      return;
    }
    t->credentials = *std::move(creds);
    t->easy = easy;
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, &AppendBody);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t->response);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, &ReadHeader);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t->response);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(easy, CURLOPT_PIPEWAIT, options.http2 ? 1L : 0L);
    curl_easy_setopt(easy, CURLOPT_HTTP_VERSION,
                     options.http2 ? CURL_HTTP_VERSION_2TLS : CURL_HTTP_VERSION_1_1);
    curl_multi_add_handle(multi, easy);
    running.emplace(easy, std::move(t));
  }

  void Finished(CURL* easy, CURLcode code) {
    auto it = running.find(easy);
    TESSERA_CHECK(it != running.end());
    std::unique_ptr<Transfer> t = std::move(it->second);
    running.erase(it);
    curl_multi_remove_handle(multi, easy);
    Finish(easy, code, t->errbuf, &t->response);
    transport->requests().Count(t->request.method, t->response.status);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, nullptr);
    curl_slist_free_all(t->headers);
    t->headers = nullptr;
    t->easy = nullptr;
    idle.push_back(easy);
    if (t->response.status == 401 && !t->reauthenticated &&
        transport->Reauthenticate(t->credentials, &t->response)) {
      t->reauthenticated = true;
      Queue(std::move(t));
      return;
    }
    if (IsTransient(t->response) && t->attempts < options.max_attempts) {
      t->ready_at = std::chrono::steady_clock::now() +
                    RetryDelay(options.backoff, t->attempts, t->response.retry_after_s, random);
      auto at = t->ready_at;
      delayed.emplace(at, std::move(t));
      return;
    }
    Complete(std::move(t));
  }

  void Loop() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stop) break;
        while (!submitted.empty()) {
          Queue(std::move(submitted.front()));
          submitted.pop_front();
        }
      }
      auto now = std::chrono::steady_clock::now();
      while (!delayed.empty() && delayed.begin()->first <= now) {
        Queue(std::move(delayed.begin()->second));
        delayed.erase(delayed.begin());
      }
      while (static_cast<int>(running.size()) < options.max_in_flight) {
        std::deque<std::unique_ptr<Transfer>>& from = next.empty() ? ready : next;
        if (from.empty()) break;
        Start(std::move(from.front()));
        from.pop_front();
      }
      int still = 0;
      curl_multi_perform(multi, &still);
      int left = 0;
      bool finished = false;
      while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
        if (msg->msg == CURLMSG_DONE) {
          Finished(msg->easy_handle, msg->data.result);
          finished = true;
        }
      }
      // Room freed and work waiting: go round again without waiting.
      if (finished && (!ready.empty() || !next.empty())) continue;
      int timeout_ms = running.empty() ? 1000 : 100;
      if (!delayed.empty()) {
        auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
            delayed.begin()->first - std::chrono::steady_clock::now());
        timeout_ms = std::clamp<int>(static_cast<int>(wait.count()), 0, timeout_ms);
      }
      curl_multi_poll(multi, nullptr, 0, timeout_ms, nullptr);
    }
    // Stopping: everything not finished is cancelled.
    std::vector<std::unique_ptr<Transfer>> cancelled;
    for (auto& [easy, t] : running) {
      curl_multi_remove_handle(multi, easy);
      curl_slist_free_all(t->headers);
      idle.push_back(easy);
      cancelled.push_back(std::move(t));
    }
    running.clear();
    for (auto& t : next) cancelled.push_back(std::move(t));
    next.clear();
    for (auto& t : ready) cancelled.push_back(std::move(t));
    ready.clear();
    for (auto& [at, t] : delayed) cancelled.push_back(std::move(t));
    delayed.clear();
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& t : submitted) cancelled.push_back(std::move(t));
      submitted.clear();
    }
    for (auto& t : cancelled) {
      t->response = HttpResponse{};
      t->response.error = "cancelled";
      Complete(std::move(t));
    }
  }
};

AsyncClient::AsyncClient(std::shared_ptr<Transport> transport, AsyncClientOptions options)
    : impl_(std::make_unique<Impl>()) {
  GlobalInit();
  impl_->transport = std::move(transport);
  impl_->options = options;
  impl_->multi = curl_multi_init();
  TESSERA_CHECK(impl_->multi != nullptr);
  curl_multi_setopt(impl_->multi, CURLMOPT_PIPELINING,
                    options.http2 ? CURLPIPE_MULTIPLEX : CURLPIPE_NOTHING);
  curl_multi_setopt(impl_->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(options.http2 ? 4 : options.max_in_flight));
  impl_->thread = std::thread([this] { impl_->Loop(); });
}

AsyncClient::~AsyncClient() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  curl_multi_wakeup(impl_->multi);
  impl_->thread.join();
  for (CURL* easy : impl_->idle) curl_easy_cleanup(easy);
  curl_multi_cleanup(impl_->multi);
}

void AsyncClient::Submit(HttpRequest request, Done done, Lane lane) {
  auto t = std::make_unique<Impl::Transfer>();
  t->request = std::move(request);
  t->done = std::move(done);
  t->lane = lane;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stop) {
      t->response.error = "cancelled";
      t->done(t->response);
      return;
    }
    impl_->submitted.push_back(std::move(t));
    ++impl_->pending;
  }
  curl_multi_wakeup(impl_->multi);
}

size_t AsyncClient::pending() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->pending;
}

bool AsyncClient::Drain(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->drained.wait_for(lock, timeout, [&] { return impl_->pending == 0; });
}

}  // namespace tessera::k8s
