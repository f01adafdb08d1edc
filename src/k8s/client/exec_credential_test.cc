// Exec credential plugins: the rules client-go keeps (interactive mode, caching until expiry, a
// new run after a 401 to the current credentials only), the ExecCredential read and written, and
// a real plugin script run for requests to a local server that accepts one token only.
#include "k8s/client/exec_credential.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "common/strings.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "k8s/client/http.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Msg(const absl::Status& s) { return std::string(FromAbsl(s.message())); }

ClientConfig WithExec(ExecInteractiveMode mode = ExecInteractiveMode::kNever) {
  ClientConfig c;
  c.server = "https://k.example:6443";
  c.ca_pem = "CA PEM";
  ExecConfig e;
  e.command = "get-token";
  e.args = {"--cluster", "prod"};
  e.env = {{"AWS_PROFILE", "ops"}, {"PATH", "/plugin/bin"}};
  e.api_version = kExecApiV1;
  e.interactive_mode = mode;
  e.user = "admin";
  c.exec = e;
  return c;
}

std::string Credential(const std::string& token, const std::string& expiry = "") {
  json status = {{"token", token}};
  if (!expiry.empty()) status["expirationTimestamp"] = expiry;
  return json{{"apiVersion", kExecApiV1}, {"kind", "ExecCredential"}, {"status", status}}.dump();
}

TEST(ExecInteractive, FollowsKubectlsModes) {
  EXPECT_FALSE(*ExecInteractive(ExecInteractiveMode::kNever, true));
  EXPECT_FALSE(*ExecInteractive(ExecInteractiveMode::kNever, false));
  EXPECT_TRUE(*ExecInteractive(ExecInteractiveMode::kIfAvailable, true));
  EXPECT_FALSE(*ExecInteractive(ExecInteractiveMode::kIfAvailable, false));
  EXPECT_TRUE(*ExecInteractive(ExecInteractiveMode::kAlways, true));
  absl::StatusOr<bool> no_tty = ExecInteractive(ExecInteractiveMode::kAlways, false);
  ASSERT_FALSE(no_tty.ok());
  EXPECT_THAT(Msg(no_tty.status()), HasSubstr("standard input is not a terminal"));
}

TEST(ExecInfo, SaysWhetherInteractiveAndTheClusterWhenAsked) {
  ClientConfig c = WithExec();
  json info = ExecInfo(*c.exec, c, true);
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_EQ(info["apiVersion"], kExecApiV1);
  EXPECT_EQ(info["spec"]["interactive"], true);
  EXPECT_FALSE(info["spec"].contains("cluster"));

  c.exec->provide_cluster_info = true;
  c.exec->cluster_config = {{"audience", "prod"}};
  c.tls_server_name = "api.internal";
  info = ExecInfo(*c.exec, c, false);
  EXPECT_EQ(info["spec"]["interactive"], false);
  const json& cl = info["spec"]["cluster"];
  EXPECT_EQ(cl["server"], "https://k.example:6443");
  EXPECT_EQ(cl["certificate-authority-data"], absl::Base64Escape("CA PEM"));
  EXPECT_EQ(cl["tls-server-name"], "api.internal");
  EXPECT_FALSE(cl.contains("insecure-skip-tls-verify"));
  EXPECT_EQ(cl["config"]["audience"], "prod");
}

