// Queues (queues.tessera.dev): who is owed which GPUs, who may borrow beyond that, whose pod goes
// next, and who must give GPUs back. Pure bookkeeping, shared by the live scheduler and the
// simulator so that both order and reclaim by one rule.
//
// A queue has a parent (queues form a tree; pods go to leaf queues), and per resource
// (resources.h: gpu, gpuMemory, gpuCompute) a deserved amount and a limit, each optional, and a
// weight for borrowing. The set keeps, per queue, what its pods hold (allocated) and what its
// waiting pods ask (pending), and derives:
//
//  - Fair share, per resource, top down from the cluster's capacity. Among the children of one
//    parent (the top-level queues share the cluster): each first gets its deserved amount, capped
//    by its demand (allocated + pending) and its limit (when the deserved amounts add up to more
//    than there is, each gets its part in proportion); what is left is shared in proportion to the
//    weights among those that want more, capped the same way, until nothing is left or nobody
//    wants more (water filling). A queue's fair share is what its children share in turn.
//  - Order (Pick): of the queues with a pod ready at one priority, the one furthest below its fair
//    share by dominant-resource fairness: the largest of allocated / fair share over the three
//    resources, compared exactly as fractions of integers, lowest first; top down through the tree
//    (first the top-level queue furthest below, then inside it); ties to the queue whose waiting
//    pod arrived first. A queue holding nothing is at 0, so it goes before every queue that holds
//    something at its priority: a queue cannot starve behind another's backlog.
//    With a usage half-life (SetHalfLife), what a queue holds counts together with what it held
//    lately: the dominant share is of allocated + decayed usage (usage_history.h) against the fair
//    share, so a queue that burst an hour ago goes after one that has held its share steadily,
//    until its burst has decayed. Half-life 0 (the default) keeps no history: the order above.
//    Only the order remembers: fair shares, limits and reclaim are by what queues hold now.
//  - Limits (OverLimit): a pod is admitted only if its queue and every ancestor stay within their
//    limits.
//  - Reclaim (MayReclaim, KeepsDeserved): a pod of a queue below its deserved share (still within
//    it with the pod) may take GPUs back from a queue above its deserved share, never taking that
//    queue below it. Between queues of different parents the rule applies to the two ancestors
//    that are siblings under their lowest common ancestor (and every queue on the way up).
//
// Worked example: 8 GPUs; queues `train` (deserved 6 GPUs, weight 1) and `infer` (deserved 2,
// weight 1). train holds 7 whole GPUs with more pending; infer holds 1 and asks for 2 more. Fair
// shares: train min(6, demand) = 6, infer 2, nothing left: train is at 7/6, infer at 1/2, so
// infer's pods go first; when nothing is free, infer (1 + 1 <= 2: below its deserved share) may
// reclaim one GPU from train (7 - 1 >= 6), but not two.
//
// Names: pods name their queue (tessera.dev/queue, default `default`). With `implicit` on (no
// Queue objects exist at all, or queues were never defined), a name without a spec is a top-level
// queue of its own with nothing deserved, no limit and weight 1; `default` always is. Invalid
// specs (a parent that does not exist, a loop of parents, a limit below the deserved amount, a
// negative amount) make the queue and its descendants unusable, with the reason.
//
// Accounting is by queue name and survives spec changes: a queue deleted and created again finds
// its pods' allocations. Not thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/queues/resources.h"
#include "core/queues/usage_history.h"

namespace tessera::core {

struct QueueSpec {
  std::string name;
  std::string parent;  // "" top level
  // Per resource (QueueResourceIndex); unset: nothing deserved of it / no limit on it.
  std::array<std::optional<int64_t>, kQueueResourceCount> deserved;
  std::array<std::optional<int64_t>, kQueueResourceCount> limit;
  int64_t weight = 1;  // share of what is left after deserved amounts; 0 never borrows
  // The namespaces whose pods may use this queue; empty: any namespace.
  std::vector<std::string> namespaces;
  bool operator==(const QueueSpec&) const = default;
};

// Where a pod stands in its queue's order: creation time, then first seen (any monotonic key).
using Arrival = std::pair<int64_t, int64_t>;

class QueueSet {
 public:
  QueueSet();

  // Replaces every spec.
  void SetSpecs(std::vector<QueueSpec> specs);
  void set_implicit(bool on);
  bool implicit() const { return implicit_; }
  void SetCapacity(const QueueResources& capacity);
  const QueueResources& capacity() const { return capacity_; }

  // Fair share that remembers (usage_history.h): the half-life of the usage the order counts, in
  // milliseconds; 0 (the default) keeps no history. Changing it keeps the histories (0 drops them).
  void SetHalfLife(int64_t half_life_ms);
  int64_t half_life_ms() const { return half_life_ms_; }
  // The clock moved to `now_ms`: every queue's decayed usage takes in what it held since the last
  // time. Call it before changing what queues hold at `now_ms`, so that each holding counts for
  // the time it was held.
  void AdvanceTo(int64_t now_ms);
  // A queue's history read back (after a restart: its usage `usage` at `at_ms`). It replaces the
  // history kept here only if that began after `at_ms` (this process started after the record
  // was written, so the record knows more of the past); the time between `at_ms` and the next
  // AdvanceTo counts as holding what the queue holds then. Returns whether it was taken.
  bool RestoreUsage(const std::string& queue, const QueueResources& usage, int64_t at_ms);
  // Per leaf queue with a history: its decayed usage and the time it is for (for writing it back).
  struct UsageRecord {
    std::string queue;
    QueueResources usage;
    int64_t at_ms = 0;
  };
  std::vector<UsageRecord> UsageRecords() const;

