#include "k8s/client/config.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "common/status.h"
#include "common/strings.h"
#include "yaml-cpp/yaml.h"

namespace tessera::k8s {
namespace {

std::string Trim(std::string s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, e - b + 1);
}

std::string JoinPath(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return dir + "/" + path;
}

// A small reader for the kubeconfig's YAML that names the entry in errors.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  absl::Status Error(std::string_view where, std::string_view what) const {
    return absl::InvalidArgumentError(StrCat(source_, ": ", where, ": ", what));
  }

  absl::StatusOr<std::string> String(const YAML::Node& map, std::string_view key,
                                     std::string_view where) const {
    YAML::Node n = map[std::string(key)];
    if (!n || n.IsNull()) return std::string();
    if (!n.IsScalar()) return Error(StrCat(where, ".", key), "expected a string");
    return n.as<std::string>();
  }

  absl::StatusOr<bool> Bool(const YAML::Node& map, std::string_view key,
                            std::string_view where) const {
    YAML::Node n = map[std::string(key)];
    if (!n || n.IsNull()) return false;
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      return Error(StrCat(where, ".", key), "expected true or false");
    }
    return v;
  }

  // The `field` map of the entry named `name` in the list `list` ("clusters", "cluster").
  absl::StatusOr<YAML::Node> Named(const YAML::Node& root, std::string_view list,
                                   std::string_view field, const std::string& name) const {
    YAML::Node entries = root[std::string(list)];
    if (!entries || !entries.IsSequence()) {
      return Error(list, StrCat("expected a list (looking for \"", name, "\")"));
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const YAML::Node& e = entries[i];
      if (!e.IsMap()) return Error(StrCat(list, "[", i, "]"), "expected a map");
      if (e["name"] && e["name"].IsScalar() && e["name"].as<std::string>() == name) {
        YAML::Node f = e[std::string(field)];
        if (!f || f.IsNull()) return YAML::Node(YAML::NodeType::Map);
        if (!f.IsMap()) return Error(StrCat(list, "[", i, "].", field), "expected a map");
        return f;
      }
    }
    return Error(list, StrCat("no entry named \"", name, "\""));
  }

 private:
  std::string source_;
};

absl::StatusOr<std::string> Base64Field(const Reader& r, const std::string& value,
                                        std::string_view where) {
  std::string out;
  if (!absl::Base64Unescape(value, &out)) return r.Error(where, "is not valid base64");
  return out;
}

// Reads `<name>-data` (base64) or `<name>` (a file) from `map`.
absl::StatusOr<std::string> PemField(const Reader& r, const YAML::Node& map, std::string_view name,
                                     std::string_view where, const std::string& dir) {
  TESSERA_ASSIGN_OR_RETURN(std::string data, r.String(map, StrCat(name, "-data"), where));
  if (!data.empty()) return Base64Field(r, data, StrCat(where, ".", name, "-data"));
  TESSERA_ASSIGN_OR_RETURN(std::string file, r.String(map, name, where));
  if (file.empty()) return std::string();
  absl::StatusOr<std::string> text = ReadWholeFile(JoinPath(dir, file));
  if (!text.ok()) return r.Error(StrCat(where, ".", name), FromAbsl(text.status().message()));
  return *text;
}

}  // namespace

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot read ", path));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return absl::DataLossError(StrCat("error reading ", path));
  return s.str();
}

