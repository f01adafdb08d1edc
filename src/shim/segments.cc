#include "shim/segments.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "shim/bus_guard.h"
#include "shim/contract.h"
#include "shim/files_at.h"

namespace tessera::shim {
namespace {

bool HasSuffix(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

absl::Status CheckUuid(const std::string& uuid) {
  if (uuid.empty() || uuid.size() >= kUuidBytes || uuid.find('/') != std::string::npos ||
      uuid[0] == '.') {
    return absl::InvalidArgumentError(
        absl::StrCat("GPU UUID '", uuid, "' is not usable as a file name"));
  }
  return absl::OkStatus();
}

std::string LedgerName(const std::string& uuid) { return uuid + contract::kLedgerSuffix; }
std::string LimitsName(const std::string& uuid) { return uuid + contract::kLimitsSuffix; }

// True when `name` in `dir_fd` exists in any form (a symlink included).
bool Exists(int dir_fd, const std::string& name) {
  struct stat st {};
  return ::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

// True when the folder open on `dir_fd` has no entry.
bool IsEmptyFolder(int dir_fd) {
  int listing = ::dup(dir_fd);
  DIR* d = listing >= 0 ? ::fdopendir(listing) : nullptr;
  if (d == nullptr) {
    if (listing >= 0) ::close(listing);
    return false;
  }
  bool empty = true;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) empty = false;
  }
  ::closedir(d);
  return empty;
}

// Puts the fixed part of a ledger's header back and gives the file the length of `slots` slots:
// for a file already checked to be a regular file the agent owns (OpenFileAt).
absl::Status RewriteLedgerHeader(int fd, const std::string& uuid, uint32_t slots,
                                 const std::string& path) {
  LedgerHeader fresh{};
  fresh.magic = kLedgerMagic;
  fresh.version = kFormatVersion;
  fresh.header_size = kLedgerHeaderSize;
  fresh.slot_size = kLedgerSlotSize;
  fresh.slot_count = slots;
  std::memcpy(fresh.gpu_uuid, uuid.data(), std::min<size_t>(uuid.size(), kUuidBytes - 1));
  const size_t fixed = offsetof(LedgerHeader, claim_hint);
  if (::ftruncate(fd, static_cast<off_t>(LedgerFileSize(slots))) != 0 ||
      ::pwrite(fd, static_cast<const void*>(&fresh), fixed, 0) != static_cast<ssize_t>(fixed)) {
    return absl::InternalError(
        absl::StrCat("cannot put back the header of ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Room for `n` slots, allocated before the SIGBUS guard that fills it (a fault inside the guard
// must not unwind out of an allocation). One buffer per thread, grown and never zeroed: the agent
// reads every pod's ledgers every 250 ms (and /metrics reads them from another thread), and
// CopySlots writes each entry it returns whole.
std::span<SlotInfo> SlotScratch(uint32_t n) {
  thread_local std::vector<SlotInfo> scratch;
  if (scratch.size() < n) scratch.resize(n);
  return std::span<SlotInfo>(scratch.data(), n);
}

}  // namespace

uint64_t LedgerFolderBytes(uint32_t ledgers, uint32_t slots) {
  const uint64_t page = 4096;
  return uint64_t{ledgers} * ((LedgerFileSize(slots) + page - 1) / page * page);
}

SegmentPaths PathsFor(const std::string& pod_dir, const std::string& gpu_uuid) {
  return {absl::StrCat(pod_dir, "/", contract::kLimitsSubdir, "/", LimitsName(gpu_uuid)),
          absl::StrCat(pod_dir, "/", contract::kLedgerSubdir, "/", LedgerName(gpu_uuid))};
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Create(const std::string& pod_dir,
                                                         const std::string& gpu_uuid,
                                                         const SegmentOptions& options) {
  if (absl::Status s = CheckUuid(gpu_uuid); !s.ok()) return s;
  if (std::string problem = ValidateShareLimits(options.limits); !problem.empty()) {
    return absl::InvalidArgumentError(problem);
  }
  if (options.slots == 0 || options.slots > kMaxLedgerSlots) {
    return absl::InvalidArgumentError(
        absl::StrCat("ledger slots ", options.slots, " outside 1..", kMaxLedgerSlots));
  }
  // The folders are the agent's (0755): containers get the files mounted, never the folders, so
  // no container creates a name here (src/agent/README.md, "What a container can write").
  absl::StatusOr<Fd> pod = MakeDirs(pod_dir, 0755);
  if (!pod.ok()) return pod.status();
  absl::StatusOr<Fd> limits_dir = MakeDirAt(pod->get(), contract::kLimitsSubdir, 0755,
                                            absl::StrCat(pod_dir, "/", contract::kLimitsSubdir));
  if (!limits_dir.ok()) return limits_dir.status();
  const std::string ledger_path = absl::StrCat(pod_dir, "/", contract::kLedgerSubdir);
  absl::StatusOr<Fd> ledger_dir = MakeDirAt(pod->get(), contract::kLedgerSubdir, 0755, ledger_path);
  if (!ledger_dir.ok()) return ledger_dir.status();
  // Sized when it is made: a folder that already holds ledgers (a pod an agent of the earlier
  // layout started, whose containers map those files) keeps them where they are.
  if (options.ledger_folder_bytes > 0 && !IsMountPointAt(pod->get(), contract::kLedgerSubdir) &&
      IsEmptyFolder(ledger_dir->get())) {
    if (absl::Status s = MountSizedTmpfsAt(pod->get(), contract::kLedgerSubdir,
                                           options.ledger_folder_bytes, ledger_path);
        !s.ok()) {
      return s;
    }
    ledger_dir = OpenDirAt(pod->get(), contract::kLedgerSubdir, ledger_path);  // the tmpfs
    if (!ledger_dir.ok()) return ledger_dir.status();
  }
  SegmentPaths paths = PathsFor(pod_dir, gpu_uuid);
  std::string error;
  if (!Exists(limits_dir->get(), LimitsName(gpu_uuid)) &&
      !LimitsMap::CreateAt(limits_dir->get(), LimitsName(gpu_uuid), gpu_uuid, options.pod_uid,
                           options.limits, &error)) {
    return absl::InternalError(error);
  }
  // A ledger name that is not a regular file the agent owns (a symlink or anything else a
  // container of an earlier layout planted in a folder it could write) is removed, never
  // followed, and reported; then the ledger is made anew.
  std::string tampered;
  if (Exists(ledger_dir->get(), LedgerName(gpu_uuid))) {
    absl::StatusOr<Fd> f =
        OpenFileAt(ledger_dir->get(), LedgerName(gpu_uuid), O_RDONLY, paths.ledger);
    if (!f.ok()) {
      tampered = std::string(f.status().message());
      if (absl::Status s = RemoveTreeAt(ledger_dir->get(), LedgerName(gpu_uuid), paths.ledger);
          !s.ok()) {
        return s;
      }
    }
  }
  if (!Exists(ledger_dir->get(), LedgerName(gpu_uuid)) &&
      !Ledger::CreateAt(ledger_dir->get(), LedgerName(gpu_uuid), gpu_uuid, options.slots, &error)) {
    return absl::InternalError(error);
  }
  absl::StatusOr<Fd> limits_fd =
      OpenFileAt(limits_dir->get(), LimitsName(gpu_uuid), O_RDWR, paths.limits);
  if (!limits_fd.ok()) return limits_fd.status();
  auto limits = LimitsMap::MapFd(limits_fd->get(), paths.limits, /*writable=*/true, &error);
  if (limits == nullptr) return absl::NotFoundError(error);
  auto ledger = ObserveLedger(ledger_dir->get(), LedgerName(gpu_uuid), paths.ledger, gpu_uuid,
                              options.slots, &tampered, &error);
  if (ledger == nullptr) return absl::FailedPreconditionError(error);
  if (limits->gpu_uuid() != gpu_uuid) {
    return absl::FailedPreconditionError(
        absl::StrCat(paths.limits, " names another GPU (", limits->gpu_uuid(), ")"));
  }
  std::unique_ptr<Segment> segment(new Segment());
  segment->pod_dir_ = pod_dir;
  segment->gpu_uuid_ = gpu_uuid;
  segment->limits_ = std::move(limits);
  segment->ledger_ = std::move(ledger);
  segment->pending_tampered_ = std::move(tampered);
  if (absl::Status s = segment->Update(options.limits); !s.ok()) return s;
  return segment;
}

std::unique_ptr<Ledger> Segment::ObserveLedger(int ledger_dir_fd, const std::string& name,
                                               const std::string& path, const std::string& uuid,
                                               uint32_t slots, std::string* tampered,
                                               std::string* error) {
  auto ledger = Ledger::Observe(ledger_dir_fd, name, path, error);
  if (ledger != nullptr && ledger->shape().gpu_uuid == uuid &&
      (slots == 0 || ledger->shape().slot_count == slots)) {
    return ledger;
  }
  if (ledger != nullptr) {
    *error = ledger->shape().gpu_uuid != uuid
                 ? absl::StrCat(path, " names another GPU")
                 : absl::StrCat(path, " has ", ledger->shape().slot_count, " slots, not ", slots);
  }
  if (slots == 0) return nullptr;
  // A regular file the agent owns whose header is broken: the pod's processes rewrote it while
  // no agent watched. Its header is put back; a file of any other kind is never touched.
  absl::StatusOr<Fd> f = OpenFileAt(ledger_dir_fd, name, O_RDWR, path);
  if (!f.ok()) return nullptr;
  if (!RewriteLedgerHeader(f->get(), uuid, slots, path).ok()) return nullptr;
  *tampered = absl::StrCat(tampered->empty() ? "" : absl::StrCat(*tampered, "; "), *error);
  return Ledger::Observe(ledger_dir_fd, name, path, error);
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Open(const std::string& pod_dir,
                                                       const std::string& gpu_uuid) {
  if (absl::Status s = CheckUuid(gpu_uuid); !s.ok()) return s;
  SegmentPaths paths = PathsFor(pod_dir, gpu_uuid);
  Fd pod(::open(pod_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!pod.valid()) {
    return absl::NotFoundError(absl::StrCat("cannot open ", pod_dir, ": ", std::strerror(errno)));
  }
  absl::StatusOr<Fd> limits_dir = OpenDirAt(pod.get(), contract::kLimitsSubdir,
                                            absl::StrCat(pod_dir, "/", contract::kLimitsSubdir));
  if (!limits_dir.ok()) return limits_dir.status();
  absl::StatusOr<Fd> ledger_dir = OpenDirAt(pod.get(), contract::kLedgerSubdir,
                                            absl::StrCat(pod_dir, "/", contract::kLedgerSubdir));
  if (!ledger_dir.ok()) return ledger_dir.status();
  absl::StatusOr<Fd> limits_fd =
      OpenFileAt(limits_dir->get(), LimitsName(gpu_uuid), O_RDWR, paths.limits);
  if (!limits_fd.ok()) return limits_fd.status();
  std::string error;
  auto limits = LimitsMap::MapFd(limits_fd->get(), paths.limits, /*writable=*/true, &error);
  if (limits == nullptr) return absl::NotFoundError(error);
  std::string tampered;
  auto ledger = ObserveLedger(ledger_dir->get(), LedgerName(gpu_uuid), paths.ledger, gpu_uuid,
                              /*slots=*/0, &tampered, &error);
  if (ledger == nullptr) return absl::NotFoundError(error);
  if (limits->gpu_uuid() != gpu_uuid) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment files for ", gpu_uuid, " in ", pod_dir,
                     " name another GPU (limits: ", limits->gpu_uuid(), ")"));
  }
  std::unique_ptr<Segment> segment(new Segment());
  segment->pod_dir_ = pod_dir;
  segment->gpu_uuid_ = gpu_uuid;
  segment->limits_ = std::move(limits);
  segment->ledger_ = std::move(ledger);
  return segment;
}

absl::Status Segment::Update(const ShareLimits& limits) {
  if (std::string problem = ValidateShareLimits(limits); !problem.empty()) {
    return absl::InvalidArgumentError(problem);
  }
  limits_->Update(limits);
  return absl::OkStatus();
}

void Segment::SetSchedule(uint32_t duty_permille, uint32_t phase_permille) {
  limits_->SetSchedule(duty_permille, phase_permille);
}

SegmentInfo Segment::Inspect() const {
  SegmentInfo info;
  const LimitsFile& f = limits_->file();
  info.gpu_uuid = f.gpu_uuid;
  info.pod_uid = f.pod_uid;
  info.limits.memory_limit_bytes = f.memory_limit_bytes.load();
  info.limits.compute_limit_permille = f.compute_limit_permille.load();
  info.limits.compute_mode = static_cast<ComputeMode>(f.compute_mode.load());
  info.limits.period_us = f.period_us.load();
  info.duty_permille = f.duty_permille.load();
  info.phase_permille = f.phase_permille.load();
  info.slots = ledger_->slot_count();
  // Everything read from the ledger is read inside the guard into memory allocated before it.
  const std::span<SlotInfo> slots = SlotScratch(ledger_->slot_count());
  uint32_t count = 0;
  const LedgerHeader* h = ledger_->header();
  (void)RunCatchingBusErrors([&] {
    info.peak_used_bytes = h->peak_used_bytes.load();
    info.oom_count = h->oom_count.load();
    info.reclaimed_slots = h->reclaimed_slots.load();
    info.reclaimed_bytes = h->reclaimed_bytes.load();
    info.gate_wait_ns = h->gate_wait_ns.load();
    info.gated_launches = h->gated_launches.load();
    info.gpu_busy_ns = h->gpu_busy_ns.load();
    count = ledger_->CopySlots(slots.data(), static_cast<uint32_t>(slots.size()), true);
  });
  for (uint32_t i = 0; i < count; ++i) {
    const SlotInfo& s = slots[i];
    // The sum saturates: the slots' values are whatever the pod's processes wrote.
    info.used_bytes = info.used_bytes + s.used_bytes < info.used_bytes
                          ? UINT64_MAX
                          : info.used_bytes + s.used_bytes;
    if (s.shared) {  // an allocation several processes hold (Ledger::CreateShared)
      info.shared_bytes = info.shared_bytes + s.used_bytes < info.shared_bytes
                              ? UINT64_MAX
                              : info.shared_bytes + s.used_bytes;
      continue;
    }
    ProcessUsage p;
    p.slot = s.index;
    p.pid = s.pid;
    p.pidns_inode = s.pidns_inode;
    // The host PID the agent resolved for this slot's identity, never the one the slot claims.
    if (auto r = resolved_.find(s.index);
        r != resolved_.end() && r->second.pid == s.pid && r->second.pidns_inode == s.pidns_inode) {
      p.host_pid = r->second.host_pid;
    }
    p.used_bytes = s.used_bytes;
    p.peak_bytes = s.peak_bytes;
    p.alive = s.alive;
    info.processes.push_back(p);
  }
  return info;
}

std::optional<uint64_t> Segment::GpuBusyNs() const {
  uint64_t ns = 0;
  const LedgerHeader* h = ledger_->header();
  if (!RunCatchingBusErrors([&] { ns = h->gpu_busy_ns.load(); })) return std::nullopt;
  return ns;
}

std::string Segment::CheckAndRestoreHeader() {
  const uint64_t bytes = ledger_->FileBytesNow();
  LedgerHeader now;
  bool read = bytes == ledger_->shape().file_bytes &&
              RunCatchingBusErrors([&] { ledger_->CopyHeader(&now); });
  std::string change = read ? DescribeHeaderChange(ledger_->shape(), now, bytes)
                            : (bytes == ledger_->shape().file_bytes
                                   ? std::string("the file was truncated while the agent read it")
                                   : DescribeHeaderChange(ledger_->shape(), LedgerHeader{}, bytes));
  if (change.empty()) return change;
  std::string error;
  bool restored = false;
  if (!RunCatchingBusErrors([&] { restored = ledger_->RestoreHeader(&error); })) {
    error = "the file was truncated again while the agent restored it";
  }
  if (!restored) change += absl::StrCat(" (not restored: ", error, ")");
  return change;
}

ReapResult Segment::Reap(const std::string& proc_root) {
  HostPidIndex index(proc_root);
  return Reap([&index](uint64_t inode, uint32_t pid) { return index.Find(inode, pid); });
}

ReapResult Segment::Reap(const HostPidLookup& lookup) {
  ReapResult result;
  result.tampered = std::exchange(pending_tampered_, "");
  if (std::string change = CheckAndRestoreHeader(); !change.empty()) {
    result.tampered =
        result.tampered.empty() ? change : absl::StrCat(result.tampered, "; ", change);
  }
  const std::span<SlotInfo> slots = SlotScratch(ledger_->slot_count());
  uint32_t count = 0;
  ReclaimResult r;
  if (!RunCatchingBusErrors([&] {
        r = ledger_->ReclaimDead();
        count = ledger_->CopySlots(slots.data(), static_cast<uint32_t>(slots.size()), false);
      })) {
    std::string change = CheckAndRestoreHeader();
    result.tampered =
        absl::StrCat(result.tampered, result.tampered.empty() ? "" : "; ",
                     change.empty() ? "the file was truncated while the agent read it" : change);
  }
  result.slots = r.slots;
  result.bytes = r.bytes;
  std::map<uint32_t, Resolved> resolved;
  for (uint32_t i = 0; i < count; ++i) {
    const SlotInfo& s = slots[i];
    if (s.shared) continue;  // an allocation, not a process: no host PID
    auto known = resolved_.find(s.index);
    if (known != resolved_.end() && known->second.pid == s.pid &&
        known->second.pidns_inode == s.pidns_inode &&
        (known->second.host_pid != 0 || --known->second.retry_in > 0)) {
      resolved[s.index] = known->second;
      continue;
    }
    Resolved now{s.pid, s.pidns_inode, 0, kLookupRetryReaps};
    if (std::optional<uint32_t> host = lookup(s.pidns_inode, s.pid)) {
      now.host_pid = *host;
      ++result.resolved;
      // Informational for whoever reads the slot; the agent keeps its own copy.
      (void)RunCatchingBusErrors([&] { ledger_->SetHostPid(s.index, *host); });
    }
    resolved[s.index] = now;
  }
  resolved_ = std::move(resolved);
  return result;
}

absl::StatusOr<std::vector<std::string>> ListSegments(const std::string& pod_dir) {
  std::string dir = absl::StrCat(pod_dir, "/", contract::kLimitsSubdir);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", std::strerror(errno)));
  }
  std::vector<std::string> out;
  const std::string suffix = contract::kLimitsSuffix;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (HasSuffix(name, suffix)) out.push_back(name.substr(0, name.size() - suffix.size()));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::vector<std::string>> ListPodDirs(const std::string& root) {
  DIR* d = ::opendir(root.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return absl::InternalError(absl::StrCat("cannot list ", root, ": ", std::strerror(errno)));
  }
  std::vector<std::string> out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string path = absl::StrCat(root, "/", e->d_name);
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) out.push_back(path);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

absl::Status RemovePodSegments(const std::string& pod_dir) {
  Fd pod(::open(pod_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!pod.valid()) {
    if (errno == ENOENT) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("cannot open ", pod_dir, ": ", std::strerror(errno)));
  }
  for (const char* sub : {contract::kLimitsSubdir, contract::kLedgerSubdir}) {
    const std::string path = absl::StrCat(pod_dir, "/", sub);
    if (absl::Status s = UnmountAt(pod.get(), sub, path); !s.ok()) return s;
    if (absl::Status s = RemoveTreeAt(pod.get(), sub, path); !s.ok()) return s;
  }
  if (::rmdir(pod_dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY) {
    return absl::InternalError(absl::StrCat("cannot remove ", pod_dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::vector<uint32_t> ParseNsPids(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.substr(0, 6) != "NSpid:") continue;
    std::vector<uint32_t> pids;
    size_t p = 6;
    while (p < line.size()) {
      while (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;
      if (p >= line.size()) break;
      uint64_t v = 0;
      size_t digits = 0;
      for (; p < line.size() && line[p] >= '0' && line[p] <= '9'; ++p) {
        if (++digits > 10) return {};
        v = v * 10 + static_cast<uint64_t>(line[p] - '0');
      }
      if (digits == 0 || v == 0 || v > UINT32_MAX || pids.size() >= 64) return {};
      pids.push_back(static_cast<uint32_t>(v));
    }
    return pids;
  }
  return {};
}

std::optional<uint32_t> HostPidIndex::Find(uint64_t pidns_inode, uint32_t ns_pid) {
  if (!scanned_) {
    scanned_ = true;
    DIR* d = ::opendir(proc_root_.c_str());
    if (d != nullptr) {
      while (dirent* e = ::readdir(d)) {
        char* end = nullptr;
        const unsigned long pid = std::strtoul(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || pid == 0 || pid > UINT32_MAX) continue;
        const std::string base = absl::StrCat(proc_root_, "/", e->d_name);
        // readlink, not stat: "pid:[4026531836]".
        char link[64] = {};
        if (::readlink(absl::StrCat(base, "/ns/pid").c_str(), link, sizeof(link) - 1) <= 0) {
          continue;
        }
        const char* open = std::strchr(link, '[');
        if (open == nullptr) continue;
        const uint64_t inode = std::strtoull(open + 1, nullptr, 10);
        char status[4096];
        int fd = ::open(absl::StrCat(base, "/status").c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        const ssize_t n = ::read(fd, status, sizeof(status));
        ::close(fd);
        if (n <= 0) continue;
        std::vector<uint32_t> ns_pids =
            ParseNsPids(std::string_view(status, static_cast<size_t>(n)));
        if (!ns_pids.empty()) pids_[{inode, ns_pids.back()}] = static_cast<uint32_t>(pid);
      }
      ::closedir(d);
    }
  }
  auto it = pids_.find({pidns_inode, ns_pid});
  if (it == pids_.end()) return std::nullopt;
  return it->second;
}

std::optional<uint32_t> ResolveHostPid(uint64_t pidns_inode, uint32_t ns_pid,
                                       const std::string& proc_root) {
  return HostPidIndex(proc_root).Find(pidns_inode, ns_pid);
}

}  // namespace tessera::shim