TEST(ParseExecCredential, ReadsTokensCertificatesAndExpiry) {
  absl::StatusOr<Credentials> t =
      ParseExecCredential(Credential("tok", "2026-03-01T10:15:00Z"), kExecApiV1);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->token, "tok");
  ASSERT_TRUE(t->expiry.has_value());
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*t->expiry), 1772360100);

  json cert = {{"apiVersion", kExecApiV1},
               {"kind", "ExecCredential"},
               {"status",
                {{"clientCertificateData", "-----BEGIN CERTIFICATE-----\nx\n"},
                 {"clientKeyData", "-----BEGIN PRIVATE KEY-----\ny\n"}}},
               {"unknown", 1}};
  absl::StatusOr<Credentials> c = ParseExecCredential(cert.dump(), kExecApiV1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->token, IsEmpty());
  EXPECT_THAT(c->client_cert_pem, HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_FALSE(c->expiry.has_value());

  auto err = [](const std::string& out) {
    absl::StatusOr<Credentials> r = ParseExecCredential(out, kExecApiV1);
    EXPECT_FALSE(r.ok()) << out;
    return Msg(r.status());
  };
  EXPECT_THAT(err("Enter MFA code: {"), HasSubstr("not an ExecCredential JSON"));
  EXPECT_THAT(err(R"({"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",
                      "status":{"token":"t"}})"),
              HasSubstr("configured to use API version client.authentication.k8s.io/v1 but "
                        "returned version \"client.authentication.k8s.io/v1beta1\""));
  EXPECT_THAT(err(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"Secret",
                      "status":{"token":"t"}})"),
              HasSubstr("kind \"Secret\""));
  EXPECT_THAT(err(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential"})"),
              HasSubstr("did not return a status"));
  EXPECT_THAT(err(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
                      "status":{}})"),
              HasSubstr("did not return a token or a certificate"));
  EXPECT_THAT(err(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
                      "status":{"clientCertificateData":"-----BEGIN CERTIFICATE-----"}})"),
              HasSubstr("only a certificate or a key"));
  EXPECT_THAT(err(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",
                      "status":{"token":"t","expirationTimestamp":"tomorrow"}})"),
              HasSubstr("expirationTimestamp \"tomorrow\""));
}

// A plugin the test controls: what each run prints, and what it was run with.
struct FakePlugin {
  std::vector<std::string> outputs;  // one per run; the last repeats
  int exit_code = 0;
  bool missing = false;
  int runs = 0;
  std::vector<std::string> argv, env;
  bool interactive = false;

  ExecRun operator()(const std::vector<std::string>& a, const std::vector<std::string>& e, bool i) {
    argv = a;
    env = e;
    interactive = i;
    ExecRun r;
    if (missing) {
      r.not_found = true;
      r.error = "No such file or directory";
      return r;
    }
    r.started = true;
    r.exit_code = exit_code;
    r.out = outputs.at(std::min<size_t>(static_cast<size_t>(runs), outputs.size() - 1));
    ++runs;
    return r;
  }
};

struct Harness {
  FakePlugin plugin;
  std::chrono::system_clock::time_point now =
      std::chrono::system_clock::from_time_t(1772360000);  // 2026-03-01T10:13:20Z
  bool tty = false;
  ExecCredentialSource::Options Options() {
    ExecCredentialSource::Options o;
    o.run = [this](const auto& a, const auto& e, bool i) { return plugin(a, e, i); };
    o.now = [this] { return now; };
    o.stdin_is_terminal = [this] { return tty; };
    o.environ = [] { return std::vector<std::string>{"HOME=/home/u", "PATH=/usr/bin"}; };
    return o;
  }
};

TEST(ExecCredentialSource, CachesUntilExpiryAndRunsWithItsArgsAndEnvironment) {
  Harness h;
  h.plugin.outputs = {Credential("one", "2026-03-01T10:15:00Z"), Credential("two")};
  ExecCredentialSource source(WithExec(), h.Options());
  absl::StatusOr<std::shared_ptr<const Credentials>> a = source.Get();
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->token, "one");
  EXPECT_EQ(h.plugin.argv, (std::vector<std::string>{"get-token", "--cluster", "prod"}));
  EXPECT_FALSE(h.plugin.interactive);
  // Ours, the kubeconfig's (which wins for PATH), and KUBERNETES_EXEC_INFO.
  EXPECT_THAT(h.plugin.env, ::testing::Contains("HOME=/home/u"));
  EXPECT_THAT(h.plugin.env, ::testing::Contains("PATH=/plugin/bin"));
  EXPECT_THAT(h.plugin.env, ::testing::Contains("AWS_PROFILE=ops"));
  EXPECT_THAT(h.plugin.env, ::testing::Not(::testing::Contains("PATH=/usr/bin")));
  std::string info;
  for (const std::string& e : h.plugin.env) {
    if (e.starts_with("KUBERNETES_EXEC_INFO=")) info = e.substr(21);
  }
  EXPECT_EQ(json::parse(info)["spec"]["interactive"], false);

  h.now += std::chrono::seconds(99);  // 10:14:59, before the expiry
  EXPECT_EQ((*source.Get())->token, "one");
  EXPECT_EQ(source.runs(), 1);
  h.now += std::chrono::seconds(2);  // 10:15:01: expired
  EXPECT_EQ((*source.Get())->token, "two");
  EXPECT_EQ(source.runs(), 2);
  h.now += std::chrono::hours(24 * 365);  // no expiry given: kept until refused
  EXPECT_EQ((*source.Get())->token, "two");
  EXPECT_EQ(source.runs(), 2);
}

