#include "agent/procs/gpu_processes.h"

#include <dlfcn.h>
#include <time.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "shim/nvml_abi.h"

namespace tessera::agent {
namespace {

// Calls an NVML list function that takes (device, count in/out, array), growing the array while
// NVML says it is too small.
template <typename Info, typename Fn>
nvmlReturn_t ListAll(Fn fn, nvmlDevice_t dev, std::vector<Info>* out) {
  for (unsigned size = 32; size <= 65536; size *= 4) {
    out->assign(size, Info{});
    unsigned count = size;
    nvmlReturn_t r = fn(dev, &count, out->data());
    if (r == NVML_SUCCESS) {
      out->resize(std::min(count, size));
      return r;
    }
    if (r != NVML_ERROR_INSUFFICIENT_SIZE) return r;
  }
  return NVML_ERROR_INSUFFICIENT_SIZE;
}

void Add(std::map<uint32_t, GpuProcessMemory>* by_pid, uint32_t pid, unsigned long long used) {
  GpuProcessMemory& p = (*by_pid)[pid];
  p.pid = pid;
  if (used == TESSERA_NVML_VALUE_NOT_AVAILABLE) {
    p.unknown = p.used_bytes == 0;
    return;
  }
  p.unknown = false;
  p.used_bytes = std::max<uint64_t>(p.used_bytes, used);
}

}  // namespace

absl::StatusOr<std::unique_ptr<NvmlProcessSampler>> NvmlProcessSampler::Load(
    const std::string& library) {
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    return absl::UnavailableError(
        absl::StrCat("cannot load ", library, ": ", why ? why : "not found"));
  }
  std::unique_ptr<NvmlProcessSampler> s(new NvmlProcessSampler());
  s->handle_ = h;
  auto init = reinterpret_cast<PFN_nvmlInit_v2>(::dlsym(h, "nvmlInit_v2"));
  s->by_uuid_ = ::dlsym(h, "nvmlDeviceGetHandleByUUID");
  s->compute_v3_ = ::dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3");
  if (s->compute_v3_ == nullptr)
    s->compute_v3_ = ::dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2");
  s->compute_v1_ = ::dlsym(h, "nvmlDeviceGetComputeRunningProcesses");
  s->graphics_v3_ = ::dlsym(h, "nvmlDeviceGetGraphicsRunningProcesses_v3");
  s->utilization_ = ::dlsym(h, "nvmlDeviceGetProcessUtilization");
  s->device_utilization_ = ::dlsym(h, "nvmlDeviceGetUtilizationRates");
  s->device_samples_ = ::dlsym(h, "nvmlDeviceGetSamples");
  if (init == nullptr || s->by_uuid_ == nullptr ||
      (s->compute_v3_ == nullptr && s->compute_v1_ == nullptr)) {
    return absl::UnavailableError(absl::StrCat(library, " lacks the NVML functions needed"));
  }
  if (nvmlReturn_t r = init(); r != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlInit_v2 failed: ", r));
  }
  return s;
}

NvmlProcessSampler::~NvmlProcessSampler() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

absl::StatusOr<void*> NvmlProcessSampler::Device(const std::string& uuid) const {
  nvmlDevice_t dev = nullptr;
  auto by_uuid = reinterpret_cast<PFN_nvmlDeviceGetHandleByUUID>(by_uuid_);
  if (nvmlReturn_t r = by_uuid(uuid.c_str(), &dev); r != NVML_SUCCESS) {
    return absl::NotFoundError(absl::StrCat("NVML does not know ", uuid, " (", r, ")"));
  }
  return static_cast<void*>(dev);
}

