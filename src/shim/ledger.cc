#include "shim/ledger.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tessera::shim {
namespace {

std::string Errno(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

uint64_t UnixNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ULL + uint64_t(ts.tv_nsec);
}

void FetchMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

uint64_t ReadStartTimeTicks() {
  char buf[1024];
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return 0;
  return StatStartTimeTicks(std::string_view(buf, static_cast<size_t>(n)));
}

}  // namespace

// The fixed part of a new ledger's header.
void Ledger::WriteHeader(LedgerHeader* h, const std::string& gpu_uuid, uint32_t slot_count) {
  h->magic = kLedgerMagic;
  h->version = kFormatVersion;
  h->header_size = kLedgerHeaderSize;
  h->slot_size = kLedgerSlotSize;
  h->slot_count = slot_count;
  // memcpy, not snprintf: the agent calls this inside a SIGBUS guard (bus_guard.h).
  std::memset(h->gpu_uuid, 0, sizeof(h->gpu_uuid));
  std::memcpy(h->gpu_uuid, gpu_uuid.data(), std::min<size_t>(gpu_uuid.size(), kUuidBytes - 1));
}

int CreateUniqueAt(int dir_fd, const std::string& prefix, unsigned mode, std::string* name) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 64; ++attempt) {
    // Unpredictable enough that a name planted in advance is unlikely; O_EXCL | O_NOFOLLOW make
    // one that is planted harmless (EEXIST: the next name).
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t(ts.tv_nsec) << 20) ^ uint64_t(ts.tv_sec) ^ (uint64_t(::getpid()) << 40) ^
                 (counter.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ULL);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(x));
    std::string candidate = prefix + hex;
    int fd = ::openat(dir_fd, candidate.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      mode);
    if (fd >= 0) {
      *name = candidate;
      return fd;
    }
    if (errno != EEXIST) return -1;
  }
  errno = EEXIST;
  return -1;
}

uint64_t StatStartTimeTicks(std::string_view stat) {
  // Field 2 (comm) may contain spaces and parentheses: start after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string_view::npos) return 0;
  size_t p = close + 1;
  // Fields 3.. follow; starttime is field 22, the 20th after ')'.
  for (int field = 3; field < 22; ++field) {
    while (p < stat.size() && stat[p] == ' ') ++p;
    while (p < stat.size() && stat[p] != ' ') ++p;
    if (p >= stat.size()) return 0;
  }
  while (p < stat.size() && stat[p] == ' ') ++p;
  uint64_t value = 0;
  size_t digits = 0;
  for (; p < stat.size() && stat[p] >= '0' && stat[p] <= '9' && digits < 20; ++p, ++digits) {
    const uint64_t d = static_cast<uint64_t>(stat[p] - '0');
    if (value > (UINT64_MAX - d) / 10) return 0;
    value = value * 10 + d;
  }
  return digits == 0 ? 0 : value;
}

ProcessIdentity ProcessIdentity::Current() {
  ProcessIdentity id;
  id.pid = static_cast<uint32_t>(::getpid());
  // "pid:[4026531836]": readlink rather than stat, which the shim avoids (glibc_compat.h).
  char link[64] = {};
  if (::readlink("/proc/self/ns/pid", link, sizeof(link) - 1) > 0) {
    if (const char* open = std::strchr(link, '['))
      id.pidns_inode = std::strtoull(open + 1, nullptr, 10);
  }
  id.start_time_ticks = ReadStartTimeTicks();
  return id;
}

std::string ValidateLedgerHeader(const LedgerHeader& h, uint64_t file_bytes) {
  if (h.magic != kLedgerMagic) return "not a tessera ledger (bad magic)";
  if (h.version != kFormatVersion) {
    return "ledger format version " + std::to_string(h.version) + ", this build reads " +
           std::to_string(kFormatVersion);
  }
  if (h.header_size != kLedgerHeaderSize || h.slot_size != kLedgerSlotSize) {
    return "ledger header or slot size differs from this build's";
  }
  if (h.slot_count == 0 || h.slot_count > kMaxLedgerSlots) {
    return "ledger slot count " + std::to_string(h.slot_count) + " outside 1.." +
           std::to_string(kMaxLedgerSlots);
  }
  if (file_bytes < LedgerFileSize(h.slot_count)) {
    return "ledger file is " + std::to_string(file_bytes) + " bytes, its header needs " +
           std::to_string(LedgerFileSize(h.slot_count));
  }
  if (std::memchr(h.gpu_uuid, '\0', sizeof(h.gpu_uuid)) == nullptr) {
    return "ledger GPU UUID is not terminated";
  }
  return "";
}

