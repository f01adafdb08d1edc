#include "core/queues/queue_set.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include "common/strings.h"

namespace tessera::core {

namespace {
constexpr char kDefaultQueue[] = "default";
__extension__ typedef __int128 i128;
}  // namespace

QueueSet::QueueSet() = default;

void QueueSet::SetSpecs(std::vector<QueueSpec> specs) {
  std::sort(specs.begin(), specs.end(),
            [](const QueueSpec& a, const QueueSpec& b) { return a.name < b.name; });
  if (specs == specs_) return;
  specs_ = std::move(specs);
  structure_dirty_ = true;
}

void QueueSet::set_implicit(bool on) {
  if (on == implicit_) return;
  implicit_ = on;
  structure_dirty_ = true;
}

void QueueSet::SetCapacity(const QueueResources& capacity) {
  if (capacity == capacity_) return;
  capacity_ = capacity;
  amounts_dirty_ = true;
}

void QueueSet::SetHalfLife(int64_t half_life_ms) {
  half_life_ms = std::max<int64_t>(0, half_life_ms);
  if (half_life_ms == half_life_ms_) return;
  half_life_ms_ = half_life_ms;
  if (half_life_ms_ == 0) history_.clear();
  usage_dirty_ = true;
}

QueueSet::History& QueueSet::HistoryOf(const std::string& queue) {
  auto [it, fresh] = history_.try_emplace(queue);
  if (fresh) {
    it->second.since_ms = now_ms_;
    // Its clock starts now (no history before): the first AdvanceTo integrates from here.
    if (now_ms_ != DecayedUsage::kNever) it->second.usage = DecayedUsage({}, now_ms_);
  }
  return it->second;
}

void QueueSet::AdvanceTo(int64_t now_ms) {
  if (now_ms_ != DecayedUsage::kNever && now_ms <= now_ms_) return;
  now_ms_ = now_ms;
  if (half_life_ms_ == 0) return;
  for (const auto& [name, a] : amounts_) {
    if (!a.allocated.zero()) HistoryOf(name);
  }
  for (auto& [name, h] : history_) {
    auto it = amounts_.find(name);
    h.usage.Advance(now_ms, it == amounts_.end() ? QueueResources{} : it->second.allocated,
                    half_life_ms_);
  }
  usage_dirty_ = true;
}

bool QueueSet::RestoreUsage(const std::string& queue, const QueueResources& usage, int64_t at_ms) {
  if (half_life_ms_ == 0) return false;
  auto it = history_.find(queue);
  if (it != history_.end() && it->second.since_ms != DecayedUsage::kNever &&
      it->second.since_ms <= at_ms) {
    return false;  // kept here since before the record was written: at least as complete
  }
  History& h = history_[queue];
  h.usage = DecayedUsage(usage, at_ms);
  h.since_ms = at_ms;
  // Up to now, as holding what the queue holds now (AdvanceTo's rule for a step).
  if (now_ms_ != DecayedUsage::kNever) {
    auto a = amounts_.find(queue);
    h.usage.Advance(now_ms_, a == amounts_.end() ? QueueResources{} : a->second.allocated,
                    half_life_ms_);
  }
  usage_dirty_ = true;
  return true;
}

std::vector<QueueSet::UsageRecord> QueueSet::UsageRecords() const {
  std::vector<UsageRecord> out;
  for (const auto& [name, h] : history_) {
    if (h.usage.at_ms() == DecayedUsage::kNever) continue;
    out.push_back(UsageRecord{name, h.usage.Rounded(), h.usage.at_ms()});
  }
  std::sort(out.begin(), out.end(),
            [](const UsageRecord& a, const UsageRecord& b) { return a.queue < b.queue; });
  return out;
}

void QueueSet::AddAllocated(const std::string& queue, const QueueResources& amount) {
  if (half_life_ms_ > 0) HistoryOf(queue);
  auto [it, inserted] = amounts_.try_emplace(queue);
  it->second.allocated += amount;
  amounts_dirty_ = true;
  if (inserted) structure_dirty_ = true;
}

void QueueSet::SubAllocated(const std::string& queue, const QueueResources& amount) {
  AddAllocated(queue, QueueResources{} - amount);
}

void QueueSet::AddPending(const std::string& queue, const QueueResources& amount, int64_t pods) {
  auto [it, inserted] = amounts_.try_emplace(queue);
  it->second.pending += amount;
  it->second.pending_pods += pods;
  amounts_dirty_ = true;
  if (inserted) structure_dirty_ = true;
}

void QueueSet::SubPending(const std::string& queue, const QueueResources& amount, int64_t pods) {
  AddPending(queue, QueueResources{} - amount, -pods);
}

void QueueSet::Rebuild() {
  nodes_.clear();
  index_.clear();
  roots_.clear();
  for (const QueueSpec& s : specs_) {
    if (index_.contains(s.name)) continue;  // names are unique in the API; keep the first
    index_[s.name] = static_cast<int>(nodes_.size());
    Node n;
    n.spec = s;
    nodes_.push_back(std::move(n));
  }
  // Implicit queues: names pods use that have no spec.
  std::vector<std::string> implicit_names;
  for (const auto& [name, a] : amounts_) {
    if (index_.contains(name)) continue;
    if (implicit_ || name == kDefaultQueue) implicit_names.push_back(name);
  }
  std::sort(implicit_names.begin(), implicit_names.end());
  for (const std::string& name : implicit_names) {
    index_[name] = static_cast<int>(nodes_.size());
    Node n;
    n.spec.name = name;
    n.implicit = true;
    nodes_.push_back(std::move(n));
  }
  // The spec alone.
  for (Node& n : nodes_) {
    const QueueSpec& s = n.spec;
    if (s.weight < 0) n.invalid = StrCat("weight ", s.weight, " is negative");
    for (int r = 0; r < kQueueResourceCount && n.invalid.empty(); ++r) {
      const auto& d = s.deserved[r];
      const auto& l = s.limit[r];
      if ((d && *d < 0) || (l && *l < 0)) {
        n.invalid = StrCat(QueueResourceName(r), " is negative");
      } else if (d && l && *l < *d) {
        n.invalid = StrCat("limit.", QueueResourceName(r), " (", FormatQueueAmount(r, *l),
                           ") is below deserved.", QueueResourceName(r), " (",
                           FormatQueueAmount(r, *d), ")");
      }
    }
    if (s.parent.empty()) continue;
    auto p = index_.find(s.parent);
    if (p == index_.end()) {
      if (n.invalid.empty()) n.invalid = StrCat("its parent queue ", s.parent, " does not exist");
      continue;
    }
    if (p->second == index_.at(s.name)) {
      n.invalid = "it names itself as its parent";
      continue;
    }
    n.parent = p->second;
  }
  // Loops of parents: every queue on one is unusable, and cut loose.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    std::vector<int> chain;
    std::set<int> seen;
    int at = static_cast<int>(i);
    while (at >= 0 && !seen.contains(at)) {
      seen.insert(at);
      chain.push_back(at);
      at = nodes_[at].parent;
    }
    if (at < 0) continue;
    // `at` is on a loop: from its first appearance in the chain.
    auto from = std::find(chain.begin(), chain.end(), at);
    std::vector<std::string> names;
    for (auto it = from; it != chain.end(); ++it) names.push_back(nodes_[*it].spec.name);
    names.push_back(nodes_[at].spec.name);
    const std::string why = StrCat("its parents form a loop: ", StrJoin(names, " -> "));
    for (auto it = from; it != chain.end(); ++it) {
      nodes_[*it].invalid = why;
      nodes_[*it].parent = -1;
    }
  }
  // Unusable ancestors make their descendants unusable; children lists; roots.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!nodes_[i].invalid.empty()) continue;
    for (int a = nodes_[i].parent; a >= 0; a = nodes_[a].parent) {
      if (!nodes_[a].invalid.empty()) {
        nodes_[i].invalid = StrCat("its ancestor queue ", nodes_[a].spec.name, " is unusable (",
                                   nodes_[a].invalid, ")");
        break;
      }
    }
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].parent >= 0) {
      nodes_[nodes_[i].parent].children.push_back(static_cast<int>(i));
    } else {
      roots_.push_back(static_cast<int>(i));
    }
  }
  auto by_name = [&](int a, int b) { return nodes_[a].spec.name < nodes_[b].spec.name; };
  for (Node& n : nodes_) std::sort(n.children.begin(), n.children.end(), by_name);
  std::sort(roots_.begin(), roots_.end(), by_name);
  structure_dirty_ = false;
  amounts_dirty_ = true;
}

