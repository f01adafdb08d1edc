#include "agent/discovery/xid.h"

#include "gtest/gtest.h"

namespace tessera::agent {
namespace {

// The catalogue's immediate actions for the XIDs the issue names, and what tessera does with them.
TEST(Xid, ApplicationXidsTellThePodAndLeaveTheGpuInService) {
  for (int32_t xid : {13, 31, 43, 45, 94, 68, 8}) {
    SCOPED_TRACE(xid);
    const XidClass x = ClassifyXid(xid);
    EXPECT_EQ(x.cause, FaultCause::kApplication);
    EXPECT_EQ(x.effect, FaultEffect::kPodEvent);
    EXPECT_FALSE(IsCriticalXid(xid));
  }
  EXPECT_EQ(ClassifyXid(13).action, "RESTART_APP");
  EXPECT_EQ(ClassifyXid(94).action, "RESTART_APP");  // contained ECC: only its application
  EXPECT_EQ(ClassifyXid(45).action, "WORKFLOW_XID_45");
}

TEST(Xid, HardwareXidsThatLoseWorkFailTheGpu) {
  for (int32_t xid : {48, 64, 74, 79, 95, 109, 119, 120, 140, 143, 145}) {
    SCOPED_TRACE(xid);
    const XidClass x = ClassifyXid(xid);
    EXPECT_EQ(x.cause, FaultCause::kHardware);
    EXPECT_EQ(x.effect, FaultEffect::kFail);
    EXPECT_TRUE(IsCriticalXid(xid));
  }
  EXPECT_EQ(ClassifyXid(79).action, "RESTART_BM");
  EXPECT_EQ(ClassifyXid(48).action, "WORKFLOW_XID_48");
  EXPECT_EQ(ClassifyXid(109).action, "RESET_GPU");  // not the device plugin's "application" list
}

TEST(Xid, InformationalXidsAreOnlyLogged) {
  for (int32_t xid : {63, 92, 121, 154}) {
    SCOPED_TRACE(xid);
    EXPECT_EQ(ClassifyXid(xid).cause, FaultCause::kInformational);
    EXPECT_EQ(ClassifyXid(xid).effect, FaultEffect::kNone);
  }
}

TEST(Xid, WhatTheCatalogueDoesNotKnowKeepsNewPodsOffButLeavesRunningOnes) {
  const XidClass x = ClassifyXid(4242);
  EXPECT_EQ(x.cause, FaultCause::kHardware);
  EXPECT_EQ(x.effect, FaultEffect::kDrain);
  EXPECT_EQ(x.action, "CONTACT_SUPPORT");
  EXPECT_TRUE(IsCriticalXid(4242));
  EXPECT_EQ(XidText(4242), "XID 4242");
  EXPECT_EQ(XidText(79), "XID 79: GPU has fallen off the bus");
}

TEST(Xid, HealthConditions) {
  EXPECT_EQ(ClassifyCondition(HealthCondition::kGpuLost).effect, FaultEffect::kFail);
  EXPECT_EQ(ClassifyCondition(HealthCondition::kRowRemapPending).effect, FaultEffect::kDrain);
  EXPECT_EQ(ClassifyCondition(HealthCondition::kRowRemapFailure).effect, FaultEffect::kFail);
  EXPECT_EQ(ClassifyCondition(HealthCondition::kRecoveryDrainReset).effect, FaultEffect::kDrain);
  EXPECT_EQ(ClassifyCondition(HealthCondition::kNvLinkDown).effect, FaultEffect::kLinks);
  EXPECT_EQ(ClassifyCondition(HealthCondition::kRecoveryReset).name, "reset-required");
  HealthCondition c = HealthCondition::kMarkedUnhealthy;
  EXPECT_FALSE(RecoveryActionCondition(0, &c));
  ASSERT_TRUE(RecoveryActionCondition(1, &c));
  EXPECT_EQ(c, HealthCondition::kRecoveryReset);
  ASSERT_TRUE(RecoveryActionCondition(2, &c));
  EXPECT_EQ(c, HealthCondition::kRecoveryReboot);
  ASSERT_TRUE(RecoveryActionCondition(4, &c));
  EXPECT_EQ(c, HealthCondition::kRecoveryDrainReset);
  ASSERT_TRUE(RecoveryActionCondition(7, &c));  // a value this table does not know: a reset
  EXPECT_EQ(c, HealthCondition::kRecoveryReset);
}

}  // namespace
}  // namespace tessera::agent
