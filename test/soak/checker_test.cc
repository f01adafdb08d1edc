// The soak's checker on hand-made snapshots: each invariant is seen to fail when broken, and to
// hold when not.
#include "soak/checker.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::soak {
namespace {

using nlohmann::json;
using std::chrono::seconds;
using ::testing::HasSubstr;

constexpr char kGpu0[] = "GPU-00000000-0000-4000-8000-000000000000";
constexpr char kGpu1[] = "GPU-00000000-0000-4000-8000-000000000001";

json Node(bool gpu1_healthy = true) {
  json gpus = json::array();
  gpus.push_back({{"index", 0}, {"uuid", kGpu0}, {"memory_mib", 81920}});
  json g1 = {{"index", 1}, {"uuid", kGpu1}, {"memory_mib", 81920}};
  if (!gpu1_healthy) g1["health"] = {{"healthy", false}, {"xids", {48}}, {"reason", "XID 48"}};
  gpus.push_back(g1);
  json inv = {{"version", 1}, {"gpus", gpus}, {"links", {{"X", "NV12"}, {"NV12", "X"}}}};
  return {{"items",
           {{{"metadata",
              {{"name", "n1"}, {"annotations", {{"tessera.dev/gpu-inventory", inv.dump()}}}}}}}}};
}

json Pod(const std::string& name, const std::vector<json>& gpus,
         const std::string& phase = "Running") {
  json a = {{"version", 1}, {"node", "n1"}, {"gpus", gpus}};
  return {{"metadata",
           {{"namespace", "s"},
            {"name", name},
            {"uid", "uid-" + name},
            {"annotations", {{"tessera.dev/assignment", a.dump()}}}}},
          {"spec", {{"nodeName", "n1"}}},
          {"status", {{"phase", phase}}}};
}

json Whole(int index, const std::string& uuid) {
  return {{"index", index},
          {"uuid", uuid},
          {"memory_mib", 81920},
          {"compute_milli", 1000},
          {"exclusive", true}};
}
json Share(int index, const std::string& uuid, int64_t mib, int64_t milli = 0) {
  return {{"index", index},
          {"uuid", uuid},
          {"memory_mib", mib},
          {"compute_milli", milli},
          {"exclusive", false}};
}

Snapshot Snap(const std::vector<json>& pods, Clock::time_point at, bool gpu1_healthy = true) {
  Snapshot s;
  s.at = at;
  s.nodes = Node(gpu1_healthy);
  s.pods = {{"items", pods}};
  s.claims = {{"items", json::array()}};
  s.slices = {{"items", json::array()}};
  return s;
}

std::vector<std::string> Invariants(const std::vector<Violation>& v) {
  std::vector<std::string> out;
  for (const Violation& x : v) out.push_back(x.invariant);
  return out;
}

const Clock::time_point t0 = Clock::time_point{} + seconds(1000);

TEST(Checker, AGpuHeldWholeTwiceIsADoubleGrant) {
  Checker c;
  EXPECT_TRUE(
      c.Check(Snap({Pod("a", {Whole(0, kGpu0)}), Pod("b", {Whole(1, kGpu1)})}, t0)).empty());
  const auto v = c.Check(Snap({Pod("a", {Whole(0, kGpu0)}), Pod("b", {Whole(0, kGpu0)})}, t0));
  ASSERT_THAT(Invariants(v), ::testing::Contains("no-double-grant"));  // and over capacity
  EXPECT_THAT(v[0].detail, HasSubstr("pod s/a (whole), pod s/b (whole)"));
  // A finished pod holds nothing.
  Checker c2;
  EXPECT_TRUE(
      c2.Check(Snap({Pod("a", {Whole(0, kGpu0)}, "Succeeded"), Pod("b", {Whole(0, kGpu0)})}, t0))
          .empty());
}

TEST(Checker, SharesBeyondAGpusMemoryOrComputeAreOverCapacity) {
  Checker c;
  EXPECT_TRUE(c.Check(Snap({Pod("a", {Share(0, kGpu0, 40960, 500)}),
                            Pod("b", {Share(0, kGpu0, 40960, 500)})},
                           t0))
                  .empty());
  EXPECT_THAT(Invariants(c.Check(Snap(
                  {Pod("a", {Share(0, kGpu0, 40960)}), Pod("b", {Share(0, kGpu0, 40961)})}, t0))),
              ::testing::ElementsAre("capacity"));
  EXPECT_THAT(
      Invariants(c.Check(
          Snap({Pod("a", {Share(0, kGpu0, 10, 600)}), Pod("b", {Share(0, kGpu0, 10, 500)})}, t0))),
      ::testing::ElementsAre("capacity"));
}

TEST(Checker, AContainerThatSeesAnotherGpuOrCap) {
  Checker c;
  Snapshot s = Snap({Pod("a", {Share(0, kGpu0, 4096)})}, t0);
  s.reports["uid-a"] = std::string("visible=") + kGpu0 + " limit_mib=4096\n";
  EXPECT_TRUE(c.Check(s).empty());
  s.reports["uid-a"] = std::string("visible=") + kGpu1 + " limit_mib=4096\n";
  EXPECT_THAT(Invariants(c.Check(s)), ::testing::ElementsAre("container-sees"));
  Checker c2;
  s.reports["uid-a"] = std::string("visible=") + kGpu0 + " limit_mib=8192\n";
  EXPECT_THAT(Invariants(c2.Check(s)), ::testing::ElementsAre("container-sees"));
}

TEST(Checker, APodLeftOnAnUnhealthyGpuOrBoundToOne) {
  Checker c(CheckerOptions{.unhealthy_allowance = seconds(60)});
  EXPECT_TRUE(c.Check(Snap({Pod("a", {Whole(1, kGpu1)})}, t0, false)).empty());
  EXPECT_TRUE(c.Check(Snap({Pod("a", {Whole(1, kGpu1)})}, t0 + seconds(59), false)).empty());
  EXPECT_THAT(Invariants(c.Check(Snap({Pod("a", {Whole(1, kGpu1)})}, t0 + seconds(61), false))),
              ::testing::ElementsAre("unhealthy-gpu"));
  // A pod seen bound to it well after it turned unhealthy.
  EXPECT_THAT(Invariants(c.Check(Snap({Pod("b", {Share(1, kGpu1, 10)})}, t0 + seconds(62), false))),
              ::testing::ElementsAre("unhealthy-gpu"));
  // Being evicted (deleted) is fine.
  Checker c2(CheckerOptions{.unhealthy_allowance = seconds(60)});
  json leaving = Pod("a", {Whole(1, kGpu1)});
  leaving["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_TRUE(c2.Check(Snap({leaving}, t0, false)).empty());
  EXPECT_TRUE(c2.Check(Snap({leaving}, t0 + seconds(100), false)).empty());
}

TEST(Checker, APodThatWaitsWithoutSayingWhy) {
  Checker c(CheckerOptions{.pending_allowance = seconds(100)});
  json pending = {{"metadata", {{"namespace", "s"}, {"name", "p"}, {"uid", "uid-p"}}},
                  {"spec", json::object()},
                  {"status", {{"phase", "Pending"}}}};
  EXPECT_TRUE(c.Check(Snap({pending}, t0)).empty());
  EXPECT_THAT(Invariants(c.Check(Snap({pending}, t0 + seconds(101)))),
              ::testing::ElementsAre("runs-or-waits"));
  Checker c2(CheckerOptions{.pending_allowance = seconds(100)});
  pending["status"]["conditions"] = {{{"type", "PodScheduled"},
                                      {"status", "False"},
                                      {"reason", "Unschedulable"},
                                      {"message", "no GPU free"}}};
  EXPECT_TRUE(c2.Check(Snap({pending}, t0)).empty());
  EXPECT_TRUE(c2.Check(Snap({pending}, t0 + seconds(101))).empty());
}

TEST(Checker, DraAllocationsCountAsTheirClaimOnce) {
  Checker c;
  Snapshot s = Snap({}, t0);
  s.slices = {{"items",
               {{{"spec",
                  {{"driver", "gpu.tessera.dev"},
                   {"nodeName", "n1"},
                   {"pool", {{"name", "n1"}}},
                   {"devices",
                    {{{"name", "gpu-0"},
                      {"attributes",
                       {{"type", {{"string", "gpu"}}}, {"uuid", {{"string", kGpu0}}}}}}}}}}}}}};
  auto claim = [](const std::string& name, const json& consumed) {
    json result = {
        {"request", "gpu"}, {"driver", "gpu.tessera.dev"}, {"pool", "n1"}, {"device", "gpu-0"}};
    if (!consumed.is_null()) result["consumedCapacity"] = consumed;
    return json{{"metadata", {{"namespace", "s"}, {"name", name}}},
                {"status", {{"allocation", {{"devices", {{"results", {result}}}}}}}}};
  };
  auto pod = [](const std::string& name, const std::string& claim_name) {
    return json{{"metadata", {{"namespace", "s"}, {"name", name}, {"uid", "uid-" + name}}},
                {"spec",
                 {{"nodeName", "n1"},
                  {"resourceClaims", {{{"name", "gpu"}, {"resourceClaimName", claim_name}}}}}},
                {"status", {{"phase", "Running"}}}};
  };
  // One whole-device claim shared by two pods: held once.
  s.claims = {{"items", {claim("whole", json())}}};
  s.pods = {{"items", {pod("a", "whole"), pod("b", "whole")}}};
  EXPECT_TRUE(c.Check(s).empty());
  // Two claims on the device, one of them whole: a double grant.
  s.claims = {{"items", {claim("whole", json()), claim("share", {{"memory", "4Gi"}})}}};
  s.pods = {{"items", {pod("a", "whole"), pod("c", "share")}}};
  EXPECT_THAT(Invariants(c.Check(s)), ::testing::Contains("no-double-grant"));

  // The pool is being published again (a kubelet restarted): the slices do not list the claims'
  // devices for a moment. Which GPU each claim holds is unknown then, not a GPU with no UUID that
  // every claim of the node shares.
  Checker c2;
  s.slices = {{"items", json::array()}};
  s.claims = {{"items", {claim("one", json()), claim("two", json())}}};
  s.pods = {{"items", {pod("a", "one"), pod("b", "two")}}};
  s.reports["uid-a"] = std::string("visible=") + kGpu0 + " limit_mib=\n";
  s.reports["uid-b"] = std::string("visible=") + kGpu1 + " limit_mib=\n";
  EXPECT_TRUE(c2.Check(s).empty());
}

TEST(Checker, LeftoversAreLeaks) {
  EXPECT_TRUE(CheckLeaks({NodeLeftovers{.node = "n1"}}).empty());
  const auto v = CheckLeaks({NodeLeftovers{
      .node = "n1", .pod_dirs = {"uid-a"}, .cdi_specs = {"k8s.gpu.tessera.dev-x.json"}}});
  ASSERT_EQ(v.size(), 2u);
  EXPECT_THAT(v[0].detail, HasSubstr("pod folders"));
  EXPECT_THAT(v[1].detail, HasSubstr("CDI specs"));
}

TEST(Checker, Quantities) {
  int64_t mib = 0;
  ASSERT_TRUE(ParseMiB("4Gi", &mib));
  EXPECT_EQ(mib, 4096);
  ASSERT_TRUE(ParseMiB("81559Mi", &mib));
  EXPECT_EQ(mib, 81559);
  EXPECT_FALSE(ParseMiB("4GB", &mib));
  EXPECT_FALSE(ParseMiB("", &mib));
}

}  // namespace
}  // namespace tessera::soak
