// Reservations with backfill (issue 31): room held for the big pods that have waited longest, so
// that small pods stop refilling the holes a big pod needs, as Slurm's backfill does.
//
// The rule, one for the simulator and the scheduler:
//  - Eligible: a waiting pod asking at least `min_gpus` whole GPUs, or a gang whose members all
//    ask whole GPUs, once it has waited `after_s`. The first `max_reservations` eligible ones in
//    the queue's order (priority, then fair share, then arrival: the one that waited longest
//    first) each get a reservation; the others wait for one to end.
//  - Where: the site (a node; for a gang with a topology level, a domain of that level) where the
//    GPUs it asks are expected to free first. A GPU frees when the last pod on it ends; a pod's
//    expected end is its start plus its declared maximum run time (enforced by whoever runs it),
//    or, undeclared, its start plus `unknown_runtime_s`, and for one that has already run longer,
//    now plus `unknown_runtime_s` (a conservative estimate: the pods that overran are not taken
//    to end soon). On a node the pod's CPU and memory must also be free by then (pods ending
//    release theirs). Ties: the lower node (domain) first. The reservation holds the GPUs that
//    free first there (the pod's `count`, or the gang's whole GPUs summed) and, for a pod, its CPU
//    and memory on that node; its expected start is when the last of them frees.
//  - Held: another pod may not take a held GPU, nor so much CPU or memory on the node that the
//    reservation's would not be free at its expected start, unless
//      * it is the owner (the pod, or a member of the gang),
//      * backfill: it declares a maximum run time that ends by the reservation's expected start,
//      * it has a higher priority than the owner (priorities still win; the reservation moves,
//        below).
//    Place() gives such a pod the placement the policy prefers when that takes nothing held, and
//    otherwise the policy's choice among what is not held: it runs elsewhere if it fits there.
//    PlaceGang() does the same for a gang (or an elastic gang's waiting members): a member may
//    take held room only as a pod may.
//  - Bounded: at most `max_reservations` at once. At each Update a reservation's expected start
//    is recomputed over the GPUs it holds; once that is later than its deadline (the expected
//    start when it was chosen plus `grace_s`: its estimate proved wrong, or a higher-priority
//    pod took room it held), it is dropped and chosen again from scratch (maybe elsewhere). A
//    reservation ends when its owner starts or stops waiting.
// Off (max_reservations 0): Update makes none and Place is the engine's decision itself.
//
// Example (reservations_test.cc): two nodes of 4 GPUs, `a` holding 3 one-GPU pods ending at
// 100, 200, 300 and `b` holding 4 ending at 50, 60, 400, 500. A pod asking 4 GPUs waited 30 s at
// now = 30: on `a` 4 GPUs are free by 300 (one free now, then 100, 200, 300), on `b` by 500, so
// it reserves a's 4 GPUs with expected start 300. A one-GPU pod arriving then goes to `a`'s free
// GPU only if it declares a run time ending by 300 (backfill); otherwise it waits for b's GPU
// freeing at 50 (the policy's choice among GPUs not held).
//
// Pure and deterministic: time is passed in; the pods running are told as they start and end
// (Started, Ended). Not thread-safe: the engine's owner owns this too.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/engine.h"

namespace tessera::core {

struct ReservationOptions {
  int max_reservations = 0;          // at most this many at once; 0: off
  int32_t min_gpus = 2;              // whole GPUs a pod asks to be eligible (any whole-GPU gang is)
  int64_t after_s = 30;              // waited at least this long (seconds)
  int64_t unknown_runtime_s = 3600;  // expected run time of a pod that declares none (above)
  int64_t grace_s = 60;              // how late past its expected start a reservation may run
};

// One reservation: who, where, since when, and when its owner is expected to start.
struct Reservation {
  std::string owner;  // the pod's name, or the gang's (GangAsk::name)
  int32_t priority = 0;
  std::vector<Candidate> gpus;  // the GPUs held, per node (masks never empty)
  int64_t cpu_milli = 0;        // held on gpus[0].node (a pod; 0 for a gang)
  int64_t memory_mib = 0;
  int64_t since = 0;           // when it was made (last chosen)
  int64_t expected_start = 0;  // when what it holds is expected to be free (latest estimate)
  int64_t deadline = 0;        // chosen again when the expected start passes this
};

// How a pod's placement stood with the reservations.
enum class Admission : uint8_t {
  kFree,      // took nothing held
  kOwner,     // the owner of what it took
  kBackfill,  // took held room, declared to end before it is needed
  kPriority,  // took held room by a higher priority (the reservation will move)
  kRefused,   // would take held room it may not
};

class Reservations {
 public:
  explicit Reservations(ReservationOptions options) : options_(options) {}

  bool enabled() const { return options_.max_reservations > 0; }
  const ReservationOptions& options() const { return options_; }
  const std::vector<Reservation>& reservations() const { return reservations_; }

