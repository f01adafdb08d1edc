// The Job controller's own PodGroups (Kubernetes 1.37.2, alpha gate WorkloadWithJob) placed by
// `tessera scheduler`: a user creates a plain batch/v1 Job; kube-controller-manager's Job
// controller makes a Workload and a PodGroup for it and creates the pods with
// spec.schedulingGroup.podGroupName naming that PodGroup; tessera places them as the PodGroup says
// (docs/workloads.md, "The Job controller's PodGroups", where the upstream facts are cited).
//
// One control plane for the binary (WITH_JOB_WORKLOADS: the workload gates, WorkloadWithJob and
// kube-controller-manager). Nodes are plain Node objects with the tessera.dev/gpu-inventory
// annotation and no kubelet, as in scheduler_e2e_test: pods never run, they are bound, and what
// the scheduler decided is read back from their tessera.dev/assignment annotations. With no
// kubelet a bound pod that is deleted stays terminating, so the tests delete such pods with grace
// period 0 where a kubelet would have confirmed them gone.
//
// Each test has its own namespace, scheduler name, node label (the scheduler's --node-selector)
// and Lease; TearDown deletes its Jobs, pods, PodGroups, Workloads and nodes.
#include <filesystem>
#include <fstream>
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

ControlPlane& Cp() { return ControlPlane::Shared(); }

template <typename Pred>
bool WaitUntil(Pred pred, milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(100));
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

constexpr std::string_view kScheduling = "/apis/scheduling.k8s.io/v1beta1/namespaces/";

class JobPodGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = k8s::ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    id_ = TestId();
    ns_ = StrCat("e2e-", id_);
    scheduler_name_ = StrCat("tessera-", id_);
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
      // The Jobs first, so that their controller makes no new pods.
      (void)api_->Delete(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs"),
                         {{"propagationPolicy", "Background"}});
      ForceDeletePods();
      (void)api_->Delete(StrCat(kScheduling, ns_, "/podgroups"));
      (void)api_->Delete(StrCat(kScheduling, ns_, "/workloads"));
      (void)api_->Delete(StrCat("/api/v1/nodes?labelSelector=",
                                k8s::QueryEscape(StrCat("tessera-e2e/test=", id_))));
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // What a kubelet does for a deleted pod that it ran: confirms it gone (grace period 0).
  void ForceDeletePods() {
    for (const json& p : List(StrCat("/api/v1/namespaces/", ns_, "/pods"))) {
      (void)api_->Delete(
          StrCat("/api/v1/namespaces/", ns_, "/pods/", std::string(p["metadata"]["name"])),
          {{"gracePeriodSeconds", 0}});
    }
  }

  void StartScheduler() {
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", Cp().kubeconfig(),
                              "--config", dir_ + "/config.yaml", "--identity", "job"},
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

  // A manifest under examples/k8s/podgroup/, with this test's scheduler name for `tessera`.
  std::string Example(const std::string& file) {
    std::ifstream in(StrCat(TESSERA_SOURCE_DIR, "/examples/k8s/podgroup/", file));
    std::stringstream text;
    text << in.rdbuf();
    std::string manifest = text.str();
    const std::string name = "schedulerName: tessera\n";
    size_t at = manifest.find(name);
    EXPECT_NE(at, std::string::npos) << file;
    if (at != std::string::npos) {
      manifest.replace(at, name.size(), StrCat("schedulerName: ", scheduler_name_, "\n"));
    }
    return manifest;
  }

  // A Job of `n` one-GPU pods; `scheduling` is its spec.scheduling (null: none).
  json Job(const std::string& name, int n, const json& scheduling,
           const std::string& pod_group = "") {
    json pod_spec = {{"schedulerName", scheduler_name_},
                     {"restartPolicy", "Never"},
                     {"containers",
                      {{{"name", "trainer"},
                        {"image", "busybox"},
                        {"resources", {{"limits", {{"tessera.dev/gpu", "1"}}}}}}}}};
    if (!pod_group.empty()) pod_spec["schedulingGroup"] = {{"podGroupName", pod_group}};
    json job = {{"apiVersion", "batch/v1"},
                {"kind", "Job"},
                {"metadata", {{"name", name}, {"namespace", ns_}}},
                {"spec",
                 {{"parallelism", n},
                  {"completions", n},
                  {"completionMode", "Indexed"},
                  {"template", {{"spec", pod_spec}}}}}};
    if (!scheduling.is_null()) job["spec"]["scheduling"] = scheduling;
    return job;
  }
  void CreateJob(const json& job) {
    absl::StatusOr<json> created =
        api_->Create(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs"), job);
    ASSERT_TRUE(created.ok()) << created.status();
  }

  json List(const std::string& path) {
    absl::StatusOr<json> list = api_->Get(path);
    EXPECT_TRUE(list.ok()) << path << ": " << list.status();
    return list.ok() ? (*list)["items"] : json::array();
  }
  json Pods() { return List(StrCat("/api/v1/namespaces/", ns_, "/pods")); }
  json PodGroups() { return List(StrCat(kScheduling, ns_, "/podgroups")); }
  json Workloads() { return List(StrCat(kScheduling, ns_, "/workloads")); }
  static bool IsBound(const json& pod) {
    return !pod["spec"].value("nodeName", std::string()).empty();
  }
  int BoundCount() {
    int n = 0;
    for (const json& p : Pods()) n += IsBound(p) ? 1 : 0;
    return n;
  }

  // The assignment of every bound pod; checks it names the pod's node.
  std::map<std::string, records::Assignment> Assignments() {
    std::map<std::string, records::Assignment> out;
    for (const json& p : Pods()) {
      if (!IsBound(p)) continue;
      std::string name = p["metadata"]["name"];
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
      out[name] = *a;
    }
    return out;
  }

  // The PodGroup's condition PodGroupInitiallyScheduled; an empty object until it is written.
  json Condition(const std::string& group) {
    absl::StatusOr<json> g = api_->Get(StrCat(kScheduling, ns_, "/podgroups/", group));
    if (!g.ok()) return json::object();
    for (const json& c : g->value("status", json::object()).value("conditions", json::array())) {
      if (c["type"] == "PodGroupInitiallyScheduled") return c;
    }
    return json::object();
  }

  static bool ControlledBy(const json& object, const json& owner) {
    for (const json& r : object["metadata"].value("ownerReferences", json::array())) {
      if (r.value("controller", false) && r.value("uid", "") == owner["metadata"]["uid"]) {
        return true;
      }
    }
    return false;
  }

  std::unique_ptr<k8s::ApiClient> api_;
  std::string id_, ns_, scheduler_name_, dir_;
  std::unique_ptr<ScopedProcess> scheduler_;
};

