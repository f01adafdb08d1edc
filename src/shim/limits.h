// LimitsMap: a mapped <GPU-UUID>.limits file (segment_format.h), what the agent commands for one
// share. The shim maps it read-only and reads its fields on each decision, so that the agent can
// resize a share or change its duty while the pod runs; the agent maps it read-write.
// No dependencies beyond libc and the C++ standard library (it lives inside the shim).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shim/segment_format.h"

namespace tessera::shim {

// What a share grants on one GPU; the agent's input to Create and Update.
struct ShareLimits {
  uint64_t memory_limit_bytes = 0;      // 0: no memory cap
  uint32_t compute_limit_permille = 0;  // 0 or >= 1000: no compute cap
  ComputeMode compute_mode = ComputeMode::kHardCap;
  uint32_t period_us = 0;  // 0: kDefaultPeriodUs
};

// Checks a ShareLimits value; empty when valid.
std::string ValidateShareLimits(const ShareLimits& limits);

class LimitsMap {
 public:
  static std::unique_ptr<LimitsMap> Open(const std::string& path, bool writable,
                                         std::string* error);
  // Maps the limits file open on `fd` (the caller keeps or closes the descriptor).
  static std::unique_ptr<LimitsMap> MapFd(int fd, const std::string& path, bool writable,
                                          std::string* error);
  // Writes a new limits file (published atomically; fails if it exists).
  static bool Create(const std::string& path, const std::string& gpu_uuid,
                     const std::string& pod_uid, const ShareLimits& limits, std::string* error);
  // The same in the directory `dir_fd` (a random temporary name, O_EXCL, O_NOFOLLOW; linkat).
  static bool CreateAt(int dir_fd, const std::string& name, const std::string& gpu_uuid,
                       const std::string& pod_uid, const ShareLimits& limits, std::string* error);

  ~LimitsMap();
  LimitsMap(const LimitsMap&) = delete;
  LimitsMap& operator=(const LimitsMap&) = delete;

  const LimitsFile& file() const { return *file_; }
  std::string gpu_uuid() const { return file_->gpu_uuid; }
  uint64_t memory_limit() const {
    return file_->memory_limit_bytes.load(std::memory_order_relaxed);
  }
  // The compute cap in permille, or 0 when there is none.
  uint32_t compute_limit() const {
    uint32_t c = file_->compute_limit_permille.load(std::memory_order_relaxed);
    return c >= 1000 ? 0 : c;
  }
  ComputeMode compute_mode() const {
    return static_cast<ComputeMode>(file_->compute_mode.load(std::memory_order_relaxed));
  }
  // The fraction of each period the pod may launch in: the controller's duty when it runs,
  // the cap otherwise; 1000 when there is no cap.
  uint32_t effective_duty() const;
  uint32_t phase() const { return file_->phase_permille.load(std::memory_order_relaxed) % 1000; }
  uint32_t period_us() const;

  // Agent side (writable maps only).
  void Update(const ShareLimits& limits);
  void SetSchedule(uint32_t duty_permille, uint32_t phase_permille);

 private:
  LimitsMap() = default;
  LimitsFile* file_ = nullptr;
  bool writable_ = false;
};

}  // namespace tessera::shim