void QueueSet::Refresh() {
  if (structure_dirty_) Rebuild();
  if (amounts_dirty_) RefreshAmounts();
  if (usage_dirty_) SumUsage();
}

void QueueSet::SumUsage() {
  for (Node& n : nodes_) n.usage = QueueResources{};
  for (const auto& [name, h] : history_) {
    auto it = index_.find(name);
    if (it == index_.end()) continue;
    const QueueResources u = h.usage.Rounded();
    for (int at = it->second; at >= 0; at = nodes_[at].parent) nodes_[at].usage += u;
  }
  usage_dirty_ = false;
}

void QueueSet::RefreshAmounts() {
  for (Node& n : nodes_) {
    n.allocated = n.pending = n.fair = QueueResources{};
    n.pending_pods = 0;
  }
  for (const auto& [name, a] : amounts_) {
    auto it = index_.find(name);
    if (it == index_.end()) continue;
    for (int at = it->second; at >= 0; at = nodes_[at].parent) {
      nodes_[at].allocated += a.allocated;
      nodes_[at].pending += a.pending;
      nodes_[at].pending_pods += a.pending_pods;
    }
  }
  std::vector<int> usable_roots;
  for (int r : roots_) {
    if (nodes_[r].invalid.empty()) usable_roots.push_back(r);
  }
  Fill(usable_roots, capacity_);
  amounts_dirty_ = false;
  usage_dirty_ = true;
}

