#include "k8s/client/exec_credential.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/time/time.h"
#include "common/status.h"
#include "common/strings.h"

extern char** environ;

namespace tessera::k8s {
namespace {

using nlohmann::json;

// "exec credential plugin aws (user "eks-admin")": how messages name the plugin.
std::string PluginName(const ExecConfig& e) {
  return StrCat("exec credential plugin ", e.command, e.user.empty() ? "" : " (user \"", e.user,
                e.user.empty() ? "" : "\")");
}

std::string StringField(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

}  // namespace

absl::StatusOr<bool> ExecInteractive(ExecInteractiveMode mode, bool stdin_is_terminal) {
  switch (mode) {
    case ExecInteractiveMode::kNever:
      return false;
    case ExecInteractiveMode::kIfAvailable:
      return stdin_is_terminal;
    case ExecInteractiveMode::kAlways:
      if (!stdin_is_terminal) {
        return absl::FailedPreconditionError(
            "its interactiveMode is Always, but standard input is not a terminal (run it from "
            "a terminal, or set interactiveMode: IfAvailable if the plugin can do without)");
      }
      return true;
  }
  return false;
}

json ExecInfo(const ExecConfig& exec, const ClientConfig& cluster, bool interactive) {
  json spec = {{"interactive", interactive}};
  if (exec.provide_cluster_info) {
    // client-go's rest.ConfigToExecCluster; empty optional fields are left out (omitempty).
    json c = {{"server", cluster.server}};
    if (!cluster.tls_server_name.empty()) c["tls-server-name"] = cluster.tls_server_name;
    if (cluster.insecure_skip_tls_verify) c["insecure-skip-tls-verify"] = true;
    if (!cluster.ca_pem.empty()) {
      c["certificate-authority-data"] = absl::Base64Escape(cluster.ca_pem);
    }
    if (!exec.cluster_config.is_null()) c["config"] = exec.cluster_config;
    spec["cluster"] = std::move(c);
  }
  return {{"kind", "ExecCredential"}, {"apiVersion", exec.api_version}, {"spec", std::move(spec)}};
}

absl::StatusOr<Credentials> ParseExecCredential(std::string_view out,
                                                std::string_view api_version) {
  json j = json::parse(out, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(
        "its output is not an ExecCredential JSON object (it must print only the credential "
        "on stdout; messages go to stderr)");
  }
  const std::string version = StringField(j, "apiVersion");
  if (version != api_version) {
    return absl::InvalidArgumentError(StrCat("it is configured to use API version ", api_version,
                                             " but returned version \"", version, "\""));
  }
  if (StringField(j, "kind") != "ExecCredential") {
    return absl::InvalidArgumentError(
        StrCat("it returned kind \"", StringField(j, "kind"), "\", not ExecCredential"));
  }
  auto st = j.find("status");
  if (st == j.end() || !st->is_object()) {
    return absl::InvalidArgumentError("it did not return a status field");
  }
  Credentials c;
  c.token = StringField(*st, "token");
  c.client_cert_pem = StringField(*st, "clientCertificateData");
  c.client_key_pem = StringField(*st, "clientKeyData");
  if (c.token.empty() && c.client_cert_pem.empty() && c.client_key_pem.empty()) {
    return absl::InvalidArgumentError("it did not return a token or a certificate and key");
  }
  if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
    return absl::InvalidArgumentError("it returned only a certificate or a key, not both");
  }
  if (!c.client_cert_pem.empty() && (c.client_cert_pem.find("-----BEGIN") == std::string::npos ||
                                     c.client_key_pem.find("-----BEGIN") == std::string::npos)) {
    return absl::InvalidArgumentError(
        "its clientCertificateData and clientKeyData must be PEM (-----BEGIN ...)");
  }
  if (auto exp = st->find("expirationTimestamp"); exp != st->end() && !exp->is_null()) {
    absl::Time t;
    std::string err;
    if (!exp->is_string() ||
        !absl::ParseTime(absl::RFC3339_full, exp->get<std::string>(), &t, &err)) {
      return absl::InvalidArgumentError(
          StrCat("its expirationTimestamp ", exp->dump(), " is not an RFC 3339 time"));
    }
    c.expiry = absl::ToChronoTime(t);
  }
  return c;
}

ExecRun RunPlugin(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                  bool interactive) {
  ExecRun run;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    run.error = StrCat("pipe: ", std::strerror(errno));
    return run;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  if (!interactive) {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  }
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : env) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawnp(&pid, cargv[0], &actions, nullptr, cargv.data(), cenv.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (err != 0) {
    ::close(fds[0]);
    run.not_found = err == ENOENT || err == EACCES || err == ENOEXEC;
    run.error = std::strerror(err);
    return run;
  }
  run.started = true;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      run.out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return run;
}

ExecCredentialSource::ExecCredentialSource(ClientConfig config, Options options)
    : config_(std::move(config)), options_(std::move(options)) {
  if (!options_.run) options_.run = RunPlugin;
  if (!options_.now) options_.now = [] { return std::chrono::system_clock::now(); };
  if (!options_.stdin_is_terminal) options_.stdin_is_terminal = [] { return ::isatty(0) == 1; };
  if (!options_.environ) {
    options_.environ = [] {
      std::vector<std::string> out;
      for (char** e = environ; e != nullptr && *e != nullptr; ++e) out.emplace_back(*e);
      return out;
    };
  }
}

absl::Status ExecCredentialSource::RunLocked() {
  const ExecConfig& e = *config_.exec;
  absl::StatusOr<bool> interactive =
      ExecInteractive(e.interactive_mode, options_.stdin_is_terminal());
  if (!interactive.ok()) {
    return absl::FailedPreconditionError(
        StrCat(PluginName(e), " cannot run: ", FromAbsl(interactive.status().message())));
  }
  // Our environment, then the kubeconfig's env (which wins, as the later value of a name does
  // for Go's exec), then KUBERNETES_EXEC_INFO.
  std::map<std::string, std::string> vars;
  std::vector<std::string> order;
  auto set = [&](const std::string& name, const std::string& value) {
    if (!vars.contains(name)) order.push_back(name);
    vars[name] = value;
  };
  for (const std::string& kv : options_.environ()) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    set(kv.substr(0, eq), kv.substr(eq + 1));
  }
  for (const auto& [name, value] : e.env) set(name, value);
  set("KUBERNETES_EXEC_INFO", ExecInfo(e, config_, *interactive).dump());
  std::vector<std::string> env;
  for (const std::string& name : order) env.push_back(StrCat(name, "=", vars[name]));
  std::vector<std::string> argv = {e.command};
  argv.insert(argv.end(), e.args.begin(), e.args.end());

