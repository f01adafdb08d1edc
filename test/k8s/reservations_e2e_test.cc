// Reservations with backfill (issue 31) with `tessera scheduler` as a process against the real
// API server. Nodes are plain Node objects (no kubelet): pods are bound but never run, so the test
// plays the kubelet where one is needed: it reports a bound pod running (status.startTime, which
// the declared run time counts from).
//
// Each test has its own namespace, scheduler name and node label.
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/time/time.h"
#include "common/strings.h"
#include "controlplane/controlplane.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "k8s/client/config.h"
#include "k8s/client/http.h"
#include "k8s/testing/objects.h"
#include "scoped_process.h"

namespace tessera::e2e {
namespace {

using k8s::testing::NodeObject;
using k8s::testing::PodObject;
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
    std::this_thread::sleep_for(milliseconds(200));
  }
  return pred();
}

class ReservationsE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<k8s::ClientConfig> config = k8s::LoadKubeconfig(Cp().kubeconfig());
    ASSERT_TRUE(config.ok()) << config.status();
    auto client = k8s::ApiClient::Create(*config);
    ASSERT_TRUE(client.ok());
    api_ = std::move(*client);
    std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    id_ = "rs-";
    for (char c : name) id_ += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    id_ = id_.substr(0, 40);
    ns_ = id_;
    scheduler_name_ = StrCat("tessera-", id_);
    dir_ = StrCat(::testing::TempDir(), "/tessera-e2e-", getpid(), "-", id_);
    std::filesystem::create_directories(dir_);
    absl::StatusOr<json> created =
        api_->Create("/api/v1/namespaces",
                     {{"apiVersion", "v1"}, {"kind", "Namespace"}, {"metadata", {{"name", ns_}}}});
    ASSERT_TRUE(created.ok() || created.status().code() == absl::StatusCode::kAlreadyExists)
        << created.status();
    // Reservations on: after 2 s of waiting; running pods without a run time are expected to
    // run an hour; a pod past its declared run time is evicted 1 s after it.
    std::ofstream(dir_ + "/config.yaml") << StrCat(R"(apiVersion: tessera.dev/v1alpha1
kind: SchedulerConfiguration
schedulerName: )",
                                                   scheduler_name_, R"(
policy: binpack
nodeSelector: "tessera-e2e/test=)",
                                                   id_, R"("