void QueueSet::Fill(const std::vector<int>& siblings, const QueueResources& capacity) {
  if (siblings.empty()) return;
  const size_t k = siblings.size();
  for (int r = 0; r < kQueueResourceCount; ++r) {
    std::vector<int64_t> cap(k), got(k);
    i128 base_sum = 0;
    for (size_t i = 0; i < k; ++i) {
      const Node& n = nodes_[siblings[i]];
      int64_t c = std::max<int64_t>(0, n.allocated[r] + n.pending[r]);
      if (n.spec.limit[r]) c = std::min(c, *n.spec.limit[r]);
      cap[i] = c;
      got[i] = std::min(n.spec.deserved[r].value_or(0), c);
      base_sum += got[i];
    }
    const int64_t total = std::max<int64_t>(0, capacity[r]);
    if (base_sum > total) {
      // More deserved than there is: each its part in proportion.
      for (size_t i = 0; i < k; ++i) {
        got[i] = static_cast<int64_t>(static_cast<i128>(got[i]) * total / base_sum);
      }
    }
    int64_t rest = total;
    for (size_t i = 0; i < k; ++i) rest -= got[i];
    // Water filling by weight among those that want more.
    while (rest > 0) {
      i128 weights = 0;
      for (size_t i = 0; i < k; ++i) {
        if (got[i] < cap[i]) weights += nodes_[siblings[i]].spec.weight;
      }
      if (weights == 0) break;
      int64_t given = 0;
      for (size_t i = 0; i < k; ++i) {
        const int64_t w = nodes_[siblings[i]].spec.weight;
        if (got[i] >= cap[i] || w == 0) continue;
        int64_t give = static_cast<int64_t>(static_cast<i128>(rest) * w / weights);
        give = std::min(give, cap[i] - got[i]);
        got[i] += give;
        given += give;
      }
      if (given == 0) {
        // Less left than there are takers: one unit each, in name order.
        for (size_t i = 0; i < k && rest - given > 0; ++i) {
          if (got[i] < cap[i] && nodes_[siblings[i]].spec.weight > 0) {
            ++got[i];
            ++given;
          }
        }
        if (given == 0) break;
      }
      rest -= given;
    }
    for (size_t i = 0; i < k; ++i) nodes_[siblings[i]].fair[r] = got[i];
  }
  for (int s : siblings) {
    std::vector<int> usable;
    for (int c : nodes_[s].children) {
      if (nodes_[c].invalid.empty()) usable.push_back(c);
    }
    Fill(usable, nodes_[s].fair);
  }
}

bool QueueSet::Less(const Ratio& a, const Ratio& b) {
  if (a.den == 0) return false;  // infinite is never less
  if (b.den == 0) return true;
  return static_cast<i128>(a.num) * b.den < static_cast<i128>(b.num) * a.den;
}

QueueSet::Ratio QueueSet::Dominant(const Node& n) const {
  Ratio best{0, 1};
  for (int r = 0; r < kQueueResourceCount; ++r) {
    const int64_t counted = n.allocated[r] + n.usage[r];
    if (counted <= 0) continue;
    Ratio x{counted, n.fair[r]};
    if (x.den <= 0) return Ratio{1, 0};
    if (Less(best, x)) best = x;
  }
  return best;
}

int QueueSet::Find(std::string_view name) {
  auto it = index_.find(ToAbsl(name));
  return it == index_.end() ? -1 : it->second;
}

