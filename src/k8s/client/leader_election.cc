#include "k8s/client/leader_election.h"

#include <unistd.h>

#include <ctime>
#include <random>

#include "common/status.h"
#include "common/strings.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

absl::Status ValidateLeaderElection(const LeaderElectionConfig& c) {
  if (c.identity.empty()) return absl::InvalidArgumentError("leader election: empty identity");
  if (c.lease_name.empty() || c.lease_namespace.empty()) {
    return absl::InvalidArgumentError("leader election: lease name and namespace are required");
  }
  if (c.retry_period.count() <= 0) {
    return absl::InvalidArgumentError("leader election: retryPeriod must be positive");
  }
  if (c.lease_duration <= c.renew_deadline) {
    return absl::InvalidArgumentError(
        "leader election: leaseDuration must be longer than renewDeadline");
  }
  if (c.renew_deadline.count() * 10 <= c.retry_period.count() * 12) {
    return absl::InvalidArgumentError(
        "leader election: renewDeadline must be longer than 1.2 x retryPeriod");
  }
  if (c.lease_duration.count() % 1000 != 0) {
    return absl::InvalidArgumentError(
        "leader election: leaseDuration must be whole seconds (the Lease stores seconds)");
  }
  return absl::OkStatus();
}

std::string FormatMicroTime(std::chrono::system_clock::time_point t) {
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(us / 1'000'000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:06d}Z", buf, us % 1'000'000);
}

std::string FormatTime(std::chrono::system_clock::time_point t) {
  std::time_t secs = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string DefaultIdentity() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof host, "unknown");
  }
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return fmt::format("{}_{:016x}", host, r);
}

LeaderElector::LeaderElector(ApiClient& client, LeaderElectionConfig config, Callbacks callbacks)
    : client_(client),
      config_(std::move(config)),
      callbacks_(std::move(callbacks)),
      random_(std::hash<std::string>()(config_.identity)) {}

LeaderElector::~LeaderElector() { Stop(); }

std::string LeaderElector::LeasePath() const {
  return StrCat("/apis/coordination.k8s.io/v1/namespaces/", config_.lease_namespace, "/leases/",
                config_.lease_name);
}

std::string LeaderElector::ObservedLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return observed_.holder;
}

nlohmann::json LeaderElector::LeaseObject(const Record& r, const std::string& rv) const {
  nlohmann::json meta = {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}};
  if (!rv.empty()) meta["resourceVersion"] = rv;
  nlohmann::json spec = {{"holderIdentity", r.holder},
                         {"leaseDurationSeconds", r.duration_s},
                         {"leaseTransitions", r.transitions}};
  if (!r.acquire_time.empty()) spec["acquireTime"] = r.acquire_time;
  if (!r.renew_time.empty()) spec["renewTime"] = r.renew_time;
  return {{"apiVersion", "coordination.k8s.io/v1"},
          {"kind", "Lease"},
          {"metadata", std::move(meta)},
          {"spec", std::move(spec)}};
}

void LeaderElector::Observe(const Record& r, std::chrono::steady_clock::time_point now) {
  bool changed_holder = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!observed_any_ || !(r == observed_)) {
      changed_holder = !observed_any_ || r.holder != observed_.holder;
      observed_ = r;
      observed_at_ = now;
      observed_any_ = true;
    }
  }
  if (changed_holder && callbacks_.on_new_leader && !r.holder.empty()) {
    callbacks_.on_new_leader(r.holder);
  }
}

