// HTTPS to the Kubernetes API server with libcurl: TLS, authentication, keep-alive connections,
// synchronous calls from any thread (a pool of connections), streaming responses (watches), and an
// asynchronous client that keeps many requests in flight on one thread (curl multi, HTTP/2
// multiplexing when the server offers it) so that bursts of binds are limited by the API server,
// not by round trips.
//
// No HTTP or TLS is written here: libcurl does both. This file only maps requests and answers to
// and from curl, and failures to absl::Status with the API server's own message and reason.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/backoff.h"
#include "k8s/client/config.h"
#include "k8s/client/exec_credential.h"
#include "k8s/client/request_counts.h"
#include "nlohmann/json.hpp"

struct curl_slist;  // libcurl

namespace tessera::k8s {

enum class PatchType { kMerge, kStrategic, kJson };
std::string_view ContentTypeOf(PatchType type);

struct HttpRequest {
  std::string method = "GET";
  std::string path;  // path and query, already escaped: "/api/v1/pods?limit=500"
  std::string body;
  std::string content_type;                   // of the body
  std::chrono::milliseconds timeout{30'000};  // the whole exchange; 0 = no limit (watches)
  // The Accept header; empty: application/json. Lists of Pods and Nodes may ask protobuf
  // (protobuf_wire.h kAcceptProtobuf).
  std::string accept;
};

struct HttpResponse {
  long status = 0;  // HTTP status; 0 when no answer came (see error)
  std::string body;
  std::string error;       // transport failure (connection refused, TLS, timeout, aborted)
  int retry_after_s = -1;  // the Retry-After header, when present
  // Not sent, and retrying cannot help: the credential plugin failed (error says how).
  bool permanent = false;
  bool ok() const { return status >= 200 && status < 300; }
};

// True for failures worth retrying: no answer (unless permanent), 429, 500, 502, 503, 504.
bool IsTransient(const HttpResponse& response);

// OK for 2xx; otherwise an error whose message is "<METHOD> <path>: HTTP <code> <reason>:
// <the server's message>", whose code maps the HTTP status (404 NotFound, 409 AlreadyExists or
// Aborted for conflicts, 410 OutOfRange, 401/403, 422 InvalidArgument, 429/5xx Unavailable), and
// which carries the HTTP status and Kubernetes reason (HttpStatusOf / ReasonOf).
absl::Status StatusFromResponse(const HttpRequest& request, const HttpResponse& response);
int HttpStatusOf(const absl::Status& status);      // 0 when not from an HTTP answer
std::string ReasonOf(const absl::Status& status);  // "Conflict", "AlreadyExists", "Expired", ...

// Escapes a query parameter value ("spec.nodeName=" -> "spec.nodeName%3D").
std::string QueryEscape(std::string_view value);

// The immutable part every connection shares: where the server is and how to authenticate
// (a token, a token file, a client certificate, or an exec credential plugin whose credentials
// are cached and renewed on expiry or a 401). Thread-safe.
class Transport {
 public:
  // Validates the config (loads nothing from the network).
  [[nodiscard]] static absl::StatusOr<std::shared_ptr<Transport>> Create(ClientConfig config,
                                                                         std::string user_agent);
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  const ClientConfig& config() const { return config_; }
  TokenSource& tokens() { return *tokens_; }
  // Every request sent through this transport, by verb and answer.
  RequestCounts& requests() { return requests_; }

  // Sets everything on `curl` (a curl_easy handle) for `request`; `headers` receives the list the
  // caller frees with curl_slist_free_all after the transfer. Returns the exec plugin's
  // credentials used (null without a plugin), or why there are none (nothing is set then).
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Credentials>> Prepare(
      void* curl, const HttpRequest& request, ::curl_slist** headers);
  // The server answered 401 to a request prepared with `used` (Prepare's result): true when the
  // request should be sent again with newer credentials (the plugin ran again, or another request
  // already renewed them). False without a plugin; `response.error` then says why when the
  // plugin failed.
  bool Reauthenticate(const std::shared_ptr<const Credentials>& used, HttpResponse* response);

 private:
  Transport() = default;
  ClientConfig config_;
  std::string user_agent_;
  std::unique_ptr<TokenSource> tokens_;
  RequestCounts requests_;
  std::unique_ptr<ExecCredentialSource> exec_;  // only when no static credential is configured
  void* share_ = nullptr;  // CURLSH: TLS sessions and DNS shared between connections
  std::mutex share_mu_[8];
  static void Lock(void* handle, int data, int access, void* user);
  static void Unlock(void* handle, int data, void* user);
};

// One keep-alive connection (a curl easy handle). Not thread-safe: one thread uses it at a time.
class Connection {
 public:
  explicit Connection(std::shared_ptr<Transport> transport);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  HttpResponse Do(const HttpRequest& request);
  // For watches: `on_data` gets the body as it arrives (and it is not kept in the response);
  // returning false aborts. `stop` is polled about every second and aborts when true.
  HttpResponse Stream(const HttpRequest& request,
                      const std::function<bool(std::string_view)>& on_data,
                      const std::function<bool()>& stop);

