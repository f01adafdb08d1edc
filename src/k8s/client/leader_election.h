// Leader election with a coordination.k8s.io/v1 Lease, following client-go's algorithm
// (tools/leaderelection/leaderelection.go, resourcelock/leaselock.go), so that several replicas
// can run and exactly one acts.
//
// Acquire: GET the Lease (create it, holding it, when absent). Another holder's lease counts as
// expired only when the local time at which this replica last saw the record change, plus
// leaseDurationSeconds, has passed: remote timestamps are never trusted (clock skew). Taking or
// renewing is a PUT with the observed resourceVersion, so of two replicas racing, one gets 409 and
// loses. Taking over adds one to leaseTransitions; renewing keeps acquireTime and transitions.
// Attempts are retry_period apart (jittered by up to 1.2x while acquiring).
//
// Lead: renew every retry_period; if no renewal succeeds within renew_deadline, leadership is lost
// (on_stopped_leading runs, and the elector stops: a replica that lost the lease restarts rather
// than risk acting on stale state, as kube-scheduler does). Stop() while leading releases the
// lease (holder "" and a 1 s duration), so another replica takes over at once.
//
// Constraint (checked): lease_duration > renew_deadline > 1.2 x retry_period.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/random.h"
#include "k8s/client/http.h"
#include "nlohmann/json.hpp"

namespace tessera::k8s {

struct LeaderElectionConfig {
  std::string lease_namespace = "kube-system";
  std::string lease_name = "tessera-scheduler";
  std::string identity;  // unique per replica: hostname + random suffix
  std::chrono::milliseconds lease_duration{15'000};
  std::chrono::milliseconds renew_deadline{10'000};
  std::chrono::milliseconds retry_period{2'000};
};

absl::Status ValidateLeaderElection(const LeaderElectionConfig& config);

// "2026-11-30T09:02:22.123456Z" (metav1.MicroTime).
std::string FormatMicroTime(std::chrono::system_clock::time_point t);
// "2026-11-30T09:02:22Z" (metav1.Time).
std::string FormatTime(std::chrono::system_clock::time_point t);
// "<hostname>_<16 hex digits>".
std::string DefaultIdentity();

// The spec of a coordination.k8s.io/v1 Lease as leader election reads it. Anyone allowed to write
// the Lease can put anything in it: a field of the wrong type is an error that names it, never an
// exception (an absent field is its zero value, as client-go reads it).
struct LeaseRecord {
  std::string holder;  // spec.holderIdentity
  int64_t duration_s = 0;
  std::string acquire_time;
  std::string renew_time;
  int64_t transitions = 0;
  std::string resource_version;  // metadata.resourceVersion
  bool operator==(const LeaseRecord&) const = default;
};
[[nodiscard]] absl::StatusOr<LeaseRecord> LeaseRecordFromJson(const nlohmann::json& lease);

class LeaderElector {
 public:
  struct Callbacks {
    std::function<void()> on_started_leading;
    std::function<void()> on_stopped_leading;
    std::function<void(const std::string&)> on_new_leader;  // the holder changed (may be us)
  };

  LeaderElector(ApiClient& client, LeaderElectionConfig config, Callbacks callbacks);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  // Stops; releases the lease if this replica holds it.
  void Stop();

  bool IsLeader() const { return leading_.load(); }
  std::string ObservedLeader() const;
  const LeaderElectionConfig& config() const { return config_; }

  // One attempt (exposed for tests): true if this replica holds the lease afterwards.
  bool TryAcquireOrRenew();

 private:
  using Record = LeaseRecord;
  void Run();
  bool Sleep(std::chrono::milliseconds d);
  void Release();
  std::string LeasePath() const;
  nlohmann::json LeaseObject(const Record& r, const std::string& resource_version) const;
  void Observe(const Record& r, std::chrono::steady_clock::time_point now);

  ApiClient& client_;
  LeaderElectionConfig config_;
  Callbacks callbacks_;
  Random random_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leading_{false};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Record observed_;
  std::string observed_rv_;
  std::chrono::steady_clock::time_point observed_at_{};
  bool observed_any_ = false;
};

}  // namespace tessera::k8s