leaderElection: {leaderElect: false}
metrics: {bindAddress: 127.0.0.1, port: 0}
retry: {minInterval: 200ms, period: 3s}
reservations: {max: 2, after: 2s, runtimeEstimate: 1h, maxRuntimeGrace: 1s}
)");
  }

  void TearDown() override {
    schedulers_.clear();
    if (api_) {
      (void)api_->Delete(StrCat("/api/v1/namespaces/", ns_, "/pods?gracePeriodSeconds=0"));
      (void)api_->Delete(StrCat("/api/v1/nodes?labelSelector=",
                                k8s::QueryEscape(StrCat("tessera-e2e/test=", id_))));
    }
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  ScopedProcess* StartScheduler(const std::string& identity) {
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start({TESSERA_BINARY, "scheduler", "--kubeconfig", Cp().kubeconfig(),
                              "--config", dir_ + "/config.yaml", "--identity", identity},
                             StrCat(dir_, "/", identity, ".log"));
    EXPECT_TRUE(p.ok()) << p.status();
    schedulers_.push_back(std::move(*p));
    return schedulers_.back().get();
  }

  std::string AddNode(const std::string& base, int gpus) {
    const std::string name = StrCat(id_.substr(0, 30), "-", base);
    NodeObject node(name);
    node.Gpus(gpus).Label("tessera-e2e/test", id_);
    json j = node.Json();
    json status = j["status"];
    j.erase("status");
    absl::StatusOr<json> created = api_->Create("/api/v1/nodes", j);
    EXPECT_TRUE(created.ok()) << created.status();
    absl::StatusOr<json> patched = api_->Patch(StrCat("/api/v1/nodes/", name, "/status"),
                                               k8s::PatchType::kMerge, {{"status", status}});
    EXPECT_TRUE(patched.ok()) << patched.status();
    return name;
  }

  void AddPod(PodObject pod) {
    json j = pod.Scheduler(scheduler_name_).Json();
    absl::StatusOr<json> created = api_->Create(StrCat("/api/v1/namespaces/", ns_, "/pods"), j);
    ASSERT_TRUE(created.ok()) << created.status();
  }
  PodObject Whole(const std::string& name, int gpus = 1, const std::string& runtime = "") {
    PodObject p(ns_, name);
    p.Limit("tessera.dev/gpu", std::to_string(gpus));
    if (!runtime.empty()) p.Annotation("tessera.dev/max-runtime", runtime);
    return p;
  }

  json GetPod(const std::string& name) {
    absl::StatusOr<json> p = api_->Get(StrCat("/api/v1/namespaces/", ns_, "/pods/", name));
    return p.ok() ? *p : json();
  }
  bool Bound(const std::string& name) {
    json p = GetPod(name);
    return p.is_object() && !p["spec"].value("nodeName", std::string()).empty();
  }
  bool Terminating(const std::string& name) {
    json p = GetPod(name);
    return p.is_object() && p["metadata"].contains("deletionTimestamp");
  }
  std::string Message(const std::string& pod) {
    for (const json& c : GetPod(pod)["status"].value("conditions", json::array())) {
      if (c["type"] == "PodScheduled") return c.value("message", "");
    }
    return "";
  }
  // As a kubelet would: the pod runs, started now.
  void Running(const std::string& pod) {
    const std::string now =
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
    absl::StatusOr<json> r = api_->Patch(
        StrCat("/api/v1/namespaces/", ns_, "/pods/", pod, "/status"), k8s::PatchType::kMerge,
        {{"status",
          {{"phase", "Running"},
           {"startTime", now},
           {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}});
    ASSERT_TRUE(r.ok()) << r.status();
  }
  bool EventOn(const std::string& pod, const std::string& reason, const std::string& text) {
    absl::StatusOr<json> list = api_->Get(
        StrCat("/api/v1/namespaces/", ns_,
               "/events?fieldSelector=", k8s::QueryEscape(StrCat("involvedObject.name=", pod))));
    if (!list.ok()) return false;
    for (const json& e : (*list)["items"]) {
      if (e.value("reason", "") == reason &&
          e.value("message", "").find(text) != std::string::npos) {
        return true;
      }
    }
    return false;
  }

  // `tessera status` for this test's scheduler and namespace (its output; -o json with `json`).
  std::string Status(const std::string& name, bool as_json) {
    std::vector<std::string> argv = {
        TESSERA_BINARY,     "status",        "--kubeconfig", Cp().kubeconfig(),
        "--scheduler-name", scheduler_name_, "-n",           ns_};
    if (as_json) argv.insert(argv.end(), {"-o", "json"});
    absl::StatusOr<std::unique_ptr<ScopedProcess>> p =
        ScopedProcess::Start(argv, StrCat(dir_, "/", name, "-", ++runs_, ".out"));  // appended
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return "";
    EXPECT_EQ((*p)->Wait(seconds(30)), 0) << (*p)->Log();
    return (*p)->Log();
  }
  // The reservations `tessera status -o json` lists, once it lists any (empty after 20 s).
  json StatusReservations() {
    json list = json::array();
    WaitUntil(
        [&] {
          const std::string out = Status("status-json", true);
          const size_t brace = out.find('{');
          if (brace == std::string::npos) return false;
          json j = json::parse(out.substr(brace), nullptr, false);
          if (j.is_discarded() || !j.contains("reservations")) return false;
          list = j["reservations"];
          return !list.empty();
        },
        seconds(20));
    return list;
  }

  // One 8-GPU node with 4 GPUs taken by pods that declare no run time (running); a gang of 8
  // one-GPU pods waits, and gets the node's 8 GPUs reserved (Event Reserved on its pods).
  std::string GangReserved(ScopedProcess** s) {
    const std::string node = AddNode("n", 8);
    *s = StartScheduler("a");
    for (int i = 0; i < 4; ++i) AddPod(Whole(StrCat("r-", i)));
    EXPECT_TRUE(WaitUntil(
        [&] { return Bound("r-0") && Bound("r-1") && Bound("r-2") && Bound("r-3"); }, seconds(60)))
        << (*s)->Log();
    for (int i = 0; i < 4; ++i) Running(StrCat("r-", i));
    for (int i = 0; i < 8; ++i) AddPod(Whole(StrCat("g-", i)).Gang("g", 8));
    EXPECT_TRUE(
        WaitUntil([&] { return EventOn("g-0", "Reserved", "gang " + ns_ + "/g"); }, seconds(30)))
        << (*s)->Log();
    // Each member's Event is its own write, sent asynchronously: g-7's may come after g-0's.
    EXPECT_TRUE(WaitUntil(
        [&] { return EventOn("g-7", "Reserved", "node " + node + " GPUs 0,1,2,3,4,5,6,7"); },
        seconds(10)))
        << (*s)->Log();
    EXPECT_FALSE(Bound("g-0"));
    return node;
  }

  std::unique_ptr<k8s::ApiClient> api_;
  std::string id_, ns_, scheduler_name_, dir_;
  int runs_ = 0;  // `tessera status` runs, each with its own output file
  std::vector<std::unique_ptr<ScopedProcess>> schedulers_;
};

// A gang of 8 that waits gets a reservation; a pod without a run time does not take the reserved
// GPUs (it stays pending while the reservation holds); one declaring a short run time does
// (Event Backfilled), and is evicted once it runs past it (Event MaxRuntimeExceeded).
TEST_F(ReservationsE2e, AGangGetsRoomAndOnlyAShortPodBackfillsIt) {
  ScopedProcess* s = nullptr;
  const std::string node = GangReserved(&s);
  ASSERT_FALSE(HasFailure());
  // `tessera status` lists the reservation (from its pods' condition tessera.dev/Reserved).
  const json listed = StatusReservations();
  ASSERT_EQ(listed.size(), 1u) << listed.dump() << "\n" << s->Log();
  EXPECT_EQ(listed[0]["owner"], ns_ + "/g");
  EXPECT_EQ(listed[0]["kind"], "gang");
  EXPECT_EQ(listed[0]["pods"].size(), 8u);
  EXPECT_EQ(listed[0]["where"],
            json::array({{{"node", node}, {"gpus", {0, 1, 2, 3, 4, 5, 6, 7}}}}));
  EXPECT_GT(listed[0]["starts_in_seconds"].get<int64_t>(), 3000);  // about an hour (estimate)
  EXPECT_TRUE(listed[0]["expected_start"].is_string());
  const std::string text = Status("status-text", false);
  EXPECT_THAT(text, HasSubstr("RESERVATIONS (1;"));
  EXPECT_THAT(text, ::testing::ContainsRegex(StrCat("gang ", ns_, "/g +8 +", node, " GPUs 0-7")));
  AddPod(Whole("nodecl"));
  AddPod(Whole("short", 1, "15s"));
  ASSERT_TRUE(WaitUntil([&] { return Bound("short"); }, seconds(30))) << s->Log();
  EXPECT_EQ(GetPod("short")["spec"]["nodeName"], node);
  EXPECT_TRUE(
      WaitUntil([&] { return EventOn("short", "Backfilled", "declared run time"); }, seconds(10)));
  EXPECT_TRUE(
      WaitUntil([&] { return Message("nodecl").find("reserv") != std::string::npos; }, seconds(20)))
      << Message("nodecl") << "\n"
      << s->Log();
  // The pod that declares nothing stays pending while the reservation holds.
  std::this_thread::sleep_for(seconds(4));
  EXPECT_FALSE(Bound("nodecl"));
  // The backfilled pod runs past its 15 s: evicted.
  Running("short");
  EXPECT_FALSE(Terminating("short"));
  ASSERT_TRUE(WaitUntil([&] { return Terminating("short"); }, seconds(40))) << s->Log();
  EXPECT_TRUE(
      WaitUntil([&] { return EventOn("short", "MaxRuntimeExceeded", "15s"); }, seconds(10)));
  EXPECT_FALSE(Bound("nodecl"));
  EXPECT_THAT(s->Log(), HasSubstr("reservation: room reserved for gang"));
}

// A restarted scheduler rebuilds the reservation from the bound pods and the waiting gang: the
// pod without a run time still does not take the held GPUs.
TEST_F(ReservationsE2e, TheReservationIsRebuiltAfterARestart) {
  ScopedProcess* s = nullptr;
  const std::string node = GangReserved(&s);
  ASSERT_FALSE(HasFailure());
  schedulers_.clear();  // SIGKILL
  AddPod(Whole("nodecl"));
  s = StartScheduler("b");
  ASSERT_TRUE(WaitUntil(
      [&] { return s->Log().find("reservation: room reserved for gang") != std::string::npos; },
      seconds(30)))
      << s->Log();
  EXPECT_THAT(s->Log(), HasSubstr("node " + node + " GPUs 0,1,2,3,4,5,6,7"));
  std::this_thread::sleep_for(seconds(4));
  EXPECT_FALSE(Bound("nodecl")) << s->Log();
  EXPECT_FALSE(Bound("g-0"));
  // The same room: the conditions stand as the first scheduler wrote them; status lists it.
  const json listed = StatusReservations();
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  EXPECT_EQ(listed[0]["where"][0]["node"], node);
}

}  // namespace
}  // namespace tessera::e2e
