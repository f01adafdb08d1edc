#include "fake_cuda/fake_machine.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace tessera::fake {
namespace {

// Field 22 of a /proc/<pid>/stat (clock ticks since boot); 0 when unreadable.
uint64_t StartTicksAt(const char* stat_path) {
  int fd = ::open(stat_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

uint64_t StartTicks(uint32_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%u/stat", pid);
  return StartTicksAt(path);
}

// This process's: /proc/self, which is right whatever PID namespace /proc shows.
uint64_t StartTicksOfSelf() { return StartTicksAt("/proc/self/stat"); }

uint64_t PidNamespaceOf(const char* ns_link) {
  char link[64] = {};
  if (::readlink(ns_link, link, sizeof(link) - 1) <= 0) return 0;
  const char* open = std::strchr(link, '[');
  return open == nullptr ? 0 : std::strtoull(open + 1, nullptr, 10);
}

// The NSpid line of a /proc/<pid>/status: its last number (the process's PID in its own
// namespace; 0 when there is none).
uint32_t OwnNsPid(const char* status_path) {
  int fd = ::open(status_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* line = std::strstr(buf, "\nNSpid:");
  if (line == nullptr) return 0;
  uint32_t last = 0;
  for (const char* p = line + 7; *p != '\0' && *p != '\n';) {
    char* end = nullptr;
    unsigned long v = std::strtoul(p, &end, 10);
    if (end == p) {
      ++p;
      continue;
    }
    last = static_cast<uint32_t>(v);
    p = end;
  }
  return last;
}

void InitDevices(FakeMachine* m, const std::vector<DeviceSpec>& devices, int driver_version) {
  m->magic = kMachineMagic;
  m->version = kMachineVersion;
  m->device_count = static_cast<uint32_t>(std::min<size_t>(devices.size(), kMaxDevices));
  m->driver_version = driver_version;
  for (uint32_t i = 0; i < m->device_count; ++i) {
    std::snprintf(m->devices[i].uuid, sizeof(m->devices[i].uuid), "%s", devices[i].uuid.c_str());
    std::snprintf(m->devices[i].name, sizeof(m->devices[i].name), "%s", devices[i].name.c_str());
    m->devices[i].total_bytes = devices[i].total_bytes;
    m->devices[i].sm_count = devices[i].sm_count;
  }
}

FakeMachine* g_machine = nullptr;
std::once_flag g_machine_once;
FakeProc* g_self = nullptr;
uint32_t g_self_pid = 0;
std::mutex g_self_mu;

}  // namespace

int64_t MonoNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000LL + ts.tv_nsec;
}

uint64_t RealtimeUs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000ULL + uint64_t(ts.tv_nsec) / 1000;
}

std::vector<DeviceSpec> Devices(int count, uint64_t bytes) {
  std::vector<DeviceSpec> out;
  for (int i = 0; i < count; ++i) {
    DeviceSpec d;
    char uuid[64];
    std::snprintf(uuid, sizeof(uuid), "GPU-fa4e0000-0000-4000-8000-%012d", i);
    d.uuid = uuid;
    d.total_bytes = bytes;
    out.push_back(d);
  }
  return out;
}

std::string CreateMachine(const std::string& path, const std::vector<DeviceSpec>& devices,
                          int driver_version) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return "cannot create " + path + ": " + std::strerror(errno);
  if (::ftruncate(fd, sizeof(FakeMachine)) != 0) {
    ::close(fd);
    return "cannot size " + path;
  }
  void* map = ::mmap(nullptr, sizeof(FakeMachine), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return "cannot map " + path;
  InitDevices(static_cast<FakeMachine*>(map), devices, driver_version);
  ::munmap(map, sizeof(FakeMachine));
  return "";
}

// The machine is mapped privately (a reader on a read-only mount): this process must not write
// it, or the pages it wrote would stop showing the machine's changes.
std::atomic<bool> g_private_map{false};

FakeMachine* MapMachine(const std::string& path, std::string* error) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  int flags = MAP_SHARED;
  if (fd < 0 && (errno == EROFS || errno == EACCES)) {
    // A reader that sees the machine on a read-only mount (the installed agent's NVML, which
    // sees the host at /host read-only): a private mapping, which on Linux keeps showing the
    // machine's changes on every page this process never writes (NVML only reads).
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    flags = MAP_PRIVATE;
    g_private_map.store(true);
  }
  if (fd < 0) {
    *error = "cannot open fake machine " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  void* map = ::mmap(nullptr, sizeof(FakeMachine), PROT_READ | PROT_WRITE, flags, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) {
    *error = "cannot map fake machine " + path;
    return nullptr;
  }
  auto* m = static_cast<FakeMachine*>(map);
  if (m->magic != kMachineMagic || m->version != kMachineVersion) {
    *error = path + " is not a fake machine";
    ::munmap(map, sizeof(FakeMachine));
    return nullptr;
  }
  return m;
}

FakeMachine* Machine() {
  std::call_once(g_machine_once, [] {
    if (const char* path = std::getenv("TESSERA_FAKE_GPU_MACHINE"); path && path[0] != '\0') {
      std::string error;
      g_machine = MapMachine(path, &error);
      if (g_machine == nullptr) std::fprintf(stderr, "fake cuda: %s\n", error.c_str());
    }
    if (g_machine == nullptr) {
      void* map = ::mmap(nullptr, sizeof(FakeMachine), PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      g_machine = static_cast<FakeMachine*>(map);
      InitDevices(g_machine, Devices(1, 80ULL << 30), 13000);
    }
  });
  return g_machine;
}

uint64_t OwnPidNamespace() { return PidNamespaceOf("/proc/self/ns/pid"); }

PidView::State PidView::Check(const FakeProc& p, uint32_t* reader_pid) {
  return Check(p.pid.load(std::memory_order_acquire), p.pidns_inode.load(std::memory_order_acquire),
               p.start_ticks.load(std::memory_order_relaxed), reader_pid);
}

PidView::State PidView::Check(uint32_t pid, uint64_t ns, uint64_t ticks, uint32_t* reader_pid) {
  if (pid == 0) return State::kDead;
  if (ns == 0 || ns == OwnPidNamespace()) {
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return State::kDead;
    if (ticks != 0 && StartTicks(pid) != ticks) return State::kDead;
    *reader_pid = pid;
    return State::kAlive;
  }
  if (!scanned_) {
    scanned_ = true;
    // The reader is in the host's namespace (it sees every process) only if its namespace is the
    // kernel's initial one. Its NSpid line cannot tell: in a container with its own /proc (as
    // every container runtime mounts it) NSpid has one number too, and a container taking itself
    // for the host took its neighbours' processes for dead and freed their memory.
    root_ = OwnPidNamespace() == kInitPidNamespaceInode;
    if (DIR* d = ::opendir("/proc")) {
      while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        unsigned long host = std::strtoul(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0') continue;
        char path[96];
        std::snprintf(path, sizeof(path), "/proc/%lu/ns/pid", host);
        const uint64_t inode = PidNamespaceOf(path);
        std::snprintf(path, sizeof(path), "/proc/%lu/status", host);
        const uint32_t own = OwnNsPid(path);
        if (inode == 0 || own == 0) continue;
        namespaces_.insert(inode);
        seen_[{inode, own}] = {static_cast<uint32_t>(host),
                               StartTicks(static_cast<uint32_t>(host))};
      }
      ::closedir(d);
    }
  }
  auto it = seen_.find({ns, pid});
  if (it != seen_.end() && (ticks == 0 || it->second.second == ticks)) {
    *reader_pid = it->second.first;
    return State::kAlive;
  }
  // Not there: dead if the reader sees that namespace (or every one), else out of its sight.
  return root_ || namespaces_.contains(ns) ? State::kDead : State::kUnseen;
}

bool Alive(const FakeProc& p) {
  PidView view;
  uint32_t ignored = 0;
  return view.Check(p, &ignored) != PidView::State::kDead;
}

FakeProc* Self() {
  uint32_t pid = static_cast<uint32_t>(::getpid());
  std::lock_guard<std::mutex> lock(g_self_mu);
  if (g_self != nullptr && g_self_pid == pid) return g_self;
  FakeMachine* m = Machine();
  uint64_t ticks = StartTicksOfSelf();
  PidView view;
  for (int pass = 0; pass < 2; ++pass) {
    for (auto& p : m->procs) {
      uint32_t cur = p.pid.load(std::memory_order_acquire);
      bool take = false;
      uint32_t ignored = 0;
      if (cur == 0) {
        take = p.pid.compare_exchange_strong(cur, pid);
      } else if (pass == 1 && view.Check(p, &ignored) == PidView::State::kDead) {
        take = p.pid.compare_exchange_strong(cur, pid);  // a dead process's entry
      }
      if (!take) continue;
      p.start_ticks.store(ticks, std::memory_order_relaxed);
      p.pidns_inode.store(OwnPidNamespace(), std::memory_order_release);
      for (int d = 0; d < kMaxDevices; ++d) {
        p.bytes[d].store(0, std::memory_order_relaxed);
        p.peak[d].store(0, std::memory_order_relaxed);
        p.has_context[d].store(0, std::memory_order_relaxed);
      }
      g_self = &p;
      g_self_pid = pid;
      return g_self;
    }
  }
  std::fprintf(stderr, "fake cuda: more than %d processes on the fake machine\n", kMaxProcs);
  std::abort();
}

namespace {
// Whether some open description of an exported allocation's backing file remains (see
// FakeShared). A dead entry is freed and its file removed.
bool SharedAlive(const FakeShared& s) {
  if (s.state.load(std::memory_order_acquire) != 2) return false;
  int fd = ::open(s.path, O_RDWR | O_CLOEXEC);
  bool alive = false;
  if (fd >= 0) {
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    fl.l_start = 0;
    fl.l_len = 1;
    alive = ::fcntl(fd, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
    ::close(fd);
  }
  if (!alive && !g_private_map.load()) {
    auto& entry = const_cast<FakeShared&>(s);
    uint32_t live = 2;
    if (entry.state.compare_exchange_strong(live, 0, std::memory_order_acq_rel)) {
      ::unlink(entry.path);
    }
  }
  return alive;
}
}  // namespace

uint64_t SharedBytes(const FakeMachine& m, uint32_t pid, int device) {
  uint64_t sum = 0;
  for (const auto& s : m.shared) {
    if (s.state.load(std::memory_order_acquire) != 2 || static_cast<int>(s.device) != device) {
      continue;
    }
    if (pid != 0 && s.owner_pid.load(std::memory_order_relaxed) != pid) continue;
    if (SharedAlive(s)) sum += s.bytes;
  }
  return sum;
}

FakeShared* AddShared(int device, uint64_t bytes, uint64_t ino, const std::string& path) {
  FakeMachine* m = Machine();
  for (auto& s : m->shared) {
    uint32_t free = 0;
    if (!s.state.compare_exchange_strong(free, 1, std::memory_order_acq_rel)) continue;
    s.device = static_cast<uint32_t>(device);
    s.bytes = bytes;
    s.ino = ino;
    s.owner_pid.store(static_cast<uint32_t>(::getpid()), std::memory_order_relaxed);
    std::snprintf(s.path, sizeof(s.path), "%s", path.c_str());
    s.state.store(2, std::memory_order_release);
    return &s;
  }
  return nullptr;
}

const FakeShared* FindShared(uint64_t ino) {
  for (const auto& s : Machine()->shared) {
    if (s.state.load(std::memory_order_acquire) == 2 && s.ino == ino && SharedAlive(s)) return &s;
  }
  return nullptr;
}

uint64_t LiveBytes(const FakeMachine& m, int device) {
  uint64_t sum = SharedBytes(m, 0, device);
  PidView view;
  for (const auto& p : m.procs) {
    uint32_t pid = p.pid.load(std::memory_order_acquire);
    if (pid == 0) continue;
    uint64_t b = p.bytes[device].load(std::memory_order_acquire);
    if (b == 0) continue;
    uint32_t ignored = 0;
    if (view.Check(p, &ignored) != PidView::State::kDead) {
      sum += b;
    } else if (!g_private_map.load()) {
      // The driver freed a dead process's memory: forget the entry, so that it is not checked
      // again (the entry is reused by Self()).
      auto& entry = const_cast<FakeProc&>(p);
      for (auto& d : entry.bytes) d.store(0, std::memory_order_relaxed);
      entry.pid.compare_exchange_strong(pid, 0, std::memory_order_acq_rel);
    }
  }
  return sum;
}

uint64_t ProcBytes(const FakeMachine& m, uint32_t pid, int device) {
  PidView view;
  for (const auto& p : m.procs) {
    uint32_t reader_pid = 0;
    if (p.pid.load(std::memory_order_acquire) != 0 &&
        view.Check(p, &reader_pid) == PidView::State::kAlive && reader_pid == pid) {
      // With the exported allocations it created that are still alive (by its own PID).
      return p.bytes[device].load(std::memory_order_acquire) +
             SharedBytes(m, p.pid.load(std::memory_order_acquire), device);
    }
  }
  return 0;
}

int64_t Execute(int device, int64_t not_before_ns, int64_t duration_ns) {
  FakeMachine* m = Machine();
  FakeDevice& d = m->devices[device];
  int64_t now = MonoNs();
  int64_t tail = d.engine_tail_ns.load(std::memory_order_acquire);
  int64_t start, end;
  do {
    start = std::max({now, not_before_ns, tail});
    end = start + duration_ns;
  } while (!d.engine_tail_ns.compare_exchange_weak(tail, end, std::memory_order_acq_rel));
  uint64_t index = m->ring_head.fetch_add(1, std::memory_order_relaxed);
  FakeKernel& k = m->ring[index % kRingSize];
  k.seq.store(0, std::memory_order_release);
  k.pid = static_cast<uint32_t>(::getpid());
  k.device = static_cast<uint32_t>(device);
  k.pidns_inode = OwnPidNamespace();
  k.start_ns = start;
  k.end_ns = end;
  k.seq.store(index + 1, std::memory_order_release);
  return end;
}

std::vector<std::pair<uint32_t, int64_t>> BusyByPid(const FakeMachine& m, int device,
                                                    int64_t from_ns, int64_t to_ns) {
  std::map<std::pair<uint64_t, uint32_t>, int64_t> busy;
  uint64_t head = m.ring_head.load(std::memory_order_acquire);
  uint64_t first = head > kRingSize ? head - kRingSize : 0;
  for (uint64_t i = first; i < head; ++i) {
    const FakeKernel& k = m.ring[i % kRingSize];
    if (k.seq.load(std::memory_order_acquire) != i + 1) continue;
    if (static_cast<int>(k.device) != device) continue;
    int64_t s = std::max(k.start_ns, from_ns), e = std::min(k.end_ns, to_ns);
    if (e > s) busy[{k.pidns_inode, k.pid}] += e - s;
  }
  PidView view;
  std::map<uint32_t, int64_t> by_reader_pid;
  for (const auto& [who, ns] : busy) {
    uint32_t reader_pid = 0;
    if (view.Check(who.second, who.first, 0, &reader_pid) == PidView::State::kAlive) {
      by_reader_pid[reader_pid] += ns;
    }
  }
  return {by_reader_pid.begin(), by_reader_pid.end()};
}

}  // namespace tessera::fake
