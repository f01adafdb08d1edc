#include "shim/shim_state.h"

#include <dirent.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "shim/contract.h"

namespace tessera::shim {

std::atomic<Shim*> Shim::instance_{nullptr};

namespace {

int g_log_level = 0;
constexpr intptr_t kNoShare = 1;

bool HasSuffix(const std::string& s, const char* suffix) {
  size_t n = std::strlen(suffix);
  return s.size() > n && s.compare(s.size() - n, n, suffix) == 0;
}

void ForkPrepare() { Shim::Get().PrepareFork(); }
void ForkParent() { Shim::Get().ParentAfterFork(); }
void ForkChild() { Shim::Get().ChildAfterFork(); }

}  // namespace

void Log(int level, const char* format, ...) {
  if (level > g_log_level) return;
  char buf[1024];
  int n = std::snprintf(buf, sizeof(buf), "tessera-shim[%d]: ", static_cast<int>(::getpid()));
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf + n, sizeof(buf) - static_cast<size_t>(n) - 1, format, args);
  va_end(args);
  size_t len = std::strlen(buf);
  buf[len++] = '\n';
  ssize_t ignored = ::write(2, buf, len);
  (void)ignored;
}

std::string UuidString(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char out[64];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return out;
}

// ---------------------------------------------------------------------------------------- Share

Share::Share(std::string uuid, std::unique_ptr<LimitsMap> limits, std::unique_ptr<Ledger> ledger,
             std::string ledger_problem)
    : uuid_(std::move(uuid)),
      limits_(std::move(limits)),
      ledger_(std::move(ledger)),
      ledger_problem_(std::move(ledger_problem)) {
  if (ledger_ == nullptr) {
    if (ledger_problem_.empty()) ledger_problem_ = "no ledger";
    private_ = Ledger::Private(uuid_);
  }
  active_.store(ledger_ != nullptr ? ledger_.get() : private_.get(), std::memory_order_release);
}

uint64_t Share::memory_limit() const {
  const uint64_t cap = limits_->memory_limit();
  const bool counted_with_the_pod =
      ledger_ != nullptr && active_.load(std::memory_order_acquire) == ledger_.get();
  if (cap == 0 || counted_with_the_pod) return cap;
  return std::min<uint64_t>(cap, contract::kNoLedgerAllowanceBytes);
}

std::string Share::ledger_problem() const {
  std::lock_guard<std::mutex> lock(claim_mu_);
  return ledger_problem_;
}

