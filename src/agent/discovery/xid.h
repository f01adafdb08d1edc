// NVIDIA XID errors: which ones mean a GPU must take no new work, and what each means.
//
// Policy (the NVIDIA device plugin's default, `nvidia-device-plugin` health checks): every XID is
// critical except the ones an application causes on its own context and that leave the GPU
// usable for others: 13 (graphics engine exception), 31 (GPU memory page fault), 43 (GPU stopped
// processing), 45 (preemptive cleanup), 68 (video processor exception), 109 (context switch
// timeout). Descriptions follow NVIDIA's "XID Errors" catalogue.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::agent {

// True when the XID marks the GPU unhealthy.
bool IsCriticalXid(int32_t xid);

// "XID 79: GPU has fallen off the bus"; "XID 1234" for numbers without a description.
std::string XidText(int32_t xid);

}  // namespace tessera::agent
