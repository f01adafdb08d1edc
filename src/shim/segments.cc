#include "shim/segments.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "shim/contract.h"

namespace tessera::shim {
namespace {

// mkdir -p; `mode` for the last component.
absl::Status MakeDir(const std::string& path, mode_t mode) {
  for (size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    std::string parent = path.substr(0, pos);
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(
          absl::StrCat("cannot create ", parent, ": ", std::strerror(errno)));
    }
  }
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) {
    return absl::InternalError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  ::chmod(path.c_str(), mode);
  return absl::OkStatus();
}

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

}  // namespace

SegmentPaths PathsFor(const std::string& pod_dir, const std::string& gpu_uuid) {
  return {
      absl::StrCat(pod_dir, "/", contract::kLimitsSubdir, "/", gpu_uuid, contract::kLimitsSuffix),
      absl::StrCat(pod_dir, "/", contract::kLedgerSubdir, "/", gpu_uuid, contract::kLedgerSuffix)};
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
  if (absl::Status s = MakeDir(pod_dir, 0755); !s.ok()) return s;
  if (absl::Status s = MakeDir(absl::StrCat(pod_dir, "/", contract::kLimitsSubdir), 0755);
      !s.ok()) {
    return s;
  }
  // The ledger directory is written by the pod's processes, whatever user they run as.
  if (absl::Status s = MakeDir(absl::StrCat(pod_dir, "/", contract::kLedgerSubdir), 0777);
      !s.ok()) {
    return s;
  }
  SegmentPaths paths = PathsFor(pod_dir, gpu_uuid);
  std::string error;
  if (::access(paths.limits.c_str(), F_OK) != 0 &&
      !LimitsMap::Create(paths.limits, gpu_uuid, options.pod_uid, options.limits, &error)) {
    return absl::InternalError(error);
  }
  if (::access(paths.ledger.c_str(), F_OK) != 0 &&
      !Ledger::Create(paths.ledger, gpu_uuid, options.slots, &error)) {
    return absl::InternalError(error);
  }
  auto segment = Open(pod_dir, gpu_uuid);
  if (!segment.ok()) return segment.status();
  if (absl::Status s = (*segment)->Update(options.limits); !s.ok()) return s;
  return segment;
}

absl::StatusOr<std::unique_ptr<Segment>> Segment::Open(const std::string& pod_dir,
                                                       const std::string& gpu_uuid) {
  if (absl::Status s = CheckUuid(gpu_uuid); !s.ok()) return s;
  SegmentPaths paths = PathsFor(pod_dir, gpu_uuid);
  std::string error;
  auto limits = LimitsMap::Open(paths.limits, /*writable=*/true, &error);
  if (limits == nullptr) return absl::NotFoundError(error);
  auto ledger = Ledger::Open(paths.ledger, &error);
  if (ledger == nullptr) return absl::NotFoundError(error);
  if (limits->gpu_uuid() != gpu_uuid || std::string(ledger->header()->gpu_uuid) != gpu_uuid) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment files for ", gpu_uuid, " in ", pod_dir, " name another GPU (limits: ",
                     limits->gpu_uuid(), ", ledger: ", ledger->header()->gpu_uuid, ")"));
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
  const LedgerHeader* h = ledger_->header();
  info.slots = h->slot_count;
  info.used_bytes = ledger_->Used();
  info.peak_used_bytes = h->peak_used_bytes.load();
  info.oom_count = h->oom_count.load();
  info.reclaimed_slots = h->reclaimed_slots.load();
  info.reclaimed_bytes = h->reclaimed_bytes.load();
  info.gate_wait_ns = h->gate_wait_ns.load();
  info.gated_launches = h->gated_launches.load();
  for (const SlotInfo& s : ledger_->Slots(/*check_alive=*/true)) {
    if (s.shared) {
      info.shared_bytes += s.used_bytes;
      continue;
    }
    ProcessUsage p;
    p.slot = s.index;
    p.pid = s.pid;
    p.pidns_inode = s.pidns_inode;
    p.host_pid = s.host_pid;
    p.used_bytes = s.used_bytes;
    p.peak_bytes = s.peak_bytes;
    p.alive = s.alive;
    info.processes.push_back(p);
  }
  return info;
}

ReapResult Segment::Reap(const std::string& proc_root) {
  ReapResult result;
  ReclaimResult r = ledger_->ReclaimDead();
  result.slots = r.slots;
  result.bytes = r.bytes;
  for (const SlotInfo& s : ledger_->Slots(/*check_alive=*/false)) {
    if (s.host_pid != 0 || s.shared) continue;
    if (auto host = ResolveHostPid(s.pidns_inode, s.pid, proc_root)) {
      ledger_->SetHostPid(s.index, *host);
      ++result.resolved;
    }
  }
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
  for (const char* sub : {contract::kLimitsSubdir, contract::kLedgerSubdir}) {
    std::string dir = absl::StrCat(pod_dir, "/", sub);
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) {
      if (errno == ENOENT) continue;
      return absl::InternalError(absl::StrCat("cannot list ", dir, ": ", std::strerror(errno)));
    }
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
        names.push_back(e->d_name);
      }
    }
    ::closedir(d);
    for (const auto& name : names) {
      std::string path = absl::StrCat(dir, "/", name);
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return absl::InternalError(
            absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
      }
    }
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      return absl::InternalError(absl::StrCat("cannot remove ", dir, ": ", std::strerror(errno)));
    }
  }
  if (::rmdir(pod_dir.c_str()) != 0 && errno != ENOENT && errno != ENOTEMPTY) {
    return absl::InternalError(absl::StrCat("cannot remove ", pod_dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

std::optional<uint32_t> ResolveHostPid(uint64_t pidns_inode, uint32_t ns_pid,
                                       const std::string& proc_root) {
  DIR* d = ::opendir(proc_root.c_str());
  if (d == nullptr) return std::nullopt;
  std::optional<uint32_t> found;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    unsigned long pid = std::strtoul(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    std::string base = absl::StrCat(proc_root, "/", e->d_name);
    struct stat st {};
    if (::stat(absl::StrCat(base, "/ns/pid").c_str(), &st) != 0 || st.st_ino != pidns_inode) {
      continue;
    }
    std::ifstream status(absl::StrCat(base, "/status"));
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("NSpid:", 0) != 0) continue;
      std::vector<std::string> fields =
          absl::StrSplit(line.substr(6), absl::ByAnyChar(" \t"), absl::SkipEmpty());
      if (!fields.empty() && fields.back() == std::to_string(ns_pid)) {
        found = static_cast<uint32_t>(pid);
      }
      break;
    }
    if (found) break;
  }
  ::closedir(d);
  return found;
}

}  // namespace tessera::shim
