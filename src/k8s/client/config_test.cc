#include "k8s/client/config.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "absl/strings/escaping.h"
#include "common/strings.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

using tessera::testing::TempDir;

std::string B64(const std::string& s) { return absl::Base64Escape(s); }

TEST(Kubeconfig, InlineCertificatesOfTheCurrentContext) {
  std::string text = StrCat(R"(apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {server: "https://other:1"}
- name: test
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: )",
                            B64("CA PEM"), R"(
users:
- name: admin
  user:
    client-certificate-data: )",
                            B64("CERT PEM"), R"(
    client-key-data: )",
                            B64("KEY PEM"), R"(
contexts:
- name: ctx
  context: {cluster: test, user: admin, namespace: team-a}
current-context: ctx
)");
  absl::StatusOr<ClientConfig> c = ParseKubeconfig(text, "/nowhere", "kc");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://127.0.0.1:6443");
  EXPECT_EQ(c->ca_pem, "CA PEM");
  EXPECT_EQ(c->client_cert_pem, "CERT PEM");
  EXPECT_EQ(c->client_key_pem, "KEY PEM");
  EXPECT_EQ(c->default_namespace, "team-a");
  EXPECT_TRUE(c->bearer_token.empty());
}

TEST(Kubeconfig, FilesRelativeToTheKubeconfigAndTokens) {
  TempDir dir;
  dir.Write("ca.crt", "CA FILE");
  dir.Write("token", "tok-from-file\n");
  std::string path = dir.Write("config", R"(clusters:
- name: c
  cluster: {server: "https://k:443", certificate-authority: ca.crt}
users:
- name: u
  user: {tokenFile: token}
- name: v
  user: {token: abc}
contexts:
- {name: one, context: {cluster: c, user: u}}
- {name: two, context: {cluster: c, user: v}}
current-context: one
)");
  absl::StatusOr<ClientConfig> one = LoadKubeconfig(path);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->ca_pem, "CA FILE");
  EXPECT_EQ(one->token_file, dir.path() + "/token");
  EXPECT_EQ(TokenSource(*one).Token(), "tok-from-file");
  absl::StatusOr<ClientConfig> two = LoadKubeconfig(path, "two");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(TokenSource(*two).Token(), "abc");
  EXPECT_EQ(two->default_namespace, "default");
}

TEST(Kubeconfig, ErrorsNameWhatIsWrong) {
  auto err = [](const std::string& text, const std::string& ctx = "") {
    absl::StatusOr<ClientConfig> c = ParseKubeconfig(text, "/x", "kc", ctx);
    EXPECT_FALSE(c.ok());
    return std::string(FromAbsl(c.status().message()));
  };
  const std::string base = R"(clusters:
- {name: c, cluster: {server: "https://k"}}
users:
- {name: u, user: {auth-provider: {name: oidc}}}
- {name: bad, user: {client-certificate-data: "!!notbase64!!", client-key-data: eA==}}
- {name: half, user: {client-certificate-data: eA==}}
contexts:
- {name: x, context: {cluster: c, user: u}}
- {name: b, context: {cluster: c, user: bad}}
- {name: h, context: {cluster: c, user: half}}
- {name: nocluster, context: {cluster: missing, user: u}}
)";
  EXPECT_THAT(err(base), HasSubstr("current-context"));
  EXPECT_THAT(err(base, "x"), HasSubstr("auth-provider plugins were removed"));
  EXPECT_THAT(err(base, "b"), HasSubstr("client-certificate-data: is not valid base64"));
  EXPECT_THAT(err(base, "h"), HasSubstr("without a key"));
  EXPECT_THAT(err(base, "nocluster"), HasSubstr("no entry named \"missing\""));
  EXPECT_THAT(err(base, "nope"), HasSubstr("contexts: no entry named \"nope\""));
  EXPECT_THAT(err("clusters: [\n"), HasSubstr("kubeconfig kc:"));
  EXPECT_THAT(err("clusters:\n- {name: c, cluster: {server: ftp://x}}\ncontexts:\n- {name: a, "
                  "context: {cluster: c}}\ncurrent-context: a\n"),
              HasSubstr("is not an http(s) URL"));
  EXPECT_THAT(std::string(FromAbsl(LoadKubeconfig("/no/such/kubeconfig").status().message())),
              HasSubstr("/no/such/kubeconfig"));
}

