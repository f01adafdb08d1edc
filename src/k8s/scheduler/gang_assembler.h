// Gangs (tessera.dev/gang NAME within a namespace, tessera.dev/gang-size K): which pods belong to
// which gang, and when a gang is ready to be placed. It decides nothing about where: the engine
// places a ready gang all-or-nothing (Engine::PlaceGang).
//
// A gang's size (and min, tessera.dev/gang-min) are those its first member gave; members giving
// others are bad input. A gang is ready when its pending members and those already placed
// (binding or bound) number at least its min (its size when not elastic) and fewer than its
// size are placed: then the oldest pending members, up to the size, are handed to the engine
// (Engine::PlaceElasticGang owns the rules: how many of them start together, where); members
// beyond the size wait, and say so. Example: gang g of size 4 with members a (bound), b, c
// (pending): not ready (3 of 4); d arrives: b, c, d are placed together, with a where it is. An
// elastic gang of size 8 and min 4 with 5 members pending is ready: as many as fit (at least 4)
// start; the others are retried as room appears.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "k8s/scheduler/pod_tracker.h"

namespace tessera::k8s {

class GangAssembler {
 public:
  // The gang key of a pod asking for one ("ns/name"), else "".
  static std::string KeyOf(const PodInfo& pod);

  // Adds the pod to its gang (pod.gang), leaving any other; no-op for pods without a gang.
  void Join(const std::string& key, PodTracker::Pod& pod);
  void Leave(const std::string& key, PodTracker::Pod& pod);

  struct Round {
    int32_t size = 0;                     // the gang's size
    int32_t min = 0;                      // the fewest it starts with (size when not elastic)
    int placed = 0;                       // members binding or bound
    std::vector<std::string> running;     // their keys
    std::vector<std::string> wrong_size;  // members asking another size: bad input
    std::vector<std::string> pending;     // members waiting to be placed
    std::vector<std::string> extra;       // pending members beyond the size (after `ready`)
    bool ready = false;  // `pending` holds exactly the members to place now, oldest first
  };
  // Where the gang of `gang_key` stands now.
  Round Assemble(const std::string& gang_key, const PodTracker& pods) const;
  // Why a member of `round` (gang `gang_key`) asking `ask` is bad input (it is in wrong_size):
  // the annotation that differs from what the other members give.
  static std::string Mismatch(const std::string& gang_key, const Round& round,
                              const core::GangAsk& ask);
  // Of `round`'s running members, the one created first (ties: by name); nullptr for none. The
  // one running member that hears how many run when an elastic gang grows.
  static const PodInfo* OldestRunning(const Round& round, const PodTracker& pods);

  // Gangs still short of members, each reported once until it is next assembled: the members
  // waiting and how many members exist.
  struct Shortage {
    std::string gang;
    int32_t size = 0;
    int32_t min = 0;  // the fewest it starts with (size when not elastic)
    int present = 0;
    std::vector<std::string> waiting;
  };
  std::vector<Shortage> TakeShortages(const PodTracker& pods);
  void Assembled(const std::string& gang_key);

  bool empty() const { return gangs_.empty(); }

 private:
  struct Gang {
    int32_t size = 0;
    int32_t min = 0;                // GangAsk::min as the first member gave it
    std::set<std::string> members;  // pod keys
    bool shortage_reported = false;
  };
  absl::flat_hash_map<std::string, Gang> gangs_;
};

}  // namespace tessera::k8s