absl::StatusOr<std::vector<GpuProcessMemory>> NvmlProcessSampler::Memory(const std::string& uuid) {
  absl::StatusOr<void*> d = Device(uuid);
  if (!d.ok()) return d.status();
  auto dev = static_cast<nvmlDevice_t>(*d);
  std::map<uint32_t, GpuProcessMemory> by_pid;
  if (compute_v3_ != nullptr) {
    std::vector<nvmlProcessInfo_t> infos;
    auto fn = reinterpret_cast<PFN_nvmlDeviceGetComputeRunningProcesses_v3>(compute_v3_);
    if (nvmlReturn_t r = ListAll(fn, dev, &infos); r != NVML_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("nvmlDeviceGetComputeRunningProcesses: ", r));
    }
    for (const auto& i : infos) Add(&by_pid, i.pid, i.usedGpuMemory);
  } else {
    std::vector<nvmlProcessInfo_v1_t> infos;
    auto fn = reinterpret_cast<PFN_nvmlDeviceGetComputeRunningProcesses>(compute_v1_);
    if (nvmlReturn_t r = ListAll(fn, dev, &infos); r != NVML_SUCCESS) {
      return absl::UnavailableError(absl::StrCat("nvmlDeviceGetComputeRunningProcesses: ", r));
    }
    for (const auto& i : infos) Add(&by_pid, i.pid, i.usedGpuMemory);
  }
  if (graphics_v3_ != nullptr) {
    std::vector<nvmlProcessInfo_t> infos;
    auto fn = reinterpret_cast<PFN_nvmlDeviceGetComputeRunningProcesses_v3>(graphics_v3_);
    if (ListAll(fn, dev, &infos) == NVML_SUCCESS) {
      for (const auto& i : infos) Add(&by_pid, i.pid, i.usedGpuMemory);
    }
  }
  std::vector<GpuProcessMemory> out;
  for (const auto& [pid, p] : by_pid) out.push_back(p);
  return out;
}

absl::StatusOr<std::vector<shim::PidUtilization>> NvmlProcessSampler::Utilization(
    const std::string& uuid) {
  if (utilization_ == nullptr) {
    return absl::UnimplementedError("this NVML has no nvmlDeviceGetProcessUtilization");
  }
  absl::StatusOr<void*> d = Device(uuid);
  if (!d.ok()) return d.status();
  auto dev = static_cast<nvmlDevice_t>(*d);
  auto util = reinterpret_cast<PFN_nvmlDeviceGetProcessUtilization>(utilization_);
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const unsigned long long now_us =
      static_cast<unsigned long long>(ts.tv_sec) * 1'000'000ULL + ts.tv_nsec / 1000;
  unsigned long long& last = last_seen_us_[uuid];
  if (last == 0) last = now_us - 250'000;
  std::vector<nvmlProcessUtilizationSample_t> samples(64);
  unsigned int count = static_cast<unsigned int>(samples.size());
  nvmlReturn_t r = util(dev, samples.data(), &count, last);
  if (r == NVML_ERROR_INSUFFICIENT_SIZE) {
    samples.resize(count + 16);
    count = static_cast<unsigned int>(samples.size());
    r = util(dev, samples.data(), &count, last);
  }
  if (r == NVML_ERROR_NOT_FOUND) {
    last = now_us;
    return std::vector<shim::PidUtilization>{};  // nothing ran since the last sample
  }
  if (r != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetProcessUtilization: ", r));
  }
  // Several samples per process: their mean.
  std::map<uint32_t, std::pair<uint64_t, uint32_t>> sums;
  unsigned long long newest = last;
  for (unsigned int i = 0; i < std::min<unsigned>(count, samples.size()); ++i) {
    auto& s = sums[samples[i].pid];
    s.first += samples[i].smUtil;
    ++s.second;
    newest = std::max(newest, samples[i].timeStamp);
  }
  last = newest > last ? newest : now_us;
  std::vector<shim::PidUtilization> out;
  for (const auto& [pid, s] : sums) {
    out.push_back({pid, static_cast<uint32_t>(std::min<uint64_t>(1000, s.first * 10 / s.second))});
  }
  return out;
}

