#include "k8s/client/config.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/escaping.h"
#include "common/strings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::k8s {
namespace {

using ::testing::HasSubstr;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessera-cfg-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  std::string Write(const std::string& name, const std::string& text) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }

 private:
  std::string path_;
};

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
- {name: u, user: {exec: {command: aws}}}
- {name: bad, user: {client-certificate-data: "!!notbase64!!", client-key-data: eA==}}
- {name: half, user: {client-certificate-data: eA==}}
contexts:
- {name: x, context: {cluster: c, user: u}}
- {name: b, context: {cluster: c, user: bad}}
- {name: h, context: {cluster: c, user: half}}
- {name: nocluster, context: {cluster: missing, user: u}}
)";
  EXPECT_THAT(err(base), HasSubstr("current-context"));
  EXPECT_THAT(err(base, "x"), HasSubstr("exec and auth-provider"));
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