bool Share::EnsureClaimed() {
  if (claimed_.load(std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(claim_mu_);
  if (claimed_.load(std::memory_order_relaxed)) return true;
  Ledger* ledger = active_.load(std::memory_order_relaxed);
  std::string error;
  if (ledger == nullptr || ledger == private_.get() ||
      !ledger->Claim(ProcessIdentity::Current(), &error)) {
    // Counted alone, every process of the pod could reach the cap: N processes, N caps. Fail
    // closed instead, to an allowance that lets a program start and say what is wrong.
    if (!error.empty()) ledger_problem_ = error;
    Log(0,
        "%s: %s; without a slot in the pod's ledger this process may allocate at most %llu MiB "
        "on this GPU (the agent creates the ledger: is it running?)",
        uuid_.c_str(), ledger_problem_.c_str(), contract::kNoLedgerAllowanceBytes >> 20);
    if (private_ == nullptr) private_ = Ledger::Private(uuid_);
    if (private_ == nullptr) return false;
    private_->Claim(ProcessIdentity::Current(), &error);
    active_.store(private_.get(), std::memory_order_release);
  }
  claimed_.store(true, std::memory_order_release);
  return true;
}

bool Share::Charge(uint64_t bytes) {
  if (!EnsureClaimed()) return false;
  return ledger()->TryCharge(bytes, memory_limit());
}

void Share::ForceCharge(uint64_t bytes) {
  if (EnsureClaimed()) ledger()->ForceCharge(bytes);
}

void Share::Uncharge(uint64_t bytes) {
  if (claimed_.load(std::memory_order_acquire)) ledger()->Uncharge(bytes);
}

int Share::CreateShared(uint64_t key, uint64_t bytes) {
  if (!EnsureClaimed()) return -1;
  return ledger()->CreateShared(key, bytes);
}

int Share::JoinShared(uint64_t key, uint64_t* bytes) {
  if (!EnsureClaimed()) return -1;
  return ledger()->JoinShared(key, bytes);
}

void Share::LeaveShared(int slot) {
  if (claimed_.load(std::memory_order_acquire)) ledger()->LeaveShared(slot);
}

uint64_t Share::Used() { return ledger()->Used(); }

void Share::Report(uint64_t real_total, uint64_t real_free, uint64_t* total, uint64_t* free) {
  uint64_t cap = memory_limit();
  if (cap == 0) {
    *total = real_total;
    *free = real_free;
    return;
  }
  uint64_t t = std::min(cap, real_total);
  uint64_t used = Used();
  uint64_t f = used >= t ? 0 : t - used;
  *total = t;
  *free = std::min(f, real_free);
}

void Share::ResetAfterFork() {
  // The mutex was held across fork by PrepareFork; unlocked by the caller before this.
  Ledger* shared = ledger_.get();
  if (shared != nullptr) {
    shared->AbandonAfterFork();
    std::string error;
    if (!shared->ReopenAfterFork(&error)) Log(0, "%s", error.c_str());
  }
  if (private_ != nullptr) private_->AbandonAfterFork();
  active_.store(shared != nullptr ? shared : private_.get(), std::memory_order_release);
  claimed_.store(false, std::memory_order_release);
}

void Share::ReleaseAtExit() {
  if (!claimed_.load(std::memory_order_acquire)) return;
  if (ledger_ != nullptr) ledger_->Release();
}

// ----------------------------------------------------------------------------------------- Shim

Shim& Shim::Init() {
  // A function-local static rather than std::call_once: no pthread_once (glibc_compat.h).
  static const bool initialised = [] {
    auto* s = new Shim();  // never deleted: hooks may run after static destructors
    if (const char* v = std::getenv(contract::kEnvLog)) g_log_level = std::atoi(v);
    s->log_level_ = g_log_level;
    const char* root = std::getenv(contract::kEnvRoot);
    s->root_ = (root != nullptr && root[0] != '\0') ? root : contract::kRootDir;
    std::string error;
    s->ready_ = LoadRealDriver(&s->real, &error);
    if (!s->ready_) Log(0, "%s", error.c_str());
    std::string limits_dir = s->root_ + "/" + contract::kLimitsSubdir;
    if (DIR* d = ::opendir(limits_dir.c_str())) {
      while (dirent* e = ::readdir(d)) {
        if (HasSuffix(e->d_name, contract::kLimitsSuffix)) s->any_share_ = true;
      }
      ::closedir(d);
    }
    Log(1, "loaded; shares under %s: %s", limits_dir.c_str(), s->any_share_ ? "yes" : "none");
    ::pthread_atfork(ForkPrepare, ForkParent, ForkChild);
    instance_.store(s, std::memory_order_release);
    return true;
  }();
  (void)initialised;
  return *instance_.load(std::memory_order_acquire);
}

Share* Shim::ShareForUuid(const std::string& uuid) {
  if (!any_share_) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = shares_.find(uuid);
  if (it != shares_.end()) return it->second.get();
  std::string limits_path =
      root_ + "/" + contract::kLimitsSubdir + "/" + uuid + contract::kLimitsSuffix;
  std::unique_ptr<Share> share;
  if (::access(limits_path.c_str(), F_OK) == 0) {
    std::string error;
    auto limits = LimitsMap::Open(limits_path, /*writable=*/false, &error);
    if (limits == nullptr) {
      Log(0, "%s; %s is not capped", error.c_str(), uuid.c_str());
    } else {
      std::string ledger_path =
          root_ + "/" + contract::kLedgerSubdir + "/" + uuid + contract::kLedgerSuffix;
      std::string ledger_error;
      auto ledger = Ledger::Open(ledger_path, &ledger_error);
      Log(1, "%s: memory cap %llu bytes, compute %u permille", uuid.c_str(),
          static_cast<unsigned long long>(limits->memory_limit()), limits->compute_limit());
      share = std::make_unique<Share>(uuid, std::move(limits), std::move(ledger), ledger_error);
    }
  }
  Share* result = share.get();
  shares_[uuid] = std::move(share);
  return result;
}

Share* Shim::ShareForDevice(CUdevice dev) {
  if (!any_share_ || dev < 0) return nullptr;
  if (dev < kMaxDevices) {
    intptr_t v = device_shares_[dev].load(std::memory_order_acquire);
    if (v == kNoShare) return nullptr;
    if (v != 0) return reinterpret_cast<Share*>(v);
  }
  CUuuid uuid{};
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (real.cuDeviceGetUuid_v2 != nullptr) r = real.cuDeviceGetUuid_v2(&uuid, dev);
  if (r != CUDA_SUCCESS && real.cuDeviceGetUuid != nullptr) r = real.cuDeviceGetUuid(&uuid, dev);
  if (r != CUDA_SUCCESS) return nullptr;  // not initialised yet: ask again next time
  Share* share = ShareForUuid(UuidString(uuid));
  if (share != nullptr) share->Join();
  if (dev < kMaxDevices) {
    device_shares_[dev].store(share != nullptr ? reinterpret_cast<intptr_t>(share) : kNoShare,
                              std::memory_order_release);
  }
  return share;
}

Share* Shim::ShareForNvml(nvmlDevice_t dev) {
  if (!any_share_ || real.nvmlDeviceGetUUID == nullptr) return nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = nvml_shares_.find(dev);
    if (it != nvml_shares_.end()) return it->second;
  }
  char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (real.nvmlDeviceGetUUID(dev, uuid, sizeof(uuid)) != NVML_SUCCESS) return nullptr;
  Share* share = ShareForUuid(uuid);
  std::lock_guard<std::mutex> lock(mu_);
  nvml_shares_[dev] = share;
  return share;
}

bool Shim::SingleDevice() {
  int v = single_device_.load(std::memory_order_relaxed);
  if (v >= 0) return v == 1;
  int count = 0;
  if (real.cuDeviceGetCount == nullptr || real.cuDeviceGetCount(&count) != CUDA_SUCCESS) {
    return false;  // not initialised yet
  }
  single_device_.store(count == 1 ? 1 : 0, std::memory_order_relaxed);
  return count == 1;
}

bool Shim::CurrentDevice(CUdevice* dev) {
  if (SingleDevice()) {
    *dev = 0;
    return true;
  }
  return real.cuCtxGetDevice != nullptr && real.cuCtxGetDevice(dev) == CUDA_SUCCESS;
}

CUcontext Shim::CurrentContext() {
  CUcontext ctx = nullptr;
  if (real.cuCtxGetCurrent != nullptr) real.cuCtxGetCurrent(&ctx);
  return ctx;
}

bool Shim::CtxDevice(CUcontext ctx, CUdevice* dev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = ctx_devices_.find(ctx);
    if (it != ctx_devices_.end()) {
      *dev = it->second;
      return true;
    }
  }
  if (real.cuCtxPushCurrent_v2 == nullptr || real.cuCtxPopCurrent_v2 == nullptr) return false;
  if (real.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) return false;
  bool ok = real.cuCtxGetDevice(dev) == CUDA_SUCCESS;
  CUcontext popped = nullptr;
  real.cuCtxPopCurrent_v2(&popped);
  if (ok) {
    std::lock_guard<std::mutex> lock(mu_);
    ctx_devices_[ctx] = *dev;
  }
  return ok;
}