  ++runs_;
  ExecRun run = options_.run(argv, env, *interactive);
  if (!run.started) {
    if (run.not_found) {
      return absl::FailedPreconditionError(
          StrCat(PluginName(e), ": executable \"", e.command, "\" not found",
                 e.command.find('/') == std::string::npos ? " on PATH" : "", " (", run.error, ")",
                 e.install_hint.empty() ? "; install it, or fix users[].user.exec.command in the "
                                          "kubeconfig"
                                        : StrCat("; ", e.install_hint)));
    }
    return absl::UnavailableError(StrCat(PluginName(e), " could not be started: ", run.error));
  }
  if (run.exit_code != 0) {
    return absl::UnauthenticatedError(StrCat(PluginName(e), " failed with exit code ",
                                             run.exit_code, " (its messages are above)"));
  }
  absl::StatusOr<Credentials> creds = ParseExecCredential(run.out, e.api_version);
  if (!creds.ok()) {
    return absl::UnauthenticatedError(
        StrCat(PluginName(e), ": ", FromAbsl(creds.status().message())));
  }
  cached_ = std::make_shared<const Credentials>(*std::move(creds));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Credentials>> ExecCredentialSource::Get() {
  std::lock_guard<std::mutex> lock(mu_);
  const bool expired = cached_ && cached_->expiry && options_.now() > *cached_->expiry;
  if (!cached_ || expired) TESSERA_RETURN_IF_ERROR(RunLocked());
  return cached_;
}

absl::StatusOr<bool> ExecCredentialSource::Rejected(
    const std::shared_ptr<const Credentials>& used) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_ != used) return cached_ != nullptr && (used == nullptr || *cached_ != *used);
  TESSERA_RETURN_IF_ERROR(RunLocked());
  return *cached_ != *used;
}

int ExecCredentialSource::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_;
}

}  // namespace tessera::k8s