// examples/k8s/podgroup/job.yaml applied as written (but for the scheduler name): a plain Job of
// 8 one-GPU pods with spec.scheduling gang {} and the NVLink-domain topology. The Job controller
// makes the Workload and the gang PodGroup (minCount 8 from parallelism), owned by the Job, and
// its pods name the PodGroup. On 6 GPUs none of the 8 binds and the PodGroup says why; a node
// with an NVLink domain of 8 arrives and all 8 bind there together, one gang named as the
// PodGroup. Deleting the Job deletes the Workload, the PodGroup and the pods.
TEST_F(JobPodGroupTest, JobIsOneGangThroughTheJobControllersPodGroup) {
  AddNode(NodeObject(NodeName("a")).Gpus(4).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(2).NvSwitch());
  StartScheduler();
  CommandResult applied = Cp().Kubectl({"apply", "-n", ns_, "-f", "-"}, Example("job.yaml"));
  ASSERT_TRUE(applied.ok()) << applied.err;
  absl::StatusOr<json> job = api_->Get(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs/train"));
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE(job->at("spec").contains("scheduling"))
      << "the API server dropped spec.scheduling: is WorkloadWithJob on?";

  // The Workload and the PodGroup the Job controller made, before its pods.
  ASSERT_TRUE(WaitUntil([&] { return Pods().size() == 8; }, seconds(60)))
      << "the Job controller made " << Pods().size() << " pods";
  json workloads = Workloads(), groups = PodGroups();
  ASSERT_EQ(workloads.size(), 1u) << workloads.dump(2);
  ASSERT_EQ(groups.size(), 1u) << groups.dump(2);
  const json& workload = workloads[0];
  const json& group = groups[0];
  const std::string group_name = group["metadata"]["name"];
  EXPECT_TRUE(ControlledBy(workload, *job)) << workload.dump(2);
  EXPECT_EQ(workload["spec"]["controllerRef"]["kind"], "Job");
  EXPECT_EQ(workload["spec"]["controllerRef"]["name"], "train");
  EXPECT_TRUE(ControlledBy(group, *job)) << group.dump(2);
  EXPECT_EQ(group["spec"]["workloadRef"]["workloadName"], workload["metadata"]["name"]);
  EXPECT_EQ(group["spec"]["schedulingPolicy"]["gang"]["minCount"], 8) << group.dump(2);
  EXPECT_EQ(group["spec"]["schedulingConstraints"]["topology"][0]["key"],
            "tessera.dev/nvlink-domain");
  for (const json& p : Pods()) {
    EXPECT_EQ(p["spec"]["schedulingGroup"]["podGroupName"], group_name) << p.dump(2);
    EXPECT_TRUE(ControlledBy(p, *job)) << p.dump(2);
    EXPECT_FALSE(p["metadata"].value("annotations", json::object()).contains("tessera.dev/gang"));
  }

  // Six GPUs for a gang of eight: none binds, the PodGroup says why.
  ASSERT_TRUE(
      WaitUntil([&] { return Condition(group_name).value("status", "") == "False"; }, seconds(60)))
      << Log();
  EXPECT_EQ(Condition(group_name)["reason"], "Unschedulable");
  EXPECT_EQ(BoundCount(), 0);

  // Room appears in one NVLink domain: all eight bind there, as one gang of the PodGroup.
  const std::string big = NodeName("big");
  AddNode(NodeObject(big).Gpus(8).NvSwitch());
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 8; }, seconds(60))) << Log();
  const auto assignments = Assignments();
  ASSERT_EQ(assignments.size(), 8u);
  for (const auto& [pod, a] : assignments) {
    EXPECT_EQ(a.node, big) << pod;
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(a.gang->name, group_name);
    EXPECT_EQ(a.gang->min, 8);
  }
  ASSERT_TRUE(
      WaitUntil([&] { return Condition(group_name).value("status", "") == "True"; }, seconds(60)))
      << Log();
  EXPECT_EQ(Condition(group_name)["reason"], "Scheduled");
  EXPECT_EQ(Condition(group_name)["message"],
            StrCat("8 pods of gang ", ns_, "/", group_name, " scheduled together"));

  // Deleting the Job: the garbage collector deletes the pods (a kubelet would confirm them gone),
  // the Workload and the PodGroup (whose protection finalizer waits for its pods).
  ASSERT_TRUE(api_->Delete(StrCat("/apis/batch/v1/namespaces/", ns_, "/jobs/train"),
                           {{"propagationPolicy", "Background"}})
                  .ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        for (const json& p : Pods()) {
          if (!p["metadata"].contains("deletionTimestamp")) return false;
        }
        return true;
      },
      seconds(60)));
  ForceDeletePods();
  EXPECT_TRUE(WaitUntil(
      [&] { return Pods().empty() && PodGroups().empty() && Workloads().empty(); }, seconds(60)))
      << "pods " << Pods().size() << ", PodGroups " << PodGroups().dump(2) << ", Workloads "
      << Workloads().size();
}