bool Shim::StreamDevice(CUstream stream, CUdevice* dev) {
  if (SingleDevice()) {
    *dev = 0;
    return true;
  }
  if (stream == nullptr || stream == TESSERA_CU_STREAM_LEGACY ||
      stream == TESSERA_CU_STREAM_PER_THREAD) {
    return CurrentDevice(dev);
  }
  if (real.cuStreamGetDevice != nullptr && real.cuStreamGetDevice(stream, dev) == CUDA_SUCCESS) {
    return true;
  }
  CUcontext ctx = nullptr;
  if (real.cuStreamGetCtx == nullptr || real.cuStreamGetCtx(stream, &ctx) != CUDA_SUCCESS) {
    return CurrentDevice(dev);
  }
  return CtxDevice(ctx, dev);
}

void Shim::NotePrimaryContext(CUdevice dev, CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  primary_[dev] = ctx;
  ctx_devices_[ctx] = dev;
}

CUcontext Shim::PrimaryContext(CUdevice dev) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = primary_.find(dev);
  return it == primary_.end() ? nullptr : it->second;
}

std::string Shim::StatusJson() {
  std::string out = "{\"ready\":";
  out += ready_ ? "true" : "false";
  out += ",\"root\":\"" + root_ + "\",\"shares\":[";
  std::lock_guard<std::mutex> lock(mu_);
  bool first = true;
  for (auto& [uuid, share] : shares_) {
    if (share == nullptr) continue;
    char buf[512];
    std::snprintf(buf, sizeof(buf),
                  "%s{\"uuid\":\"%s\",\"memory_limit\":%llu,\"used\":%llu,\"own\":%llu,"
                  "\"compute_limit_permille\":%u,\"duty_permille\":%u,\"launch_cost_ns\":%lld",
                  first ? "" : ",", uuid.c_str(),
                  static_cast<unsigned long long>(share->memory_limit()),
                  static_cast<unsigned long long>(share->Used()),
                  static_cast<unsigned long long>(share->ledger()->OwnUsed()),
                  share->limits().compute_limit(), share->limits().effective_duty(),
                  static_cast<long long>(share->gate().cost_ns()));
    out += buf;
    out += ",\"ledger_problem\":\"";
    for (char c : share->ledger_problem()) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    out += "\"}";
    first = false;
  }
  out += "]}";
  return out;
}