std::string ValidateLimitsFile(const LimitsFile& l, uint64_t file_bytes) {
  if (file_bytes < kLimitsFileSize) return "limits file shorter than its format";
  if (l.magic != kLimitsMagic) return "not a tessera limits file (bad magic)";
  if (l.version != kFormatVersion) {
    return "limits format version " + std::to_string(l.version) + ", this build reads " +
           std::to_string(kFormatVersion);
  }
  if (l.size != kLimitsFileSize) return "limits file size field differs from this build's";
  if (std::memchr(l.gpu_uuid, '\0', sizeof(l.gpu_uuid)) == nullptr) {
    return "limits GPU UUID is not terminated";
  }
  return "";
}

std::unique_ptr<Ledger> Ledger::Map(int fd, const std::string& path, uint64_t file_bytes,
                                    std::string* error) {
  if (file_bytes < kLedgerHeaderSize) {
    *error = "ledger " + path + " is shorter than its header";
    ::close(fd);
    return nullptr;
  }
  size_t bytes = static_cast<size_t>(file_bytes);
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    *error = Errno("cannot map ledger", path);
    ::close(fd);
    return nullptr;
  }
  auto* header = static_cast<LedgerHeader*>(map);
  // One read of the header into our own copy, validated; the mapping's header is never trusted
  // again. pread, not a copy from the mapping: a file truncated meanwhile reads short instead of
  // raising SIGBUS.
  LedgerHeader copy;
  std::string problem;
  if (::pread(fd, static_cast<void*>(&copy), sizeof(copy), 0) !=
      static_cast<ssize_t>(sizeof(copy))) {
    problem = "its header cannot be read";
  } else {
    problem = ValidateLedgerHeader(copy, bytes);
  }
  if (!problem.empty()) {
    *error = path + ": " + problem;
    ::munmap(map, bytes);
    ::close(fd);
    return nullptr;
  }
  std::unique_ptr<Ledger> ledger(new Ledger());
  ledger->path_ = path;
  ledger->fd_ = fd;
  ledger->map_ = map;
  ledger->map_bytes_ = bytes;
  ledger->header_ = header;
  ledger->shape_.slot_count = copy.slot_count;
  ledger->shape_.file_bytes = bytes;
  ledger->shape_.gpu_uuid = copy.gpu_uuid;  // terminated: validated
  return ledger;
}

std::unique_ptr<Ledger> Ledger::Open(const std::string& path, std::string* error) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    *error = Errno("cannot open ledger", path);
    return nullptr;
  }
  const off_t size = ::lseek(fd, 0, SEEK_END);
  return Map(fd, path, size < 0 ? 0 : static_cast<uint64_t>(size), error);
}

std::unique_ptr<Ledger> Ledger::Private(const std::string& gpu_uuid) {
  size_t bytes = LedgerFileSize(1);
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return nullptr;
  auto* h = static_cast<LedgerHeader*>(map);
  WriteHeader(h, gpu_uuid.substr(0, kUuidBytes - 1), 1);
  std::unique_ptr<Ledger> ledger(new Ledger());
  ledger->shape_.slot_count = 1;
  ledger->shape_.file_bytes = bytes;
  ledger->shape_.gpu_uuid = h->gpu_uuid;
  ledger->path_ = "(private)";
  ledger->map_ = map;
  ledger->map_bytes_ = bytes;
  ledger->header_ = h;
  ledger->private_ = true;
  return ledger;
}

int OpenParentFolder(const std::string& path, std::string* name, std::string* error) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) *error = Errno("cannot open", dir);
  return fd;
}

bool Ledger::Create(const std::string& path, const std::string& gpu_uuid, uint32_t slot_count,
                    std::string* error) {
  std::string name;
  int dir_fd = OpenParentFolder(path, &name, error);
  if (dir_fd < 0) return false;
  bool ok = CreateAt(dir_fd, name, gpu_uuid, slot_count, error);
  ::close(dir_fd);
  return ok;
}

