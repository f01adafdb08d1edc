#include "shim/tracker.h"

#include <unistd.h>

#include <algorithm>

namespace tessera::shim {
namespace {

uint64_t FormatBytes(CUarray_format format) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4;
    default:
      return 4;  // packed, block-compressed and video formats: at most 4 bytes per channel
  }
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

uint64_t LevelBytes(uint64_t w, uint64_t h, uint64_t d, uint64_t element) {
  return RoundUp(w * element, 512) * std::max<uint64_t>(h, 1) * std::max<uint64_t>(d, 1);
}

}  // namespace

uint64_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, unsigned int mip_levels) {
  if ((desc.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) != 0) return 0;
  const uint64_t element = FormatBytes(desc.Format) * std::max(desc.NumChannels, 1u);
  const bool layered = (desc.Flags & CUDA_ARRAY3D_LAYERED) != 0;
  uint64_t w = std::max<uint64_t>(desc.Width, 1), h = desc.Height, d = desc.Depth;
  uint64_t total = 0;
  for (unsigned int level = 0; level < std::max(mip_levels, 1u); ++level) {
    total += LevelBytes(w, h, d, element);
    if (w == 1 && h <= 1 && (layered || d <= 1)) break;
    w = std::max<uint64_t>(w / 2, 1);
    if (h > 1) h /= 2;
    if (!layered && d > 1) d /= 2;
  }
  return RoundUp(total, 4096);
}

uint64_t ArrayBytes(const CUDA_ARRAY_DESCRIPTOR& desc) {
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = desc.Width;
  d3.Height = desc.Height;
  d3.Depth = 0;
  d3.Format = desc.Format;
  d3.NumChannels = desc.NumChannels;
  return ArrayBytes(d3, 1);
}

void Tracker::Add(uint64_t key, const Allocation& a) {
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[key] = a;
}

std::optional<Allocation> Tracker::Take(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(key);
  if (it == allocations_.end()) return std::nullopt;
  Allocation a = it->second;
  allocations_.erase(it);
  return a;
}

std::optional<Allocation> Tracker::Find(uint64_t key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(key);
  if (it == allocations_.end()) return std::nullopt;
  return it->second;
}

std::vector<Allocation> Tracker::TakeContext(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Allocation> out;
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.ctx == ctx && it->second.kind != AllocKind::kPool) {
      out.push_back(it->second);
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

bool Tracker::SetAllocationShared(uint64_t key, int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(key);
  if (it == allocations_.end()) return false;
  it->second.shared_slot = slot;
  it->second.bytes = 0;  // the shared slot holds them now
  return true;
}

bool Tracker::OpenAgain(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(key);
  if (it == allocations_.end() || it->second.kind != AllocKind::kIpcOpened) return false;
  ++it->second.opens;
  return true;
}

std::optional<Allocation> Tracker::CloseOpened(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocations_.find(key);
  if (it == allocations_.end() || it->second.kind != AllocKind::kIpcOpened) return std::nullopt;
  if (--it->second.opens > 0) return std::nullopt;
  Allocation a = it->second;
  allocations_.erase(it);
  return a;
}

void Tracker::AddPhysical(CUmemGenericAllocationHandle h, uint64_t bytes, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  physical_[h] = Physical{bytes, device, 1, 0};
}

uint64_t LimitReservation(CUlimit limit, uint64_t value, uint64_t device_threads) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE:
      return value > 1024 ? (value - 1024) * device_threads : 0;
    case CU_LIMIT_PRINTF_FIFO_SIZE:
      return value > (1ULL << 20) ? value - (1ULL << 20) : 0;
    case CU_LIMIT_MALLOC_HEAP_SIZE:
      return value > (8ULL << 20) ? value - (8ULL << 20) : 0;
    default:
      return 0;
  }
}

uint64_t LimitKey(CUcontext ctx, CUlimit limit) {
  return (uint64_t{1} << 63) | (reinterpret_cast<uint64_t>(ctx) << 3) |
         (static_cast<uint64_t>(limit) & 7);
}

PoolState* Tracker::GraphMemory(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = graph_memory_[device];
  if (!slot) {
    slot = std::make_unique<PoolState>();
    slot->device = device;
  }
  return slot.get();
}

std::vector<std::pair<int, PoolState*>> Tracker::GraphMemories() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<int, PoolState*>> out;
  for (const auto& [device, state] : graph_memory_) out.emplace_back(device, state.get());
  return out;
}

void Tracker::SetGraphExecAllocations(CUgraphExec exec,
                                      std::vector<std::pair<int, uint64_t>> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes.empty()) {
    graph_execs_.erase(exec);
  } else {
    graph_execs_[exec] = std::move(bytes);
  }
}

std::vector<std::pair<int, uint64_t>> Tracker::GraphExecAllocations(CUgraphExec exec) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = graph_execs_.find(exec);
  return it == graph_execs_.end() ? std::vector<std::pair<int, uint64_t>>{} : it->second;
}

void Tracker::AddPhysical(CUmemGenericAllocationHandle h, const Physical& p) {
  std::lock_guard<std::mutex> lock(mu_);
  physical_[h] = p;
}

