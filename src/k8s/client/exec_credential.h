// Exec credential plugins (client.authentication.k8s.io), as client-go runs them
// (k8s.io/client-go/plugin/pkg/client/auth/exec/exec.go, v0.37.2): the way EKS (`aws eks
// get-token`), GKE (gke-gcloud-auth-plugin), AKS and OIDC (kubelogin) clusters authenticate.
//
// The plugin is run with the kubeconfig's args and env added to ours, and KUBERNETES_EXEC_INFO
// set to an ExecCredential whose spec says whether it may talk to the user (`interactive`) and,
// with provideClusterInfo, which cluster it is for. It prints an ExecCredential of the configured
// apiVersion whose status holds a bearer token or a client certificate and key (PEM), and
// optionally an expirationTimestamp:
//
//   {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
//    "status": {"token": "k8s-aws-v1.abc", "expirationTimestamp": "2026-03-01T10:15:00Z"}}
//
// Rules kept from client-go:
//  - interactive mode (ExecInteractive): Never runs it with stdin closed; IfAvailable hands it
//    our stdin when that is a terminal; Always requires a terminal and fails without one;
//  - the credentials are cached until now is after expirationTimestamp (none: until the server
//    refuses them); one plugin run at a time (an interactive plugin prompts once);
//  - a 401 answer to a request made with the current credentials runs the plugin again (a 401
//    to credentials already replaced does not): Rejected. client-go hands the 401 back and lets
//    the caller's next request use the new credentials; http.cc retries the request once with
//    them instead, since a 401 means the server did nothing;
//  - the plugin's stderr is ours (prompts and errors reach the user); a plugin that is not found
//    gets the install hint, one that fails its exit status.
// Not kept: the credential plugin policy (allowlist, from kubectl's kuberc preferences) and
// proxy-url in the cluster info.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "k8s/client/config.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

// What a request presents to the API server.
struct Credentials {
  std::string token;            // bearer token; may be empty when a certificate is given
  std::string client_cert_pem;  // with client_key_pem, or both empty
  std::string client_key_pem;
  std::optional<std::chrono::system_clock::time_point> expiry;  // nullopt: none given
  bool operator==(const Credentials&) const = default;
};

// client-go's isInteractive: whether the plugin gets our stdin, or an error when mode Always
// meets no terminal.
[[nodiscard]] absl::StatusOr<bool> ExecInteractive(ExecInteractiveMode mode,
                                                   bool stdin_is_terminal);

// The KUBERNETES_EXEC_INFO document for `exec`, with the cluster of `cluster` when
// provideClusterInfo is set.
nlohmann::json ExecInfo(const ExecConfig& exec, const ClientConfig& cluster, bool interactive);

// The plugin's stdout as credentials, checked as client-go checks it (kind and apiVersion, a
// status with a token or a certificate and key, both or neither of those).
[[nodiscard]] absl::StatusOr<Credentials> ParseExecCredential(std::string_view out,
                                                              std::string_view api_version);

// One run of a plugin: its exit status and stdout, or why it could not be started.
struct ExecRun {
  bool started = false;
  bool not_found = false;  // the command does not exist (or is not executable)
  int exit_code = -1;      // 128 + signal when a signal ended it
  std::string out;
  std::string error;  // when !started
};
// Runs `argv` with `env` (NAME=value strings, the whole environment); stdin is ours when
// `interactive`, else /dev/null; stderr is ours; stdout is captured. A command without '/' is
// looked up on our PATH.
ExecRun RunPlugin(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  bool interactive);

// The credentials of one exec plugin, cached as client-go caches them. Thread-safe; a run holds
// the lock, so concurrent requests wait for one run.
class ExecCredentialSource {
 public:
  struct Options {
    // Runs the plugin (tests: a fake); default RunPlugin.
    std::function<ExecRun(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                          bool interactive)>
        run;
    std::function<std::chrono::system_clock::time_point()> now;  // default: system clock
    std::function<bool()> stdin_is_terminal;                     // default: isatty(0)
    std::function<std::vector<std::string>()> environ;           // default: our environment
  };
  // `config.exec` must be set.
  explicit ExecCredentialSource(ClientConfig config, Options options = {});

  // The cached credentials, or the plugin's new ones when there are none or they expired.
  // Errors say what the plugin did wrong and name it.
  [[nodiscard]] absl::StatusOr<std::shared_ptr<const Credentials>> Get();
  // The server answered 401 to a request made with `used`: unless the credentials were replaced
  // since, the plugin runs again. True when credentials different from `used` are now at hand
  // (the plugin giving the same token again is no reason to send the request again); an error
  // when the plugin ran and failed.
  [[nodiscard]] absl::StatusOr<bool> Rejected(const std::shared_ptr<const Credentials>& used);

  int runs() const;  // plugin runs so far (tests)

 private:
  absl::Status RunLocked();

  ClientConfig config_;
  Options options_;
  mutable std::mutex mu_;
  std::shared_ptr<const Credentials> cached_;
  int runs_ = 0;
};

}  // namespace tessera::k8s
