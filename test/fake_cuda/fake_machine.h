// The fake GPU machine shared by every process of a test: a mapped file holding the devices,
// the physical ledger (device bytes really held, per process), each device's execution engine and
// a ring of executed kernels. The fake libcuda.so.1 writes it; the fake libnvidia-ml.so.1 and
// the tests read it, so NVML's memory, process list and utilisation come from what the fake
// driver really did (throttling is tested closed-loop).
//
// A process's bytes stop counting when it dies (its PID is gone or reused), as a real driver
// frees a dead process's memory. Kernels execute on one engine per device in submission order:
// a launch starts at max(now, its stream's last completion, the engine's last completion) and
// occupies the engine for its duration, so processes sharing a device slow each other down.
//
// PIDs as the driver reports them: a real driver knows every process by its host PID, and NVML
// answers with those whatever PID namespace its caller is in. The fake knows each process by its
// PID in its own namespace and that namespace's inode (a container's processes write the file
// from their own namespaces), and a reader translates to its own namespace: a process of the
// reader's namespace as it is; one of a namespace below it (the host reading a container's) by
// the NSpid lines of the reader's /proc; one it cannot see (another container's, from a
// container) is counted in the device's memory but listed nowhere, and never taken for dead.
//
// Selected by TESSERA_FAKE_GPU_MACHINE=<file>; without it, a process gets a private machine with
// one 80 GiB device.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace tessera::fake {

inline constexpr uint64_t kMachineMagic = 0x4E4843414D454B46ULL;  // "FKEMACHN"
inline constexpr uint32_t kMachineVersion = 2;
inline constexpr int kMaxDevices = 8;
inline constexpr int kMaxProcs = 256;
inline constexpr uint32_t kRingSize = 1u << 16;
inline constexpr int kMaxShared = 256;

struct FakeDevice {
  char uuid[96];
  char name[96];
  uint64_t total_bytes;
  uint32_t sm_count;
  uint32_t reserved;
  std::atomic<int64_t> engine_tail_ns;  // CLOCK_MONOTONIC: when the engine is next free
};

struct FakeProc {
  std::atomic<uint32_t> pid;  // in its own PID namespace
  uint32_t reserved;
  std::atomic<uint64_t> start_ticks;  // to tell a reused PID from the original
  std::atomic<uint64_t> pidns_inode;  // its PID namespace (/proc/self/ns/pid); 0: the reader's
  std::atomic<uint64_t> bytes[kMaxDevices];
  std::atomic<uint64_t> peak[kMaxDevices];
  std::atomic<uint32_t> has_context[kMaxDevices];
};

struct FakeKernel {
  std::atomic<uint64_t> seq;  // written last; ring index + 1 once complete
  uint32_t pid;               // in its own PID namespace
  uint32_t device;
  uint64_t pidns_inode;
  int64_t start_ns;
  int64_t end_ns;
};

// A virtual-memory allocation exported as a file descriptor. The driver frees it when no process
// holds a handle or a mapping of it and no exported descriptor of it is open anywhere, which is
// when the last open description of its backing file (`path`) goes: each holds a read lock on
// byte 0 (taken at export, shared by every dup and by the mappings), so it is alive while a lock
// test on that byte from a new description fails. Its bytes count here, not in a process's
// entry; NVML attributes them to the process that created it while that process lives.
struct FakeShared {
  std::atomic<uint32_t> state;  // 0 free, 1 being filled in, 2 live
  uint32_t device;
  uint64_t bytes;
  uint64_t ino;  // the backing file's inode (how an import finds it)
  std::atomic<uint32_t> owner_pid;
  uint32_t reserved;
  char path[240];
};

struct FakeMachine {
  uint64_t magic;
  uint32_t version;
  uint32_t device_count;
  int32_t driver_version;
  uint32_t reserved;
  FakeDevice devices[kMaxDevices];
  FakeProc procs[kMaxProcs];
  FakeShared shared[kMaxShared];
  std::atomic<uint64_t> ring_head;
  FakeKernel ring[kRingSize];
};

struct DeviceSpec {
  std::string uuid;
  std::string name = "NVIDIA H100 80GB HBM3 (fake)";
  uint64_t total_bytes = 80ULL << 30;
  uint32_t sm_count = 132;
};

// Creates a machine file with these devices (tests). Returns an error message, empty on success.
std::string CreateMachine(const std::string& path, const std::vector<DeviceSpec>& devices,
                          int driver_version = 13000);
// N devices with UUIDs GPU-fa4e0000-0000-4000-8000-00000000000<i> and `bytes` each.
std::vector<DeviceSpec> Devices(int count, uint64_t bytes);

// The machine of this process (TESSERA_FAKE_GPU_MACHINE or a private one); never null.
FakeMachine* Machine();
// Maps a machine file read-write (tests inspecting it).
FakeMachine* MapMachine(const std::string& path, std::string* error);

// This process's entry in the ledger (registered on first use).
FakeProc* Self();

// A reader's view of the machine's processes (see "PIDs" above). Scans the reader's /proc once, on
// the first question about a process of another namespace.
class PidView {
 public:
  enum class State { kAlive, kDead, kUnseen };
  // The state of the process (pid in namespace pidns_inode, started at start_ticks); its PID in
  // the reader's namespace in `reader_pid` when alive.
  State Check(uint32_t pid, uint64_t pidns_inode, uint64_t start_ticks, uint32_t* reader_pid);
  State Check(const FakeProc& p, uint32_t* reader_pid);

 private:
  bool scanned_ = false;
  bool root_ = false;  // the reader's namespace is the host's: it sees every process
  std::map<std::pair<uint64_t, uint32_t>, std::pair<uint32_t, uint64_t>> seen_;  // -> pid, ticks
  std::set<uint64_t> namespaces_;
};
// The PID namespace of this process.
uint64_t OwnPidNamespace();
// The inode of the kernel's initial PID namespace, the host's (PROC_PID_INIT_INO, fixed since
// Linux 3.8).
inline constexpr uint64_t kInitPidNamespaceInode = 0xEFFFFFFCu;
// Whether the process of an entry is alive (a process this reader cannot see counts as alive).
bool Alive(const FakeProc& p);
// Bytes held on `device` by living processes and by exported allocations still alive.
uint64_t LiveBytes(const FakeMachine& m, int device);
// Bytes held on `device` by one living process (0 when dead), with the exported allocations it
// created that are still alive.
uint64_t ProcBytes(const FakeMachine& m, uint32_t pid, int device);
// Exported allocations on `device` still alive that `pid` created (0: any creator).
uint64_t SharedBytes(const FakeMachine& m, uint32_t pid, int device);

// Registers an exported allocation whose backing file is `path` (already locked by the caller);
// returns its entry, or null when the table is full.
FakeShared* AddShared(int device, uint64_t bytes, uint64_t ino, const std::string& path);
// The live exported allocation whose backing file has inode `ino`, or null.
const FakeShared* FindShared(uint64_t ino);

int64_t MonoNs();
uint64_t RealtimeUs();
// Executes a kernel of `duration_ns` on `device` after `not_before_ns`; returns its end.
int64_t Execute(int device, int64_t not_before_ns, int64_t duration_ns);
// GPU time per PID (the reader's PIDs; processes it cannot see are left out) on `device` within
// [from_ns, to_ns) (CLOCK_MONOTONIC).
std::vector<std::pair<uint32_t, int64_t>> BusyByPid(const FakeMachine& m, int device,
                                                    int64_t from_ns, int64_t to_ns);

}  // namespace tessera::fake
