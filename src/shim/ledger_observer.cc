// The agent's side of a ledger (ledger.h): the observer's checked open, and the header checks
// and repair. Apart from ledger.cc because it uses fstat, which the shim must not (glibc_compat.h):
// only the agent links it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "shim/ledger.h"

namespace tessera::shim {
namespace {

std::string Errno(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

// The bits of live-bitmap word `w` that name no slot of a ledger of `slot_count` slots.
uint64_t StrayBits(uint32_t slot_count, uint32_t w) {
  const uint32_t first = w * 64;
  if (slot_count <= first) return ~uint64_t{0};
  if (slot_count - first >= 64) return 0;
  return ~uint64_t{0} << (slot_count - first);
}

}  // namespace

std::unique_ptr<Ledger> Ledger::Observe(int dir_fd, const std::string& name,
                                        const std::string& path, std::string* error) {
  int fd = ::openat(dir_fd, name.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    *error = Errno("cannot open ledger", path);
    return nullptr;
  }
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = Errno("cannot stat ledger", path);
  } else if (!S_ISREG(st.st_mode)) {
    problem = path + " is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    problem = path + " is owned by uid " + std::to_string(st.st_uid) + ", not by the agent's " +
              std::to_string(::geteuid());
  } else if (st.st_nlink != 1) {
    problem = path + " has " + std::to_string(st.st_nlink) + " links";
  }
  if (!problem.empty()) {
    ::close(fd);
    *error = problem;
    return nullptr;
  }
  std::unique_ptr<Ledger> ledger = Map(fd, path, static_cast<uint64_t>(st.st_size), error);
  if (ledger == nullptr) return nullptr;
  if (ledger->map_bytes_ != LedgerFileSize(ledger->shape_.slot_count)) {
    *error = path + " is " + std::to_string(ledger->map_bytes_) + " bytes, its header names " +
             std::to_string(LedgerFileSize(ledger->shape_.slot_count));
    return nullptr;
  }
  ledger->observer_ = true;
  return ledger;
}

uint64_t Ledger::FileBytesNow() const {
  struct stat st {};
  if (private_) return shape_.file_bytes;
  if (::fstat(fd_, &st) != 0 || st.st_size < 0) return 0;
  return static_cast<uint64_t>(st.st_size);
}

void Ledger::CopyHeader(LedgerHeader* out) const {
  std::memcpy(static_cast<void*>(out), static_cast<const void*>(header_), sizeof(LedgerHeader));
}

std::string DescribeHeaderChange(const LedgerShape& shape, const LedgerHeader& h,
                                 uint64_t file_bytes) {
  if (file_bytes != shape.file_bytes) {
    return "the file is " + std::to_string(file_bytes) + " bytes long, it was " +
           std::to_string(shape.file_bytes);
  }
  std::string changed;
  auto note = [&changed](const std::string& what) {
    changed += (changed.empty() ? "" : ", ") + what;
  };
  if (h.magic != kLedgerMagic) note("magic");
  if (h.version != kFormatVersion) note("version " + std::to_string(h.version));
  if (h.header_size != kLedgerHeaderSize) note("header size " + std::to_string(h.header_size));
  if (h.slot_size != kLedgerSlotSize) note("slot size " + std::to_string(h.slot_size));
  if (h.slot_count != shape.slot_count) {
    note("slot count " + std::to_string(h.slot_count) + " (was " +
         std::to_string(shape.slot_count) + ")");
  }
  char uuid[kUuidBytes] = {};
  std::memcpy(uuid, shape.gpu_uuid.data(), std::min<size_t>(shape.gpu_uuid.size(), kUuidBytes - 1));
  if (std::memcmp(h.gpu_uuid, uuid, sizeof(uuid)) != 0) note("GPU UUID");
  for (uint32_t w = shape.slot_count / 64; w < kMaxLedgerSlots / 64; ++w) {
    if ((h.live_bitmap[w].load(std::memory_order_relaxed) & StrayBits(shape.slot_count, w)) != 0) {
      note("live bits past the slot count");
      break;
    }
  }
  return changed;
}

bool Ledger::RestoreHeader(std::string* error) {
  if (private_) return true;
  const uint64_t bytes = FileBytesNow();
  if (bytes != shape_.file_bytes && ::ftruncate(fd_, static_cast<off_t>(shape_.file_bytes)) != 0) {
    *error = Errno("cannot give back its length to", path_);
    return false;
  }
  // The whole UUID field as WriteHeader leaves it (zero-padded): DescribeHeaderChange compares all
  // of it, so bytes after the NUL are put back too, not reported at every reap.
  char uuid[kUuidBytes] = {};
  std::memcpy(uuid, shape_.gpu_uuid.data(),
              std::min<size_t>(shape_.gpu_uuid.size(), kUuidBytes - 1));
  // From here on the mapping is touched: nothing may allocate (see bus_guard.h).
  LedgerHeader* h = header_;
  if (h->magic != kLedgerMagic || h->version != kFormatVersion ||
      h->header_size != kLedgerHeaderSize || h->slot_size != kLedgerSlotSize ||
      h->slot_count != shape_.slot_count || std::memcmp(h->gpu_uuid, uuid, sizeof(uuid)) != 0) {
    WriteHeader(h, shape_.gpu_uuid, shape_.slot_count);
  }
  for (uint32_t w = shape_.slot_count / 64; w < kMaxLedgerSlots / 64; ++w) {
    h->live_bitmap[w].fetch_and(~StrayBits(shape_.slot_count, w), std::memory_order_seq_cst);
  }
  return true;
}

}  // namespace tessera::shim