TEST(Kubeconfig, ExecPluginsAreReadAndCheckedAsKubectlChecksThem) {
  TempDir dir;
  std::string path = dir.Write("config", R"(clusters:
- name: eks
  cluster:
    server: https://eks.example
    extensions:
    - name: client.authentication.k8s.io/exec
      extension: {audience: prod, retries: 3}
users:
- name: aws
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: aws
      args: [eks, get-token, --cluster-name, prod]
      env: [{name: AWS_PROFILE, value: ops}]
      interactiveMode: Never
      provideClusterInfo: true
      installHint: install the AWS CLI
- name: local
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: ./bin/get-token}
- name: both
  user:
    token: static
    exec: {apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: Always}
contexts:
- {name: aws, context: {cluster: eks, user: aws}}
- {name: local, context: {cluster: eks, user: local}}
- {name: both, context: {cluster: eks, user: both}}
current-context: aws
)");
  absl::StatusOr<ClientConfig> aws = LoadKubeconfig(path);
  ASSERT_TRUE(aws.ok()) << aws.status();
  ASSERT_TRUE(aws->exec.has_value());
  EXPECT_EQ(aws->exec->command, "aws");  // no '/': looked up on PATH, not in the folder
  EXPECT_EQ(aws->exec->args,
            (std::vector<std::string>{"eks", "get-token", "--cluster-name", "prod"}));
  EXPECT_EQ(aws->exec->env,
            (std::vector<std::pair<std::string, std::string>>{{"AWS_PROFILE", "ops"}}));
  EXPECT_EQ(aws->exec->interactive_mode, ExecInteractiveMode::kNever);
  EXPECT_TRUE(aws->exec->provide_cluster_info);
  EXPECT_EQ(aws->exec->install_hint, "install the AWS CLI");
  EXPECT_EQ(aws->exec->cluster_config, (nlohmann::json{{"audience", "prod"}, {"retries", 3}}));
  EXPECT_EQ(aws->exec->user, "aws");

  absl::StatusOr<ClientConfig> local = LoadKubeconfig(path, "local");
  ASSERT_TRUE(local.ok()) << local.status();
  EXPECT_EQ(local->exec->command, dir.path() + "/./bin/get-token");
  // v1beta1 defaults to IfAvailable (client-go's SetDefaults_ExecConfig).
  EXPECT_EQ(local->exec->interactive_mode, ExecInteractiveMode::kIfAvailable);

  absl::StatusOr<ClientConfig> both = LoadKubeconfig(path, "both");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->bearer_token, "static");  // the Transport uses it and not the plugin

  auto err = [](const std::string& exec) {
    absl::StatusOr<ClientConfig> c =
        ParseKubeconfig(StrCat("clusters: [{name: c, cluster: {server: https://k}}]\n"
                               "users: [{name: u, user: {exec: ",
                               exec,
                               "}}]\n"
                               "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
                               "current-context: x\n"),
                        "/x", "kc");
    EXPECT_FALSE(c.ok()) << exec;
    return std::string(FromAbsl(c.status().message()));
  };
  EXPECT_THAT(err("{apiVersion: client.authentication.k8s.io/v1, command: x}"),
              HasSubstr("interactiveMode: must be set"));
  EXPECT_THAT(err("{apiVersion: client.authentication.k8s.io/v1, command: x, "
                  "interactiveMode: Sometimes}"),
              HasSubstr("\"Sometimes\" is not Never, IfAvailable or Always"));
  EXPECT_THAT(err("{command: x}"), HasSubstr("has no apiVersion"));
  EXPECT_THAT(err("{apiVersion: client.authentication.k8s.io/v1alpha1, command: x}"),
              HasSubstr("is not client.authentication.k8s.io/v1"));
  EXPECT_THAT(err("{apiVersion: client.authentication.k8s.io/v1, interactiveMode: Never}"),
              HasSubstr("has no command"));
  EXPECT_THAT(err("{apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: "
                  "Never, env: [{value: v}]}"),
              HasSubstr("env[0]: has no name"));
  EXPECT_THAT(err("{apiVersion: client.authentication.k8s.io/v1, command: x, interactiveMode: "
                  "Never, args: {a: b}}"),
              HasSubstr("args: expected a list"));
}

