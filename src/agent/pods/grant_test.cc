#include "agent/pods/grant.h"

#include "agent/discovery/fake_gpus_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

using ::testing::HasSubstr;

constexpr char kMigUuid[] = "MIG-0a1b2c3d-0000-4000-8000-000000000001";

std::string Uuid(int i) { return "GPU-6f1c2a9e-0000-4000-8000-00000000000" + std::to_string(i); }

// GPU 0 plain, GPU 1 in MIG mode with 3g.40gb@4 configured (its device known), GPU 2 MIG-capable
// but not in MIG mode.
NodeGpus Node() {
  absl::StatusOr<NodeGpus> node = ParseFakeGpusFile(
      R"({"version": 1, "gpus": [
        {"index": 0, "uuid": ")" +
          Uuid(0) + R"(", "model": "H100-80GB", "memory_mib": 81559},
        {"index": 1, "uuid": ")" +
          Uuid(1) + R"(", "model": "H100-80GB", "memory_mib": 81559,
         "mig": {"enabled": true, "instances": [{"profile": "3g.40gb", "start": 4, "uuid": ")" +
          kMigUuid + R"("}]}},
        {"index": 2, "uuid": ")" +
          Uuid(2) + R"(", "model": "H100-80GB", "memory_mib": 81559}],
       "links": [["X","NV18","NV18"],["NV18","X","NV18"],["NV18","NV18","X"]]})",
      "node.json");
  EXPECT_TRUE(node.ok()) << node.status();
  return *node;
}

records::AssignedGpu Gpu(int i, int64_t memory_mib, int32_t compute_milli, bool exclusive) {
  records::AssignedGpu g;
  g.grant.gpu = i;
  g.grant.memory_mib = memory_mib;
  g.grant.compute_milli = compute_milli;
  g.grant.exclusive = exclusive;
  g.uuid = Uuid(i);
  return g;
}

PodRef Pod(const records::Assignment& a, std::map<std::string, std::string> more = {}) {
  PodRef p{"team", "p", "0f5e3a8c-5f2b-4c1e-9d7a-2b6c8e1f4a30", std::move(more)};
  p.annotations["tessera.dev/assignment"] = records::AssignmentToJson(a);
  return p;
}

records::Assignment On(std::vector<records::AssignedGpu> gpus, std::string node = "n1") {
  records::Assignment a;
  a.node = std::move(node);
  a.gpus = std::move(gpus);
  return a;
}

TEST(ResolveGrant, APodWithoutARecordHasNoGrant) {
  absl::StatusOr<std::optional<PodGrant>> g =
      ResolveGrant(PodRef{"team", "web", "u", {}}, "n1", Node());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->has_value());
}

TEST(ResolveGrant, SharesAreEnforcedByTheShimUnlessThePodAsksForMps) {
  absl::StatusOr<std::optional<PodGrant>> g =
      ResolveGrant(Pod(On({Gpu(0, 4096, 300, false)})), "n1", Node());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(g->has_value());
  EXPECT_EQ((*g)->sharing, Sharing::kShim);
  EXPECT_FALSE((*g)->work_conserving);
  EXPECT_EQ((*g)->uuids(), std::vector<std::string>{Uuid(0)});

  g = ResolveGrant(
      Pod(On({Gpu(0, 4096, 300, false)}), {{"tessera.dev/gpu-sharing", "mps"},
                                           {"tessera.dev/gpu-compute-mode", "work-conserving"}}),
      "n1", Node());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->sharing, Sharing::kMps);
  EXPECT_TRUE((*g)->work_conserving);

  // Whole GPUs need no enforcement, whatever the pod says.
  g = ResolveGrant(Pod(On({Gpu(0, 81559, 1000, true), Gpu(2, 81559, 1000, true)}),
                       {{"tessera.dev/gpu-sharing", "mps"}}),
                   "n1", Node());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->sharing, Sharing::kNone);
}

