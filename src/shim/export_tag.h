// How an exported virtual-memory allocation is recognised by the process that imports it.
//
// cuMemExportToShareableHandle hands out a file descriptor (with the real driver, one opened on
// /dev/nvidiactl: every export looks alike to fstat). The exporting shim names the allocation's
// shared slot in the pod's ledger (Ledger::CreateShared) by a random key, and writes that key onto
// the descriptor itself: an OFD read lock on the byte at kExportTagBase + key of the descriptor's
// open file description. Every copy of the descriptor (dup, SCM_RIGHTS, pidfd_getfd) shares that
// description and so the lock, and /proc/self/fdinfo/<fd> lists the locks a description holds, so
// the importing shim reads the key back from its own copy, whatever the file is. A descriptor
// from elsewhere (another pod's shim, an unshimmed exporter) carries no key of this pod's ledger.
//
// The same lock tells whether an exported description is still open anywhere: a test for a write
// lock at that byte, from another description of the same file (a probe the exporter opens from
// /proc/self/fd), conflicts while any copy of the exported description exists.
//
// Example: exporter: key = NewExportKey() (say 0x2a); TagDescriptor(fd, 0x2a) locks byte
// 2^62 + 0x2a; the importer, handed a copy of fd, gets ReadExportTag(copy) == 0x2a.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::shim {

inline constexpr uint64_t kExportTagBase = uint64_t{1} << 62;
inline constexpr uint64_t kExportKeyMask = (uint64_t{1} << 60) - 1;

// A random key in [1, 2^60).
uint64_t NewExportKey();
// Writes `key` onto the open file description of `fd`; false if the file takes no locks.
bool TagDescriptor(int fd, uint64_t key);
// The key written onto the description of `fd`, or 0.
uint64_t ReadExportTag(int fd);
// A second description of the file `fd` refers to, for ExportedDescriptorOpen; -1 on failure.
int OpenProbe(int fd);
// Whether a description tagged with `key` is open anywhere, tested through `probe`.
bool ExportedDescriptorOpen(int probe, uint64_t key);

// Linear memory exported over CUDA IPC has no descriptor to tag: its handle (cuIpcGetMemHandle's
// 64 bytes, which the exporter hands on as they are) names it. The key of the pod's shared slot
// for it is a hash of those bytes, in [2^63, 2^64): never a key of NewExportKey's.
uint64_t IpcHandleKey(const void* handle, size_t size);

}  // namespace tessera::shim