absl::StatusOr<DeviceBusy> NvmlProcessSampler::SampledUtilization(void* device,
                                                                  const std::string& uuid) {
  if (device_samples_ == nullptr) {
    return absl::UnimplementedError("this NVML has no nvmlDeviceGetSamples");
  }
  auto get = reinterpret_cast<PFN_nvmlDeviceGetSamples>(device_samples_);
  auto dev = static_cast<nvmlDevice_t>(device);
  unsigned long long& last = last_device_sample_us_[uuid];
  int type = NVML_VALUE_TYPE_UNSIGNED_INT;
  unsigned int count = 0;
  nvmlReturn_t r = get(dev, NVML_GPU_UTILIZATION_SAMPLES, last, &type, &count, nullptr);
  std::vector<nvmlSample_t> samples;
  if (r == NVML_SUCCESS || r == NVML_ERROR_INSUFFICIENT_SIZE) {
    samples.resize(count + 16);  // a sample or two may come meanwhile
    count = static_cast<unsigned int>(samples.size());
    r = get(dev, NVML_GPU_UTILIZATION_SAMPLES, last, &type, &count, samples.data());
  }
  if (r != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetSamples: ", r));
  }
  samples.resize(std::min<size_t>(count, samples.size()));
  std::sort(samples.begin(), samples.end(),
            [](const nvmlSample_t& a, const nvmlSample_t& b) { return a.timeStamp < b.timeStamp; });
  auto percent = [type](const nvmlValue_t& v) -> uint64_t {
    switch (type) {
      case NVML_VALUE_TYPE_DOUBLE:
        return v.dVal > 0 ? static_cast<uint64_t>(v.dVal + 0.5) : 0;
      case NVML_VALUE_TYPE_UNSIGNED_LONG:
        return v.ulVal;
      case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
        return v.ullVal;
      case NVML_VALUE_TYPE_SIGNED_LONG_LONG:
        return v.sllVal > 0 ? v.sllVal : 0;
      case NVML_VALUE_TYPE_SIGNED_INT:
        return v.siVal > 0 ? v.siVal : 0;
      case NVML_VALUE_TYPE_UNSIGNED_SHORT:
        return v.usVal;
      default:
        return v.uiVal;
    }
  };
  // Each sample covers the time since the one before it. The first call for a GPU (nothing seen
  // yet) weighs the whole record the driver keeps (its first sample only marks where it starts).
  uint64_t busy = 0, span = 0;
  unsigned long long prev = last;
  for (const nvmlSample_t& s : samples) {
    if (s.timeStamp <= prev) continue;
    if (prev != 0) {
      const uint64_t gap = s.timeStamp - prev;
      busy += std::min<uint64_t>(percent(s.sampleValue), 100) * gap;
      span += gap;
    }
    prev = s.timeStamp;
  }
  last = prev;
  if (span == 0) return absl::UnavailableError("no utilisation sample to weigh yet");
  // The samples' timestamps are in microseconds.
  return DeviceBusy{.permille = static_cast<uint32_t>(busy * 10 / span), .span_ns = span * 1000};
}

absl::StatusOr<uint32_t> NvmlProcessSampler::DeviceUtilization(const std::string& uuid) {
  absl::StatusOr<DeviceBusy> b = DeviceBusyTime(uuid);
  if (!b.ok()) return b.status();
  return b->permille;
}

absl::StatusOr<DeviceBusy> NvmlProcessSampler::DeviceBusyTime(const std::string& uuid) {
  absl::StatusOr<void*> d = Device(uuid);
  if (!d.ok()) return d.status();
  if (absl::StatusOr<DeviceBusy> sampled = SampledUtilization(*d, uuid); sampled.ok()) {
    return sampled;
  }
  if (device_utilization_ == nullptr) {
    return absl::UnimplementedError("this NVML has no nvmlDeviceGetUtilizationRates");
  }
  nvmlUtilization_t u{};
  auto rates = reinterpret_cast<PFN_nvmlDeviceGetUtilizationRates>(device_utilization_);
  if (nvmlReturn_t r = rates(static_cast<nvmlDevice_t>(*d), &u); r != NVML_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("nvmlDeviceGetUtilizationRates: ", r));
  }
  return DeviceBusy{.permille = std::min<uint32_t>(u.gpu, 100) * 10};
}

}  // namespace tessera::agent
