// Kueue in front of `tessera scheduler`: Kueue's controller manager (built from its Go module by
// test/kueue/build.sh) admits suspended batch/v1 Jobs against a ClusterQueue's quota in
// tessera.dev/gpu and tessera.dev/gpu-memory; tessera places the pods of each admitted Job as a
// gang (the Job controller's gang PodGroup, gate WorkloadWithJob; or, in
// kueue_annotations_e2e_test, tessera's gang annotations on the pod template); a Job over quota
// waits in Kueue (suspended, no pods) while tessera has room; when quota frees up (a Job
// finishes, a Job is deleted, Kueue preempts a lower-priority Job) the waiting Job is admitted and
// placed. Kueue's plain-pod groups stay behind their scheduling gate, untouched by tessera, until
// Kueue admits them (docs/workloads.md, "Kueue").
//
// One control plane for the binary (CMake: WITH_JOB_WORKLOADS for kueue_e2e_test; Kubernetes'
// default gates and kube-controller-manager for kueue_annotations_e2e_test), nodes as plain Node
// objects with the tessera.dev/gpu-inventory annotation and no kubelet (as in
// job_podgroup_e2e_test): pods never run, they are bound, and what tessera decided is read from
// their tessera.dev/assignment annotations. Where a kubelet would act the test does: it confirms
// deleted pods gone (grace period 0) and reports a finished pod's phase (Succeeded).
//
// Kueue runs once for the binary (SetUpTestSuite): its CRDs applied from the module, the
// namespace kueue-system, a configuration file with leader election, metrics and internal
// certificate management off, the batch/job and pod integrations, and no webhook registered with
// the API server (its webhook server listens on 127.0.0.1 with a self-signed certificate, but no
// {Validating,Mutating}WebhookConfiguration points at it): the test sets what Kueue's webhooks
// would (Jobs created suspended and labelled; plain pods gated, labelled managed, with Kueue's
// finalizer). Kueue v0.17 with internal certificate management off reads its metrics certificate
// from the fixed path /etc/kueue/metrics/certs even with metrics off, so it runs in a mount
// namespace of its own with an overlay on /etc that holds a self-signed one (nothing is written
// to the host's /etc; this needs root, as the harness's nodes do).
//
// Each test has its own namespace (with the LocalQueues team-a and team-b), ClusterQueue,
// scheduler name, node label and Lease; TearDown deletes them.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/testing/objects.h"
#include "records/assignment.h"
#include "scoped_process.h"

namespace tessera::e2e {
namespace {

using k8s::testing::NodeObject;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::HasSubstr;
using ::testing::Not;

ControlPlane& Cp() { return ControlPlane::Shared(); }

template <typename Pred>
bool WaitUntil(Pred pred, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(200));
  }
  return pred();
}

