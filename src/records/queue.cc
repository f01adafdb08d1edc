#include "records/queue.h"

#include <ctime>

#include "common/strings.h"
#include "core/model/quantity.h"
#include "records/json_util.h"

namespace tessera::records {
namespace {

// A quantity given as a JSON integer or string, as text.
absl::StatusOr<std::string> QuantityText(const JsonReader& r, std::string_view key) {
  const nlohmann::json& v = r.At(key);
  if (v.is_number_integer()) {
    if (v.get<int64_t>() < 0) return r.Error(key, "must not be negative");
    return std::to_string(v.get<int64_t>());
  }
  if (v.is_string()) return v.get<std::string>();
  return r.Error(key, "expected a quantity (an integer or a string such as \"2.5\" or \"80Gi\")");
}

absl::Status ReadResources(const nlohmann::json& j, const std::string& path,
                           std::array<std::optional<int64_t>, core::kQueueResourceCount>* out) {
  JsonReader r(j, path);
  TESSERA_RETURN_IF_ERROR(r.ExpectObject());
  TESSERA_RETURN_IF_ERROR(r.OnlyKeys({"gpu", "gpuMemory", "gpuCompute"}));
  for (int k = 0; k < core::kQueueResourceCount; ++k) {
    const std::string_view key = core::QueueResourceName(k);
    if (!r.Has(key)) continue;
    TESSERA_ASSIGN_OR_RETURN(std::string text, QuantityText(r, key));
    absl::StatusOr<int64_t> v;
    switch (k) {
      case core::kQueueGpu:
        v = core::ParseCpuMilli(text, core::Rounding::kDown);  // GPUs -> milli-GPU
        break;
      case core::kQueueGpuMemory:
        v = core::ParseMemoryMiB(text, core::Rounding::kDown);
        break;
      default: {
        absl::StatusOr<int64_t> percent = core::ParseCount(text);
        if (percent.ok())
          v = *percent * 10;  // percent of a GPU -> milli-GPU
        else
          v = percent.status();
      }
    }
    if (!v.ok()) return r.Error(key, FromAbsl(v.status().message()));
    if (*v < 0) return r.Error(key, "must not be negative");
    (*out)[k] = *v;
  }
  return absl::OkStatus();
}

// A DNS-1123 label, as namespace names are.
bool IsNamespaceName(const std::string& s) {
  if (s.empty() || s.size() > 63 || s.front() == '-' || s.back() == '-') return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<core::QueueSpec> QueueSpecFromJson(const nlohmann::json& spec,
                                                  const std::string& name,
                                                  const std::string& path) {
  JsonReader r(spec, path);
  TESSERA_RETURN_IF_ERROR(r.ExpectObject());
  TESSERA_RETURN_IF_ERROR(r.OnlyKeys({"parent", "weight", "deserved", "limit", "namespaces"}));
  core::QueueSpec q;
  q.name = name;
  TESSERA_ASSIGN_OR_RETURN(q.parent, r.OptionalString("parent"));
  TESSERA_ASSIGN_OR_RETURN(q.weight, r.OptionalInt("weight", 1));
  if (q.weight < 0) return r.Error("weight", "must not be negative");
  if (q.parent == name)
    return r.Error("parent", StrCat("queue ", name, " cannot be its own parent"));
  if (r.Has("deserved")) {
    TESSERA_RETURN_IF_ERROR(ReadResources(r.At("deserved"), r.Path("deserved"), &q.deserved));
  }
  if (r.Has("limit")) {
    TESSERA_RETURN_IF_ERROR(ReadResources(r.At("limit"), r.Path("limit"), &q.limit));
  }
  if (r.Has("namespaces")) {
    TESSERA_ASSIGN_OR_RETURN(const nlohmann::json* list, r.Array("namespaces"));
    for (size_t i = 0; i < list->size(); ++i) {
      const nlohmann::json& ns = (*list)[i];
      const std::string where = StrCat(r.Path("namespaces"), "[", i, "]");
      if (!ns.is_string() || !IsNamespaceName(ns.get<std::string>())) {
        return absl::InvalidArgumentError(
            StrCat(where,
                   ": expected a namespace name (a DNS-1123 label: lower-case letters, "
                   "digits and '-', at most 63)"));
      }
      q.namespaces.push_back(ns.get<std::string>());
    }
  }
  return q;
}

absl::StatusOr<core::QueueSpec> QueueFromObject(const nlohmann::json& object) {
  JsonReader r(object, "Queue");
  TESSERA_RETURN_IF_ERROR(r.ExpectObject());
  if (!r.Has("metadata") || !r.At("metadata").is_object()) {
    return r.Error("metadata", "expected an object with a name");
  }
  JsonReader meta(r.At("metadata"), r.Path("metadata"));
  TESSERA_ASSIGN_OR_RETURN(std::string name, meta.String("name"));
  static const nlohmann::json kEmpty = nlohmann::json::object();
  // Unknown fields in an object the API server stored are the server's business (status,
  // newer fields): only the spec is read strictly.
  const nlohmann::json& spec = r.Has("spec") ? r.At("spec") : kEmpty;
  return QueueSpecFromJson(spec, name, StrCat("Queue ", name, ".spec"));
}

std::string QueueQuantity(int r, int64_t amount) {
  const bool negative = amount < 0;
  const int64_t a = negative ? -amount : amount;
  std::string out;
  switch (r) {
    case core::kQueueGpu: {  // milli-GPU as a decimal quantity: 2500 -> "2.5"
      out = StrCat(a / 1000);
      if (a % 1000 != 0) {
        std::string frac = fmt::format("{:03d}", a % 1000);
        while (frac.back() == '0') frac.pop_back();
        StrAppend(&out, ".", frac);
      }
      break;
    }
    case core::kQueueGpuMemory:  // MiB as an exact quantity
      out = a == 0 ? StrCat(0) : a % 1024 == 0 ? StrCat(a / 1024, "Gi") : StrCat(a, "Mi");
      break;
    default:  // milli-GPU as percent of one GPU: 2500 -> "250", 142 -> "14.2"
      out = StrCat(a / 10);
      if (a % 10 != 0) StrAppend(&out, ".", a % 10);
      break;
  }
  return negative ? StrCat("-", out) : out;
}

nlohmann::json QueueStatusJson(const QueueStatus& status) {
  auto resources = [](const core::QueueResources& q) {
    nlohmann::json j = nlohmann::json::object();
    for (int r = 0; r < core::kQueueResourceCount; ++r) {
      j[std::string(core::QueueResourceName(r))] = QueueQuantity(r, q[r]);
    }
    return j;
  };
  if (!status.message.empty()) {
    return {{"message", status.message}, {"allocated", nullptr}, {"fairShare", nullptr},
            {"borrowed", nullptr},       {"pending", nullptr},   {"pendingPods", nullptr}};
  }
  return {{"allocated", resources(status.allocated)}, {"fairShare", resources(status.fair_share)},
          {"borrowed", resources(status.borrowed)},   {"pending", resources(status.pending)},
          {"pendingPods", status.pending_pods},       {"message", nullptr}};
}

std::string FormatUtcSeconds(int64_t time_ms) {
  const std::time_t t = static_cast<std::time_t>(time_ms / 1000 - (time_ms % 1000 < 0 ? 1 : 0));
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

absl::StatusOr<int64_t> ParseUtcSeconds(std::string_view text) {
  const std::string s(text);
  std::tm tm{};
  const char* end = strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (end == nullptr || *end != '\0') {
    return absl::InvalidArgumentError(
        StrCat("\"", s, "\" is not a time in RFC 3339 UTC (2026-12-01T20:32:05Z)"));
  }
  return static_cast<int64_t>(timegm(&tm)) * 1000;
}

absl::StatusOr<std::optional<QueueUsageStatus>> QueueUsageFromObject(const nlohmann::json& object) {
  if (!object.is_object() || !object.contains("status") || !object["status"].is_object() ||
      !object["status"].contains("usage")) {
    return std::optional<QueueUsageStatus>();
  }
  JsonReader r(object, "Queue");
  JsonReader meta(r.At("metadata"), r.Path("metadata"));
  QueueUsageStatus u;
  TESSERA_ASSIGN_OR_RETURN(u.queue, meta.String("name"));
  JsonReader usage(object["status"]["usage"], StrCat("Queue ", u.queue, ".status.usage"));
  TESSERA_RETURN_IF_ERROR(usage.ExpectObject());
  static constexpr std::string_view kFields[core::kQueueResourceCount] = {
      "gpuMilli", "gpuMemoryMiB", "gpuComputeMilli"};
  for (int k = 0; k < core::kQueueResourceCount; ++k) {
    TESSERA_ASSIGN_OR_RETURN(u.usage[k], usage.OptionalInt(kFields[k], 0));
    if (u.usage[k] < 0) return usage.Error(kFields[k], "must not be negative");
  }
  TESSERA_ASSIGN_OR_RETURN(u.half_life_seconds, usage.Int("halfLifeSeconds"));
  if (u.half_life_seconds <= 0) return usage.Error("halfLifeSeconds", "must be positive");
  TESSERA_ASSIGN_OR_RETURN(std::string time, usage.String("time"));
  absl::StatusOr<int64_t> ms = ParseUtcSeconds(time);
  if (!ms.ok()) return usage.Error("time", FromAbsl(ms.status().message()));
  u.time_ms = *ms;
  return std::optional<QueueUsageStatus>(std::move(u));
}

nlohmann::json QueueUsagePatch(const QueueUsageStatus& u) {
  return {{"status",
           {{"usage",
             {{"gpuMilli", u.usage[core::kQueueGpu]},
              {"gpuMemoryMiB", u.usage[core::kQueueGpuMemory]},
              {"gpuComputeMilli", u.usage[core::kQueueGpuCompute]},
              {"halfLifeSeconds", u.half_life_seconds},
              {"time", FormatUtcSeconds(u.time_ms)}}}}}};
}

}  // namespace tessera::records