absl::StatusOr<ClientConfig> ParseKubeconfig(std::string_view text, const std::string& dir,
                                             std::string_view source,
                                             std::string_view context_name) {
  Reader r(StrCat("kubeconfig ", source));
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat("kubeconfig ", source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  if (!root.IsMap()) return r.Error("top level", "expected a map");
  std::string ctx(context_name);
  if (ctx.empty()) {
    TESSERA_ASSIGN_OR_RETURN(ctx, r.String(root, "current-context", "top level"));
    if (ctx.empty()) return r.Error("current-context", "is not set; pass a context");
  }
  TESSERA_ASSIGN_OR_RETURN(YAML::Node context, r.Named(root, "contexts", "context", ctx));
  std::string where = StrCat("context \"", ctx, "\"");
  TESSERA_ASSIGN_OR_RETURN(std::string cluster_name, r.String(context, "cluster", where));
  TESSERA_ASSIGN_OR_RETURN(std::string user_name, r.String(context, "user", where));
  TESSERA_ASSIGN_OR_RETURN(std::string ns, r.String(context, "namespace", where));
  if (cluster_name.empty()) return r.Error(where, "names no cluster");

  ClientConfig c;
  c.source = StrCat("kubeconfig ", source, " (context ", ctx, ")");
  if (!ns.empty()) c.default_namespace = ns;

  TESSERA_ASSIGN_OR_RETURN(YAML::Node cluster, r.Named(root, "clusters", "cluster", cluster_name));
  where = StrCat("cluster \"", cluster_name, "\"");
  TESSERA_ASSIGN_OR_RETURN(c.server, r.String(cluster, "server", where));
  if (c.server.empty()) return r.Error(where, "has no server");
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.server.rfind("https://", 0) != 0 && c.server.rfind("http://", 0) != 0) {
    return r.Error(StrCat(where, ".server"), StrCat("\"", c.server, "\" is not an http(s) URL"));
  }
  TESSERA_ASSIGN_OR_RETURN(c.ca_pem, PemField(r, cluster, "certificate-authority", where, dir));
  TESSERA_ASSIGN_OR_RETURN(c.insecure_skip_tls_verify,
                           r.Bool(cluster, "insecure-skip-tls-verify", where));
  TESSERA_ASSIGN_OR_RETURN(c.tls_server_name, r.String(cluster, "tls-server-name", where));

  if (!user_name.empty()) {
    TESSERA_ASSIGN_OR_RETURN(YAML::Node user, r.Named(root, "users", "user", user_name));
    where = StrCat("user \"", user_name, "\"");
    if (user["exec"] || user["auth-provider"]) {
      return r.Error(where,
                     "exec and auth-provider credential plugins are not supported; use a "
                     "client certificate or a token");
    }
    TESSERA_ASSIGN_OR_RETURN(c.client_cert_pem,
                             PemField(r, user, "client-certificate", where, dir));
    TESSERA_ASSIGN_OR_RETURN(c.client_key_pem, PemField(r, user, "client-key", where, dir));
    if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
      return r.Error(where, "has a client certificate without a key, or a key without one");
    }
    TESSERA_ASSIGN_OR_RETURN(c.bearer_token, r.String(user, "token", where));
    TESSERA_ASSIGN_OR_RETURN(std::string token_file, r.String(user, "tokenFile", where));
    if (!token_file.empty()) {
      c.token_file = JoinPath(dir, token_file);
      absl::StatusOr<std::string> t = ReadWholeFile(c.token_file);
      if (!t.ok()) return r.Error(StrCat(where, ".tokenFile"), FromAbsl(t.status().message()));
    }
  }
  return c;
}

absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, std::string_view context) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  std::string dir;
  if (size_t slash = path.rfind('/'); slash != std::string::npos) dir = path.substr(0, slash);
  if (dir.empty() && !path.empty() && path[0] == '/') dir = "/";
  return ParseKubeconfig(text, dir, path, context);
}

absl::StatusOr<ClientConfig> InClusterConfig(const InClusterSource& source) {
  auto getenv = source.getenv ? source.getenv : [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  std::optional<std::string> host = getenv("KUBERNETES_SERVICE_HOST");
  std::optional<std::string> port = getenv("KUBERNETES_SERVICE_PORT");
  if (!host || !port || host->empty() || port->empty()) {
    return absl::FailedPreconditionError(
        "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both "
        "be set (or pass --kubeconfig)");
  }
  ClientConfig c;
  c.source = "in-cluster service account";
  bool ipv6 = host->find(':') != std::string::npos;
  c.server = StrCat("https://", ipv6 ? "[" : "", *host, ipv6 ? "]" : "", ":", *port);
  c.token_file = source.service_account_dir + "/token";
  absl::StatusOr<std::string> token = ReadWholeFile(c.token_file);
  if (!token.ok()) {
    return absl::FailedPreconditionError(
        StrCat("in-cluster config: ", FromAbsl(token.status().message())));
  }
  absl::StatusOr<std::string> ca = ReadWholeFile(source.service_account_dir + "/ca.crt");
  if (!ca.ok()) {
    return absl::FailedPreconditionError(
        StrCat("in-cluster config: ", FromAbsl(ca.status().message())));
  }
  c.ca_pem = *ca;
  if (absl::StatusOr<std::string> ns = ReadWholeFile(source.service_account_dir + "/namespace");
      ns.ok() && !Trim(*ns).empty()) {
    c.default_namespace = Trim(*ns);
  }
  return c;
}

std::string DefaultKubeconfigPath() {
  if (const char* env = std::getenv("KUBECONFIG"); env != nullptr && env[0] != '\0') {
    std::string s(env);
    return s.substr(0, s.find(':'));
  }
  if (const char* home = std::getenv("HOME"); home != nullptr) {
    std::string p = StrCat(home, "/.kube/config");
    if (std::ifstream(p).good()) return p;
  }
  return "";
}

TokenSource::TokenSource(const ClientConfig& config, Clock clock)
    : fixed_(Trim(config.bearer_token)),
      file_(config.token_file),
      refresh_(config.token_refresh),
      clock_(clock ? std::move(clock) : [] { return std::chrono::steady_clock::now(); }) {}

std::string TokenSource::Token() {
  if (file_.empty()) return fixed_;
  std::lock_guard<std::mutex> lock(mu_);
  auto now = clock_();
  if (!read_at_ || now - *read_at_ >= refresh_) {
    ++reads_;
    absl::StatusOr<std::string> t = ReadWholeFile(file_);
    read_at_ = now;
    if (t.ok() && !Trim(*t).empty()) {
      cached_ = Trim(*t);
      error_.clear();
    } else {
      error_ = t.ok() ? StrCat(file_, " is empty") : std::string(FromAbsl(t.status().message()));
    }
  }
  return cached_.empty() ? fixed_ : cached_;
}

std::string TokenSource::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

int TokenSource::reads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_;
}

}  // namespace tessera::k8s