std::optional<Physical> Tracker::FindPhysical(CUmemGenericAllocationHandle h) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = physical_.find(h);
  if (it == physical_.end()) return std::nullopt;
  return it->second;
}

void Tracker::SetShared(CUmemGenericAllocationHandle h, int slot, uint64_t key, int probe) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = physical_.find(h);
  if (it == physical_.end()) return;
  it->second.shared_slot = slot;
  it->second.share_key = key;
  it->second.probe = probe;
}

void Tracker::SetPhysicalBytes(CUmemGenericAllocationHandle h, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = physical_.find(h);
  if (it != physical_.end()) it->second.bytes = bytes;
}

void Tracker::Linger(const Physical& p) {
  std::lock_guard<std::mutex> lock(mu_);
  lingering_.push_back(p);
  lingering_count_.store(lingering_.size(), std::memory_order_relaxed);
}

std::vector<Physical> Tracker::TakeLingering() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Physical> out;
  out.swap(lingering_);
  lingering_count_.store(0, std::memory_order_relaxed);
  return out;
}

void Tracker::RetainPhysical(CUmemGenericAllocationHandle h) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = physical_.find(h);
  if (it != physical_.end()) ++it->second.refs;
}

std::optional<Physical> Tracker::ReleasePhysical(CUmemGenericAllocationHandle h) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = physical_.find(h);
  if (it == physical_.end()) return std::nullopt;
  if (it->second.refs > 0) --it->second.refs;
  if (it->second.refs > 0 || it->second.maps > 0) return std::nullopt;
  Physical p = it->second;
  physical_.erase(it);
  return p;
}

void Tracker::Map(CUdeviceptr va, uint64_t size, CUmemGenericAllocationHandle h) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = physical_.find(h);
  if (it == physical_.end()) return;  // not charged here (imported, or on an unshared GPU)
  ++it->second.maps;
  mappings_[va] = Mapping{size, h};
}

std::vector<Physical> Tracker::Unmap(CUdeviceptr va, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<Physical> freed;
  const CUdeviceptr end = va + size;
  auto it = mappings_.lower_bound(va);
  // A mapping that starts before va but covers it.
  if (it != mappings_.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > va) it = prev;
  }
  while (it != mappings_.end() && it->first < end) {
    auto p = physical_.find(it->second.handle);
    if (p != physical_.end()) {
      if (p->second.maps > 0) --p->second.maps;
      if (p->second.maps == 0 && p->second.refs == 0) {
        freed.push_back(p->second);
        physical_.erase(p);
      }
    }
    it = mappings_.erase(it);
  }
  return freed;
}

std::optional<CUmemGenericAllocationHandle> Tracker::HandleAt(CUdeviceptr addr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin()) return std::nullopt;
  --it;
  if (addr >= it->first + it->second.size) return std::nullopt;
  return it->second.handle;
}

PoolState* Tracker::Pool(CUmemoryPool pool, int device_if_new, bool imported_if_new) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = pools_[pool];
  if (!slot) {
    slot = std::make_unique<PoolState>();
    slot->device = device_if_new;
    slot->imported = imported_if_new;
  }
  return slot.get();
}

PoolState* Tracker::FindPool(CUmemoryPool pool) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? nullptr : it->second.get();
}

std::vector<std::pair<CUmemoryPool, PoolState*>> Tracker::Pools() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<CUmemoryPool, PoolState*>> out;
  out.reserve(pools_.size());
  for (const auto& [handle, state] : pools_) out.emplace_back(handle, state.get());
  return out;
}

uint64_t Tracker::LinearBytes(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t sum = 0;
  for (const auto& [key, a] : allocations_) {
    if (a.device == device && a.kind != AllocKind::kPool) sum += a.bytes;
  }
  return sum;
}

uint64_t Tracker::PhysicalBytes(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t sum = 0;
  for (const auto& [h, p] : physical_) {
    if (p.device == device) sum += p.bytes;
  }
  return sum;
}

size_t Tracker::allocation_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocations_.size();
}

void Tracker::Clear() {
  // Called in a fork child, where no other thread exists; the mutex was held across fork by
  // the prepare handler and released by the child handler before this.
  std::lock_guard<std::mutex> lock(mu_);
  allocations_.clear();
  for (const auto& [h, p] : physical_) {
    if (p.probe >= 0) ::close(p.probe);
  }
  physical_.clear();
  mappings_.clear();
  for (const Physical& p : lingering_) {
    if (p.probe >= 0) ::close(p.probe);
  }
  lingering_.clear();
  lingering_count_.store(0, std::memory_order_relaxed);
  // Another thread of the parent may have held a pool's mutex at fork: the states are kept,
  // never destroyed while locked (the shim's tracker lives as long as the process).
  for (auto& [handle, state] : pools_) abandoned_.push_back(std::move(state));
  pools_.clear();
  for (auto& [device, state] : graph_memory_) abandoned_.push_back(std::move(state));
  graph_memory_.clear();
}

}  // namespace tessera::shim
