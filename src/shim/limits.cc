#include "shim/limits.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "shim/ledger.h"

namespace tessera::shim {

std::string ValidateShareLimits(const ShareLimits& limits) {
  if (limits.compute_mode != ComputeMode::kHardCap &&
      limits.compute_mode != ComputeMode::kWorkConserving) {
    return "unknown compute mode " + std::to_string(static_cast<uint32_t>(limits.compute_mode));
  }
  if (limits.period_us != 0 &&
      (limits.period_us < kMinPeriodUs || limits.period_us > kMaxPeriodUs)) {
    return "compute period " + std::to_string(limits.period_us) + "us outside " +
           std::to_string(kMinPeriodUs) + ".." + std::to_string(kMaxPeriodUs) + "us";
  }
  return "";
}

std::unique_ptr<LimitsMap> LimitsMap::Open(const std::string& path, bool writable,
                                           std::string* error) {
  int fd = ::open(path.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot open limits " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<LimitsMap> limits = MapFd(fd, path, writable, error);
  ::close(fd);  // the mapping stays valid
  return limits;
}

std::unique_ptr<LimitsMap> LimitsMap::MapFd(int fd, const std::string& path, bool writable,
                                            std::string* error) {
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < static_cast<off_t>(kLimitsFileSize)) {
    *error = "limits " + path + " is shorter than its format";
    return nullptr;
  }
  void* map = ::mmap(nullptr, kLimitsFileSize, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                     MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    *error = "cannot map limits " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  auto* file = static_cast<LimitsFile*>(map);
  std::string problem = ValidateLimitsFile(*file, static_cast<uint64_t>(size));
  if (!problem.empty()) {
    *error = path + ": " + problem;
    ::munmap(map, kLimitsFileSize);
    return nullptr;
  }
  std::unique_ptr<LimitsMap> limits(new LimitsMap());
  limits->file_ = file;
  limits->writable_ = writable;
  return limits;
}

bool LimitsMap::Create(const std::string& path, const std::string& gpu_uuid,
                       const std::string& pod_uid, const ShareLimits& limits, std::string* error) {
  std::string name;
  int dir_fd = OpenParentFolder(path, &name, error);
  if (dir_fd < 0) return false;
  bool ok = CreateAt(dir_fd, name, gpu_uuid, pod_uid, limits, error);
  ::close(dir_fd);
  return ok;
}

bool LimitsMap::CreateAt(int dir_fd, const std::string& name, const std::string& gpu_uuid,
                         const std::string& pod_uid, const ShareLimits& limits,
                         std::string* error) {
  if (gpu_uuid.empty() || gpu_uuid.size() >= kUuidBytes) {
    *error = "GPU UUID must have 1.." + std::to_string(kUuidBytes - 1) + " characters";
    return false;
  }
  if (pod_uid.size() >= kPodUidBytes) {
    *error = "pod UID longer than " + std::to_string(kPodUidBytes - 1) + " characters";
    return false;
  }
  std::string problem = ValidateShareLimits(limits);
  if (!problem.empty()) {
    *error = problem;
    return false;
  }
  // A new temporary name (O_EXCL, O_NOFOLLOW), published with linkat: see Ledger::CreateAt.
  std::string tmp;
  int fd = CreateUniqueAt(dir_fd, "." + name + ".tmp.", 0600, &tmp);
  if (fd < 0) {
    *error = "cannot create a temporary file for " + name + ": " + std::strerror(errno);
    return false;
  }
  ::fchmod(fd, 0644);
  bool ok = ::ftruncate(fd, kLimitsFileSize) == 0;
  void* map =
      ok ? ::mmap(nullptr, kLimitsFileSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  ::close(fd);
  if (map == MAP_FAILED) {
    *error = "cannot size or map " + tmp + ": " + std::strerror(errno);
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return false;
  }
  auto* f = static_cast<LimitsFile*>(map);
  f->magic = kLimitsMagic;
  f->version = kFormatVersion;
  f->size = kLimitsFileSize;
  std::snprintf(f->gpu_uuid, sizeof(f->gpu_uuid), "%s", gpu_uuid.c_str());
  std::snprintf(f->pod_uid, sizeof(f->pod_uid), "%s", pod_uid.c_str());
  LimitsMap writer;
  writer.file_ = f;
  writer.writable_ = true;
  writer.Update(limits);
  writer.file_ = nullptr;
  ::munmap(map, kLimitsFileSize);
  if (::linkat(dir_fd, tmp.c_str(), dir_fd, name.c_str(), 0) != 0) {
    *error = "cannot publish limits " + name + ": " + std::strerror(errno);
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return false;
  }
  ::unlinkat(dir_fd, tmp.c_str(), 0);
  return true;
}

LimitsMap::~LimitsMap() {
  if (file_ != nullptr) ::munmap(file_, kLimitsFileSize);
}

uint32_t LimitsMap::effective_duty() const {
  uint32_t cap = compute_limit();
  if (cap == 0) return 1000;
  uint32_t duty = file_->duty_permille.load(std::memory_order_relaxed);
  if (duty == 0) return cap;
  return std::min<uint32_t>(duty, 1000);
}

uint32_t LimitsMap::period_us() const {
  uint32_t p = file_->period_us.load(std::memory_order_relaxed);
  if (p == 0) return kDefaultPeriodUs;
  return std::clamp(p, kMinPeriodUs, kMaxPeriodUs);
}

void LimitsMap::Update(const ShareLimits& limits) {
  if (!writable_) return;
  file_->memory_limit_bytes.store(limits.memory_limit_bytes, std::memory_order_relaxed);
  file_->compute_limit_permille.store(limits.compute_limit_permille, std::memory_order_relaxed);
  file_->compute_mode.store(static_cast<uint32_t>(limits.compute_mode), std::memory_order_relaxed);
  file_->period_us.store(limits.period_us, std::memory_order_relaxed);
  file_->generation.fetch_add(1, std::memory_order_release);
}

void LimitsMap::SetSchedule(uint32_t duty_permille, uint32_t phase_permille) {
  if (!writable_) return;
  file_->duty_permille.store(std::min<uint32_t>(duty_permille, 1000), std::memory_order_relaxed);
  file_->phase_permille.store(phase_permille % 1000, std::memory_order_relaxed);
  file_->generation.fetch_add(1, std::memory_order_release);
}

}  // namespace tessera::shim
