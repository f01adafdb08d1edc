// How to reach and authenticate to a Kubernetes API server: from a kubeconfig file (what kubectl
// reads) or from inside a pod (the service-account token, CA and KUBERNETES_SERVICE_HOST/PORT, as
// client-go's InClusterConfig does).
//
// Supported kubeconfig credentials: client certificate and key (inline `*-data` or files), bearer
// `token` or `tokenFile`, and exec credential plugins (client.authentication.k8s.io/v1 and
// v1beta1, as EKS, GKE, AKS and OIDC clusters use; run by exec_credential.h when the first request
// needs them). Static credentials win over an exec plugin on the same user, as in client-go.
// auth-provider plugins (removed from client-go) are refused with a clear error. Relative paths in
// a kubeconfig are relative to the folder of the file that holds the entry, as kubectl resolves
// them; an exec command is resolved so only when it contains a '/' (else it is looked up on PATH).
//
// Several kubeconfigs (KUBECONFIG=a:b) merge as kubectl merges them (client-go's
// ClientConfigLoadingRules.Load, tools/clientcmd/loader.go): the first file to name a cluster,
// user or context wins the whole entry (later files' entries of that name are ignored, even their
// fields the first one lacks), current-context comes from the first file that sets it, files that
// do not exist are skipped, and a name repeated inside one file is an error.
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
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

inline constexpr char kExecApiV1[] = "client.authentication.k8s.io/v1";
inline constexpr char kExecApiV1Beta1[] = "client.authentication.k8s.io/v1beta1";

// kubectl's interactiveMode of an exec plugin: whether the plugin gets the terminal's stdin.
enum class ExecInteractiveMode { kNever, kIfAvailable, kAlways };

// A users[].user.exec entry (client-go's api.ExecConfig).
struct ExecConfig {
  std::string command;  // resolved against the kubeconfig's folder when it contains a '/'
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  // added to the plugin's environment
  std::string api_version;  // "client.authentication.k8s.io/v1" or ".../v1beta1"
  ExecInteractiveMode interactive_mode = ExecInteractiveMode::kIfAvailable;
  bool provide_cluster_info = false;  // pass the cluster in KUBERNETES_EXEC_INFO
  std::string install_hint;           // shown when the command is not found
  // The cluster's extension "client.authentication.k8s.io/exec" (spec.cluster.config); null when
  // absent.
  nlohmann::json cluster_config;
  std::string user;  // the kubeconfig user it belongs to, for messages
};

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
  // An exec credential plugin; used only when no token, token file or client certificate is set.
  std::optional<ExecConfig> exec;
};

// One kubeconfig file's text, where it came from and the folder its relative paths resolve in.
struct KubeconfigText {
  std::string text;
  std::string dir;
  std::string source;  // the path, for messages
};

// Reads a kubeconfig file and resolves `context` (empty = current-context). The file must exist
// (kubectl's --kubeconfig).
[[nodiscard]] absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path,
                                                          std::string_view context = {});
// Same, from text; `dir` resolves relative paths, `source` names the file in errors.
[[nodiscard]] absl::StatusOr<ClientConfig> ParseKubeconfig(std::string_view text,
                                                           const std::string& dir,
                                                           std::string_view source,
                                                           std::string_view context = {});
// Several files merged as kubectl merges them (the header comment), then `context` resolved.
[[nodiscard]] absl::StatusOr<ClientConfig> ParseKubeconfigs(
    const std::vector<KubeconfigText>& files, std::string_view context = {});
// Reads those of `paths` that exist and merges them. NotFound when none exists.
[[nodiscard]] absl::StatusOr<ClientConfig> LoadKubeconfigs(const std::vector<std::string>& paths,
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

// kubectl's precedence list when no --kubeconfig is given: $KUBECONFIG split on ':' (empty and
// repeated entries dropped), else ~/.kube/config. The files need not exist (LoadKubeconfigs skips
// those that do not).
std::vector<std::string> DefaultKubeconfigPaths(
    const std::function<std::optional<std::string>(const char*)>& getenv = nullptr);

// Which API server a command talks to when --kubeconfig does not name one, in one of the two
// orders docs/configuration.md gives (both end with an error that says how to name one):
//   kInClusterFirst   the daemons (`tessera scheduler`, `tessera agent`, `tessera agent
//                     uninstall`): the pod's service account, else $KUBECONFIG's files merged or
//                     ~/.kube/config (what client-go's controllers do);
//   kKubeconfigFirst  the commands a person runs (`tessera status`, `explain`, `simulate
//                     --from-cluster`, `doctor`): kubectl's order, $KUBECONFIG or ~/.kube/config,
//                     else the service account when run in a pod.
// `kubeconfig` non-empty: that file, which must exist (kubectl's --kubeconfig); `context` empty:
// the current-context. The one resolution of every command (cli/).
enum class ConfigSearch { kInClusterFirst, kKubeconfigFirst };
[[nodiscard]] absl::StatusOr<ClientConfig> ResolveClientConfig(const std::string& kubeconfig,
                                                               std::string_view context,
                                                               ConfigSearch order);

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