std::string TestId() {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  std::string id;
  for (char c : name) {
    if (std::isupper(static_cast<unsigned char>(c)) && !id.empty()) id += '-';
    id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  id = id.substr(0, 40);
  while (!id.empty() && id.back() == '-') id.pop_back();
  return id;
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The full path of a program on PATH (ScopedProcess does not search PATH), or `name`.
std::string InPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return name;
}

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

constexpr std::string_view kKueue = "/apis/kueue.x-k8s.io/v1beta2/";
constexpr std::string_view kScheduling = "/apis/scheduling.k8s.io/v1beta1/namespaces/";

// Kueue's manager for the whole binary: started by the first SetUpTestSuite, stopped after the
// last test. error is why it is not running ("" when it is).
struct KueueManager {
  std::string dir;    // configuration, certificates, the log
  std::string build;  // test/kueue/build.sh's build folder (bin/kueue, crds/)
  std::unique_ptr<ScopedProcess> process;
  std::string error;
};
KueueManager& Kueue() {
  static KueueManager* k = new KueueManager;
  return *k;
}

absl::Status RunOk(const std::vector<std::string>& argv) {
  CommandResult r = RunCommand(argv);
  if (r.ok()) return absl::OkStatus();
  return absl::InternalError(StrCat(argv[0], " failed (", r.exit_code, "): ", r.err, r.out));
}

absl::Status StartKueue(KueueManager& k) {
  CommandResult built =
      RunCommand({StrCat(TESSERA_SOURCE_DIR, "/test/kueue/build.sh"), "--print-dir"});
  if (!built.ok()) {
    return absl::FailedPreconditionError(
        StrCat("Kueue is not built for this tree: run test/kueue/build.sh (", built.err, ")"));
  }
  k.build = Trimmed(built.out);
  k.dir = StrCat(::testing::TempDir(), "/tessera-kueue-", getpid());
  std::filesystem::remove_all(k.dir);
  const std::string certs = k.dir + "/webhook-certs";
  const std::string metrics_certs = k.dir + "/etc-upper/kueue/metrics/certs";
  std::filesystem::create_directories(certs);
  std::filesystem::create_directories(metrics_certs);
  std::filesystem::create_directories(k.dir + "/etc-work");

  // Kueue's CRDs, as the module ships them (server-side: the Workload CRD is too big for the
  // last-applied annotation).
  absl::StatusOr<std::string> applied =
      Cp().KubectlOk({"apply", "--server-side", "--force-conflicts", "-f", k.build + "/crds"});
  if (!applied.ok()) return applied.status();
  absl::StatusOr<std::string> established = Cp().KubectlOk(
      {"wait", "--for=condition=Established", "--timeout=60s", "-f", k.build + "/crds"});
  if (!established.ok()) return established.status();
  CommandResult ns = Cp().Kubectl({"create", "namespace", "kueue-system"});
  if (!ns.ok() && ns.err.find("AlreadyExists") == std::string::npos) {
    return absl::InternalError(StrCat("kubectl create namespace kueue-system: ", ns.err));
  }

  // Self-signed certificates for the webhook server (which listens, though no webhook is
  // registered) and for the metrics server's certificate watcher.
  absl::Status cert =
      RunOk({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=kueue-webhook", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
             certs + "/tls.key", "-out", certs + "/tls.crt"});
  if (!cert.ok()) return cert;
  std::filesystem::copy(certs + "/tls.key", metrics_certs + "/tls.key");
  std::filesystem::copy(certs + "/tls.crt", metrics_certs + "/tls.crt");

  const std::string config = k.dir + "/config.yaml";
  std::ofstream(config) << StrCat(R"(apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
health:
  healthProbeBindAddress: 127.0.0.1:)",
                                  FreePort(), R"(
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: )",
                                  FreePort(), R"(
  certDir: )",
                                  certs, R"(
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
clientConnection:
  qps: 50
  burst: 100
integrations:
  frameworks:
  - batch/job
  - pod
featureGates:
  VisibilityOnDemand: false
)");
  // The overlay gives Kueue's process an /etc with kueue/metrics/certs in it, in a mount
  // namespace of its own (gone with the process); exec keeps the pid ScopedProcess kills.
  const std::string script = StrCat("mount -t overlay overlay -o lowerdir=/etc,upperdir=", k.dir,
                                    "/etc-upper,workdir=", k.dir, "/etc-work /etc && exec ",
                                    k.build, "/bin/kueue --config ", config, " --kubeconfig ",
                                    Cp().kubeconfig(), " --zap-log-level=2");
  absl::StatusOr<std::unique_ptr<ScopedProcess>> p = ScopedProcess::Start(
      {InPath("unshare"), "--mount", "--propagation", "private", "--", "sh", "-c", script},
      k.dir + "/kueue.log");
  if (!p.ok()) return p.status();
  k.process = std::move(*p);
  if (!k.process->WaitForLog("Starting workers", milliseconds(60000))) {
    return absl::InternalError(
        StrCat("Kueue did not start; its log ", k.dir, "/kueue.log:\n", k.process->Log()));
  }
  return absl::OkStatus();
}

class KueueTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    KueueManager& k = Kueue();
    if (k.process || !k.error.empty()) return;
    absl::Status started = StartKueue(k);
    if (!started.ok()) k.error = started.ToString();
  }
  static void TearDownTestSuite() {
    KueueManager& k = Kueue();
    k.process.reset();  // SIGKILL and reap
    if (!::testing::UnitTest::GetInstance()->Failed()) std::filesystem::remove_all(k.dir);
  }

  void SetUp() override {
    ASSERT_TRUE(Kueue().error.empty()) << Kueue().error;
    absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = k8s::ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    id_ = TestId();
    ns_ = StrCat("e2e-", id_);
    scheduler_name_ = StrCat("tessera-", id_);
    cluster_queue_ = StrCat("cq-", id_);
    dir_ = StrCat(::testing::TempDir(), "/tessera-e2e-", getpid(), "-", id_);
    std::filesystem::create_directories(dir_);
    absl::StatusOr<json> created =
        api_->Create("/api/v1/namespaces",
                     {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok() || created.status().code() == absl::StatusCode::kAlreadyExists)
        << created.status();
    std::ofstream(dir_ + "/config.yaml") << StrCat(R"(apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: )",
                                                   scheduler_name_, R"(
nodeSelector: "tessera-e2e/test=)",
                                                   id_, R"("
leaderElection:
  resourceNamespace: )",
                                                   ns_, R"(
  resourceName: tessera-scheduler
  leaseDuration: 3s
  renewDeadline: 2s
  retryPeriod: 500ms
metrics: {bindAddress: 127.0.0.1, port: 0}
retry: {minInterval: 200ms, period: 5s}
)");
  }

  void TearDown() override {
    scheduler_.reset();  // SIGKILL and reap
    if (api_) {
      (void)api_->Delete(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs"),
                         {{"propagationPolicy", "Background"}});
      ForceDeletePods();
      (void)api_->Delete(StrCat(kKueue, "namespaces/", ns_, "/localqueues"));
      (void)api_->Delete(StrCat(kKueue, "clusterqueues/", cluster_queue_));
      (void)api_->Delete(StrCat(kScheduling, ns_, "/podgroups"));
      (void)api_->Delete(StrCat(kScheduling, ns_, "/workloads"));
      (void)api_->Delete(StrCat("/api/v1/nodes?labelSelector=",
                                k8s::QueryEscape(StrCat("tessera-e2e/test=", id_))));
    }
    if (HasFailure() && Kueue().process) {
      std::cerr << "Kueue's log: " << Kueue().process->log_path() << "\n";
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // What a kubelet does for a deleted pod that it ran: confirms it gone (grace period 0).
  void ForceDeletePods(const std::string& job = "") {
    for (const json& p : Pods(job)) {
      if (!job.empty() && !p["metadata"].contains("deletionTimestamp")) continue;
      (void)api_->Delete(
          StrCat("/api/v1/namespaces/", ns_, "/pods/", std::string(p["metadata"]["name"])),
          {{"gracePeriodSeconds", 0}});
    }
  }

  void StartScheduler() {
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", Cp().kubeconfig(),
                              "--config", dir_ + "/config.yaml", "--identity", "kueue"},
                             dir_ + "/scheduler.log");
    ASSERT_TRUE(p.ok()) << p.status();
    scheduler_ = std::move(*p);
  }
  std::string Log() const { return scheduler_ ? scheduler_->Log() : ""; }

  void AddNode(NodeObject node) {
    node.Label("tessera-e2e/test", id_);
    json j = node.Json();
    json status = j["status"];
    j.erase("status");
    absl::StatusOr<json> created = api_->Create("/api/v1/nodes", j);
    ASSERT_TRUE(created.ok()) << created.status();
    absl::StatusOr<json> patched =
        api_->Patch(StrCat("/api/v1/nodes/", std::string(j["metadata"]["name"]), "/status"),
                    k8s::PatchType::kMerge, {{"status", status}});
    ASSERT_TRUE(patched.ok()) << patched.status();
  }
  std::string NodeName(const std::string& base) { return StrCat(id_.substr(0, 20), "-", base); }

  // A manifest under examples/k8s/kueue/, with this test's scheduler name and ClusterQueue.
  std::string Example(const std::string& file) {
    std::string manifest = ReadFile(StrCat(TESSERA_SOURCE_DIR, "/examples/k8s/kueue/", file));
    EXPECT_FALSE(manifest.empty()) << file;
    auto replace_all = [&](const std::string& from, const std::string& to) {
      for (size_t at = manifest.find(from); at != std::string::npos;
           at = manifest.find(from, at + to.size())) {
        manifest.replace(at, from.size(), to);
      }
    };
    replace_all("schedulerName: tessera\n", StrCat("schedulerName: ", scheduler_name_, "\n"));
    replace_all("gpu-cluster-queue", cluster_queue_);
    return manifest;
  }
  void Apply(const std::string& file) {
    CommandResult applied = Cp().Kubectl({"apply", "-n", ns_, "-f", "-"}, Example(file));
    ASSERT_TRUE(applied.ok()) << file << ": " << applied.err;
  }
  // queues.yaml (the ResourceFlavor, this test's ClusterQueue, team-a and team-b), then waits
  // until Kueue says the ClusterQueue is active.
  void ApplyQueues() {
    Apply("queues.yaml");
    ASSERT_TRUE(WaitUntil(
        [&] {
          absl::StatusOr<json> cq = api_->Get(StrCat(kKueue, "clusterqueues/", cluster_queue_));
          if (!cq.ok()) return false;
          for (const json& c :
               cq->value("status", json::object()).value("conditions", json::array())) {
            if (c["type"] == "Active" && c["status"] == "True") return true;
          }
          return false;
        },
        seconds(60)))
        << "Kueue did not make ClusterQueue " << cluster_queue_ << " active";
  }

  // A suspended Job of `n` pods for LocalQueue `queue`, each asking for `resources` (requests and
  // limits), a gang of n in one NVLink domain (the Job controller's PodGroup).
  json Job(const std::string& name, const std::string& queue, int n, const json& resources,
           const std::string& priority_class = "") {
    json labels = {{"kueue.x-k8s.io/queue-name", queue}};
    if (!priority_class.empty()) labels["kueue.x-k8s.io/priority-class"] = priority_class;
    json pod_spec = {{"schedulerName", scheduler_name_},
                     {"restartPolicy", "Never"},
                     {"containers",
                      {{{"name", "worker"},
                        {"image", "busybox"},
                        {"resources", {{"requests", resources}, {"limits", resources}}}}}}};
    json job = {{"apiVersion", "batch/v1"},
                {"kind", "Job"},
                {"metadata", {{"name", name}, {"namespace", ns_}, {"labels", labels}}},
                {"spec",
                 {{"suspend", true},
                  {"parallelism", n},
                  {"completions", n},
                  {"completionMode", "Indexed"},
                  {"template", {{"spec", pod_spec}}}}}};
    if (annotated_gangs_) {
      job["spec"]["template"]["metadata"]["annotations"] = {
          {"tessera.dev/gang", name},
          {"tessera.dev/gang-size", std::to_string(n)},
          {"tessera.dev/gang-topology", "nvlink-domain"}};
    } else {
      job["spec"]["scheduling"] = {
          {"schedulingPolicy", {{"gang", json::object()}}},
          {"schedulingConstraints", {{"topology", {{{"key", "tessera.dev/nvlink-domain"}}}}}}};
    }
    return job;
  }
  void CreateJob(const json& job) {
    absl::StatusOr<json> created =
        api_->Create(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs"), job);
    ASSERT_TRUE(created.ok()) << created.status();
  }
  json GetJob(const std::string& name) {
    absl::StatusOr<json> job = api_->Get(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs/", name));
    return job.ok() ? *job : json::object();
  }
  bool Suspended(const std::string& job) {
    return GetJob(job).value("spec", json::object()).value("suspend", false);
  }

  json List(const std::string& path) {
    absl::StatusOr<json> list = api_->Get(path);
    EXPECT_TRUE(list.ok()) << path << ": " << list.status();
    return list.ok() ? (*list)["items"] : json::array();
  }
  // The pods of `job` (all pods of the namespace when empty).
  json Pods(const std::string& job = "") {
    std::string path = StrCat("/api/v1/namespaces/", ns_, "/pods");
    if (!job.empty()) {
      path +=
          StrCat("?labelSelector=", k8s::QueryEscape(StrCat("batch.kubernetes.io/job-name=", job)));
    }
    return List(path);
  }
  static bool IsBound(const json& pod) {
    return !pod["spec"].value("nodeName", std::string()).empty();
  }
  int BoundCount(const std::string& job) {
    int n = 0;
    for (const json& p : Pods(job)) n += IsBound(p) ? 1 : 0;
    return n;
  }

  // Kueue's Workload for `job` (the one it owns), or an empty object.
  json KueueWorkload(const std::string& job) {
    const json j = GetJob(job);
    if (j.empty()) return json::object();
    for (const json& w : List(StrCat(kKueue, "namespaces/", ns_, "/workloads"))) {
      for (const json& r : w["metadata"].value("ownerReferences", json::array())) {
        if (r.value("uid", "") == j["metadata"]["uid"]) return w;
      }
    }
    return json::object();
  }
  // The status of Kueue's Workload's condition `type` for `job` ("" if absent).
  std::string KueueCondition(const std::string& job, const std::string& type,
                             std::string* reason = nullptr) {
    const json w = KueueWorkload(job);
    if (w.empty()) return "";
    for (const json& c : w.value("status", json::object()).value("conditions", json::array())) {
      if (c["type"] == type) {
        if (reason) *reason = c.value("reason", "");
        return c.value("status", "");
      }
    }
    return "";
  }

  // The PodGroup the Job controller made for `job` (owned by it), or "".
  std::string PodGroupOf(const std::string& job) {
    const json j = GetJob(job);
    if (j.empty()) return "";
    for (const json& g : List(StrCat(kScheduling, ns_, "/podgroups"))) {
      for (const json& r : g["metadata"].value("ownerReferences", json::array())) {
        if (r.value("controller", false) && r.value("uid", "") == j["metadata"]["uid"]) {
          return g["metadata"]["name"];
        }
      }
    }
    return "";
  }

  // Waits until Kueue has admitted `job` and unsuspended it and tessera has bound all `n` of its
  // pods; then checks they are one gang of n, named as the Job's PodGroup, on one node (one
  // NVLink domain: the nodes here are NVSwitch servers). Returns that node.
  std::string ExpectPlacedAsGang(const std::string& job, int n) {
    EXPECT_TRUE(WaitUntil([&] { return KueueCondition(job, "Admitted") == "True"; }, seconds(60)))
        << "Kueue did not admit " << job << ": " << KueueWorkload(job).dump(2);
    EXPECT_TRUE(WaitUntil([&] { return !Suspended(job); }, seconds(30))) << job;
    // Kueue (built against Kubernetes 1.35 types) unsuspends by a merge patch: the Job keeps
    // its spec.scheduling.
    EXPECT_EQ(GetJob(job)["spec"].contains("scheduling"), !annotated_gangs_) << GetJob(job).dump(2);
    EXPECT_TRUE(WaitUntil([&] { return BoundCount(job) == n; }, seconds(60)))
        << job << ": " << BoundCount(job) << " of " << n << " bound\n"
        << Log();
    // The gang: the Job's PodGroup, or (annotated_gangs_) the name on the pod template.
    const std::string group = annotated_gangs_ ? job : PodGroupOf(job);
    EXPECT_FALSE(group.empty()) << "no PodGroup for " << job;
    std::set<std::string> nodes;
    for (const json& p : Pods(job)) {
      const std::string name = p["metadata"]["name"];
      EXPECT_EQ(p["spec"].value("schedulingGroup", json::object()).value("podGroupName", ""),
                annotated_gangs_ ? "" : group)
          << name;
      const json& ann = p["metadata"].value("annotations", json::object());
      auto it = ann.find("tessera.dev/assignment");
      if (it == ann.end()) {
        ADD_FAILURE() << "pod " << name << " is bound without an assignment";
        continue;
      }
      absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(it->get<std::string>());
      if (!a.ok()) {
        ADD_FAILURE() << name << ": " << a.status();
        continue;
      }
      EXPECT_EQ(a->node, p["spec"]["nodeName"]) << name;
      nodes.insert(a->node);
      if (!a->gang.has_value()) {
        ADD_FAILURE() << name << " was not placed as a gang member";
        continue;
      }
      EXPECT_EQ(a->gang->name, group) << name;
      EXPECT_EQ(a->gang->min, n) << name;
    }
    EXPECT_EQ(nodes.size(), 1u) << job << " is split over " << nodes.size() << " nodes";
    return nodes.empty() ? "" : *nodes.begin();
  }

  // A Job that Kueue has not admitted: suspended, no pods, its Workload pending in Kueue
  // (QuotaReserved False), checked for `hold` while tessera has room.
  void ExpectWaitingInKueue(const std::string& job, milliseconds hold) {
    ASSERT_TRUE(
        WaitUntil([&] { return KueueCondition(job, "QuotaReserved") == "False"; }, seconds(60)))
        << "Kueue has no pending Workload for " << job << ": " << KueueWorkload(job).dump(2);
    std::string reason;
    KueueCondition(job, "QuotaReserved", &reason);
    EXPECT_EQ(reason, "Pending") << KueueWorkload(job).dump(2);
    EXPECT_FALSE(WaitUntil([&] { return !Suspended(job) || !Pods(job).empty(); }, hold))
        << job << " started although Kueue had not admitted it";
    EXPECT_NE(KueueCondition(job, "Admitted"), "True");
  }

  // A pod of Kueue's plain-pod group `group` (of `total` pods) for LocalQueue `queue`, as
  // Kueue's pod webhook would have made it: labelled managed, Kueue's finalizer, and held by the
  // scheduling gate kueue.x-k8s.io/admission until Kueue admits the group.
  json GatedPod(const std::string& group, int index, int total, const std::string& queue,
                const json& resources) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata",
             {{"name", StrCat(group, "-", index)},
              {"namespace", ns_},
              {"labels",
               {{"kueue.x-k8s.io/queue-name", queue},
                {"kueue.x-k8s.io/managed", "true"},
                {"kueue.x-k8s.io/pod-group-name", group}}},
              {"annotations", {{"kueue.x-k8s.io/pod-group-total-count", std::to_string(total)}}},
              {"finalizers", {"kueue.x-k8s.io/managed"}}}},
            {"spec",
             {{"schedulerName", scheduler_name_},
              {"restartPolicy", "Never"},
              {"schedulingGates", {{{"name", "kueue.x-k8s.io/admission"}}}},
              {"containers",
               {{{"name", "worker"},
                 {"image", "busybox"},
                 {"resources", {{"requests", resources}, {"limits", resources}}}}}}}}};
  }
  void CreateGroup(const std::string& group, int total, const std::string& queue,
                   const json& resources) {
    for (int i = 0; i < total; ++i) {
      absl::StatusOr<json> created = api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"),
                                                  GatedPod(group, i, total, queue, resources));
      ASSERT_TRUE(created.ok()) << created.status();
    }
  }
  json GroupPods(const std::string& group) {
    return List(StrCat("/api/v1/namespaces/", ns_, "/pods?labelSelector=",
                       k8s::QueryEscape(StrCat("kueue.x-k8s.io/pod-group-name=", group))));
  }
  static bool Gated(const json& pod) {
    return !pod["spec"].value("schedulingGates", json::array()).empty();
  }
  // The reason of the pod's PodScheduled condition ("" if it has none).
  static std::string PodScheduledReason(const json& pod) {
    for (const json& c : pod.value("status", json::object()).value("conditions", json::array())) {
      if (c["type"] == "PodScheduled") return c.value("reason", "");
    }
    return "";
  }

  // What a kubelet reports when the containers of the pods exit 0 (the Job's pods, or `pods`).
  void FinishPods(const std::string& job, json pods = nullptr) {
    if (pods.is_null()) pods = Pods(job);
    for (const json& p : pods) {
      absl::StatusOr<json> patched =
          api_->Patch(StrCat("/api/v1/namespaces/", ns_, "/pods/",
                             std::string(p["metadata"]["name"]), "/status"),
                      k8s::PatchType::kMerge,
                      {{"status",
                        {{"phase", "Succeeded"},
                         {"containerStatuses",
                          {{{"name", "worker"},
                            {"image", "busybox"},
                            {"imageID", ""},
                            {"ready", false},
                            {"restartCount", 0},
                            {"state",
                             {{"terminated",
                               {{"exitCode", 0},
                                {"reason", "Completed"},
                                {"startedAt", "2026-01-01T00:00:00Z"},
                                {"finishedAt", "2026-01-01T00:00:01Z"}}}}}}}}}}});
      ASSERT_TRUE(patched.ok()) << patched.status();
    }
  }

  // Deletes the Job (its pods go with it: the test confirms them gone as a kubelet would).
  void DeleteJob(const std::string& job) {
    ASSERT_TRUE(api_->Delete(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs/", job),
                             {{"propagationPolicy", "Background"}})
                    .ok());
    ASSERT_TRUE(WaitUntil(
        [&] {
          ForceDeletePods(job);
          return Pods(job).empty();
        },
        seconds(60)))
        << Pods(job).dump(2);
  }

  std::unique_ptr<k8s::ApiClient> api_;
  // Jobs say their gang with tessera's annotations on the pod template instead of spec.scheduling
  // (for a control plane without WorkloadWithJob, where no Job has a PodGroup).
  bool annotated_gangs_ = false;
  std::string id_, ns_, scheduler_name_, cluster_queue_, dir_;
  std::unique_ptr<ScopedProcess> scheduler_;
};