bool QueueSet::Usable(std::string_view queue, std::string* why) {
  if (structure_dirty_) Rebuild();
  const int i = Find(queue);
  if (i < 0) {
    if (implicit_ || queue == kDefaultQueue) return true;  // becomes implicit when counted
    if (why) {
      *why = StrCat("queue ", queue, " does not exist (kubectl get queues.tessera.dev)");
    }
    return false;
  }
  const Node& n = nodes_[i];
  if (!n.invalid.empty()) {
    if (why) *why = StrCat("queue ", queue, " is unusable: ", n.invalid);
    return false;
  }
  if (!n.children.empty()) {
    if (why) {
      std::vector<std::string> names;
      for (int c : n.children) names.push_back(nodes_[c].spec.name);
      *why = StrCat("queue ", queue, " has child queues (", StrJoin(names, ", "),
                    "): pods go to a queue without children");
    }
    return false;
  }
  return true;
}

bool QueueSet::Admits(std::string_view queue, std::string_view ns, std::string* why) {
  if (structure_dirty_) Rebuild();
  const int i = Find(queue);
  if (i < 0) return true;  // implicit or default: open to every namespace
  const std::vector<std::string>& allowed = nodes_[i].spec.namespaces;
  if (allowed.empty() || std::find(allowed.begin(), allowed.end(), ns) != allowed.end()) {
    return true;
  }
  if (why) {
    *why = StrCat("queue ", queue, " does not admit pods of namespace ", ns,
                  " (its spec.namespaces: ", StrJoin(allowed, ", "), ")");
  }
  return false;
}

size_t QueueSet::Pick(std::span<const Candidate> candidates) {
  Refresh();
  // Per node: the earliest waiting pod among the candidates in its subtree.
  const Arrival none{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max()};
  std::vector<Arrival> best(nodes_.size(), none);
  std::vector<int> leaf_candidate(nodes_.size(), -1);
  std::optional<size_t> uncounted;  // an implicit queue that holds and asks nothing yet: at 0
  for (size_t i = 0; i < candidates.size(); ++i) {
    const int n = Find(candidates[i].queue);
    if (n < 0) {
      if (!Usable(candidates[i].queue)) return i;  // unusable: its pods hear why at once
      if (!uncounted || candidates[i].head < candidates[*uncounted].head) uncounted = i;
      continue;
    }
    if (!nodes_[n].invalid.empty() || !nodes_[n].children.empty()) return i;
    leaf_candidate[n] = static_cast<int>(i);
    for (int at = n; at >= 0; at = nodes_[at].parent) {
      best[at] = std::min(best[at], candidates[i].head);
    }
  }
  if (uncounted) return *uncounted;
  const std::vector<int>* level = &roots_;
  while (true) {
    int chosen = -1;
    Ratio chosen_ratio;
    for (int n : *level) {
      if (best[n] == none || !nodes_[n].invalid.empty()) continue;
      const Ratio r = Dominant(nodes_[n]);
      if (chosen < 0 || Less(r, chosen_ratio) ||
          (!Less(chosen_ratio, r) && best[n] < best[chosen])) {
        chosen = n;
        chosen_ratio = r;
      }
    }
    if (chosen < 0) return 0;  // cannot happen: every candidate is on a usable path
    if (leaf_candidate[chosen] >= 0 && nodes_[chosen].children.empty()) {
      return static_cast<size_t>(leaf_candidate[chosen]);
    }
    level = &nodes_[chosen].children;
  }
}

std::string QueueSet::OverLimit(std::string_view queue, const QueueResources& more) {
  Refresh();
  for (int at = Find(queue); at >= 0; at = nodes_[at].parent) {
    const Node& n = nodes_[at];
    for (int r = 0; r < kQueueResourceCount; ++r) {
      if (!n.spec.limit[r] || more[r] <= 0) continue;
      if (n.allocated[r] + more[r] > *n.spec.limit[r]) {
        return StrCat("queue ", n.spec.name, " would hold ",
                      FormatQueueAmount(r, n.allocated[r] + more[r]), ", over its limit of ",
                      FormatQueueAmount(r, *n.spec.limit[r]), " (it holds ",
                      FormatQueueAmount(r, n.allocated[r]), ")");
      }
    }
  }
  return "";
}

std::vector<int> QueueSet::PathUp(int leaf, int stop) const {
  std::vector<int> out;
  for (int at = leaf; at >= 0 && at != stop; at = nodes_[at].parent) out.push_back(at);
  return out;
}

int QueueSet::CommonAncestor(int a, int b) const {
  std::set<int> up;
  for (int at = a; at >= 0; at = nodes_[at].parent) up.insert(at);
  for (int at = b; at >= 0; at = nodes_[at].parent) {
    if (up.contains(at)) return at;
  }
  return -1;
}

