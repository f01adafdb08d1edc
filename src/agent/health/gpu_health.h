// The node's GPU health over time: from what discovery finds now (each GPU's health conditions,
// the link matrix) and the XID errors the driver reports, which GPUs are in service, which are
// kept free of new pods, which have failed, which NVLinks are down, and when each returns.
//
// Rules (the fault table, agent/discovery/xid.h, says what each fault means):
//   - a fault whose effect is kDrain or kFail takes the GPU out of new work at once; the GPU's
//     published effect is the strongest fault it holds;
//   - a condition (a lost GPU, the driver's recovery action, pending remapping...) holds while
//     discovery reports it; an XID holds from its event;
//   - a fault is let go once it has not been seen for the quiet period: a condition that cleared
//     (the GPU was reset, the remapping applied, the GPU answers again) or an XID older than the
//     quiet period. The GPU returns to service when it holds none: no restart of anything;
//   - an NVLink is down when a pair of GPUs that was joined by NVLink (the best link the tracker
//     has seen for the pair) is joined by less now; the published matrix keeps it degraded until
//     the link has been back for the quiet period, so new decisions never use a flapping link;
//   - application and informational XIDs change nothing here (the responder tells the pod).
//
// Example (quiet period 5 s): XID 48 on GPU 1 at t=0 and the driver's recovery action "reset"
// from t=0.2: GPU 1 is out of service (kFail) from t=0, change kOutOfService. The GPU is reset at
// t=60: the recovery action reads none from then on. At t=65 nothing has been seen for 5 s: GPU 1
// is back in service, change kBackInService.
//
// Pure: time comes from the caller, nothing is read or written. Not thread-safe: one owner (the
// agent's loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "agent/discovery/discovery.h"

namespace tessera::agent {

struct HealthTrackerOptions {
  // How long a GPU (or an NVLink) must be free of faults before it returns to service.
  std::chrono::milliseconds quiet_period{300'000};
};

// A change the tracker made to what is published, for the responder (health/fault_responder.h).
struct HealthChange {
  enum class Kind {
    kOutOfService,   // the GPU failed (effect kFail), or a drained GPU failed
    kDraining,       // the GPU takes no new pods; the running ones stay (effect kDrain)
    kBackInService,  // the GPU holds no fault any more
    kLinkDown,       // the NVLink between `gpu` and `peer` is down
    kLinkUp,         // ... and back (after the quiet period)
  };
  Kind kind = Kind::kOutOfService;
  int32_t gpu = -1;
  std::string uuid;
  int32_t peer = -1;  // for links
  std::string peer_uuid;
  std::string reason;  // what happened, for Events
  std::vector<int32_t> xids;
  FaultEffect effect = FaultEffect::kNone;
  // When the fault began (kOutOfService, kDraining, kLinkDown) or when it began and when the GPU
  // returned (kBackInService, kLinkUp: `since` is the fault's beginning).
  std::chrono::steady_clock::time_point since;
};
std::string_view HealthChangeName(HealthChange::Kind kind);

class GpuHealthTracker {
 public:
  using Clock = std::chrono::steady_clock;

  explicit GpuHealthTracker(HealthTrackerOptions options = {}) : options_(options) {}

  // What discovery found at `now`.
  void Observe(const NodeGpus& found, Clock::time_point now);
  // An XID the driver reported at `now` (application and informational ones change nothing).
  void OnXid(const HealthEvent& event, Clock::time_point now);
  // Lets go of faults not seen for the quiet period. Called with every loop of the agent.
  void Tick(Clock::time_point now);

  // The last discovery with each GPU's health and fault effect as the tracker holds them and the
  // link matrix with the links it holds down; empty before the first Observe.
  const NodeGpus& Published() const { return published_; }
  // Changes since the last call, in order.
  std::vector<HealthChange> TakeChanges();

  // GPU indices whose published effect is kFail; pairs (i < k) whose NVLink is held down.
  std::vector<int32_t> FailedGpus() const;
  std::vector<std::pair<int32_t, int32_t>> DownLinks() const;
  // The earliest time a held fault may be let go (Clock::time_point::max() when none).
  Clock::time_point NextRelease() const;

 private:
  struct Fault {
    std::string key;  // "xid-48", "reset-required": one entry per kind
    FaultEffect effect = FaultEffect::kNone;
    std::vector<int32_t> xids;
    std::string text;
    Clock::time_point first_seen, last_seen;
    bool present = false;  // a condition discovery reports now (XIDs never are)
  };
  struct GpuState {
    std::map<std::string, Fault> faults;
    FaultEffect published = FaultEffect::kNone;
    Clock::time_point since;  // when `published` left kNone
  };
  struct LinkState {
    core::Link best;      // the best link seen between the pair: what it should be
    core::Link degraded;  // what it was while down (published while held)
    bool held = false, down_now = false;
    Clock::time_point first_seen, last_seen;
  };

  // Recomputes each GPU's published effect and the published matrix; records changes.
  void Publish(Clock::time_point now);
  void Release(Clock::time_point now);

  HealthTrackerOptions options_;
  NodeGpus found_;                                          // the last discovery
  NodeGpus published_;                                      // what Published() returns
  std::map<std::string, GpuState> gpus_;                    // by GPU UUID
  std::map<std::pair<int32_t, int32_t>, LinkState> links_;  // by index pair, i < k
  std::vector<HealthChange> changes_;
};

}  // namespace tessera::agent
