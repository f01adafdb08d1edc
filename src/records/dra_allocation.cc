#include "records/dra_allocation.h"

#include "common/json_fields.h"
#include "common/strings.h"
#include "core/model/quantity.h"
#include "records/json_util.h"

namespace tessera::records::dra {
namespace {

using nlohmann::json;

constexpr int64_t kMiMilli = int64_t{1024} * 1024 * 1000;  // 1Mi in milli-units

Allocation DecodeAllocation(const json& a, std::string* error) {
  Allocation alloc;
  alloc.raw = a;
  const json& devices = JsonField(a, "devices");
  const json& results = JsonField(devices, "results");
  if (results.is_array()) {
    for (size_t i = 0; i < results.size(); ++i) {
      AllocatedDevice d = DecodeAllocatedDevice(results[i]);
      if (!d.error.empty() && error->empty()) {
        *error = StrCat("status.allocation.devices.results[", i, "].", d.error);
      }
      alloc.results.push_back(std::move(d));
    }
  }
  const json& config = JsonField(devices, "config");
  if (config.is_array()) {
    for (const json& c : config) {
      alloc.config.push_back(AllocationConfig{JsonStringField(c, "source"),
                                              JsonStringField(JsonField(c, "opaque"), "driver"),
                                              StringList(JsonField(c, "requests"))});
    }
  }
  // kube-scheduler's allocator writes matchFields metadata.name In [node] for node-local pools.
  const json& terms = JsonField(JsonField(a, "nodeSelector"), "nodeSelectorTerms");
  if (terms.is_array() && terms.size() == 1) {
    const json& fields = JsonField(terms[0], "matchFields");
    if (fields.is_array()) {
      for (const json& f : fields) {
        std::vector<std::string> values = StringList(JsonField(f, "values"));
        if (JsonStringField(f, "key") == "metadata.name" &&
            JsonStringField(f, "operator") == "In" && values.size() == 1) {
          alloc.node = values[0];
        }
      }
    }
  }
  return alloc;
}

}  // namespace

absl::StatusOr<int64_t> ParseMilli(std::string_view text) {
  // Cores are counted in milli-units too: the same exact parser and scale.
  return core::ParseCpuMilli(text, core::Rounding::kUp);
}

std::string FormatMilli(int64_t milli) {
  if (milli % 1000 != 0) return StrCat(milli, "m");
  const int64_t v = milli / 1000;
  if (v != 0) {
    if (v % (int64_t{1} << 40) == 0) return StrCat(v >> 40, "Ti");
    if (v % (int64_t{1} << 30) == 0) return StrCat(v >> 30, "Gi");
    if (v % (int64_t{1} << 20) == 0) return StrCat(v >> 20, "Mi");
  }
  return StrCat(v);
}

absl::StatusOr<int64_t> ParseMilliValue(const json& v) {
  std::string text;
  if (v.is_string()) {
    text = v.get<std::string>();
  } else if (v.is_number_integer()) {
    text = std::to_string(v.get<int64_t>());
  } else {
    return absl::InvalidArgumentError(StrCat(v.dump(), ": not a quantity"));
  }
  absl::StatusOr<int64_t> m = ParseMilli(text);
  if (!m.ok()) {
    return absl::InvalidArgumentError(StrCat("\"", text, "\": ", FromAbsl(m.status().message())));
  }
  return *m;
}

int64_t MemoryMib(int64_t milli) { return (milli + kMiMilli - 1) / kMiMilli; }

std::string LocalCapacityName(std::string_view name, std::string_view driver) {
  if (name.size() > driver.size() && name.starts_with(driver) && name[driver.size()] == '/') {
    return std::string(name.substr(driver.size() + 1));
  }
  return std::string(name);
}

std::optional<int64_t> AllocatedDevice::Consumed(std::string_view capacity,
                                                 std::string_view driver) const {
  std::optional<int64_t> found;  // the last spelling wins, as both are the same capacity
  for (const auto& [name, value] : consumed) {
    if (LocalCapacityName(name, driver) == capacity) found = value;
  }
  return found;
}

AllocatedDevice DecodeAllocatedDevice(const json& r) {
  AllocatedDevice d;
  try {
    d.request = JsonStringField(r, "request");
    d.driver = JsonStringField(r, "driver");
    d.pool = JsonStringField(r, "pool");
    d.device = JsonStringField(r, "device");
    d.share_id = JsonStringField(r, "shareID");
    const json& consumed = JsonField(r, "consumedCapacity");
    if (consumed.is_object()) {
      for (const auto& [name, q] : consumed.items()) {
        absl::StatusOr<int64_t> v = ParseMilliValue(q);
        if (!v.ok()) {
          if (d.error.empty()) {
            d.error = StrCat("consumedCapacity.", name, " ", FromAbsl(v.status().message()));
          }
          continue;
        }
        d.consumed[name] = *v;
      }
    }
  } catch (const std::exception& e) {
    d.error = StrCat("result: ", e.what());
  }
  return d;
}

ClaimStatus DecodeClaimStatus(const json& status) {
  ClaimStatus out;
  try {
    if (const json& a = JsonField(status, "allocation"); a.is_object()) {
      out.allocation = DecodeAllocation(a, &out.error);
    }
    const json& reserved = JsonField(status, "reservedFor");
    if (reserved.is_array()) {
      for (const json& r : reserved) {
        out.reserved_for.push_back(
            ConsumerRef{JsonStringField(r, "apiGroup"), JsonStringField(r, "resource"),
                        JsonStringField(r, "name"), JsonStringField(r, "uid")});
      }
    }
  } catch (const std::exception& e) {
    out.error = StrCat("status: ", e.what());
  }
  return out;
}

}  // namespace tessera::records::dra