void Shim::AddForkMutex(std::mutex* m) {
  std::lock_guard<std::mutex> lock(mu_);
  fork_mutexes_.push_back(m);
}

void Shim::PrepareFork() {
  for (std::mutex* m : fork_mutexes_) m->lock();
  mu_.lock();
  tracker.mutex().lock();
  for (auto& [uuid, share] : shares_) {
    if (share != nullptr && share->shared_ledger() != nullptr) {
      share->shared_ledger()->lock_mutex().lock();
    }
    if (share != nullptr) share->busy().LockForFork();
  }
}

void Shim::ParentAfterFork() {
  for (auto& [uuid, share] : shares_) {
    if (share != nullptr) share->busy().UnlockAfterFork(false);
    if (share != nullptr && share->shared_ledger() != nullptr) {
      share->shared_ledger()->lock_mutex().unlock();
    }
  }
  tracker.mutex().unlock();
  mu_.unlock();
  for (std::mutex* m : fork_mutexes_) m->unlock();
}

void Shim::ChildAfterFork() {
  for (auto& [uuid, share] : shares_) {
    if (share != nullptr) share->busy().UnlockAfterFork(true);
    if (share != nullptr && share->shared_ledger() != nullptr) {
      share->shared_ledger()->lock_mutex().unlock();
    }
  }
  tracker.mutex().unlock();
  // The parent's allocations, slots and contexts are not the child's.
  tracker.Clear();
  for (auto& [uuid, share] : shares_) {
    if (share != nullptr) share->ResetAfterFork();
  }
  ctx_devices_.clear();
  primary_.clear();
  mu_.unlock();
  for (std::mutex* m : fork_mutexes_) m->unlock();
}

void Shim::AtExit() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [uuid, share] : shares_) {
    if (share != nullptr) share->ReleaseAtExit();
  }
}

namespace {
__attribute__((constructor)) void ShimLoad() { Shim::Get(); }
__attribute__((destructor)) void ShimUnload() {
  if (Shim* s = &Shim::Get(); s->any_share()) s->AtExit();
}
}  // namespace

}  // namespace tessera::shim