TEST(ExecCredentialSource, A401RunsThePluginOnceForTheCurrentCredentialsOnly) {
  Harness h;
  h.plugin.outputs = {Credential("stale"), Credential("fresh")};
  ExecCredentialSource source(WithExec(), h.Options());
  std::shared_ptr<const Credentials> stale = *source.Get();
  absl::StatusOr<bool> renewed = source.Rejected(stale);
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(*renewed);
  EXPECT_EQ((*source.Get())->token, "fresh");
  EXPECT_EQ(source.runs(), 2);
  // Another request that was refused with the stale token: already renewed, no new run.
  renewed = source.Rejected(stale);
  ASSERT_TRUE(renewed.ok());
  EXPECT_TRUE(*renewed);
  EXPECT_EQ(source.runs(), 2);
  // The fresh one refused too, and the plugin gives it again: nothing newer to retry with.
  std::shared_ptr<const Credentials> fresh = *source.Get();
  renewed = source.Rejected(fresh);
  ASSERT_TRUE(renewed.ok());
  EXPECT_FALSE(*renewed);
  EXPECT_EQ(source.runs(), 3);
}

TEST(ExecCredentialSource, InteractiveModesAndFailuresSayWhatToDo) {
  {
    Harness h;
    h.plugin.outputs = {Credential("t")};
    ExecCredentialSource always(WithExec(ExecInteractiveMode::kAlways), h.Options());
    absl::StatusOr<std::shared_ptr<const Credentials>> r = always.Get();
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(Msg(r.status()), HasSubstr("standard input is not a terminal"));
    EXPECT_EQ(h.plugin.runs, 0);  // never started without a terminal
    h.tty = true;
    ASSERT_TRUE(always.Get().ok());
    EXPECT_TRUE(h.plugin.interactive);
  }
  {
    Harness h;
    h.tty = true;
    h.plugin.outputs = {Credential("t")};
    ExecCredentialSource if_available(WithExec(ExecInteractiveMode::kIfAvailable), h.Options());
    ASSERT_TRUE(if_available.Get().ok());
    EXPECT_TRUE(h.plugin.interactive);
    ExecCredentialSource never(WithExec(ExecInteractiveMode::kNever), h.Options());
    ASSERT_TRUE(never.Get().ok());
    EXPECT_FALSE(h.plugin.interactive);
  }
  {
    Harness h;
    h.plugin.missing = true;
    ClientConfig c = WithExec();
    c.exec->install_hint = "Install aws-iam-authenticator: brew install aws-iam-authenticator";
    ExecCredentialSource missing(c, h.Options());
    const std::string m = Msg(missing.Get().status());
    EXPECT_THAT(m, HasSubstr("executable \"get-token\" not found on PATH"));
    EXPECT_THAT(m, HasSubstr("brew install aws-iam-authenticator"));
    EXPECT_THAT(m, HasSubstr("(user \"admin\")"));
  }
  {
    Harness h;
    h.plugin.outputs = {""};
    h.plugin.exit_code = 3;
    ExecCredentialSource failing(WithExec(), h.Options());
    EXPECT_THAT(Msg(failing.Get().status()), HasSubstr("failed with exit code 3"));
  }
}

using tessera::testing::TempDir;

TEST(RunPlugin, CapturesStdoutAndTheExitStatus) {
  TempDir dir;
  const std::string p = dir.Script("p", "echo \"$1 $X\"; echo to-stderr >&2; exit 4\n");
  ExecRun r = RunPlugin({p, "arg"}, {"X=env"}, false);
  ASSERT_TRUE(r.started) << r.error;
  EXPECT_EQ(r.out, "arg env\n");
  EXPECT_EQ(r.exit_code, 4);
  ExecRun missing = RunPlugin({dir.path() + "/nope"}, {}, false);
  EXPECT_FALSE(missing.started);
  EXPECT_TRUE(missing.not_found);
  // stdin is /dev/null unless interactive.
  const std::string reads = dir.Script("r", "if read x; then echo got; else echo eof; fi\n");
  EXPECT_EQ(RunPlugin({reads}, {}, false).out, "eof\n");
}