bool QueueSet::MayReclaim(std::string_view claimant, const QueueResources& demand,
                          std::string_view victim, std::string* why) {
  Refresh();
  const int c = Find(claimant), v = Find(victim);
  auto no = [&](std::string text) {
    if (why) *why = std::move(text);
    return false;
  };
  if (c < 0 || v < 0 || c == v) return no("not another queue");
  if (!nodes_[c].invalid.empty() || !nodes_[v].invalid.empty()) return no("an unusable queue");
  const int lca = CommonAncestor(c, v);
  for (int x : PathUp(c, lca)) {
    const Node& n = nodes_[x];
    bool any = false;
    for (int r = 0; r < kQueueResourceCount; ++r) {
      if (demand[r] <= 0 || !n.spec.deserved[r]) continue;
      any = true;
      if (n.allocated[r] + demand[r] > *n.spec.deserved[r]) {
        return no(StrCat(
            "queue ", n.spec.name, " would hold ", FormatQueueAmount(r, n.allocated[r] + demand[r]),
            ", more than it deserves (", FormatQueueAmount(r, *n.spec.deserved[r]), ")"));
      }
    }
    if (!any) return no(StrCat("queue ", n.spec.name, " deserves none of what the pod asks"));
  }
  for (int y : PathUp(v, lca)) {
    const Node& n = nodes_[y];
    bool above = false;
    for (int r = 0; r < kQueueResourceCount; ++r) {
      above = above || n.allocated[r] > n.spec.deserved[r].value_or(0);
    }
    if (!above) return no(StrCat("queue ", n.spec.name, " holds no more than it deserves"));
  }
  return true;
}

bool QueueSet::KeepsDeserved(std::string_view claimant,
                             std::span<const std::pair<std::string, QueueResources>> freed) {
  Refresh();
  const int c = Find(claimant);
  std::map<int, QueueResources> taken;
  for (const auto& [queue, amount] : freed) {
    const int v = Find(queue);
    if (v < 0) continue;
    for (int y : PathUp(v, CommonAncestor(c, v))) taken[y] += amount;
  }
  for (const auto& [y, amount] : taken) {
    const Node& n = nodes_[y];
    for (int r = 0; r < kQueueResourceCount; ++r) {
      if (n.spec.deserved[r] && n.allocated[r] - amount[r] < *n.spec.deserved[r]) return false;
    }
  }
  return true;
}

std::vector<QueueSet::Report> QueueSet::Snapshot() {
  Refresh();
  std::vector<Report> out;
  std::vector<int> stack(roots_.rbegin(), roots_.rend());
  while (!stack.empty()) {
    const int i = stack.back();
    stack.pop_back();
    const Node& n = nodes_[i];
    Report r;
    r.name = n.spec.name;
    r.parent = n.parent >= 0 ? nodes_[n.parent].spec.name : n.spec.parent;
    r.leaf = n.children.empty();
    r.implicit = n.implicit;
    r.invalid = n.invalid;
    r.weight = n.spec.weight;
    for (int k = 0; k < kQueueResourceCount; ++k) {
      r.deserved[k] = n.spec.deserved[k].value_or(0);
      r.limit[k] = n.spec.limit[k].value_or(-1);
      r.borrowed[k] = std::max<int64_t>(0, n.allocated[k] - r.deserved[k]);
    }
    r.allocated = n.allocated;
    r.pending = n.pending;
    r.pending_pods = n.pending_pods;
    r.fair_share = n.fair;
    r.usage = n.usage;
    out.push_back(std::move(r));
    for (auto it = n.children.rbegin(); it != n.children.rend(); ++it) stack.push_back(*it);
  }
  return out;
}

QueueResources QueueSet::FairShare(std::string_view queue) {
  Refresh();
  const int i = Find(queue);
  return i < 0 ? QueueResources{} : nodes_[i].fair;
}

QueueResources QueueSet::Allocated(std::string_view queue) {
  Refresh();
  const int i = Find(queue);
  return i < 0 ? QueueResources{} : nodes_[i].allocated;
}

QueueResources QueueSet::Usage(std::string_view queue) {
  Refresh();
  const int i = Find(queue);
  return i < 0 ? QueueResources{} : nodes_[i].usage;
}

double QueueSet::DominantShare(std::string_view queue) {
  Refresh();
  const int i = Find(queue);
  if (i < 0) return 0;
  const Ratio r = Dominant(nodes_[i]);
  if (r.den == 0) return std::numeric_limits<double>::infinity();
  return static_cast<double>(r.num) / static_cast<double>(r.den);
}

}  // namespace tessera::core