// KUBECONFIG=a:b as kubectl merges it (client-go's loader.go): the first file to name an entry
// wins all of it, current-context from the first file that sets one, missing files skipped,
// paths relative to the file that holds the entry.
TEST(Kubeconfig, SeveralFilesMergeAsKubectlMergesThem) {
  TempDir a, b;
  a.Write("ca.crt", "CA OF A");
  b.Write("ca.crt", "CA OF B");
  b.Write("token", "token-of-b");
  const std::string first = a.Write("config", R"(clusters:
- {name: shared, cluster: {server: "https://from-a", certificate-authority: ca.crt}}
users:
- {name: u, user: {token: token-of-a}}
contexts:
- {name: one, context: {cluster: shared, user: u, namespace: from-a}}
)");
  const std::string second = b.Write("config", R"(clusters:
- {name: shared, cluster: {server: "https://from-b", insecure-skip-tls-verify: true}}
- {name: only-b, cluster: {server: "https://only-b", certificate-authority: ca.crt}}
users:
- {name: u, user: {token: ignored}}
- {name: v, user: {tokenFile: token}}
contexts:
- {name: one, context: {cluster: only-b, user: v}}
- {name: two, context: {cluster: only-b, user: v}}
current-context: one
)");
  const std::string third = b.Write("third", "current-context: two\n");
  absl::StatusOr<ClientConfig> c = LoadKubeconfigs({first, a.path() + "/missing", second, third});
  ASSERT_TRUE(c.ok()) << c.status();
  // current-context "one" (the second file is the first to set it) is the first file's context.
  EXPECT_EQ(c->server, "https://from-a");
  EXPECT_EQ(c->ca_pem, "CA OF A");
  EXPECT_FALSE(c->insecure_skip_tls_verify);  // the second file's "shared" is ignored whole
  EXPECT_EQ(c->bearer_token, "token-of-a");
  EXPECT_EQ(c->default_namespace, "from-a");
  EXPECT_THAT(c->source, HasSubstr(first));

  absl::StatusOr<ClientConfig> two = LoadKubeconfigs({first, second}, "two");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->server, "https://only-b");
  EXPECT_EQ(two->ca_pem, "CA OF B");  // relative to the second file's folder
  EXPECT_EQ(two->token_file, b.path() + "/token");

  absl::StatusOr<ClientConfig> reversed = LoadKubeconfigs({second, first});
  ASSERT_TRUE(reversed.ok()) << reversed.status();
  EXPECT_EQ(reversed->server, "https://only-b");

  EXPECT_EQ(LoadKubeconfigs({a.path() + "/x", b.path() + "/y"}).status().code(),
            absl::StatusCode::kNotFound);
  const std::string dup =
      a.Write("dup",
              "clusters:\n- {name: c, cluster: {server: https://a}}\n- {name: c, cluster: "
              "{server: https://b}}\n");
  EXPECT_THAT(std::string(FromAbsl(LoadKubeconfigs({dup, first}, "one").status().message())),
              HasSubstr("duplicate name \"c\" in clusters"));
}