// A Job without spec.scheduling also gets a Workload and a PodGroup under WorkloadWithJob, but a
// `basic` one: its pods are independent (no gang), so on 6 GPUs 6 of its 8 pods bind.
TEST_F(JobPodGroupTest, JobWithoutSchedulingGetsABasicPodGroupAndNoGang) {
  AddNode(NodeObject(NodeName("a")).Gpus(4).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(2).NvSwitch());
  StartScheduler();
  CreateJob(Job("plain", 8, nullptr));
  ASSERT_TRUE(WaitUntil([&] { return Pods().size() == 8; }, seconds(60)));
  json groups = PodGroups();
  ASSERT_EQ(groups.size(), 1u) << groups.dump(2);
  EXPECT_TRUE(groups[0]["spec"]["schedulingPolicy"].contains("basic")) << groups.dump(2);
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 6; }, seconds(60))) << Log();
  for (const auto& [pod, a] : Assignments()) EXPECT_FALSE(a.gang.has_value()) << pod;
  const std::string group_name = groups[0]["metadata"]["name"];
  EXPECT_TRUE(
      WaitUntil([&] { return Condition(group_name).value("status", "") == "True"; }, seconds(60)))
      << Log();
}

// The same basic PodGroup with tessera's gang annotations on the Job's template: basic asks for no
// gang, so the annotations apply (examples/k8s/gang-job.yaml keeps its gang on a cluster with
// WorkloadWithJob): on 6 GPUs none of the 8 bind, and nothing says the annotation is ignored; with
// 2 GPUs more, all 8 bind as the annotated gang.
TEST_F(JobPodGroupTest, JobWithoutSchedulingKeepsItsTemplatesGangAnnotations) {
  AddNode(NodeObject(NodeName("a")).Gpus(4).NvSwitch());
  AddNode(NodeObject(NodeName("b")).Gpus(2).NvSwitch());
  StartScheduler();
  json job = Job("annotated", 8, nullptr);
  job["spec"]["template"]["metadata"]["annotations"] = {{"tessera.dev/gang", "annotated"},
                                                        {"tessera.dev/gang-size", "8"}};
  CreateJob(job);
  ASSERT_TRUE(WaitUntil([&] { return Pods().size() == 8; }, seconds(60)));
  json groups = PodGroups();
  ASSERT_EQ(groups.size(), 1u) << groups.dump(2);
  EXPECT_TRUE(groups[0]["spec"]["schedulingPolicy"].contains("basic")) << groups.dump(2);
  // All or nothing: 6 GPUs are not enough for the gang of 8.
  std::this_thread::sleep_for(seconds(5));
  EXPECT_EQ(BoundCount(), 0) << Log();
  absl::StatusOr<json> events = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/events"));
  ASSERT_TRUE(events.ok()) << events.status();
  EXPECT_EQ(events->dump().find("GangAnnotationIgnored"), std::string::npos) << events->dump(2);
  AddNode(NodeObject(NodeName("c")).Gpus(2).NvSwitch());
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 8; }, seconds(60))) << Log();
  for (const auto& [pod, a] : Assignments()) {
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(a.gang->name, "annotated") << pod;
  }
}