  // The pods running: what they hold, since when, and their declared maximum run time (nullopt:
  // none). A pod not told here holding a GPU makes that GPU never expected to free.
  // A pod's start also ends the reservation it owned (a gang's ends at the next Update).
  void Started(const std::string& pod, const Placement& placement, int64_t start,
               std::optional<int64_t> max_runtime_s);
  void Ended(const std::string& pod);

  // A waiting pod or gang, as the queue orders them.
  struct Waiting {
    std::string_view owner;            // the pod's name or the gang's (outlives the call)
    std::span<const PodRequest> pods;  // the pod, or the gang's members still waiting
    int32_t priority = 0;
    int64_t since = 0;  // waiting since
  };
  // Drops reservations whose owner no longer waits or whose estimate proved wrong, recomputes
  // the others' expected starts, and makes new ones for the first eligible waiting in `waiting`
  // (the queue's order) up to the bound. Returns how many were made.
  int Update(int64_t now, std::span<const Waiting> waiting, const Engine& engine);

  // How `placement` (of `request`, declaring `max_runtime_s`) stands with the reservations now.
  Admission Admit(const PodRequest& request, const Placement& placement, int64_t now,
                  std::optional<int64_t> max_runtime_s, const ClusterState& state) const;

  // The engine's decision for one pod (Mode kCommit, kTestOnly or kApply) under the
  // reservations: the policy's choice if it takes nothing the pod may not take, else its choice
  // among the GPUs and nodes left (a candidate list: a scan without the policy's index). `how`
  // (optional) gets how the placement stood (kRefused never: such a choice is not made).
  // `allowed` (optional): the only nodes the pod may use (the live scheduler's taints, node
  // selectors and affinity), in both decisions.
  PlacementResult Place(Engine& engine, const PodRequest& request, Mode mode, int64_t now,
                        std::optional<int64_t> max_runtime_s, Admission* how = nullptr,
                        const NodeSet* allowed = nullptr) const;

  // The same rule for a gang (`ask`: Ask::Gang or Ask::ElasticGang, with its where, mode and
  // explain): the policy's choice if no member it places takes room held from it, else the
  // policy's choice among the GPUs and nodes no reservation holds from any member (within
  // ask.where, as a candidate list), so that a gang runs where it fits instead of waiting behind
  // room held for another; where it fits only on held room, every member gets kNoFitNow saying so.
  // A member may take held room as a pod may (its own gang's, a higher priority, or backfill
  // when it declares a run time ending in time). `owners`: the members as the reservations name
  // them (the scheduler's gangs are "ns/gang"; empty: ask.pods); `max_runtime_s`: each member's
  // declared run time (empty: none declares one).
  std::vector<PlacementResult> PlaceGang(
      Engine& engine, Ask ask, int64_t now, std::span<const PodRequest> owners = {},
      std::span<const std::optional<int64_t>> max_runtime_s = {}) const;

  // The GPUs of `node` (a mask) held by reservations that `request`, declaring `max_runtime_s`,
  // may not take at `now` (not its own, no backfill by then, no higher priority).
  uint64_t HeldFrom(const PodRequest& request, NodeId node, int64_t now,
                    std::optional<int64_t> max_runtime_s) const;

 private:
  struct Running {
    Placement placement;
    int64_t start = 0;
    std::optional<int64_t> max_runtime_s;
  };
  // When a running pod is expected to end, seen at `now`.
  int64_t ExpectedEnd(const Running& pod, int64_t now) const;
  // When each GPU of `node` is expected to be wholly free (now if it is; INT64_MAX if a holder
  // is unknown), seen at `now`.
  std::vector<int64_t> GpuFreeTimes(const ClusterState& state, NodeId node, int64_t now) const;
  // The earliest time from `t` on by which `cpu_milli` and `memory_mib` are free on `node`
  // (pods ending by then release theirs), counting `extra_*` as taken now; INT64_MAX if never.
  int64_t ResourcesFreeBy(const ClusterState& state, NodeId node, int64_t t, int64_t now,
                          int64_t cpu_milli, int64_t memory_mib) const;
  // A reservation for `w` at the site freeing first, or nullopt where none can hold it.
  std::optional<Reservation> Choose(int64_t now, const Waiting& w, const Engine& engine) const;
  // The expected start over what `r` holds, at `now`.
  int64_t ExpectedStart(const Reservation& r, const ClusterState& state, int64_t now) const;
  bool Eligible(const Waiting& w, int64_t now) const;
  // Whether `request` may take the room held on `r` (owner, backfill, priority).
  Admission Exception(const PodRequest& request, const Reservation& r, int64_t now,
                      std::optional<int64_t> max_runtime_s) const;

  ReservationOptions options_;
  std::vector<Reservation> reservations_;
  absl::flat_hash_map<std::string, Running> running_;
  absl::flat_hash_map<int32_t, std::vector<std::string>> on_node_;  // running pods per node
};

}  // namespace tessera::core
