#include "k8s/client/config.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/escaping.h"
#include "common/status.h"
#include "common/strings.h"
#include "k8s/client/yaml_json.h"
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

namespace {

// One named entry (a cluster, user or context) and the file it came from.
struct Entry {
  YAML::Node field;  // the entry's `cluster` / `user` / `context` map
  const KubeconfigText* file = nullptr;
  std::string where;  // "kubeconfig F: users[2]"
};

// The files merged: per list, the first file's entry of each name (kubectl's map merge).
struct Merged {
  std::map<std::string, Entry> clusters, users, contexts;
  std::string current_context;
};

// Adds the entries of `list` in `root` that earlier files did not name. A name repeated within
// the file is an error (client-go's conversion refuses it).
absl::Status MergeList(const Reader& r, const YAML::Node& root, std::string_view list,
                       std::string_view field, const KubeconfigText& file,
                       std::map<std::string, Entry>* into) {
  YAML::Node entries = root[std::string(list)];
  if (!entries || entries.IsNull()) return absl::OkStatus();
  if (!entries.IsSequence()) return r.Error(list, "expected a list");
  std::set<std::string> here;
  for (size_t i = 0; i < entries.size(); ++i) {
    const YAML::Node& e = entries[i];
    const std::string at = StrCat(list, "[", i, "]");
    if (!e.IsMap()) return r.Error(at, "expected a map");
    TESSERA_ASSIGN_OR_RETURN(std::string name, r.String(e, "name", at));
    if (name.empty()) return r.Error(at, "has no name");
    if (!here.insert(name).second) {
      return r.Error(at, StrCat("duplicate name \"", name, "\" in ", list));
    }
    YAML::Node f = e[std::string(field)];
    if (f && !f.IsNull() && !f.IsMap()) return r.Error(StrCat(at, ".", field), "expected a map");
    into->try_emplace(name, Entry{f && !f.IsNull() ? f : YAML::Node(YAML::NodeType::Map), &file,
                                  StrCat("kubeconfig ", file.source, ": ", at)});
  }
  return absl::OkStatus();
}

absl::StatusOr<ExecInteractiveMode> ParseInteractiveMode(const Reader& r, const std::string& mode,
                                                         const std::string& api_version,
                                                         std::string_view where) {
  if (mode == "Never") return ExecInteractiveMode::kNever;
  if (mode == "IfAvailable") return ExecInteractiveMode::kIfAvailable;
  if (mode == "Always") return ExecInteractiveMode::kAlways;
  if (mode.empty()) {
    // client-go's SetDefaults_ExecConfig: older versions default to IfAvailable; v1 must say.
    if (api_version == kExecApiV1Beta1) return ExecInteractiveMode::kIfAvailable;
    return r.Error(StrCat(where, ".interactiveMode"),
                   "must be set for client.authentication.k8s.io/v1 plugins: Never, IfAvailable "
                   "or Always");
  }
  return r.Error(StrCat(where, ".interactiveMode"),
                 StrCat("\"", mode, "\" is not Never, IfAvailable or Always"));
}

// users[].user.exec, validated as client-go validates it (validation.go, exec.go's
// newAuthenticator).
absl::StatusOr<ExecConfig> ParseExec(const Reader& r, const YAML::Node& exec,
                                     const std::string& dir, const std::string& user,
                                     std::string_view where_user) {
  const std::string where = StrCat(where_user, ".exec");
  if (!exec.IsMap()) return r.Error(where, "expected a map");
  ExecConfig e;
  e.user = user;
  TESSERA_ASSIGN_OR_RETURN(e.command, r.String(exec, "command", where));
  if (e.command.empty()) return r.Error(where, "has no command");
  if (e.command.find('/') != std::string::npos) e.command = JoinPath(dir, e.command);
  TESSERA_ASSIGN_OR_RETURN(e.api_version, r.String(exec, "apiVersion", where));
  if (e.api_version.empty()) {
    return r.Error(where, StrCat("has no apiVersion (use ", kExecApiV1, ")"));
  }
  if (e.api_version != kExecApiV1 && e.api_version != kExecApiV1Beta1) {
    return r.Error(StrCat(where, ".apiVersion"),
                   StrCat("\"", e.api_version, "\" is not ", kExecApiV1, " or ", kExecApiV1Beta1));
  }
  if (YAML::Node args = exec["args"]; args && !args.IsNull()) {
    if (!args.IsSequence()) return r.Error(StrCat(where, ".args"), "expected a list of strings");
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].IsScalar()) return r.Error(StrCat(where, ".args[", i, "]"), "expected a string");
      e.args.push_back(args[i].as<std::string>());
    }
  }
  if (YAML::Node env = exec["env"]; env && !env.IsNull()) {
    if (!env.IsSequence()) return r.Error(StrCat(where, ".env"), "expected a list");
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string at = StrCat(where, ".env[", i, "]");
      if (!env[i].IsMap()) return r.Error(at, "expected {name, value}");
      TESSERA_ASSIGN_OR_RETURN(std::string name, r.String(env[i], "name", at));
      TESSERA_ASSIGN_OR_RETURN(std::string value, r.String(env[i], "value", at));
      if (name.empty()) return r.Error(at, "has no name");
      e.env.emplace_back(std::move(name), std::move(value));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(std::string mode, r.String(exec, "interactiveMode", where));
  TESSERA_ASSIGN_OR_RETURN(e.interactive_mode, ParseInteractiveMode(r, mode, e.api_version, where));
  TESSERA_ASSIGN_OR_RETURN(e.provide_cluster_info, r.Bool(exec, "provideClusterInfo", where));
  TESSERA_ASSIGN_OR_RETURN(e.install_hint, r.String(exec, "installHint", where));
  return e;
}