TEST(ResolveGrant, RefusalsSayWhy) {
  auto error = [](const PodRef& pod) {
    absl::StatusOr<std::optional<PodGrant>> g = ResolveGrant(pod, "n1", Node());
    EXPECT_FALSE(g.ok());
    return g.ok() ? std::string() : std::string(g.status().message());
  };
  EXPECT_THAT(error(Pod(On({Gpu(0, 1, 0, false)}, "n2"))),
              HasSubstr("pod team/p is assigned GPUs on node n2, not on this node (n1)"));
  records::AssignedGpu stranger = Gpu(0, 1, 0, false);
  stranger.uuid = "GPU-00000000-0000-4000-8000-00000000dead";
  EXPECT_THAT(error(Pod(On({stranger}))),
              HasSubstr("is assigned GPU GPU-00000000-0000-4000-8000-00000000dead, which node n1 "
                        "does not have"));
  records::AssignedGpu moved = Gpu(0, 1, 0, false);
  moved.uuid = Uuid(2);
  EXPECT_THAT(error(Pod(On({moved}))),
              HasSubstr("is assigned GPU " + Uuid(2) + " as index 0, but it is index 2"));
  records::AssignedGpu beyond = Gpu(0, 1, 0, false);
  beyond.grant.gpu = 7;
  beyond.uuid.clear();
  EXPECT_THAT(error(Pod(On({beyond}))), HasSubstr("is assigned GPU index 7; node n1 has 3 GPUs"));
  EXPECT_THAT(error(Pod(On({Gpu(0, 1, 0, false)}), {{"tessera.dev/gpu-sharing", "hami"}})),
              HasSubstr("tessera.dev/gpu-sharing is \"hami\"; it must be shim or mps"));
  EXPECT_THAT(error(Pod(On({Gpu(0, 1, 0, false)}), {{"tessera.dev/gpu-compute-mode", "fast"}})),
              HasSubstr("it must be hard-cap or work-conserving"));
  EXPECT_THAT(error(Pod(On({Gpu(0, 1, 0, false), Gpu(2, 1, 0, false)}),
                        {{"tessera.dev/gpu-sharing", "mps"}})),
              HasSubstr("MPS serves shares of one GPU"));
  PodRef garbled{"team", "p", "u", {{"tessera.dev/assignment", "{\"version\": 1"}}};
  EXPECT_THAT(error(garbled), HasSubstr("its tessera.dev/assignment cannot be read"));
}

TEST(ResolveGrant, MigInstances) {
  records::AssignedGpu mig = Gpu(1, 40448, 0, true);
  mig.mig_profile = "3g.40gb";
  mig.mig_start = 4;
  absl::StatusOr<std::optional<PodGrant>> g = ResolveGrant(Pod(On({mig})), "n1", Node());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE((*g)->has_mig());
  EXPECT_EQ((*g)->sharing, Sharing::kNone);
  EXPECT_EQ((*g)->uuids(), std::vector<std::string>{kMigUuid});

  // An instance that is not there: refused, unless the record's plan creates it.
  mig.mig_start = 0;
  g = ResolveGrant(Pod(On({mig})), "n1", Node());
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(
      g.status().message(),
      HasSubstr("is assigned MIG instance 3g.40gb@0 of GPU " + Uuid(1) +
                ", which is not configured on node n1 (and its record does not create it)"));
  records::Assignment plan = On({mig});
  plan.mig_create = true;
  g = ResolveGrant(Pod(plan), "n1", Node());
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->gpus[0].mig_uuid, "");  // not created yet

  // A GPU that is not in MIG mode.
  records::AssignedGpu off = Gpu(2, 40448, 0, true);
  off.mig_profile = "3g.40gb";
  off.mig_start = 0;
  g = ResolveGrant(Pod(On({off})), "n1", Node());
  ASSERT_FALSE(g.ok());
  EXPECT_THAT(g.status().message(), HasSubstr("which is not in MIG mode on node n1"));
}

}  // namespace
}  // namespace tessera::agent