// A real plugin script and a server that accepts only the token of its second run: the first
// request is refused (401), the plugin runs again, and the request is sent again and succeeds;
// later requests reuse the cached token. The same through the AsyncClient.
TEST(ExecCredentials, ARefusedTokenIsRenewedAndTheRequestSentAgain) {
  TempDir dir;
  const std::string counter = dir.path() + "/runs";
  const std::string plugin = dir.Script(
      "plugin",
      StrCat("n=$(cat ", counter, " 2>/dev/null || echo 0); n=$((n+1)); echo $n > ", counter,
             "\n"
             "case \"$KUBERNETES_EXEC_INFO\" in *'\"interactive\":false'*) ;; *) exit 9;; esac\n"
             "if [ $n -eq 1 ]; then t=expired; else t=good-$MODE; fi\n"
             "printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":"
             "\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' $t\n"));
  httplib::Server server;
  std::atomic<int> refused{0}, served{0};
  server.Get("/api/v1/namespaces", [&](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != "Bearer good-test") {
      ++refused;
      res.status = 401;
      res.set_content(R"({"kind":"Status","reason":"Unauthorized","message":"Unauthorized"})",
                      "application/json");
      return;
    }
    ++served;
    res.set_content(R"({"items":[]})", "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });
  // A client of the server whose credentials come from `command` run with MODE=`mode`.
  auto client_of = [port](const std::string& command, const std::string& mode) {
    ClientConfig config;
    config.server = StrCat("http://127.0.0.1:", port);
    ExecConfig e;
    e.command = command;
    e.api_version = kExecApiV1;
    e.interactive_mode = ExecInteractiveMode::kNever;
    e.env = {{"MODE", mode}};
    config.exec = e;
    return ApiClient::Create(config);
  };
  {
    absl::StatusOr<std::unique_ptr<ApiClient>> client = client_of(plugin, "test");
    ASSERT_TRUE(client.ok()) << client.status();
    for (int i = 0; i < 3; ++i) {
      absl::StatusOr<json> got = (*client)->Get("/api/v1/namespaces");
      ASSERT_TRUE(got.ok()) << got.status();
    }
    EXPECT_EQ(refused.load(), 1);
    EXPECT_EQ(served.load(), 3);
    AsyncClient async((*client)->transport(), AsyncClientOptions{});
    std::atomic<int> ok{0};
    async.Submit(HttpRequest{"GET", "/api/v1/namespaces", "", ""},
                 [&](const HttpResponse& r) { ok += r.ok() ? 1 : 0; });
    EXPECT_TRUE(async.Drain(std::chrono::seconds(10)));
    EXPECT_EQ(ok.load(), 1);
  }
  {
    // A token the server never accepts: the 401 comes back once, after one renewal.
    std::ofstream(counter) << "0";
    absl::StatusOr<std::unique_ptr<ApiClient>> client = client_of(plugin, "other");
    ASSERT_TRUE(client.ok());
    refused = 0;
    absl::StatusOr<json> got = (*client)->Get("/api/v1/namespaces");
    EXPECT_EQ(got.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_EQ(refused.load(), 2);
    std::ifstream in(counter);
    int runs = 0;
    in >> runs;
    EXPECT_EQ(runs, 2);
  }
  {
    // A plugin that fails: no request is sent, and the error names the plugin.
    absl::StatusOr<std::unique_ptr<ApiClient>> client =
        client_of(dir.Script("broken", "echo 'no SSO session' >&2; exit 1\n"), "");
    ASSERT_TRUE(client.ok());
    refused = 0;
    served = 0;
    absl::StatusOr<json> got = (*client)->Get("/api/v1/namespaces");
    ASSERT_FALSE(got.ok());
    EXPECT_THAT(Msg(got.status()), HasSubstr("failed with exit code 1"));
    EXPECT_EQ(refused.load() + served.load(), 0);
  }
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace tessera::k8s