bool Ledger::CreateAt(int dir_fd, const std::string& name, const std::string& gpu_uuid,
                      uint32_t slot_count, std::string* error) {
  if (slot_count == 0 || slot_count > kMaxLedgerSlots) {
    *error = "slot count " + std::to_string(slot_count) + " outside 1.." +
             std::to_string(kMaxLedgerSlots);
    return false;
  }
  if (gpu_uuid.empty() || gpu_uuid.size() >= kUuidBytes) {
    *error = "GPU UUID must have 1.." + std::to_string(kUuidBytes - 1) + " characters";
    return false;
  }
  // Written under a temporary name and published with linkat(2), which fails if the ledger
  // exists: a shim never maps a half-written header, and a live ledger is never replaced. The
  // temporary name is new (O_EXCL) and never a symlink (O_NOFOLLOW), whatever was planted.
  std::string tmp;
  int fd = CreateUniqueAt(dir_fd, "." + name + ".tmp.", 0600, &tmp);
  if (fd < 0) {
    *error = Errno("cannot create a temporary file for", name);
    return false;
  }
  ::fchmod(fd, 0666);  // container processes may run as any user
  uint64_t bytes = LedgerFileSize(slot_count);
  bool ok = ::ftruncate(fd, static_cast<off_t>(bytes)) == 0;
  void* map = ok ? ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  if (map == MAP_FAILED) {
    *error = Errno("cannot size or map", tmp);
    ::close(fd);
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return false;
  }
  WriteHeader(static_cast<LedgerHeader*>(map), gpu_uuid, slot_count);
  ::munmap(map, bytes);
  ::close(fd);
  if (::linkat(dir_fd, tmp.c_str(), dir_fd, name.c_str(), 0) != 0) {
    *error = Errno("cannot publish ledger", name);
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return false;
  }
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  return true;
}

Ledger::~Ledger() {
  Release();
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  if (fd_ >= 0) ::close(fd_);
}

LedgerSlot* Ledger::SlotAt(uint32_t i) const {
  return reinterpret_cast<LedgerSlot*>(static_cast<char*>(map_) + LockOffset(i));
}

bool Ledger::TryLock(uint32_t i) const {
  if (private_) return true;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(LockOffset(i));
  fl.l_len = 1;
  return ::fcntl(fd_, F_OFD_SETLK, &fl) == 0;
}

bool Ledger::TryReadLock(uint32_t i) const {
  if (private_) return true;
  struct flock fl {};
  fl.l_type = F_RDLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(LockOffset(i));
  fl.l_len = 1;
  return ::fcntl(fd_, F_OFD_SETLK, &fl) == 0;
}

void Ledger::Unlock(uint32_t i) const {
  if (private_) return;
  struct flock fl {};
  fl.l_type = F_UNLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(LockOffset(i));
  fl.l_len = 1;
  ::fcntl(fd_, F_OFD_SETLK, &fl);
}

void Ledger::InitSlot(uint32_t i, const ProcessIdentity& me) {
  LedgerSlot* s = SlotAt(i);
  s->used_bytes.store(0, std::memory_order_seq_cst);
  s->peak_bytes.store(0, std::memory_order_relaxed);
  s->pid.store(me.pid, std::memory_order_relaxed);
  s->pidns_inode.store(me.pidns_inode, std::memory_order_relaxed);
  s->start_time_ticks.store(me.start_time_ticks, std::memory_order_relaxed);
  s->host_pid.store(0, std::memory_order_relaxed);
  s->claimed_at_unix_ns.store(UnixNowNs(), std::memory_order_relaxed);
  s->state.store(kSlotLive, std::memory_order_seq_cst);
  header_->live_bitmap[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_seq_cst);
  slot_ = s;
  slot_index_ = static_cast<int>(i);
}

void Ledger::FreeSlot(uint32_t i, LedgerSlot* s) {
  header_->live_bitmap[i / 64].fetch_and(~(uint64_t{1} << (i % 64)), std::memory_order_seq_cst);
  s->state.store(kSlotFree, std::memory_order_seq_cst);
  s->used_bytes.store(0, std::memory_order_seq_cst);
  s->share_key.store(0, std::memory_order_relaxed);
}

