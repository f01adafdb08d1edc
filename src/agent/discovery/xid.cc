#include "agent/discovery/xid.h"

#include "common/strings.h"

namespace tessera::agent {
namespace {

using C = FaultCause;
using E = FaultEffect;

// The catalogue's rows for the XIDs a data-center GPU (A100, H100, B100, GB200) reports, in XID
// order; rows the catalogue marks unused are left out (they fall to the default). Text: the
// catalogue's description, shortened; action: its "Resolution Bucket (Immediate Action)".
constexpr XidClass kXids[] = {
    {8, "GPU stopped processing (channel idle timeout)", "RESTART_APP", C::kApplication,
     E::kPodEvent},
    {11, "invalid or corrupted push buffer stream", "RESTART_APP", C::kApplication, E::kPodEvent},
    {13, "graphics engine exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {14, "test error injected by the driver", "IGNORE", C::kInformational, E::kNone},
    {25, "illegal notify from the graphics engine", "RESTART_APP", C::kApplication, E::kPodEvent},
    {31, "GPU memory page fault", "RESTART_APP", C::kApplication, E::kPodEvent},
    {32, "invalid or corrupted push buffer stream (PBDMA)", "RESTART_APP", C::kApplication,
     E::kPodEvent},
    {37, "unimplemented firmware method", "IGNORE", C::kInformational, E::kNone},
    {38, "driver firmware error (watchdog timeout)", "IGNORE", C::kInformational, E::kNone},
    {39, "copy engine 0 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {40, "copy engine 1 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {41, "copy engine 2 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    // IGNORE in the catalogue: the channel of an application that failed before was stopped.
    {43, "GPU stopped processing (the application's channel was reset)", "IGNORE", C::kApplication,
     E::kPodEvent},
    {44, "graphics engine fault during a context switch", "IGNORE", C::kInformational, E::kNone},
    {45, "preemptive cleanup, due to previous errors", "WORKFLOW_XID_45", C::kApplication,
     E::kPodEvent},
    {46, "GPU stopped processing (timeout)", "RESET_GPU", C::kHardware, E::kFail},
    {48, "double bit ECC error", "WORKFLOW_XID_48", C::kHardware, E::kFail},
    {54, "clocks reduced for power (check the power supply)", "CHECK_MECHANICALS", C::kHardware,
     E::kDrain},
    {60, "security engine (SEC2) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {61, "internal micro-controller breakpoint/warning", "CONTACT_SUPPORT", C::kHardware,
     E::kDrain},
    {62, "internal micro-controller halt", "RESET_GPU", C::kHardware, E::kFail},
    {63, "ECC page retirement or row remapping recording event", "IGNORE", C::kInformational,
     E::kNone},
    {64, "ECC page retirement or row remapping recording failure", "RESET_GPU", C::kHardware,
     E::kFail},
    {66, "firmware register access violation", "IGNORE", C::kInformational, E::kNone},
    {67, "firmware verification violation", "IGNORE", C::kInformational, E::kNone},
    {68, "video decoder (NVDEC0) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {69, "graphics engine class error", "RESTART_APP", C::kApplication, E::kPodEvent},
    {70, "copy engine 3 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {71, "copy engine 4 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {72, "copy engine 5 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {74, "NVLink error", "WORKFLOW_NVLINK_ERR", C::kHardware, E::kFail},
    {75, "copy engine 6 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {76, "copy engine 7 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {77, "copy engine 8 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {78, "vGPU start error", "UPDATE_SWFW", C::kHardware, E::kDrain},
    {79, "GPU has fallen off the bus", "RESTART_BM", C::kHardware, E::kFail},
    {80, "push buffer CRC mismatch", "RESTART_APP", C::kApplication, E::kPodEvent},
    {82, "JPEG engine (NVJPG0) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {83, "video decoder (NVDEC1) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {84, "video decoder (NVDEC2) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {85, "copy engine 9 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {86, "optical flow engine (OFA0) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {88, "video decoder (NVDEC3) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {89, "video decoder (NVDEC4) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {92, "high single-bit ECC error rate", "IGNORE", C::kInformational, E::kNone},
    {93, "InfoROM erase limit exceeded", "IGNORE", C::kInformational, E::kNone},
    {94, "contained ECC error", "RESTART_APP", C::kApplication, E::kPodEvent},
    {95, "uncontained ECC error", "RESET_GPU", C::kHardware, E::kFail},
    {96, "video decoder (NVDEC5) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {97, "video decoder (NVDEC6) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {98, "video decoder (NVDEC7) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {99, "JPEG engine (NVJPG1) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {100, "JPEG engine (NVJPG2) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {101, "JPEG engine (NVJPG3) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {102, "JPEG engine (NVJPG4) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {103, "JPEG engine (NVJPG5) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {104, "JPEG engine (NVJPG6) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {105, "JPEG engine (NVJPG7) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {106, "SMBPBI test message", "IGNORE", C::kInformational, E::kNone},
    {107, "SMBPBI test message (silent)", "IGNORE", C::kInformational, E::kNone},
    {109, "context switch timeout", "RESET_GPU", C::kHardware, E::kFail},
    {110, "security fault", "RESET_GPU", C::kHardware, E::kFail},
    {119, "GSP RPC timeout", "RESET_GPU", C::kHardware, E::kFail},
    {120, "GSP error", "RESET_GPU", C::kHardware, E::kFail},
    {121, "C2C link corrected error", "IGNORE", C::kInformational, E::kNone},
    {126, "copy engine 10 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {127, "copy engine 11 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {128, "copy engine 12 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {129, "copy engine 13 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {130, "copy engine 14 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {131, "copy engine 15 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {132, "copy engine 16 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {133, "copy engine 17 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {134, "copy engine 18 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {135, "copy engine 19 exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {136, "link training failure (ALI)", "RESET_GPU", C::kHardware, E::kFail},
    {137, "NVLink FLA privilege error", "IGNORE", C::kInformational, E::kNone},
    {139, "optical flow engine (OFA1) exception", "RESTART_APP", C::kApplication, E::kPodEvent},
    {140, "unrecovered ECC error", "RESET_GPU", C::kHardware, E::kFail},
    {141, "fast path error", "IGNORE", C::kInformational, E::kNone},
    {143, "GPU initialization failure", "RESET_GPU", C::kHardware, E::kFail},
    {144, "NVLink SAW error", "WORKFLOW_NVLINK5_ERR", C::kHardware, E::kFail},
    {145, "NVLink RLW error", "WORKFLOW_NVLINK5_ERR", C::kHardware, E::kFail},
    {146, "NVLink TLW error", "WORKFLOW_NVLINK5_ERR", C::kHardware, E::kFail},
    {147, "NVLink TREX error", "WORKFLOW_NVLINK5_ERR", C::kHardware, E::kFail},
    {148, "NVLink NVLPW control error", "WORKFLOW_NVLINK5_ERR", C::kHardware, E::kFail},
    {149, "NVLink NETIR error", "WORKFLOW_NVLINK5_ERR", C::kHardware, E::kFail},
    {150, "NVLink MSE error", "WORKFLOW_NVLINK5_ERR", C::kHardware, E::kFail},
    {151, "key rotation error (confidential computing)", "RESTART_VM", C::kHardware, E::kFail},
    {152, "DLA SMMU error", "IGNORE", C::kInformational, E::kNone},
    {153, "DLA timeout", "IGNORE", C::kInformational, E::kNone},
    // The driver's recovery action changed: it is read again (HealthCondition), which decides.
    {154, "GPU recovery action changed", "FOLLOW_OTHER_XID", C::kInformational, E::kNone},
    {155, "NVLink software-defined error", "RESET_GPU", C::kHardware, E::kFail},
    {156, "resource retirement event", "RESET_GPU", C::kHardware, E::kFail},
    {157, "resource retirement failure", "IGNORE", C::kInformational, E::kNone},
    {158, "GPU fatal timeout", "RESET_GPU", C::kHardware, E::kFail},
    {159, "CHI non-data error", "CHECK_UVM", C::kInformational, E::kNone},
    {160, "channel retirement event", "RESTART_BM", C::kHardware, E::kFail},
    {161, "channel retirement failure", "IGNORE", C::kInformational, E::kNone},
    {999, "unknown XID (reported by the driver without a number)", "CONTACT_SUPPORT", C::kHardware,
     E::kDrain},
};

constexpr ConditionClass kConditions[] = {
    {HealthCondition::kGpuLost, "gpu-lost", "GPU is lost (fallen off the bus: reset or reboot)",
     E::kFail},
    {HealthCondition::kRecoveryReset, "reset-required", "the driver says the GPU needs a reset",
     E::kFail},
    {HealthCondition::kRecoveryReboot, "reboot-required", "the driver says the node needs a reboot",
     E::kFail},
    {HealthCondition::kRecoveryDrainP2p, "drain-p2p",
     "the driver says peer-to-peer traffic must stop before it can tell more", E::kFail},
    {HealthCondition::kRecoveryDrainReset, "drain-and-reset",
     "the driver says the GPU runs at reduced capacity: drain it, then reset it", E::kDrain},
    {HealthCondition::kRowRemapPending, "row-remap-pending",
     "a memory row remapping is pending until the next GPU reset", E::kDrain},
    {HealthCondition::kRowRemapFailure, "row-remap-failure",
     "a memory row could not be remapped (no spare rows left)", E::kFail},
    {HealthCondition::kRetiredPagesPending, "retired-pages-pending",
     "a memory page retirement is pending until the next GPU reset", E::kDrain},
    {HealthCondition::kNvLinkDown, "nvlink-down", "an NVLink is down", E::kLinks},
    {HealthCondition::kMarkedUnhealthy, "marked-unhealthy", "marked unhealthy", E::kFail},
};

}  // namespace

std::string_view FaultCauseName(FaultCause c) {
  switch (c) {
    case FaultCause::kApplication:
      return "application";
    case FaultCause::kHardware:
      return "hardware";
    case FaultCause::kInformational:
      return "informational";
  }
  return "?";
}

std::string_view FaultEffectName(FaultEffect e) {
  switch (e) {
    case FaultEffect::kNone:
      return "none";
    case FaultEffect::kPodEvent:
      return "pod-event";
    case FaultEffect::kLinks:
      return "links";
    case FaultEffect::kDrain:
      return "drain";
    case FaultEffect::kFail:
      return "fail";
  }
  return "?";
}

XidClass ClassifyXid(int32_t xid) {
  for (const XidClass& x : kXids) {
    if (x.xid == xid) return x;
  }
  return XidClass{xid, "", "CONTACT_SUPPORT", FaultCause::kHardware, FaultEffect::kDrain};
}

bool IsCriticalXid(int32_t xid) { return ClassifyXid(xid).effect >= FaultEffect::kDrain; }

std::string XidText(int32_t xid) {
  const XidClass x = ClassifyXid(xid);
  if (x.text.empty()) return StrCat("XID ", xid);
  return StrCat("XID ", xid, ": ", x.text);
}

ConditionClass ClassifyCondition(HealthCondition c) {
  for (const ConditionClass& k : kConditions) {
    if (k.condition == c) return k;
  }
  return kConditions[sizeof(kConditions) / sizeof(kConditions[0]) - 1];
}

bool RecoveryActionCondition(uint32_t action, HealthCondition* out) {
  switch (action) {
    case 0:
      return false;
    case 2:
      *out = HealthCondition::kRecoveryReboot;
      return true;
    case 3:
      *out = HealthCondition::kRecoveryDrainP2p;
      return true;
    case 4:
      *out = HealthCondition::kRecoveryDrainReset;
      return true;
    default:
      *out = HealthCondition::kRecoveryReset;
      return true;
  }
}

}  // namespace tessera::agent