namespace {
// The value of `key` in `object`: absent or null leaves `*out` as it is; another type is an error.
absl::Status ReadString(const nlohmann::json& object, const char* key, const char* path,
                        std::string* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return absl::InvalidArgumentError(StrCat(path, ": expected a string"));
  *out = it->get<std::string>();
  return absl::OkStatus();
}
absl::Status ReadInt(const nlohmann::json& object, const char* key, const char* path,
                     int64_t* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number_integer()) {
    return absl::InvalidArgumentError(StrCat(path, ": expected an integer"));
  }
  *out = it->get<int64_t>();
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<LeaseRecord> LeaseRecordFromJson(const nlohmann::json& lease) {
  if (!lease.is_object()) return absl::InvalidArgumentError("lease: expected an object");
  LeaseRecord r;
  auto meta = lease.find("metadata");
  if (meta != lease.end() && !meta->is_null()) {
    if (!meta->is_object()) return absl::InvalidArgumentError("metadata: expected an object");
    TESSERA_RETURN_IF_ERROR(
        ReadString(*meta, "resourceVersion", "metadata.resourceVersion", &r.resource_version));
  }
  auto spec = lease.find("spec");
  if (spec == lease.end() || spec->is_null()) return r;
  if (!spec->is_object()) return absl::InvalidArgumentError("spec: expected an object");
  TESSERA_RETURN_IF_ERROR(ReadString(*spec, "holderIdentity", "spec.holderIdentity", &r.holder));
  TESSERA_RETURN_IF_ERROR(
      ReadInt(*spec, "leaseDurationSeconds", "spec.leaseDurationSeconds", &r.duration_s));
  TESSERA_RETURN_IF_ERROR(ReadString(*spec, "acquireTime", "spec.acquireTime", &r.acquire_time));
  TESSERA_RETURN_IF_ERROR(ReadString(*spec, "renewTime", "spec.renewTime", &r.renew_time));
  TESSERA_RETURN_IF_ERROR(
      ReadInt(*spec, "leaseTransitions", "spec.leaseTransitions", &r.transitions));
  return r;
}

bool LeaderElector::TryAcquireOrRenew() {
  auto now = std::chrono::steady_clock::now();
  std::string now_text = FormatMicroTime(std::chrono::system_clock::now());
  const int64_t duration_s = config_.lease_duration.count() / 1000;
  absl::StatusOr<nlohmann::json> got = client_.Get(LeasePath());
  if (!got.ok() && got.status().code() == absl::StatusCode::kNotFound) {
    Record r{config_.identity, duration_s, now_text, now_text, 0};
    absl::StatusOr<nlohmann::json> created = client_.Create(
        StrCat("/apis/coordination.k8s.io/v1/namespaces/", config_.lease_namespace, "/leases"),
        LeaseObject(r, ""));
    if (!created.ok()) {
      spdlog::debug("leader election: create lease: {}", FromAbsl(created.status().message()));
      return false;
    }
    Observe(r, now);
    return true;
  }
  if (!got.ok()) {
    spdlog::warn("leader election: get lease {}/{}: {}", config_.lease_namespace,
                 config_.lease_name, FromAbsl(got.status().message()));
    return false;
  }
  absl::StatusOr<LeaseRecord> read = LeaseRecordFromJson(*got);
  if (!read.ok()) {
    // As client-go: a Lease that cannot be read is never taken over (a replica that cannot tell
    // who holds it must not act); the attempt fails and is retried.
    spdlog::warn("leader election: lease {}/{} cannot be read: {}", config_.lease_namespace,
                 config_.lease_name, FromAbsl(read.status().message()));
    return false;
  }
  Record current = *read;
  Observe(current, now);
  std::chrono::steady_clock::time_point observed_at;
  {
    std::lock_guard<std::mutex> lock(mu_);
    observed_at = observed_at_;
  }
  if (!current.holder.empty() && current.holder != config_.identity &&
      observed_at + std::chrono::seconds(current.duration_s) > now) {
    return false;  // held by another replica and not expired
  }
  Record next{config_.identity, duration_s, now_text, now_text, current.transitions};
  if (current.holder == config_.identity) {
    next.acquire_time = current.acquire_time;
  } else {
    next.transitions = current.transitions + 1;
  }
  absl::StatusOr<nlohmann::json> put =
      client_.Update(LeasePath(), LeaseObject(next, current.resource_version));
  if (!put.ok()) {
    if (put.status().code() != absl::StatusCode::kAborted) {
      spdlog::warn("leader election: update lease: {}", FromAbsl(put.status().message()));
    }
    return false;
  }
  Observe(next, now);
  return true;
}

void LeaderElector::Release() {
  absl::StatusOr<nlohmann::json> got = client_.Get(LeasePath());
  if (!got.ok()) return;
  absl::StatusOr<LeaseRecord> current = LeaseRecordFromJson(*got);
  if (!current.ok() || current->holder != config_.identity) return;
  std::string now_text = FormatMicroTime(std::chrono::system_clock::now());
  Record r{"", 1, now_text, now_text, current->transitions};
  absl::StatusOr<nlohmann::json> put =
      client_.Update(LeasePath(), LeaseObject(r, current->resource_version));
  if (put.ok()) {
    spdlog::info("leader election: released lease {}/{}", config_.lease_namespace,
                 config_.lease_name);
  }
}

bool LeaderElector::Sleep(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [&] { return stop_.load(); });
}

void LeaderElector::Run() {
  spdlog::info("leader election: {} tries to acquire lease {}/{}", config_.identity,
               config_.lease_namespace, config_.lease_name);
  // Acquire.
  while (!stop_) {
    if (TryAcquireOrRenew()) break;
    auto wait = std::chrono::milliseconds(static_cast<int64_t>(
        static_cast<double>(config_.retry_period.count()) * (1.0 + 1.2 * random_.UniformDouble())));
    if (!Sleep(wait)) return;
  }
  if (stop_) return;
  leading_ = true;
  spdlog::info("leader election: {} acquired lease {}/{}", config_.identity,
               config_.lease_namespace, config_.lease_name);
  if (callbacks_.on_started_leading) callbacks_.on_started_leading();
  // Renew.
  auto last_renew = std::chrono::steady_clock::now();
  while (!stop_) {
    if (!Sleep(config_.retry_period)) break;
    if (TryAcquireOrRenew()) {
      last_renew = std::chrono::steady_clock::now();
      continue;
    }
    if (std::chrono::steady_clock::now() - last_renew >= config_.renew_deadline) {
      leading_ = false;
      spdlog::error("leader election: {} could not renew lease {}/{} within {} ms; stepping down",
                    config_.identity, config_.lease_namespace, config_.lease_name,
                    config_.renew_deadline.count());
      if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading();
      return;
    }
  }
}

void LeaderElector::Start() {
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (leading_.exchange(false)) {
    Release();
    if (callbacks_.on_stopped_leading) callbacks_.on_stopped_leading();
  }
}

}  // namespace tessera::k8s
