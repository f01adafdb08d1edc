#include "k8s/scheduler/config.h"

#include <algorithm>
#include <set>

#include "common/duration.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/profiles.h"
#include "core/policy/policy.h"
#include "k8s/client/config.h"
#include "k8s/scheduler/config_keys.h"
#include "yaml-cpp/yaml.h"

namespace tessera::k8s {
namespace {

class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  absl::Status Error(const YAML::Node& at, std::string_view what) const {
    const YAML::Mark m = at.Mark();
    if (m.line < 0) return absl::InvalidArgumentError(StrCat(source_, ": ", what));
    return absl::InvalidArgumentError(
        StrCat(source_, ":", m.line + 1, ":", m.column + 1, ": ", what));
  }

  // `map` has only keys of `keys` (KeysUnder: config_keys.h is the one list).
  absl::Status OnlyKeys(const YAML::Node& map, std::string_view where,
                        const std::vector<std::string_view>& keys) const {
    if (!map.IsMap()) return Error(map, StrCat(where, ": expected a map"));
    for (const auto& kv : map) {
      std::string k = kv.first.as<std::string>();
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        return Error(kv.first, StrCat("unknown key \"", k, "\" in ", where,
                                      " (expected one of: ", StrJoin(keys, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> String(const YAML::Node& n, std::string_view what) const {
    if (!n.IsScalar()) return Error(n, StrCat(what, ": expected a string"));
    return n.as<std::string>();
  }

  absl::StatusOr<bool> Bool(const YAML::Node& n, std::string_view what) const {
    bool v = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) {
      return Error(n, StrCat(what, ": expected true or false"));
    }
    return v;
  }

  absl::StatusOr<int64_t> Int(const YAML::Node& n, std::string_view what, int64_t min,
                              int64_t max) const {
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
      return Error(n, StrCat(what, ": expected a whole number"));
    }
    if (v < min || v > max) return Error(n, StrCat(what, ": ", v, " is not in ", min, "..", max));
    return v;
  }

  absl::StatusOr<std::chrono::milliseconds> Duration(const YAML::Node& n,
                                                     std::string_view what) const {
    TESSERA_ASSIGN_OR_RETURN(std::string text, String(n, what));
    absl::StatusOr<std::chrono::milliseconds> d = ParseDuration(text);
    if (!d.ok()) return Error(n, StrCat(what, ": ", FromAbsl(d.status().message())));
    return *d;
  }

 private:
  std::string source_;
};

}  // namespace

absl::StatusOr<SchedulerConfig> ParseSchedulerConfig(std::string_view yaml,
                                                     std::string_view source) {
  Reader r{std::string(source)};
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        StrCat(source, ":", e.mark.line + 1, ":", e.mark.column + 1, ": ", e.msg));
  }
  SchedulerConfig c;
  if (root.IsNull()) return c;
  TESSERA_RETURN_IF_ERROR(r.OnlyKeys(root, "the configuration", KeysUnder("")));
  if (YAML::Node n = root["apiVersion"]) {
    TESSERA_ASSIGN_OR_RETURN(std::string v, r.String(n, "apiVersion"));
    if (v != "tessera.dev/v1alpha1") {
      return r.Error(n, StrCat("apiVersion: \"", v, "\" is not tessera.dev/v1alpha1"));
    }
  }
  if (YAML::Node n = root["kind"]) {
    TESSERA_ASSIGN_OR_RETURN(std::string v, r.String(n, "kind"));
    if (v != "SchedulerConfiguration") {
      return r.Error(n, StrCat("kind: \"", v, "\" is not SchedulerConfiguration"));
    }
  }
  if (YAML::Node n = root["schedulerName"]) {
    TESSERA_ASSIGN_OR_RETURN(c.core.scheduler_name, r.String(n, "schedulerName"));
    if (c.core.scheduler_name.empty()) return r.Error(n, "schedulerName: must not be empty");
  }
  if (YAML::Node n = root["policy"]) {
    TESSERA_ASSIGN_OR_RETURN(c.core.policy, r.String(n, "policy"));
    absl::StatusOr<std::unique_ptr<core::Policy>> p = core::CreatePolicy(c.core.policy, {});
    if (!p.ok()) return r.Error(n, StrCat("policy: ", FromAbsl(p.status().message())));
  }
  if (YAML::Node n = root["seed"]) {
    TESSERA_ASSIGN_OR_RETURN(int64_t seed, r.Int(n, "seed", 0, INT64_MAX));
    c.core.seed = static_cast<uint64_t>(seed);
  }
  if (YAML::Node n = root["nodeSelector"]) {
    TESSERA_ASSIGN_OR_RETURN(c.node_selector, r.String(n, "nodeSelector"));
  }
  if (YAML::Node n = root["topologyLevels"]) {
    if (!n.IsSequence()) return r.Error(n, "topologyLevels: expected a list");
    c.core.levels.clear();
    for (size_t i = 0; i < n.size(); ++i) {
      std::string where = StrCat("topologyLevels[", i, "]");
      TESSERA_RETURN_IF_ERROR(r.OnlyKeys(n[i], where, KeysUnder("topologyLevels[]")));
      core::TopologyLevel level;
      if (!n[i]["name"]) return r.Error(n[i], StrCat(where, ": needs a name"));
      TESSERA_ASSIGN_OR_RETURN(level.name, r.String(n[i]["name"], StrCat(where, ".name")));
      level.label = StrCat("tessera.dev/", level.name);
      if (n[i]["label"]) {
        TESSERA_ASSIGN_OR_RETURN(level.label, r.String(n[i]["label"], StrCat(where, ".label")));
      }
      c.core.levels.push_back(std::move(level));
    }
  }
  if (YAML::Node n = root["spareGpusPerDomain"]) {
    TESSERA_ASSIGN_OR_RETURN(int64_t v, r.Int(n, "spareGpusPerDomain", 0, 64));
    c.core.spare_gpus_per_domain = static_cast<int>(v);
  }
  if (YAML::Node le = root["leaderElection"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(le, "leaderElection", KeysUnder("leaderElection")));
    if (le["leaderElect"]) {
      TESSERA_ASSIGN_OR_RETURN(c.leader_elect, r.Bool(le["leaderElect"], "leaderElect"));
    }
    if (le["resourceNamespace"]) {
      TESSERA_ASSIGN_OR_RETURN(c.lease.lease_namespace,
                               r.String(le["resourceNamespace"], "resourceNamespace"));
    }
    if (le["resourceName"]) {
      TESSERA_ASSIGN_OR_RETURN(c.lease.lease_name, r.String(le["resourceName"], "resourceName"));
    }
    if (le["leaseDuration"]) {
      TESSERA_ASSIGN_OR_RETURN(c.lease.lease_duration,
                               r.Duration(le["leaseDuration"], "leaseDuration"));
    }
    if (le["renewDeadline"]) {
      TESSERA_ASSIGN_OR_RETURN(c.lease.renew_deadline,
                               r.Duration(le["renewDeadline"], "renewDeadline"));
    }
    if (le["retryPeriod"]) {
      TESSERA_ASSIGN_OR_RETURN(c.lease.retry_period, r.Duration(le["retryPeriod"], "retryPeriod"));
    }
    LeaderElectionConfig check = c.lease;
    check.identity = "check";
    if (absl::Status s = ValidateLeaderElection(check); !s.ok()) {
      return r.Error(le, FromAbsl(s.message()));
    }
  }
  if (YAML::Node m = root["metrics"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(m, "metrics", KeysUnder("metrics")));
    if (m["bindAddress"]) {
      TESSERA_ASSIGN_OR_RETURN(c.metrics_address, r.String(m["bindAddress"], "bindAddress"));
    }
    if (m["port"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t port, r.Int(m["port"], "metrics.port", 0, 65535));
      c.metrics_port = static_cast<int>(port);
    }
  }
  if (YAML::Node n = root["bindConcurrency"]) {
    TESSERA_ASSIGN_OR_RETURN(int64_t v, r.Int(n, "bindConcurrency", 1, 1024));
    c.bind_concurrency = static_cast<int>(v);
  }
  if (YAML::Node n = root["http2"]) {
    TESSERA_ASSIGN_OR_RETURN(c.http2, r.Bool(n, "http2"));
  }
  if (YAML::Node n = root["wire"]) {
    TESSERA_ASSIGN_OR_RETURN(std::string wire, r.String(n, "wire"));
    if (wire != "protobuf" && wire != "json") {
      return r.Error(n, StrCat("wire: \"", wire, "\" is neither protobuf nor json"));
    }
    c.protobuf_wire = wire == "protobuf";
  }
  if (YAML::Node n = root["retry"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(n, "retry", KeysUnder("retry")));
    if (n["minInterval"]) {
      TESSERA_ASSIGN_OR_RETURN(c.core.retry_min_interval,
                               r.Duration(n["minInterval"], "retry.minInterval"));
    }
    if (n["period"]) {
      TESSERA_ASSIGN_OR_RETURN(c.core.retry_period, r.Duration(n["period"], "retry.period"));
    }
    if (c.core.retry_period < c.core.retry_min_interval) {
      return r.Error(n, "retry: period must not be shorter than minInterval");
    }
  }
  if (YAML::Node n = root["dra"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(n, "dra", KeysUnder("dra")));
    if (n["enabled"]) {
      TESSERA_ASSIGN_OR_RETURN(c.core.dra, r.Bool(n["enabled"], "dra.enabled"));
    }
    if (n["driver"]) {
      TESSERA_ASSIGN_OR_RETURN(c.core.dra_driver, r.String(n["driver"], "dra.driver"));
      if (c.core.dra_driver.empty()) return r.Error(n, "dra.driver: must not be empty");
    }
  }
  if (YAML::Node n = root["scaleUp"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(n, "scaleUp", KeysUnder("scaleUp")));
    ScaleUpSignalOptions& su = c.core.scale_up;
    if (n["interval"]) {
      TESSERA_ASSIGN_OR_RETURN(su.interval, r.Duration(n["interval"], "scaleUp.interval"));
    }
    if (n["maxNodes"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v, r.Int(n["maxNodes"], "scaleUp.maxNodes", 1, 10'000));
      su.max_nodes = static_cast<int>(v);
    }
    if (YAML::Node t = n["templates"]) {
      if (!t.IsSequence()) return r.Error(t, "scaleUp.templates: expected a list");
      std::set<std::string> names;
      for (size_t i = 0; i < t.size(); ++i) {
        const std::string where = StrCat("scaleUp.templates[", i, "]");
        TESSERA_RETURN_IF_ERROR(r.OnlyKeys(t[i], where, KeysUnder("scaleUp.templates[]")));
        if (!t[i]["profile"]) {
          return r.Error(t[i], StrCat(where, ": needs a profile (built-in profiles: ",
                                      StrJoin(core::ProfileNames(), ", "), ")"));
        }
        TESSERA_ASSIGN_OR_RETURN(std::string profile,
                                 r.String(t[i]["profile"], StrCat(where, ".profile")));
        absl::StatusOr<core::Profile> found = core::FindProfile(profile);
        if (!found.ok()) {
          return r.Error(t[i]["profile"],
                         StrCat(where, ".profile: ", FromAbsl(found.status().message())));
        }
        std::string name = profile;
        if (t[i]["name"]) {
          TESSERA_ASSIGN_OR_RETURN(name, r.String(t[i]["name"], StrCat(where, ".name")));
        }
        if (name.empty() || !names.insert(name).second) {
          return r.Error(t[i], StrCat(where, ": the name \"", name,
                                      "\" is empty or taken by another template"));
        }
        core::NodeSpec node = core::NodeOfProfile(*found, name);
        if (YAML::Node labels = t[i]["labels"]) {
          if (!labels.IsMap()) return r.Error(labels, StrCat(where, ".labels: expected a map"));
          for (const auto& kv : labels) {
            TESSERA_ASSIGN_OR_RETURN(std::string k, r.String(kv.first, StrCat(where, ".labels")));
            TESSERA_ASSIGN_OR_RETURN(node.labels[k],
                                     r.String(kv.second, StrCat(where, ".labels.", k)));
          }
        }
        su.templates.push_back(std::move(node));
      }
    }
  }
  if (YAML::Node n = root["queues"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(n, "queues", KeysUnder("queues")));
    if (n["usageHalfLife"]) {
      TESSERA_ASSIGN_OR_RETURN(c.queue_usage_half_life,
                               r.Duration(n["usageHalfLife"], "queues.usageHalfLife"));
      if (c.queue_usage_half_life.count() % 1000 != 0) {
        return r.Error(n, "queues.usageHalfLife: must be whole seconds (it is written in them)");
      }
    }
    if (n["usageWriteInterval"]) {
      TESSERA_ASSIGN_OR_RETURN(c.queue_usage_write_interval,
                               r.Duration(n["usageWriteInterval"], "queues.usageWriteInterval"));
      if (c.queue_usage_write_interval < std::chrono::seconds(1)) {
        return r.Error(n, "queues.usageWriteInterval: must be at least 1s");
      }
    }
  }
  if (YAML::Node n = root["defrag"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(n, "defrag", KeysUnder("defrag")));
    DefragExecutorOptions& d = c.core.defrag;
    if (n["enabled"]) {
      TESSERA_ASSIGN_OR_RETURN(d.enabled, r.Bool(n["enabled"], "defrag.enabled"));
    }
    if (n["minPriority"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v,
                               r.Int(n["minPriority"], "defrag.minPriority", INT32_MIN, INT32_MAX));
      d.min_priority = static_cast<int32_t>(v);
    }
    if (n["after"]) {
      TESSERA_ASSIGN_OR_RETURN(d.after, r.Duration(n["after"], "defrag.after"));
    }
    if (n["maxMoves"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v, r.Int(n["maxMoves"], "defrag.maxMoves", 1, 16));
      d.max_moves = static_cast<int>(v);
    }
    if (n["maxChecks"]) {
      TESSERA_ASSIGN_OR_RETURN(d.max_checks,
                               r.Int(n["maxChecks"], "defrag.maxChecks", 1, 100'000'000));
    }
    if (n["holdFor"]) {
      TESSERA_ASSIGN_OR_RETURN(d.hold_for, r.Duration(n["holdFor"], "defrag.holdFor"));
    }
  }
  if (YAML::Node n = root["reservations"]) {
    TESSERA_RETURN_IF_ERROR(r.OnlyKeys(n, "reservations", KeysUnder("reservations")));
    core::ReservationOptions& o = c.core.reservations;
    auto seconds = [&](const YAML::Node& v, const char* key) -> absl::StatusOr<int64_t> {
      TESSERA_ASSIGN_OR_RETURN(std::chrono::milliseconds d, r.Duration(v, key));
      if (d.count() % 1000 != 0) return r.Error(v, StrCat(key, ": must be whole seconds"));
      return d.count() / 1000;
    };
    if (n["max"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v, r.Int(n["max"], "reservations.max", 0, 1000));
      o.max_reservations = static_cast<int>(v);
    }
    if (n["after"]) {
      TESSERA_ASSIGN_OR_RETURN(o.after_s, seconds(n["after"], "reservations.after"));
    }
    if (n["minGpus"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v, r.Int(n["minGpus"], "reservations.minGpus", 1, 64));
      o.min_gpus = static_cast<int32_t>(v);
    }
    if (n["runtimeEstimate"]) {
      TESSERA_ASSIGN_OR_RETURN(o.unknown_runtime_s,
                               seconds(n["runtimeEstimate"], "reservations.runtimeEstimate"));
      if (o.unknown_runtime_s < 1) {
        return r.Error(n["runtimeEstimate"], "reservations.runtimeEstimate: must be at least 1s");
      }
    }
    if (n["grace"]) {
      TESSERA_ASSIGN_OR_RETURN(o.grace_s, seconds(n["grace"], "reservations.grace"));
    }
    if (n["maxRuntimeGrace"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t v,
                               seconds(n["maxRuntimeGrace"], "reservations.maxRuntimeGrace"));
      c.core.max_runtime_grace = std::chrono::seconds(v);
    }
  }
  if (YAML::Node n = root["maxPodsPerCycle"]) {
    TESSERA_ASSIGN_OR_RETURN(int64_t v, r.Int(n, "maxPodsPerCycle", 1, 1'000'000));
    c.core.max_pods_per_cycle = static_cast<int>(v);
  }
  return c;
}

absl::StatusOr<SchedulerConfig> LoadSchedulerConfig(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return ParseSchedulerConfig(text, path);
}

}  // namespace tessera::k8s
