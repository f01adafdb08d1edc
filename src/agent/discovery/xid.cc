#include "agent/discovery/xid.h"

#include <string_view>

#include "common/strings.h"

namespace tessera::agent {
namespace {

struct Xid {
  int32_t number;
  std::string_view text;
};

// NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors), the ones seen on data-center GPUs.
constexpr Xid kXids[] = {
    {13, "graphics engine exception"},
    {31, "GPU memory page fault"},
    {32, "invalid or corrupted push buffer stream"},
    {38, "driver firmware error"},
    {43, "GPU stopped processing"},
    {45, "preemptive cleanup, due to previous errors"},
    {48, "double bit ECC error"},
    {61, "internal micro-controller breakpoint/warning"},
    {62, "internal micro-controller halt"},
    {63, "ECC page retirement or row remapping recording event"},
    {64, "ECC page retirement or row remapping recording failure"},
    {68, "video processor exception"},
    {69, "graphics engine class error"},
    {74, "NVLink error"},
    {79, "GPU has fallen off the bus"},
    {92, "high single-bit ECC error rate"},
    {94, "contained ECC error"},
    {95, "uncontained ECC error"},
    {109, "context switch timeout"},
    {119, "GSP RPC timeout"},
    {120, "GSP error"},
    {121, "C2C link corrected error"},
    {140, "unrecovered ECC error"},
    {143, "GPU initialization failure"},
    {145, "NVLink recovery error"},
    {149, "NVLink fabric error"},
    {154, "GPU recovery action changed (reset or reboot required)"},
    {999, "unknown XID (reported by the driver without a number)"},
};

// Application errors: the device plugin's default list of XIDs that do not make a GPU unhealthy.
constexpr int32_t kApplicationXids[] = {13, 31, 43, 45, 68, 109};

}  // namespace

bool IsCriticalXid(int32_t xid) {
  for (int32_t a : kApplicationXids) {
    if (a == xid) return false;
  }
  return true;
}

std::string XidText(int32_t xid) {
  for (const Xid& x : kXids) {
    if (x.number == xid) return StrCat("XID ", xid, ": ", x.text);
  }
  return StrCat("XID ", xid);
}

}  // namespace tessera::agent
