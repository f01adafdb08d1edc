// The fault table: every GPU fault the agent can see, who caused it and what it implies. One table
// for XID errors (the driver's events) and one for the health conditions NVML reports when asked
// (a lost GPU, the driver's recovery action, pending page retirement or row remapping, NVLinks
// down); everything that decides what a fault means calls this file.
//
// Source: NVIDIA's XID catalogue for Ampere and newer GPUs
// (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html), its "Resolution Bucket
// (Immediate Action)" column, read through NVIDIA NVSentinel's machine-readable copy of that column
// (distros/kubernetes/nvsentinel/charts/gpu-health-monitor/xiderrorsmapping.csv), since the page is
// a spreadsheet; the memory-error application note (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt:
// a contained ECC error ends only the application that met it, pending row remapping is applied at
// the next reset) and NVML's nvmlDeviceGpuRecoveryAction_t (what the driver says a GPU needs).
//
// How a catalogue action becomes tessera's:
//   RESTART_APP                      the application's own fault: an Event on the pod that caused
//                                    it; the GPU stays in service (13, 31, 94, the copy engines...)
//   IGNORE                           informational: logged (63, 92, ...); 43 (a channel stopped
//                                    after its application's error) tells that application's pod
//   WORKFLOW_XID_45                  45, preemptive cleanup after a previous error: the pod's
//                                    channel was torn down; the previous XID decides the rest
//   RESET_GPU, RESTART_BM,           hardware, running work lost or at risk: the GPU leaves service
//   WORKFLOW_XID_48, NVLink          and its pods are handled by the fault policy (evict,
//   workflows, RESTART_VM            cordon-gpu, none) until the fault clears
//   CHECK_MECHANICALS, UPDATE_SWFW,  hardware, cause unknown or running work unaffected: no new
//   CONTACT_SUPPORT, unknown XIDs    pods on the GPU, the running ones stay
//   154 (recovery action changed)    informational: the driver's recovery action is read again
// Where tessera differs from NVIDIA's k8s-device-plugin: 94 (contained ECC, RESTART_APP) leaves the
// GPU healthy, and 109 (context switch timeout, RESET_GPU) takes it out of service; the plugin's
// default list does the opposite of the catalogue for both.
//
// Example: ClassifyXid(31) = {cause kApplication, effect kPodEvent, action "RESTART_APP"};
// ClassifyXid(79) = {kHardware, kFail, "RESTART_BM"}; ClassifyXid(4242) = {kHardware, kDrain,
// "CONTACT_SUPPORT"} (not in the catalogue).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tessera::agent {

// Who caused a fault.
enum class FaultCause {
  kApplication,    // the process on the GPU: its own context ended; others are unaffected
  kHardware,       // the GPU, its memory, its links or the driver
  kInformational,  // nothing to act on
};
std::string_view FaultCauseName(FaultCause c);  // "application", "hardware", "informational"

// What a fault means for the GPU and its pods (ordered: a later one outranks an earlier one).
enum class FaultEffect {
  kNone,      // logged only
  kPodEvent,  // an Event on the pod that caused it; the GPU stays in service
  kLinks,     // NVLinks down: the node's link matrix is degraded; pods that hold both GPUs of a
              // lost link are treated as on a failed GPU
  kDrain,     // no new pods on the GPU; the running ones are unaffected and stay
  kFail,      // the GPU leaves service; its pods are handled by the fault policy
};
std::string_view FaultEffectName(FaultEffect e);  // "none", "pod-event", "links", "drain", "fail"

struct XidClass {
  int32_t xid = 0;
  std::string_view text;    // "GPU has fallen off the bus"
  std::string_view action;  // the catalogue's immediate action: "RESTART_APP", "RESET_GPU", ...
  FaultCause cause = FaultCause::kHardware;
  FaultEffect effect = FaultEffect::kDrain;
};

// The XID's row; an XID the catalogue does not list is hardware, CONTACT_SUPPORT, kDrain.
XidClass ClassifyXid(int32_t xid);

// True when the XID takes the GPU out of new work (effect kDrain or kFail).
bool IsCriticalXid(int32_t xid);

// "XID 79: GPU has fallen off the bus"; "XID 4242" for numbers the table does not describe.
std::string XidText(int32_t xid);

// Health conditions NVML reports when asked (not events): they hold while the driver reports
// them.
enum class HealthCondition {
  kGpuLost,              // NVML_ERROR_GPU_IS_LOST: gone from the bus (XID 79's state)
  kRecoveryReset,        // recovery action GPU_RESET: the GPU needs a reset
  kRecoveryReboot,       // recovery action NODE_REBOOT
  kRecoveryDrainP2p,     // recovery action DRAIN_P2P: peer-to-peer traffic must stop first
  kRecoveryDrainReset,   // recovery action DRAIN_AND_RESET: reduced capacity, running work safe
  kRowRemapPending,      // nvmlDeviceGetRemappedRows isPending: applied at the next reset
  kRowRemapFailure,      // nvmlDeviceGetRemappedRows failureOccurred: no spare rows left
  kRetiredPagesPending,  // nvmlDeviceGetRetiredPagesPendingStatus: applied at the next reset
  kNvLinkDown,           // an NVLink that was up is not (nvmlDeviceGetNvLinkState)
  kMarkedUnhealthy,      // the GPU description file says so, or discovery cannot describe it
};

struct ConditionClass {
  HealthCondition condition = HealthCondition::kMarkedUnhealthy;
  std::string_view name;  // "gpu-lost", a label value (DRA taint values, metrics)
  std::string_view text;  // for people
  FaultEffect effect = FaultEffect::kFail;
};
ConditionClass ClassifyCondition(HealthCondition c);

// NVML's nvmlDeviceGpuRecoveryAction_t (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) as a
// condition: 1 reset, 2 reboot, 3 drain P2P, 4 drain and reset, other values (newer drivers) a
// reset; false for 0 (none: nothing to do).
bool RecoveryActionCondition(uint32_t action, HealthCondition* out);

}  // namespace tessera::agent