json Gpus(int n) { return {{"tessera.dev/gpu", std::to_string(n)}}; }
json GpuMemory(const std::string& q) { return {{"tessera.dev/gpu-memory", q}}; }

// The ClusterQueue of examples/k8s/kueue/queues.yaml holds 8 GPUs and 8Gi of GPU memory; the
// nodes have 16 GPUs. Jobs of team-a and team-b within the quota are admitted and placed, each as
// one gang in one NVLink domain; a Job over the GPU quota and one over the GPU-memory quota wait
// in Kueue (suspended, no pods) although tessera has room; when a Job finishes, the one over the
// GPU quota is admitted and placed; when a Job is deleted, the one over the memory quota is.
TEST_F(KueueTest, AdmittedJobsArePlacedAsGangsAndJobsOverQuotaWaitInKueue) {
  AddNode(NodeObject(NodeName("a")).Gpus(8).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(8).NvSwitch());
  StartScheduler();
  ApplyQueues();

  // examples/k8s/kueue/job.yaml as written: team-a's gang of 4 one-GPU trainers.
  Apply("job.yaml");
  ExpectPlacedAsGang("train", 4);
  // team-b: a gang of two 4Gi shares (the whole memory quota) and a gang of 4 GPUs.
  CreateJob(Job("infer", "team-b", 2, GpuMemory("4Gi")));
  ExpectPlacedAsGang("infer", 2);
  CreateJob(Job("eval", "team-b", 4, Gpus(1)));
  ExpectPlacedAsGang("eval", 4);
  for (const json& p : Pods("infer")) {
    absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(
        p["metadata"]["annotations"]["tessera.dev/assignment"].get<std::string>());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_EQ(a->gpus.size(), 1u);
    EXPECT_FALSE(a->gpus[0].grant.exclusive);
    EXPECT_EQ(a->gpus[0].grant.memory_mib, 4096) << p["metadata"]["name"];
  }

  // The quota is used up (8 GPUs, 8Gi); tessera still has 8 free GPUs. Both wait in Kueue.
  CreateJob(Job("late", "team-a", 2, Gpus(1)));
  CreateJob(Job("late-share", "team-a", 1, GpuMemory("4Gi")));
  ExpectWaitingInKueue("late", seconds(5));
  ExpectWaitingInKueue("late-share", milliseconds(0));

  // train finishes: Kueue releases its 4 GPUs and admits late (2 GPUs); late-share still waits.
  FinishPods("train");
  ASSERT_TRUE(WaitUntil([&] { return KueueCondition("train", "Finished") == "True"; }, seconds(60)))
      << GetJob("train").dump(2) << KueueWorkload("train").dump(2);
  ExpectPlacedAsGang("late", 2);
  EXPECT_TRUE(Suspended("late-share"));
  EXPECT_TRUE(Pods("late-share").empty());

  // infer is deleted: its 8Gi go back to the quota and late-share is admitted and placed.
  DeleteJob("infer");
  ExpectPlacedAsGang("late-share", 1);
}