// The cluster's extension named "client.authentication.k8s.io/exec", or null.
absl::StatusOr<nlohmann::json> ExecExtension(const Reader& r, const YAML::Node& cluster,
                                             std::string_view where) {
  YAML::Node ext = cluster["extensions"];
  if (!ext || ext.IsNull()) return nlohmann::json();
  if (!ext.IsSequence()) return r.Error(StrCat(where, ".extensions"), "expected a list");
  for (size_t i = 0; i < ext.size(); ++i) {
    if (!ext[i].IsMap()) return r.Error(StrCat(where, ".extensions[", i, "]"), "expected a map");
    TESSERA_ASSIGN_OR_RETURN(std::string name,
                             r.String(ext[i], "name", StrCat(where, ".extensions[", i, "]")));
    if (name == "client.authentication.k8s.io/exec" && ext[i]["extension"]) {
      return YamlToJson(ext[i]["extension"]);
    }
  }
  return nlohmann::json();
}

// A named entry of the merged files, or an error naming the files searched.
absl::StatusOr<const Entry*> Find(const std::map<std::string, Entry>& entries,
                                  std::string_view list, const std::string& name,
                                  const std::vector<KubeconfigText>& files) {
  auto it = entries.find(name);
  if (it != entries.end()) return &it->second;
  std::vector<std::string> sources;
  for (const KubeconfigText& f : files) sources.push_back(f.source);
  return absl::InvalidArgumentError(
      StrCat("kubeconfig ", StrJoin(sources, ":"), ": ", list, ": no entry named \"", name, "\""));
}

}  // namespace