// A Job with parallelism 8 and gang minCount 4: the PodGroup's gang starts with 4 when only 4 fit,
// together, and the other 4 join as room appears (the elastic-gang rules, docs/workloads.md).
TEST_F(JobPodGroupTest, JobWithMinCountBelowParallelismStartsWithMinCountAndGrows) {
  AddNode(NodeObject(NodeName("a")).Gpus(4).NvSwitch());
  StartScheduler();
  CreateJob(Job("elastic", 8, {{"schedulingPolicy", {{"gang", {{"minCount", 4}}}}}}));
  ASSERT_TRUE(WaitUntil([&] { return Pods().size() == 8; }, seconds(60)));
  json groups = PodGroups();
  ASSERT_EQ(groups.size(), 1u) << groups.dump(2);
  EXPECT_EQ(groups[0]["spec"]["schedulingPolicy"]["gang"]["minCount"], 4);
  const std::string group_name = groups[0]["metadata"]["name"];
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 4; }, seconds(60))) << Log();
  ASSERT_TRUE(
      WaitUntil([&] { return Condition(group_name).value("status", "") == "True"; }, seconds(60)))
      << Log();
  AddNode(NodeObject(NodeName("b")).Gpus(4).NvSwitch());
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 8; }, seconds(60))) << Log();
  for (const auto& [pod, a] : Assignments()) {
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(a.gang->name, group_name);
    EXPECT_EQ(a.gang->min, 4);
  }
}

// A Job whose pod template names a PodGroup the user made (as any Job can, with or without
// WorkloadWithJob): the Job controller makes no Workload or PodGroup of its own, and tessera
// places the pods as the user's PodGroup says (a gang of 2, all or nothing).
TEST_F(JobPodGroupTest, JobNamingTheUsersPodGroupIsPlacedByIt) {
  AddNode(NodeObject(NodeName("a")).Gpus(1).NvSwitch());
  StartScheduler();
  absl::StatusOr<json> created = api_->Create(StrCat(kScheduling, ns_, "/podgroups"),
                                              k8s::testing::PodGroupJson(ns_, "mine", 2));
  ASSERT_TRUE(created.ok()) << created.status();
  CreateJob(Job("byo", 2, nullptr, "mine"));
  ASSERT_TRUE(
      WaitUntil([&] { return Condition("mine").value("status", "") == "False"; }, seconds(60)))
      << Log();
  EXPECT_EQ(BoundCount(), 0);
  EXPECT_EQ(PodGroups().size(), 1u);
  EXPECT_TRUE(Workloads().empty()) << Workloads().dump(2);
  AddNode(NodeObject(NodeName("b")).Gpus(2).NvSwitch());
  ASSERT_TRUE(WaitUntil([&] { return BoundCount() == 2; }, seconds(60))) << Log();
  for (const auto& [pod, a] : Assignments()) {
    ASSERT_TRUE(a.gang.has_value()) << pod;
    EXPECT_EQ(a.gang->name, "mine");
    EXPECT_EQ(a.gang->min, 2);
  }
}

}  // namespace
}  // namespace tessera::e2e
