#include "core/model/mig.h"

#include <algorithm>
#include <cctype>

#include "common/strings.h"

namespace tessera::core {
namespace {

// Starts as bit masks: {0..6}, {0,2,4,6}, {0,2,4}, {0,4}, {0}.
constexpr uint8_t kAny7 = 0b0111'1111;
constexpr uint8_t kEven4 = 0b0101'0101;
constexpr uint8_t kEven3 = 0b0001'0101;
constexpr uint8_t kHalves = 0b0001'0001;
constexpr uint8_t kFirst = 0b0000'0001;

// A100-SXM4-40GB, `nvidia-smi mig -lgip` (R525+): GiB 4.75 / 9.75 / 9.75 / 19.62 / 19.62 / 39.38.
constexpr MigProfile kA100_40[] = {
    {"7g.40gb", 0, 7, 8, kFirst, 1, false, 40320, 98},
    {"4g.20gb", 5, 4, 4, kFirst, 1, false, 20096, 56},
    {"3g.20gb", 9, 3, 4, kHalves, 2, false, 20096, 42},
    {"2g.10gb", 14, 2, 2, kEven3, 3, false, 9984, 28},
    {"1g.10gb", 15, 1, 2, kEven4, 4, false, 9984, 14},
    {"1g.5gb", 19, 1, 1, kAny7, 7, false, 4864, 14},
    {"1g.5gb+me", 20, 1, 1, kAny7, 1, true, 4864, 14},
};
// A100-SXM4-80GB: GiB 9.50 / 9.50 / 19.50 / 19.50 / 39.25 / 39.25 / 79.00.
constexpr MigProfile kA100_80[] = {
    {"7g.80gb", 0, 7, 8, kFirst, 1, false, 80896, 98},
    {"4g.40gb", 5, 4, 4, kFirst, 1, false, 40192, 56},
    {"3g.40gb", 9, 3, 4, kHalves, 2, false, 40192, 42},
    {"2g.20gb", 14, 2, 2, kEven3, 3, false, 19968, 28},
    {"1g.20gb", 15, 1, 2, kEven4, 4, false, 19968, 14},
    {"1g.10gb", 19, 1, 1, kAny7, 7, false, 9728, 14},
    {"1g.10gb+me", 20, 1, 1, kAny7, 1, true, 9728, 14},
};
// H100 80GB HBM3 (SXM5): GiB 9.75 / 9.75 / 19.62 / 19.62 / 39.50 / 39.50 / 79.25.
constexpr MigProfile kH100_80[] = {
    {"7g.80gb", 0, 7, 8, kFirst, 1, false, 81152, 132},
    {"4g.40gb", 5, 4, 4, kFirst, 1, false, 40448, 64},
    {"3g.40gb", 9, 3, 4, kHalves, 2, false, 40448, 60},
    {"2g.20gb", 14, 2, 2, kEven3, 3, false, 20096, 32},
    {"1g.20gb", 15, 1, 2, kEven4, 4, false, 20096, 26},
    {"1g.10gb", 19, 1, 1, kAny7, 7, false, 9984, 16},
    {"1g.10gb+me", 20, 1, 1, kAny7, 1, true, 9984, 16},
};

// H200 (141GB HBM3e, SXM): GiB 16.00 / 16.00 / 32.50 / 32.50 / 69.75 / 69.75 / 140.00, SMs and
// placements as `nvidia-smi mig -lgip` / `-lgipp` print them on an H200 (driver 580.159.04, MIG
// off; the listing is in core/topology/mig_test.cc).
constexpr MigProfile kH200_141[] = {
    {"7g.141gb", 0, 7, 8, kFirst, 1, false, 143360, 132},
    {"4g.71gb", 5, 4, 4, kFirst, 1, false, 71424, 64},
    {"3g.71gb", 9, 3, 4, kHalves, 2, false, 71424, 60},
    {"2g.35gb", 14, 2, 2, kEven3, 3, false, 33280, 32},
    {"1g.35gb", 15, 1, 2, kEven4, 4, false, 33280, 26},
    {"1g.18gb", 19, 1, 1, kAny7, 7, false, 16384, 16},
    {"1g.18gb+me", 20, 1, 1, kAny7, 1, true, 16384, 16},
};

constexpr MigModel kModels[] = {
    {"A100-40GB", kA100_40},
    {"A100-80GB", kA100_80},
    {"H100-80GB", kH100_80},
    {"H200-141GB", kH200_141},
};

std::string Upper(std::string_view s) {
  std::string out;
  for (char c : s) out.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  return out;
}

}  // namespace

int MigModel::Find(std::string_view profile) const {
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].name == profile) return static_cast<int>(i);
  }
  return -1;
}