int Ledger::CreateShared(uint64_t key, uint64_t bytes) {
  if (private_ || slot_ == nullptr || key == 0) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t n = shape_.slot_count;
  const uint32_t start = header_->claim_hint.fetch_add(1, std::memory_order_relaxed) % n;
  for (uint32_t k = 0; k < n; ++k) {
    uint32_t i = (start + k) % n;
    LedgerSlot* s = SlotAt(i);
    if (s->state.load(std::memory_order_acquire) != kSlotFree || !TryLock(i)) continue;
    if (s->state.load(std::memory_order_acquire) != kSlotFree) {  // taken meanwhile
      Unlock(i);
      continue;
    }
    // Filled in under the write lock, then held like any holder's (a read lock; the conversion
    // is atomic, so no one can take it as unheld in between).
    s->used_bytes.store(bytes, std::memory_order_seq_cst);
    s->peak_bytes.store(bytes, std::memory_order_relaxed);
    s->pid.store(0, std::memory_order_relaxed);
    s->pidns_inode.store(0, std::memory_order_relaxed);
    s->start_time_ticks.store(0, std::memory_order_relaxed);
    s->host_pid.store(0, std::memory_order_relaxed);
    s->claimed_at_unix_ns.store(UnixNowNs(), std::memory_order_relaxed);
    s->share_key.store(key, std::memory_order_relaxed);
    s->state.store(kSlotShared, std::memory_order_seq_cst);
    header_->live_bitmap[i / 64].fetch_or(uint64_t{1} << (i % 64), std::memory_order_seq_cst);
    TryReadLock(i);
    ++held_[i];
    // The bytes count in the shared slot now: take them off the own slot (briefly counted twice,
    // which errs on the side of refusing).
    uint64_t cur = slot_->used_bytes.load(std::memory_order_relaxed);
    uint64_t next;
    do {
      next = cur >= bytes ? cur - bytes : 0;
    } while (!slot_->used_bytes.compare_exchange_weak(cur, next, std::memory_order_seq_cst));
    return static_cast<int>(i);
  }
  return -1;
}

int Ledger::JoinShared(uint64_t key, uint64_t* bytes) {
  if (private_ || slot_ == nullptr || key == 0) return -1;
  std::lock_guard<std::mutex> lock(mu_);
  const uint32_t n = shape_.slot_count;
  for (uint32_t i = 0; i < n; ++i) {
    LedgerSlot* s = SlotAt(i);
    if (s->state.load(std::memory_order_acquire) != kSlotShared ||
        s->share_key.load(std::memory_order_acquire) != key) {
      continue;
    }
    if (held_.count(i) == 0) {
      // A reclaimer testing whether anyone holds it has it write-locked for an instant.
      bool locked = false;
      for (int attempt = 0; attempt < 64 && !(locked = TryReadLock(i)); ++attempt) sched_yield();
      if (!locked) continue;
      // Freed (and perhaps reused) before the lock: not this allocation any more.
      if (s->state.load(std::memory_order_acquire) != kSlotShared ||
          s->share_key.load(std::memory_order_acquire) != key) {
        Unlock(i);
        continue;
      }
    }
    ++held_[i];
    *bytes = s->used_bytes.load(std::memory_order_seq_cst);
    return static_cast<int>(i);
  }
  return -1;
}

