// Gangs restarted whole: a gang that declares tessera.dev/gang-restart: all (or whose PodGroup
// says spec.disruptionMode all) and loses a member to a GPU fault is evicted whole and placed
// again together. The one rule for a gang that loses a member (README "Gangs and GPU faults"):
//   - by default ("member") the member's controller makes a replacement and the engine places it
//     beside the survivors when room exists (core::Engine::Decide, "Where, for a gang that runs
//     members"); the survivors keep running;
//   - with "all", every other member placed then (the old members) is evicted through the
//     Eviction API (its PodDisruptionBudgets honoured: a refused eviction is tried again every
//     `retry` until the pod goes), and the gang's new members wait until no old member is left;
//     then they are placed together as a gang that starts (no survivor to stay beside).
// Lost to a GPU fault: the member is leaving (deleting, finished or deleted) while a GPU of its
// assignment is unhealthy in its node's inventory (the agent's fault policy evicts such pods),
// or its node is gone.
//
// Invariants: a gang has at most one restart under way; a restart's old members are the members
// placed when it started, and it ends when the last of them is gone. Restart-safe: each old
// member to evict is first marked with the pod condition tessera.dev/GangRestart (objects.h), and
// a restarted scheduler that sees a member so marked resumes the restart (Resume): the member is
// old (evicted again unless it is terminating already) and the new members wait for it to go.
//
// Example: gang g of 4 with restart all runs w0..w3; GPU 2 of w1's node fails and the agent
// evicts w1: Start(g, {w0, w1, w2, w3}) returns w0, w2, w3 to evict; their Job makes w4..w7,
// which wait (Leaving(g) > 0) until w0..w3 are gone, then go together.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace tessera::k8s {

class GangRestarts {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit GangRestarts(std::chrono::milliseconds retry) : retry_(retry) {}

  // Gang `gang` lost member `lost` to a fault; `placed`: its members placed now (bound or binding,
  // `lost` among them or not). Starts its restart unless one is under way, and returns the members
  // to evict now (the others); empty when one was under way.
  std::vector<std::string> Start(const std::string& gang, const std::string& lost,
                                 const std::vector<std::string>& placed, TimePoint now);
  // `key`, a member of `gang` marked as an old member of a restart (by this scheduler before a
  // restart of its own), joins that restart, which starts again if none is under way; its
  // eviction is due at once. No-op for a known old member.
  void Resume(const std::string& gang, const std::string& key, TimePoint now);
  // The pod `key` is gone (deleted, finished): a restart ends when none of its old members is left.
  // True when this ended one (its gang's new members may go now).
  bool Gone(const std::string& key);
  // Old members of `gang` not gone yet (0: no restart under way).
  int Leaving(const std::string& gang) const;
  // The old members still running whose eviction is due again (evicted `retry` ago or more, not
  // terminating: `deleting` says whether a pod is); marks them evicted at `now`.
  template <typename Deleting>
  std::vector<std::string> DueAgain(TimePoint now, Deleting deleting) {
    std::vector<std::string> out;
    for (auto& [gang, r] : restarts_) {
      for (auto& [key, at] : r.old) {
        if (now - at < retry_ || deleting(key)) continue;
        at = now;
        out.push_back(key);
      }
    }
    return out;
  }
  // The gang an old member's restart belongs to, or "" when `key` is no old member.
  std::string GangOf(const std::string& key) const;
  bool empty() const { return restarts_.empty(); }

 private:
  struct Restart {
    std::string lost;                      // the member lost to a fault
    std::map<std::string, TimePoint> old;  // old members not gone -> last eviction
  };
  std::chrono::milliseconds retry_;
  std::map<std::string, Restart> restarts_;  // by gang key
};

}  // namespace tessera::k8s
