// How to reach and authenticate to a Kubernetes API server: from a kubeconfig file (what kubectl
// reads) or from inside a pod (the service-account token, CA and KUBERNETES_SERVICE_HOST/PORT, as
// client-go's InClusterConfig does).
//
// Supported kubeconfig credentials: client certificate and key (inline `*-data` or files), bearer
// `token` or `tokenFile`. exec and auth-provider plugins are refused with a clear error. Relative
// paths in a kubeconfig are relative to the kubeconfig's folder, as kubectl resolves them.
//
// Tokens from a file are re-read periodically (TokenSource): kubelet rotates service-account
// tokens, and client-go re-reads the file every minute.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace tessera::k8s {

struct ClientConfig {
  std::string server;           // "https://127.0.0.1:6443", no trailing slash
  std::string ca_pem;           // CA bundle (PEM); empty = the system's trust store
  std::string client_cert_pem;  // client certificate (PEM), with client_key_pem
  std::string client_key_pem;
  std::string bearer_token;  // a fixed token
  std::string token_file;    // a token re-read every token_refresh (wins over bearer_token)
  std::chrono::seconds token_refresh{60};
  bool insecure_skip_tls_verify = false;
  std::string tls_server_name;  // overrides the name checked in the server's certificate
  std::string default_namespace = "default";
  std::string source;  // where this came from, for messages ("kubeconfig /x", "in-cluster")
};

// Reads a kubeconfig file and resolves `context` (empty = current-context).
[[nodiscard]] absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path,
                                                          std::string_view context = {});
// Same, from text; `dir` resolves relative paths, `source` names the file in errors.
[[nodiscard]] absl::StatusOr<ClientConfig> ParseKubeconfig(std::string_view text,
                                                           const std::string& dir,
                                                           std::string_view source,
                                                           std::string_view context = {});

// Where in-cluster configuration comes from; tests point it at a temporary folder and fake
// environment.
struct InClusterSource {
  std::function<std::optional<std::string>(const char*)> getenv;  // default: ::getenv
  std::string service_account_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
};

// client-go's InClusterConfig: KUBERNETES_SERVICE_HOST and _PORT (both required; IPv6 hosts are
// bracketed), the token file (re-read), ca.crt, and the namespace file when present.
[[nodiscard]] absl::StatusOr<ClientConfig> InClusterConfig(const InClusterSource& source = {});

// The kubeconfig to use when none is given: $KUBECONFIG (its first entry), else ~/.kube/config
// if it exists; empty when neither.
std::string DefaultKubeconfigPath();

// The bearer token to send, re-reading token_file when it is older than token_refresh. A failed
// re-read keeps the last good token (and reports the error through last_error()). Thread-safe.
class TokenSource {
 public:
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  explicit TokenSource(const ClientConfig& config, Clock clock = nullptr);

  // Empty when the config has no token.
  std::string Token();
  std::string last_error() const;
  int reads() const;  // file reads so far (tests)

 private:
  std::string fixed_;
  std::string file_;
  std::chrono::seconds refresh_;
  Clock clock_;
  mutable std::mutex mu_;
  std::string cached_;
  std::optional<std::chrono::steady_clock::time_point> read_at_;
  std::string error_;
  int reads_ = 0;
};

// Reads a whole file; errors name the path.
[[nodiscard]] absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace tessera::k8s
