#include "core/cluster_state.h"

#include "core/fit.h"
#include "core/testing/cluster_builder.h"
#include "gtest/gtest.h"

namespace tessera::core {
namespace {

using testing::ClusterBuilder;

class ClusterStateTest : public ::testing::Test {
 protected:
  Cluster cluster_ = ClusterBuilder().Node("a").Cpu(8).MemoryGi(64).Gpus(2, "A100-80GB").Build();
  ClusterState state_{cluster_};
  NodeId a_{0};

  Placement Share(int gpu, int64_t mem, int32_t compute) {
    Placement p;
    p.node = a_;
    p.cpu_milli = 1000;
    p.memory_mib = 1024;
    p.gpus.push_back(GpuGrant{gpu, mem, compute, false});
    return p;
  }
  Placement Whole(int gpu) {
    Placement p;
    p.node = a_;
    p.gpus.push_back(GpuGrant{gpu, 81920, 1000, true});
    return p;
  }
};

TEST_F(ClusterStateTest, ApplyAndRevertRestoreEverything) {
  Placement p = Share(0, 4096, 250);
  state_.Apply(p);
  EXPECT_EQ(state_.gpu(a_, 0).free_memory_mib, 81920 - 4096);
  EXPECT_EQ(state_.gpu(a_, 0).free_compute_milli, 750);
  EXPECT_EQ(state_.whole_free_mask(a_), 0b10u);
  EXPECT_EQ(state_.gpus_in_use(), 1);
  uint64_t v = state_.version(a_);
  state_.Revert(p);
  EXPECT_GT(state_.version(a_), v);
  EXPECT_EQ(state_.gpu(a_, 0).free_memory_mib, 81920);
  EXPECT_EQ(state_.whole_free_mask(a_), 0b11u);
  EXPECT_EQ(state_.gpus_in_use(), 0);
  EXPECT_EQ(state_.allocated_cpu_milli(), 0);
  state_.CheckInvariants();
}

TEST_F(ClusterStateTest, NeverOverCommitsMemoryOrCompute) {
  state_.Apply(Share(0, 80000, 100));
  std::string why;
  EXPECT_FALSE(state_.CanApply(Share(0, 2000, 100), &why));
  EXPECT_NE(why.find("GPU 0 has 1920Mi free"), std::string::npos) << why;
  EXPECT_FALSE(state_.CanApply(Share(0, 100, 901), &why));
  EXPECT_TRUE(state_.CanApply(Share(0, 1920, 900), &why));
  EXPECT_DEATH(state_.Apply(Share(0, 2000, 0)), "CHECK failed");
}

TEST_F(ClusterStateTest, ExclusiveGpuIsNeverShared) {
  state_.Apply(Whole(1));
  EXPECT_FALSE(state_.CanApply(Share(1, 1, 0)));
  EXPECT_FALSE(state_.CanApply(Whole(1)));
  state_.Apply(Share(0, 1, 0));
  EXPECT_FALSE(state_.CanApply(Whole(0)));  // shared GPUs cannot become exclusive
  EXPECT_DEATH(state_.Apply(Whole(0)), "CHECK failed");
  state_.CheckInvariants();
}

// The sharing mode is a scheduling input: MPS shares and shim shares never land on one GPU (the
// node could enforce only one of them); the fit check sends each to a GPU of its own mode.
TEST_F(ClusterStateTest, SharesOfTheTwoModesNeverShareAGpu) {
  Placement shim = Share(0, 4096, 250);
  Placement mps = Share(0, 4096, 250);
  mps.gpus[0].mode = ShareMode::kMps;
  state_.Apply(shim);
  std::string why;
  EXPECT_FALSE(state_.CanApply(mps, &why));
  EXPECT_NE(why.find("a GPU serves MPS shares or shim shares, not both"), std::string::npos) << why;
  PodRequest r;
  r.gpu = GpuAsk::Share(4096, 250);
  r.gpu.mode = ShareMode::kMps;
  NodeFit fit = CheckNode(state_, Query(state_, r), a_, ~0ULL);
  EXPECT_EQ(fit.gpus, 0b10u);         // only the empty GPU
  state_.Apply(Share(1, 1024, 100));  // a shim share on GPU 1 too
  fit = CheckNode(state_, Query(state_, r), a_, ~0ULL);
  EXPECT_EQ(fit.reject, Reject::kShareMode);
  EXPECT_NE(ExplainNoFit(state_, Query(state_, r), {}).find("enforced by the shim"),
            std::string::npos);
  state_.Revert(shim);
  mps.gpus[0].gpu = 0;
  state_.Apply(mps);  // GPU 0 now serves MPS shares
  EXPECT_EQ(state_.gpu(a_, 0).mps_grants, 1);
  EXPECT_FALSE(state_.CanApply(Share(0, 1024, 100)));  // a shim share waits
  r.gpu.mode = ShareMode::kShim;
  EXPECT_EQ(CheckNode(state_, Query(state_, r), a_, ~0ULL).gpus, 0b10u);
  state_.Revert(mps);
  EXPECT_EQ(state_.gpu(a_, 0).mps_grants, 0);
  EXPECT_TRUE(state_.CanApply(Share(0, 1024, 100)));
  state_.CheckInvariants();
}

TEST_F(ClusterStateTest, NodeCpuAndMemoryAreChecked) {
  Placement p = Share(0, 1, 0);
  p.cpu_milli = 9000;
  std::string why;
  EXPECT_FALSE(state_.CanApply(p, &why));
  EXPECT_NE(why.find("CPU"), std::string::npos);
}

TEST_F(ClusterStateTest, RevertOfWhatWasNeverAppliedDies) {
  EXPECT_DEATH(state_.Revert(Share(0, 1, 0)), "CHECK failed");
}

}  // namespace
}  // namespace tessera::core