  // Whether pods may name `queue`; when not, *why says so for the pod's owner.
  bool Usable(std::string_view queue, std::string* why = nullptr);
  // Whether pods of namespace `ns` may use `queue` (its spec.namespaces; a queue that does not
  // exist admits no one but as Usable says). When not, *why says so for the pod's owner.
  bool Admits(std::string_view queue, std::string_view ns, std::string* why = nullptr);

  // What a queue's pods hold and ask; counted by name whether or not the queue exists.
  void AddAllocated(const std::string& queue, const QueueResources& amount);
  void SubAllocated(const std::string& queue, const QueueResources& amount);
  void AddPending(const std::string& queue, const QueueResources& amount, int64_t pods);
  void SubPending(const std::string& queue, const QueueResources& amount, int64_t pods);

  // The queue to serve next (an index into `candidates`): see the class comment. An unusable
  // queue goes first (so that its pods hear why at once). `candidates` must not be empty.
  struct Candidate {
    std::string_view queue;
    Arrival head;  // its first waiting pod
  };
  size_t Pick(std::span<const Candidate> candidates);

  // Why holding `more` would take `queue` or an ancestor over a limit ("" within them).
  std::string OverLimit(std::string_view queue, const QueueResources& more);

  // Whether a pod of `claimant` asking `demand` may reclaim from pods of `victim` (another queue):
  // the claimant side within its deserved share with the pod, the victim side above its own; when
  // not, *why.
  bool MayReclaim(std::string_view claimant, const QueueResources& demand, std::string_view victim,
                  std::string* why = nullptr);
  // Whether taking `freed` from each of those queues (leaf names) leaves every queue on the
  // victims' side at or above its deserved share (and below: see MayReclaim).
  bool KeepsDeserved(std::string_view claimant,
                     std::span<const std::pair<std::string, QueueResources>> freed);

  // For /metrics, status and the simulator: every queue, parents before children.
  struct Report {
    std::string name;
    std::string parent;
    bool leaf = true;
    bool implicit = false;
    std::string invalid;             // why it is unusable ("" usable)
    QueueResources deserved, limit;  // unset amounts are 0 (limit: -1)
    int64_t weight = 1;
    QueueResources allocated, pending, fair_share;
    QueueResources borrowed;  // allocated beyond deserved, per resource
    QueueResources usage;     // decayed usage (0 without a half-life); parents: their subtree's
    int64_t pending_pods = 0;
  };
  std::vector<Report> Snapshot();
  // Fair share of one queue (zero for an unknown or unusable one).
  QueueResources FairShare(std::string_view queue);
  QueueResources Allocated(std::string_view queue);
  QueueResources Usage(std::string_view queue);
  // (allocated + decayed usage) / fair share by the dominant resource, as a number (for people
  // and the simulator): the figure Pick orders by.
  double DominantShare(std::string_view queue);

 private:
  struct Amounts {
    QueueResources allocated, pending;
    int64_t pending_pods = 0;
  };
  struct Node {
    QueueSpec spec;
    bool implicit = false;
    std::string invalid;
    int parent = -1;
    std::vector<int> children;          // in name order
    QueueResources allocated, pending;  // subtree totals
    int64_t pending_pods = 0;
    QueueResources fair;
    QueueResources usage;  // subtree total of the leaves' decayed usage, rounded
  };
  // One leaf queue's history, and when this process began keeping it (RestoreUsage's test).
  struct History {
    DecayedUsage usage;
    int64_t since_ms = 0;
  };
  // A fraction num/den (den 0: infinite) for exact comparison.
  struct Ratio {
    int64_t num = 0, den = 1;
  };
  static bool Less(const Ratio& a, const Ratio& b);

  void Rebuild();         // nodes_ from specs_ and the names counted
  void Refresh();         // totals and fair shares, when something changed
  void RefreshAmounts();  // Refresh's part for what queues hold and ask
  void SumUsage();        // Node::usage from history_
  // The history of `queue`, begun now if it has none.
  History& HistoryOf(const std::string& queue);
  void Fill(const std::vector<int>& siblings, const QueueResources& capacity);
  Ratio Dominant(const Node& n) const;
  int Find(std::string_view name);  // after Refresh; -1 none
  // Nodes from `leaf` up to (not including) `stop` (-1: to the top).
  std::vector<int> PathUp(int leaf, int stop) const;
  int CommonAncestor(int a, int b) const;  // -1: only the cluster

  bool implicit_ = true;
  QueueResources capacity_;
  std::vector<QueueSpec> specs_;
  absl::flat_hash_map<std::string, Amounts> amounts_;  // by leaf name
  std::vector<Node> nodes_;
  absl::flat_hash_map<std::string, int> index_;
  std::vector<int> roots_;
  bool structure_dirty_ = true;
  bool amounts_dirty_ = true;
  int64_t half_life_ms_ = 0;
  int64_t now_ms_ = DecayedUsage::kNever;              // the last AdvanceTo
  absl::flat_hash_map<std::string, History> history_;  // by leaf name; empty at half-life 0
  bool usage_dirty_ = false;
};

}  // namespace tessera::core