std::vector<std::string> MigModel::ProfileNames() const {
  std::vector<std::string> out;
  for (const MigProfile& p : profiles) out.emplace_back(p.name);
  return out;
}

const MigModel* FindMigModel(std::string_view gpu_model) {
  // Accept tessera's names and nvidia-smi's product names ("NVIDIA A100-SXM4-80GB",
  // "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H200"); not H100 NVL (94GB), H100
  // PCIe, H200 NVL or GH200, whose tables differ or were not checked.
  const std::string m = Upper(gpu_model);
  const bool a100 = m.find("A100") != std::string::npos;
  const bool h100 = m.find("H100") != std::string::npos && m.find("NVL") == std::string::npos &&
                    m.find("PCIE") == std::string::npos;
  if (a100 && m.find("40GB") != std::string::npos) return &kModels[0];
  if (a100 && m.find("80GB") != std::string::npos) return &kModels[1];
  if (h100 && m.find("80GB") != std::string::npos) return &kModels[2];
  const bool h200 = m.find("H200") != std::string::npos && m.find("GH200") == std::string::npos &&
                    m.find("NVL") == std::string::npos;
  if (h200) return &kModels[3];
  return nullptr;
}

std::vector<std::string> MigModelNames() {
  std::vector<std::string> out;
  for (const MigModel& m : kModels) out.emplace_back(m.model);
  return out;
}

bool IsKnownMigProfile(std::string_view profile) {
  return std::any_of(std::begin(kModels), std::end(kModels),
                     [&](const MigModel& m) { return m.Find(profile) >= 0; });
}

bool MigInstancesConflict(const MigModel& model, MigPlacement a, MigPlacement b) {
  const MigProfile& pa = model.profiles[a.profile];
  const MigProfile& pb = model.profiles[b.profile];
  return (pa.slots(a.start) & pb.slots(b.start)) != 0 ||
         (pa.media_extensions && pb.media_extensions);
}

std::string MigPlacementName(const MigModel& model, MigPlacement p) {
  if (p.profile < 0 || p.profile >= static_cast<int>(model.profiles.size())) return "?";
  return StrCat(model.profiles[p.profile].name, "@", static_cast<int>(p.start));
}

absl::Status ValidateMigInstances(const MigModel& model, const std::vector<MigPlacement>& instances,
                                  std::string_view where) {
  uint8_t used = 0;
  int media = 0;
  std::vector<int> per_profile(model.profiles.size(), 0);
  for (const MigPlacement& p : instances) {
    if (p.profile < 0 || p.profile >= static_cast<int>(model.profiles.size())) {
      return absl::InvalidArgumentError(StrCat(where, ": unknown MIG profile"));
    }
    const MigProfile& prof = model.profiles[p.profile];
    if (!prof.may_start_at(p.start)) {
      std::vector<int> allowed;
      for (int s = 0; s < kMigSlots; ++s) {
        if (prof.may_start_at(s)) allowed.push_back(s);
      }
      return absl::InvalidArgumentError(StrCat(where, ": ", prof.name, " cannot start at slice ",
                                               static_cast<int>(p.start), " on ", model.model,
                                               " (allowed starts: ", StrJoin(allowed, ", "), ")"));
    }
    if (used & prof.slots(p.start)) {
      return absl::InvalidArgumentError(StrCat(
          where, ": ", MigPlacementName(model, p), " overlaps another instance (memory slices ",
          static_cast<int>(p.start), "..", p.start + prof.size - 1, ")"));
    }
    used |= prof.slots(p.start);
    if (prof.media_extensions && ++media > 1) {
      return absl::InvalidArgumentError(
          StrCat(where, ": more than one +me instance (a GPU has one set of media engines)"));
    }
    if (++per_profile[p.profile] > prof.max_per_gpu) {
      return absl::InvalidArgumentError(
          StrCat(where, ": more than ", prof.max_per_gpu, " ", prof.name, " instances"));
    }
  }
  return absl::OkStatus();
}

}  // namespace tessera::core