absl::StatusOr<ClientConfig> ParseKubeconfigs(const std::vector<KubeconfigText>& files,
                                              std::string_view context_name) {
  if (files.empty()) return absl::InvalidArgumentError("no kubeconfig to read");
  Merged m;
  for (const KubeconfigText& file : files) {
    Reader r(StrCat("kubeconfig ", file.source));
    YAML::Node root;
    try {
      root = YAML::Load(file.text);
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(StrCat("kubeconfig ", file.source, ":", e.mark.line + 1,
                                               ":", e.mark.column + 1, ": ", e.msg));
    }
    if (root.IsNull()) continue;  // an empty file sets nothing
    if (!root.IsMap()) return r.Error("top level", "expected a map");
    TESSERA_RETURN_IF_ERROR(MergeList(r, root, "clusters", "cluster", file, &m.clusters));
    TESSERA_RETURN_IF_ERROR(MergeList(r, root, "users", "user", file, &m.users));
    TESSERA_RETURN_IF_ERROR(MergeList(r, root, "contexts", "context", file, &m.contexts));
    if (m.current_context.empty()) {
      TESSERA_ASSIGN_OR_RETURN(m.current_context, r.String(root, "current-context", "top level"));
    }
  }
  std::vector<std::string> sources;
  for (const KubeconfigText& f : files) sources.push_back(f.source);
  const std::string all = StrJoin(sources, ":");
  std::string ctx(context_name);
  if (ctx.empty()) {
    ctx = m.current_context;
    if (ctx.empty()) {
      return absl::InvalidArgumentError(
          StrCat("kubeconfig ", all, ": current-context: is not set; pass a context"));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(const Entry* context, Find(m.contexts, "contexts", ctx, files));
  Reader r(StrCat("kubeconfig ", context->file->source));
  std::string where = StrCat("context \"", ctx, "\"");
  TESSERA_ASSIGN_OR_RETURN(std::string cluster_name, r.String(context->field, "cluster", where));
  TESSERA_ASSIGN_OR_RETURN(std::string user_name, r.String(context->field, "user", where));
  TESSERA_ASSIGN_OR_RETURN(std::string ns, r.String(context->field, "namespace", where));
  if (cluster_name.empty()) return r.Error(where, "names no cluster");

  ClientConfig c;
  c.source = StrCat("kubeconfig ", all, " (context ", ctx, ")");
  if (!ns.empty()) c.default_namespace = ns;

  TESSERA_ASSIGN_OR_RETURN(const Entry* cl, Find(m.clusters, "clusters", cluster_name, files));
  r = Reader(StrCat("kubeconfig ", cl->file->source));
  const YAML::Node& cluster = cl->field;
  const std::string& cluster_dir = cl->file->dir;
  where = StrCat("cluster \"", cluster_name, "\"");
  TESSERA_ASSIGN_OR_RETURN(c.server, r.String(cluster, "server", where));
  if (c.server.empty()) return r.Error(where, "has no server");
  while (!c.server.empty() && c.server.back() == '/') c.server.pop_back();
  if (c.server.rfind("https://", 0) != 0 && c.server.rfind("http://", 0) != 0) {
    return r.Error(StrCat(where, ".server"), StrCat("\"", c.server, "\" is not an http(s) URL"));
  }
  TESSERA_ASSIGN_OR_RETURN(c.ca_pem,
                           PemField(r, cluster, "certificate-authority", where, cluster_dir));
  TESSERA_ASSIGN_OR_RETURN(c.insecure_skip_tls_verify,
                           r.Bool(cluster, "insecure-skip-tls-verify", where));
  TESSERA_ASSIGN_OR_RETURN(c.tls_server_name, r.String(cluster, "tls-server-name", where));
  TESSERA_ASSIGN_OR_RETURN(nlohmann::json exec_extension, ExecExtension(r, cluster, where));

  if (!user_name.empty()) {
    TESSERA_ASSIGN_OR_RETURN(const Entry* us, Find(m.users, "users", user_name, files));
    r = Reader(StrCat("kubeconfig ", us->file->source));
    const YAML::Node& user = us->field;
    const std::string& dir = us->file->dir;
    where = StrCat("user \"", user_name, "\"");
    if (user["auth-provider"]) {
      return r.Error(where,
                     "auth-provider plugins were removed from kubectl; use an exec credential "
                     "plugin (kubelogin, gke-gcloud-auth-plugin, aws eks get-token), a client "
                     "certificate or a token");
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
    if (YAML::Node exec = user["exec"]; exec && !exec.IsNull()) {
      TESSERA_ASSIGN_OR_RETURN(ExecConfig e, ParseExec(r, exec, dir, user_name, where));
      e.cluster_config = std::move(exec_extension);
      c.exec = std::move(e);
    }
  }
  return c;
}

absl::StatusOr<ClientConfig> ParseKubeconfig(std::string_view text, const std::string& dir,
                                             std::string_view source,
                                             std::string_view context_name) {
  return ParseKubeconfigs({KubeconfigText{std::string(text), dir, std::string(source)}},
                          context_name);
}

namespace {

std::string DirOf(const std::string& path) {
  std::string dir;
  if (size_t slash = path.rfind('/'); slash != std::string::npos) dir = path.substr(0, slash);
  if (dir.empty() && !path.empty() && path[0] == '/') dir = "/";
  return dir;
}

}  // namespace

absl::StatusOr<ClientConfig> LoadKubeconfig(const std::string& path, std::string_view context) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return ParseKubeconfig(text, DirOf(path), path, context);
}

absl::StatusOr<ClientConfig> LoadKubeconfigs(const std::vector<std::string>& paths,
                                             std::string_view context) {
  std::vector<KubeconfigText> files;
  for (const std::string& path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) continue;  // kubectl skips these
    TESSERA_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
    files.push_back(KubeconfigText{std::move(text), DirOf(path), path});
  }
  if (files.empty()) {
    return absl::NotFoundError(StrCat("no kubeconfig: none of ", StrJoin(paths, ", "), " exists"));
  }
  return ParseKubeconfigs(files, context);
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

absl::StatusOr<ClientConfig> ResolveClientConfig(const std::string& kubeconfig,
                                                 std::string_view context, ConfigSearch order) {
  if (!kubeconfig.empty()) return LoadKubeconfig(kubeconfig, context);
  absl::StatusOr<ClientConfig> in_cluster = absl::NotFoundError("not looked for");
  if (order == ConfigSearch::kInClusterFirst) {
    in_cluster = InClusterConfig();
    if (in_cluster.ok()) return in_cluster;
  }
  // $KUBECONFIG's files merged as kubectl merges them, or ~/.kube/config.
  if (absl::StatusOr<ClientConfig> c = LoadKubeconfigs(DefaultKubeconfigPaths(), context);
      c.ok() || c.status().code() != absl::StatusCode::kNotFound) {
    return c;
  }
  if (order == ConfigSearch::kInClusterFirst) {
    return absl::InvalidArgumentError(
        StrCat("no API server: pass --kubeconfig, set KUBECONFIG, or run in a pod (",
               FromAbsl(in_cluster.status().message()), ")"));
  }
  in_cluster = InClusterConfig();
  if (in_cluster.ok()) return in_cluster;
  return absl::InvalidArgumentError(
      StrCat("no cluster to read: pass --kubeconfig, set KUBECONFIG, create ~/.kube/config, or "
             "run in a pod (",
             FromAbsl(in_cluster.status().message()), ")"));
}

std::vector<std::string> DefaultKubeconfigPaths(
    const std::function<std::optional<std::string>(const char*)>& getenv_fn) {
  auto getenv = getenv_fn ? getenv_fn : [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
  std::vector<std::string> out;
  if (std::optional<std::string> env = getenv("KUBECONFIG"); env && !env->empty()) {
    // filepath.SplitList, then client-go's deduplicate; empty entries are skipped when loading.
    size_t at = 0;
    while (at <= env->size()) {
      size_t colon = env->find(':', at);
      if (colon == std::string::npos) colon = env->size();
      std::string p = env->substr(at, colon - at);
      if (!p.empty() && std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
      at = colon + 1;
    }
    return out;
  }
  if (std::optional<std::string> home = getenv("HOME"); home && !home->empty()) {
    out.push_back(StrCat(*home, "/.kube/config"));
  }
  return out;
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