// Kueue preempts: the quota (8 GPUs) is held by a low-priority gang of 8 when a high-priority Job
// of 4 arrives (examples/k8s/kueue/priority.yaml). Kueue evicts the low one (suspends it; the Job
// controller deletes its pods), admits the high one, and tessera places it; the low Job waits in
// Kueue, suspended, and is admitted and placed again when the high one is deleted.
TEST_F(KueueTest, KueuePreemptionSuspendsTheLowPriorityGangAndTesseraPlacesTheNewOne) {
  AddNode(NodeObject(NodeName("a")).Gpus(8).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(8).NvSwitch());
  StartScheduler();
  ApplyQueues();
  Apply("priority.yaml");

  CreateJob(Job("low", "team-a", 8, Gpus(1), "low-priority"));
  ExpectPlacedAsGang("low", 8);

  CreateJob(Job("high", "team-b", 4, Gpus(1), "high-priority"));
  // Kueue evicts low (Preempted) and suspends it; its pods are deleted.
  ASSERT_TRUE(WaitUntil([&] { return KueueCondition("low", "Preempted") == "True"; }, seconds(60)))
      << KueueWorkload("low").dump(2);
  ASSERT_TRUE(WaitUntil([&] { return Suspended("low"); }, seconds(60)));
  ASSERT_TRUE(WaitUntil(
      [&] {
        ForceDeletePods("low");
        return Pods("low").empty();
      },
      seconds(60)))
      << Pods("low").dump(2);
  ExpectPlacedAsGang("high", 4);
  // low needs 8 GPUs of the quota and 4 are held: it waits in Kueue, not in tessera.
  ExpectWaitingInKueue("low", seconds(3));

  DeleteJob("high");
  ExpectPlacedAsGang("low", 8);
}