void Ledger::LeaveShared(int index) {
  if (private_ || index < 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(static_cast<uint32_t>(index));
  if (it == held_.end()) return;
  if (--it->second > 0) return;
  held_.erase(it);
  Unlock(static_cast<uint32_t>(index));
  FreeSharedIfUnheld(static_cast<uint32_t>(index));
}

void Ledger::FreeSharedIfUnheld(uint32_t i) {
  if (!TryLock(i)) return;  // another process still holds it
  LedgerSlot* s = SlotAt(i);
  if (s->state.load(std::memory_order_acquire) == kSlotShared) FreeSlot(i, s);
  Unlock(i);
}

bool Ledger::Claim(const ProcessIdentity& me, std::string* error) {
  if (observer_) {
    *error = "an observer of " + path_ + " does not claim slots";
    return false;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (slot_ != nullptr) return true;
  const uint32_t n = shape_.slot_count;
  const uint32_t start = header_->claim_hint.fetch_add(1, std::memory_order_relaxed) % n;
  // First pass: free slots only (one lock attempt each, usually the first one succeeds).
  // Second pass: any slot whose lock is free, i.e. whose owner died without giving it back.
  for (int pass = 0; pass < 2; ++pass) {
    for (uint32_t k = 0; k < n; ++k) {
      uint32_t i = (start + k) % n;
      LedgerSlot* s = SlotAt(i);
      if (pass == 0 && s->state.load(std::memory_order_acquire) != kSlotFree) continue;
      if (held_.count(i) != 0 || !TryLock(i)) continue;
      if (s->state.load(std::memory_order_acquire) != kSlotFree) {  // a dead process's, or unheld
        uint64_t bytes = s->used_bytes.load(std::memory_order_seq_cst);
        FreeSlot(i, s);
        header_->reclaimed_slots.fetch_add(1, std::memory_order_relaxed);
        header_->reclaimed_bytes.fetch_add(bytes, std::memory_order_relaxed);
      }
      InitSlot(i, me);
      return true;
    }
  }
  *error = "all " + std::to_string(n) + " process slots of " + path_ +
           " are held by living processes (the agent sizes the ledger)";
  return false;
}

uint64_t Ledger::Used() const {
  const uint32_t n = shape_.slot_count;
  const uint32_t words = (n + 63) / 64;
  uint64_t sum = 0;
  for (uint32_t w = 0; w < words; ++w) {
    uint64_t bits = header_->live_bitmap[w].load(std::memory_order_seq_cst);
    while (bits != 0) {
      uint32_t i = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      if (i < n) sum += SlotAt(i)->used_bytes.load(std::memory_order_seq_cst);
    }
  }
  return sum;
}

uint64_t Ledger::OwnUsed() const {
  return slot_ == nullptr ? 0 : slot_->used_bytes.load(std::memory_order_relaxed);
}

bool Ledger::TryCharge(uint64_t bytes, uint64_t limit) {
  if (slot_ == nullptr) return false;
  if (limit == 0) {
    ForceCharge(bytes);
    return true;
  }
  if (bytes > limit) {
    header_->oom_count.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  bool reclaimed = false;
  for (int attempt = 0; attempt < 16; ++attempt) {
    uint64_t mine = slot_->used_bytes.fetch_add(bytes, std::memory_order_seq_cst) + bytes;
    uint64_t total = Used();
    if (total <= limit) {
      FetchMax(slot_->peak_bytes, mine);
      FetchMax(header_->peak_used_bytes, total);
      return true;
    }
    slot_->used_bytes.fetch_sub(bytes, std::memory_order_seq_cst);
    if (Used() + bytes <= limit) {  // another process's reservation was in flight
      sched_yield();
      continue;
    }
    if (!reclaimed) {
      reclaimed = true;
      if (ReclaimDead().slots > 0) continue;
    }
    break;
  }
  header_->oom_count.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void Ledger::ForceCharge(uint64_t bytes) {
  if (slot_ == nullptr) return;
  uint64_t mine = slot_->used_bytes.fetch_add(bytes, std::memory_order_seq_cst) + bytes;
  FetchMax(slot_->peak_bytes, mine);
}

void Ledger::Uncharge(uint64_t bytes) {
  if (slot_ == nullptr) return;
  uint64_t cur = slot_->used_bytes.load(std::memory_order_relaxed);
  uint64_t next;
  do {
    next = cur >= bytes ? cur - bytes : 0;
  } while (!slot_->used_bytes.compare_exchange_weak(cur, next, std::memory_order_seq_cst));
}

ReclaimResult Ledger::ReclaimDead() {
  if (private_) return {};
  if (observer_) return ReclaimDeadLocked();  // no own slot, and the caller serialises
  std::lock_guard<std::mutex> lock(mu_);
  return ReclaimDeadLocked();
}

ReclaimResult Ledger::ReclaimDeadLocked() {
  ReclaimResult result;
  const uint32_t n = shape_.slot_count;
  const uint32_t words = (n + 63) / 64;
  for (uint32_t w = 0; w < words; ++w) {
    uint64_t bits = header_->live_bitmap[w].load(std::memory_order_seq_cst);
    while (bits != 0) {
      uint32_t i = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      bits &= bits - 1;
      // Our own descriptor would be granted our own slot's lock (and would turn a shared slot's
      // read lock of ours into a write lock): never test those.
      if (i >= n || static_cast<int>(i) == slot_index_ || held_.count(i) != 0) continue;
      if (!TryLock(i)) continue;  // its owner is alive, or someone holds the shared allocation
      LedgerSlot* s = SlotAt(i);
      if (s->state.load(std::memory_order_acquire) != kSlotFree) {
        uint64_t bytes = s->used_bytes.load(std::memory_order_seq_cst);
        FreeSlot(i, s);
        ++result.slots;
        result.bytes += bytes;
      } else {
        // A live bit on a free slot whose lock nobody holds was not set by the protocol (a
        // claim takes the lock before it sets the bit): it names no process.
        FreeSlot(i, s);
      }
      Unlock(i);
    }
  }
  if (result.slots > 0) {
    header_->reclaimed_slots.fetch_add(result.slots, std::memory_order_relaxed);
    header_->reclaimed_bytes.fetch_add(result.bytes, std::memory_order_relaxed);
  }
  return result;
}

std::vector<SlotInfo> Ledger::Slots(bool check_alive) const {
  // This process's holds of shared slots (held_) are read under mu_; CopySlots alone is for the
  // agent, which holds none (and must not take a lock under its SIGBUS guard).
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SlotInfo> out(shape_.slot_count);
  out.resize(CopySlots(out.data(), static_cast<uint32_t>(out.size()), check_alive));
  return out;
}

uint32_t Ledger::CopySlots(SlotInfo* out, uint32_t capacity, bool check_alive) const {
  uint32_t count = 0;
  const uint32_t n = shape_.slot_count;
  const uint32_t words = (n + 63) / 64;
  // Word by word, as ReclaimDeadLocked: a pod's few live slots cost a few loads, not one per slot.
  for (uint32_t w = 0; w < words && count < capacity; ++w) {
    uint64_t bits = header_->live_bitmap[w].load(std::memory_order_acquire);
    for (; bits != 0 && count < capacity; bits &= bits - 1) {
      const uint32_t i = w * 64 + static_cast<uint32_t>(__builtin_ctzll(bits));
      if (i >= n) break;  // bits past the slots this process validated name nothing
      const LedgerSlot* s = SlotAt(i);
      SlotInfo& info = out[count++];
      info = SlotInfo{};
      info.index = i;
      info.pid = s->pid.load(std::memory_order_relaxed);
      info.pidns_inode = s->pidns_inode.load(std::memory_order_relaxed);
      info.start_time_ticks = s->start_time_ticks.load(std::memory_order_relaxed);
      info.host_pid = s->host_pid.load(std::memory_order_relaxed);
      info.used_bytes = s->used_bytes.load(std::memory_order_relaxed);
      info.peak_bytes = s->peak_bytes.load(std::memory_order_relaxed);
      info.claimed_at_unix_ns = s->claimed_at_unix_ns.load(std::memory_order_relaxed);
      info.shared = s->state.load(std::memory_order_relaxed) == kSlotShared;
      if (check_alive) {
        if (private_ || static_cast<int>(i) == slot_index_ || held_.count(i) != 0) {
          info.alive = true;
        } else {
          struct flock fl {};
          fl.l_type = F_WRLCK;
          fl.l_whence = SEEK_SET;
          fl.l_start = static_cast<off_t>(LockOffset(i));
          fl.l_len = 1;
          info.alive = ::fcntl(fd_, F_OFD_GETLK, &fl) == 0 && fl.l_type != F_UNLCK;
        }
      }
    }
  }
  return count;
}

bool Ledger::IsLive(uint32_t i) const {
  return (header_->live_bitmap[i / 64].load(std::memory_order_acquire) &
          (uint64_t{1} << (i % 64))) != 0;
}

void Ledger::SetHostPid(uint32_t slot, uint32_t host_pid) {
  if (slot < shape_.slot_count) SlotAt(slot)->host_pid.store(host_pid, std::memory_order_relaxed);
}

void Ledger::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [index, holds] : held_) {
    Unlock(index);
    FreeSharedIfUnheld(index);
  }
  held_.clear();
  if (slot_ == nullptr) return;
  FreeSlot(static_cast<uint32_t>(slot_index_), slot_);
  Unlock(static_cast<uint32_t>(slot_index_));
  slot_ = nullptr;
  slot_index_ = -1;
}

void Ledger::AbandonAfterFork() {
  slot_ = nullptr;
  slot_index_ = -1;
  held_.clear();  // the parent's holds (its descriptor's locks)
  if (fd_ >= 0) {
    ::close(fd_);  // the parent's open file description keeps the parent's lock
    fd_ = -1;
  }
}

bool Ledger::ReopenAfterFork(std::string* error) {
  if (private_ || fd_ >= 0) return true;
  fd_ = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  if (fd_ < 0) {
    *error = Errno("cannot reopen ledger", path_);
    return false;
  }
  return true;
}

}  // namespace tessera::shim