TEST(Kubeconfig, DefaultPathsSplitKubeconfigLikeKubectl) {
  std::map<std::string, std::string> env = {{"HOME", "/home/u"}};
  auto getenv = [&](const char* k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  EXPECT_EQ(DefaultKubeconfigPaths(getenv), std::vector<std::string>{"/home/u/.kube/config"});
  env["KUBECONFIG"] = "/a::/b:/a:";
  EXPECT_EQ(DefaultKubeconfigPaths(getenv), (std::vector<std::string>{"/a", "/b"}));
}

// The daemons look for the pod's service account first, the commands a person runs for kubeconfig
// files first; with neither, each says how to name an API server.
TEST(ResolveClientConfig, BothOrdersFindTheKubeconfigAndSayHowToNameAServer) {
  TempDir dir;
  const std::string path = dir.Write("config", R"(clusters:
- name: c
  cluster: {server: "https://from-file:443"}
users:
- name: u
  user: {token: abc}
contexts:
- {name: one, context: {cluster: c, user: u}}
current-context: one
)");
  auto saved = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    return v ? std::optional<std::string>(v) : std::nullopt;
  };
  const std::optional<std::string> kubeconfig = saved("KUBECONFIG");
  const std::optional<std::string> host = saved("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_HOST");  // not in a pod
  ::setenv("KUBECONFIG", path.c_str(), 1);
  for (ConfigSearch order : {ConfigSearch::kInClusterFirst, ConfigSearch::kKubeconfigFirst}) {
    absl::StatusOr<ClientConfig> c = ResolveClientConfig("", "", order);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->server, "https://from-file:443");
  }
  ::setenv("KUBECONFIG", (dir.path() + "/missing").c_str(), 1);
  EXPECT_THAT(std::string(FromAbsl(
                  ResolveClientConfig("", "", ConfigSearch::kInClusterFirst).status().message())),
              HasSubstr("no API server: pass --kubeconfig, set KUBECONFIG, or run in a pod ("));
  EXPECT_THAT(std::string(FromAbsl(
                  ResolveClientConfig("", "", ConfigSearch::kKubeconfigFirst).status().message())),
              HasSubstr("no cluster to read: pass --kubeconfig, set KUBECONFIG, create "
                        "~/.kube/config, or run in a pod ("));
  // A file named on the command line must exist, whichever the order.
  EXPECT_FALSE(
      ResolveClientConfig(dir.path() + "/missing", "", ConfigSearch::kKubeconfigFirst).ok());
  EXPECT_TRUE(ResolveClientConfig(path, "", ConfigSearch::kInClusterFirst).ok());
  if (kubeconfig) {
    ::setenv("KUBECONFIG", kubeconfig->c_str(), 1);
  } else {
    ::unsetenv("KUBECONFIG");
  }
  if (host) ::setenv("KUBERNETES_SERVICE_HOST", host->c_str(), 1);
}

TEST(InCluster, ReadsEnvironmentTokenCaAndNamespace) {
  TempDir dir;
  dir.Write("token", "sa-token");
  dir.Write("ca.crt", "SA CA");
  dir.Write("namespace", "tessera-system\n");
  std::map<std::string, std::string> env = {{"KUBERNETES_SERVICE_HOST", "10.0.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"}};
  InClusterSource src;
  src.service_account_dir = dir.path();
  src.getenv = [&](const char* k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  absl::StatusOr<ClientConfig> c = InClusterConfig(src);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->server, "https://10.0.0.1:443");
  EXPECT_EQ(c->ca_pem, "SA CA");
  EXPECT_EQ(c->default_namespace, "tessera-system");
  EXPECT_EQ(TokenSource(*c).Token(), "sa-token");

  env["KUBERNETES_SERVICE_HOST"] = "fd00::1";
  c = InClusterConfig(src);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->server, "https://[fd00::1]:443");

  env.erase("KUBERNETES_SERVICE_PORT");
  EXPECT_THAT(std::string(FromAbsl(InClusterConfig(src).status().message())),
              HasSubstr("KUBERNETES_SERVICE_PORT"));
  env["KUBERNETES_SERVICE_PORT"] = "443";
  std::filesystem::remove(dir.path() + "/token");
  EXPECT_THAT(std::string(FromAbsl(InClusterConfig(src).status().message())), HasSubstr("/token"));
}

TEST(TokenSource, ReReadsTheFileAfterTheRefreshPeriodAndKeepsTheLastGoodToken) {
  TempDir dir;
  std::string file = dir.Write("token", "first");
  ClientConfig c;
  c.token_file = file;
  c.token_refresh = std::chrono::seconds(60);
  auto now = std::chrono::steady_clock::time_point() + std::chrono::hours(1);
  TokenSource tokens(c, [&] { return now; });
  EXPECT_EQ(tokens.Token(), "first");
  dir.Write("token", "second");
  now += std::chrono::seconds(59);
  EXPECT_EQ(tokens.Token(), "first");  // cached
  EXPECT_EQ(tokens.reads(), 1);
  now += std::chrono::seconds(1);
  EXPECT_EQ(tokens.Token(), "second");  // rotated
  EXPECT_EQ(tokens.reads(), 2);
  std::filesystem::remove(file);
  now += std::chrono::seconds(60);
  EXPECT_EQ(tokens.Token(), "second");  // file gone: keep the last good one
  EXPECT_THAT(tokens.last_error(), HasSubstr("token"));
}

}  // namespace
}  // namespace tessera::k8s