// The same without WorkloadWithJob (ctest kueue_annotations_e2e_test: a control plane without
// the workload gates, where Jobs get no PodGroup): the gang is tessera's annotations on the Job's
// pod template. A Job of 8 takes the quota and is placed as one gang in one NVLink domain; a Job
// of 4 waits in Kueue; when the first is deleted the second is admitted and placed.
TEST_F(KueueTest, AnnotatedGangsWithoutTheJobControllersPodGroups) {
  annotated_gangs_ = true;
  AddNode(NodeObject(NodeName("a")).Gpus(8).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(8).NvSwitch());
  StartScheduler();
  ApplyQueues();
  CreateJob(Job("first", "team-a", 8, Gpus(1)));
  ExpectPlacedAsGang("first", 8);
  CreateJob(Job("second", "team-b", 4, Gpus(1)));
  ExpectWaitingInKueue("second", seconds(3));
  DeleteJob("first");
  ExpectPlacedAsGang("second", 4);
}

// Kueue's plain-pod groups and scheduling gates: pods made as Kueue's pod webhook makes them
// (gate kueue.x-k8s.io/admission, labels kueue.x-k8s.io/pod-group-name and queue-name, the
// total-count annotation). tessera never places a gated pod: a group over the quota stays gated,
// unbound and marked SchedulingGated (not Unschedulable) while tessera has room; Kueue admits a
// group by removing the gates, and tessera places it as one gang of the total count.
TEST_F(KueueTest, GatedPodGroupWaitsInKueueAndIsPlacedAsAGangOnceUngated) {
  AddNode(NodeObject(NodeName("a")).Gpus(8).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(8).NvSwitch());
  StartScheduler();
  ApplyQueues();

  auto expect_gang = [&](const std::string& group, int total) {
    ASSERT_TRUE(WaitUntil(
        [&] {
          json pods = GroupPods(group);
          if (pods.size() != static_cast<size_t>(total)) return false;
          for (const json& p : pods) {
            if (Gated(p) || !IsBound(p)) return false;
          }
          return true;
        },
        seconds(60)))
        << GroupPods(group).dump(2) << Log();
    std::set<std::string> nodes;
    for (const json& p : GroupPods(group)) {
      absl::StatusOr<records::Assignment> a = records::AssignmentFromJson(
          p["metadata"]["annotations"]["tessera.dev/assignment"].get<std::string>());
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(a->gang.has_value()) << p["metadata"]["name"];
      EXPECT_EQ(a->gang->name, group);
      EXPECT_EQ(a->gang->size, total);
      EXPECT_EQ(a->gang->min, total);
      nodes.insert(a->node);
    }
    EXPECT_EQ(nodes.size(), 1u);
  };

  // A group of 8 takes the whole GPU quota: Kueue ungates it, tessera places it.
  CreateGroup("big", 8, "team-a", Gpus(1));
  expect_gang("big", 8);

  // A group of 2 over the quota: gated, unbound, SchedulingGated, although 8 GPUs are free.
  CreateGroup("next", 2, "team-b", Gpus(1));
  EXPECT_FALSE(WaitUntil(
      [&] {
        for (const json& p : GroupPods("next")) {
          if (!Gated(p) || IsBound(p) || PodScheduledReason(p) != "SchedulingGated") return true;
        }
        return false;
      },
      seconds(5)))
      << GroupPods("next").dump(2);
  EXPECT_EQ(GroupPods("next").size(), 2u);
  // ... and tessera has not tried them (a bind of a gated pod, which the API server refuses with
  // this message, is logged).
  EXPECT_THAT(Log(), Not(HasSubstr("has non-empty .spec.schedulingGates")));

  // The big group's pods finish: Kueue releases the quota, ungates next, tessera places it.
  FinishPods("", GroupPods("big"));
  expect_gang("next", 2);
  EXPECT_THAT(Log(), Not(HasSubstr("has non-empty .spec.schedulingGates")));
}

}  // namespace
}  // namespace tessera::e2e