 private:
  HttpResponse Stream(const HttpRequest& request,
                      const std::function<bool(std::string_view)>& on_data,
                      const std::function<bool()>& stop, bool reauthenticated);

  std::shared_ptr<Transport> transport_;
  void* curl_;
};

struct ApiClientOptions {
  std::string user_agent = "tessera/0.1.0";
  int max_attempts = 5;  // for transient failures (IsTransient), with `backoff` between attempts
  Backoff::Params backoff{std::chrono::milliseconds(200), 2.0, std::chrono::milliseconds(5'000),
                          0.5, std::chrono::milliseconds(60'000)};
};

// Synchronous REST calls, from any thread: each call borrows a pooled keep-alive connection.
// Transient failures are retried (honouring Retry-After); the answer is parsed JSON or an error
// from StatusFromResponse. Conflicts (409) are returned to the caller, who knows what to re-read.
class ApiClient {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ApiClient>> Create(
      ClientConfig config, ApiClientOptions options = {});

  absl::StatusOr<nlohmann::json> Get(const std::string& path);
  absl::StatusOr<nlohmann::json> Create(const std::string& path, const nlohmann::json& object);
  absl::StatusOr<nlohmann::json> Update(const std::string& path, const nlohmann::json& object);
  absl::StatusOr<nlohmann::json> Patch(const std::string& path, PatchType type,
                                       const nlohmann::json& patch);
  absl::StatusOr<nlohmann::json> Delete(const std::string& path,
                                        const nlohmann::json& options = nullptr);
  // POST .../pods/NAME/binding. `annotations` are merged into the pod by the API server in the
  // same update that sets spec.nodeName (BindingREST.setPodNodeAndMetadata), so an assignment
  // record and the binding are written atomically. `uid` (optional) is a precondition.
  absl::Status Bind(std::string_view ns, std::string_view pod, std::string_view uid,
                    std::string_view node, const nlohmann::json& annotations = nullptr);

  // Any request, with retries; the raw answer.
  HttpResponse Call(const HttpRequest& request);
  // A dedicated connection (a watch keeps one busy for minutes).
  std::unique_ptr<Connection> NewConnection() const;
  const std::shared_ptr<Transport>& transport() const { return transport_; }
  const ClientConfig& config() const { return transport_->config(); }

 private:
  ApiClient(std::shared_ptr<Transport> transport, ApiClientOptions options)
      : transport_(std::move(transport)), options_(std::move(options)) {}
  absl::StatusOr<nlohmann::json> JsonCall(HttpRequest request);

  std::shared_ptr<Transport> transport_;
  ApiClientOptions options_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> idle_;
};

// The Binding body for pod `ns/pod` to `node` (metadata.annotations when given).
nlohmann::json BindingBody(std::string_view ns, std::string_view pod, std::string_view uid,
                           std::string_view node, const nlohmann::json& annotations);

struct AsyncClientOptions {
  int max_in_flight = 32;
  int max_attempts = 5;  // transient failures are retried inside the client
  Backoff::Params backoff{std::chrono::milliseconds(200), 2.0, std::chrono::milliseconds(5'000),
                          0.5, std::chrono::milliseconds(60'000)};
  bool http2 = true;  // multiplex on few connections when the server speaks HTTP/2
};

// Keeps up to max_in_flight requests in flight on its own thread (curl multi). Submit is
// thread-safe; `done` runs on the client's thread once per request, with the final answer (after
// retries), and must be quick (hand the answer to another thread). Destruction stops the thread;
// requests not finished by then get a response with error "cancelled".
//
// Requests start in submission order, except that kNext requests (the next step of a chain whose
// first step is done, such as a claim's status write after its finalizer) start before every
// kFirst request waiting: a chain once begun finishes in a few round trips instead of waiting
// behind every other chain's first step.
class AsyncClient {
 public:
  using Done = std::function<void(const HttpResponse&)>;
  enum class Lane { kFirst, kNext };
  AsyncClient(std::shared_ptr<Transport> transport, AsyncClientOptions options);
  ~AsyncClient();
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  void Submit(HttpRequest request, Done done, Lane lane = Lane::kFirst);
  // Requests submitted and not yet done.
  size_t pending() const;
  // Waits until nothing is pending or `timeout` passes; true if drained.
  bool Drain(std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::k8s
