#include "k8s/status/status.h"

#include <algorithm>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <type_traits>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "common/strings.h"
#include "core/fit.h"
#include "core/model/mig.h"
#include "core/model/quantity.h"
#include "core/topology/gpu_select.h"
#include "fmt/format.h"
#include "k8s/scheduler/queue_book.h"
#include "records/gpu_indices.h"

namespace tessera::k8s {
namespace {

using nlohmann::json;

std::string MigName(const std::string& model, core::MigPlacement p) {
  const core::MigModel* m = core::FindMigModel(model);
  if (m == nullptr || p.profile < 0 || static_cast<size_t>(p.profile) >= m->profiles.size()) {
    return "?";
  }
  return std::string(m->profiles[static_cast<size_t>(p.profile)].name);
}

// Memory one pending ask needs on one GPU to use it; nullopt when the ask cannot use it at all
// (a MIG ask on a GPU without MIG, say), so it does not count toward "too small".
std::optional<int64_t> MemoryNeedOn(const core::PodRequest& r, const core::GpuSpec& gpu) {
  switch (r.gpu.kind) {
    case core::GpuAsk::Kind::kNone:
      return std::nullopt;
    case core::GpuAsk::Kind::kWhole:
      return gpu.mig_enabled ? std::nullopt : std::optional<int64_t>(gpu.memory_mib);
    case core::GpuAsk::Kind::kShare:
    case core::GpuAsk::Kind::kFraction:
      return gpu.mig_enabled ? std::nullopt
                             : std::optional<int64_t>(core::ShareMemoryOn(r.gpu, gpu.memory_mib));
    case core::GpuAsk::Kind::kMig: {
      if (!gpu.mig_enabled) return std::nullopt;
      const core::MigModel* m = core::FindMigModel(gpu.model);
      const int i = m == nullptr ? -1 : m->Find(r.gpu.mig_profile);
      if (i < 0) return std::nullopt;
      return m->profiles[static_cast<size_t>(i)].memory_mib;
    }
  }
  return std::nullopt;
}

// A pending pod's request with its name cleared, and its node constraints: pods that differ only
// in name can use exactly the same GPUs.
struct Shape {
  core::PodRequest request;
  const PodInfo* pod;  // the first pending pod of this shape
  bool never_fits = false;
};

// Equal keys are equal pairs (PodRequest's and NodeConstraints' own operator==); the hash covers
// the fields that tell shapes apart in practice (the ask and the constraints), not the optional
// gang, which is cleared in keys and which the system's Abseil cannot hash.
using ShapeKey = std::pair<core::PodRequest, NodeConstraints>;
struct ShapeKeyHash {
  size_t operator()(const ShapeKey& k) const {
    return absl::Hash<std::tuple<int64_t, int64_t, const core::GpuAsk&,
                                 const std::vector<std::string>&, const NodeConstraints&>>()(
        std::tie(k.first.cpu_milli, k.first.memory_mib, k.first.gpu, k.first.gpu_models, k.second));
  }
};

std::string Time(std::chrono::system_clock::time_point t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromChrono(t), absl::UTCTimeZone());
}

// One row per owner from the pods' conditions tessera.dev/Reserved (ReservationStatus).
std::vector<ReservationStatus> Reservations(const std::vector<const PodInfo*>& pods,
                                            std::chrono::system_clock::time_point now) {
  std::vector<ReservationStatus> out;
  std::map<std::pair<bool, std::string>, size_t> at;  // (gang, owner) -> row
  const int64_t now_unix =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  for (const PodInfo* p : pods) {
    absl::StatusOr<records::ReservationRecord> r =
        records::ParseReservationMessage(p->reservation_message);
    if (!r.ok()) {
      ReservationStatus& row = out.emplace_back();
      row.owner = p->key;
      row.pods = {p->key};
      row.since = p->reservation_since;
      row.held_seconds = SecondsSince(p->reservation_since, now);
      row.error = std::string(FromAbsl(r.status().message()));
      continue;
    }
    auto [it, fresh] = at.try_emplace({r->gang, r->owner}, out.size());
    if (fresh) out.emplace_back();
    ReservationStatus& row = out[it->second];
    row.pods.push_back(p->key);
    // The latest word among the pods that show it (a rewrite may be on its way to the others).
    if (!fresh && p->reservation_since <= row.since) continue;
    row.gang = r->gang;
    row.owner = r->owner;
    row.sites = std::move(r->sites);
    row.since = p->reservation_since;
    row.held_seconds = SecondsSince(p->reservation_since, now);
    row.expected_start =
        Time(std::chrono::system_clock::time_point(std::chrono::seconds(r->expected_start_unix)));
    row.starts_in_seconds = r->expected_start_unix - now_unix;
  }
  for (ReservationStatus& row : out) std::sort(row.pods.begin(), row.pods.end());
  std::sort(out.begin(), out.end(), [](const ReservationStatus& a, const ReservationStatus& b) {
    return std::tie(a.expected_start, a.owner) < std::tie(b.expected_start, b.owner);
  });
  return out;
}

// "0-3,6": GPU indices (ascending) with runs shortened.
std::string IndexRuns(const std::vector<int32_t>& v) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    parts.push_back(j == i ? StrCat(v[i]) : StrCat(v[i], j == i + 1 ? "," : "-", v[j]));
    i = j + 1;
  }
  return StrJoin(parts, ",");
}

}  // namespace

int64_t SecondsSince(const std::string& rfc3339, std::chrono::system_clock::time_point now) {
  if (rfc3339.empty()) return -1;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, rfc3339, &t, &err)) return -1;
  const int64_t then = absl::ToUnixSeconds(t);
  const int64_t at =
      std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  return std::max<int64_t>(0, at - then);
}

std::string FormatWait(int64_t s) {
  if (s < 0) return "?";
  if (s < 120) return StrCat(s, "s");
  if (s < 7200) return StrCat(s / 60, "m");
  if (s < 2 * 86400) return StrCat(s / 3600, "h");
  return StrCat(s / 86400, "d");
}

std::string FormatGpus(int64_t milli) {
  std::string v = fmt::format("{:.3f}", static_cast<double>(milli) / 1000.0);
  while (v.back() == '0') v.pop_back();
  if (v.back() == '.') v.pop_back();
  return v;
}

absl::StatusOr<ClusterStatus> ComputeStatus(const ClusterSnapshot& snapshot,
                                            const StatusOptions& options) {
  if (!options.node.empty() && snapshot.FindNode(options.node) == nullptr) {
    return absl::NotFoundError(StrCat("node \"", options.node, "\" not found (",
                                      snapshot.nodes().size(), " nodes listed)"));
  }
  ClusterStatus out;
  out.server = snapshot.server;
  out.taken_at = snapshot.taken_at;
  out.read_seconds = snapshot.read_seconds;
  out.scheduler_name = options.scheduler_name;
  out.node_filter = options.node;
  out.namespace_filter = options.ns;
  out.pods_namespace = snapshot.pod_namespace;
  out.nodes_error = snapshot.nodes_error;
  LedgerOptions lo;
  lo.policy = options.policy;
  lo.levels = options.levels;
  std::unique_ptr<ClusterLedger> ledger = snapshot.Ledger(lo, &out.problems);
  const core::Engine& engine = ledger->engine();
  const core::ClusterState& state = engine.state();
  const core::Cluster& cluster = engine.cluster();
  auto shown_ns = [&](const PodInfo& p) { return options.ns.empty() || p.ns == options.ns; };

  // --- nodes and GPUs ---
  std::map<std::string, std::string> blocked;  // node -> why (first problem naming it)
  for (const SnapshotProblem& p : out.problems) {
    if (p.object.starts_with("pod/")) blocked.emplace(p.node, p.message);
  }
  absl::flat_hash_map<std::string, size_t> node_at;  // name -> index in out.nodes
  StatusTotals& t = out.totals;
  for (const SnapshotNode& sn : snapshot.nodes()) {
    const NodeInfo& info = *sn.info;
    ++t.nodes;
    if (info.spec.gpus.empty() && info.inventory_error.empty()) continue;
    NodeStatus n;
    n.name = info.name;
    n.ready = sn.ready;
    n.cordoned = info.unschedulable;
    n.cpu_milli = info.spec.cpu_milli;
    n.memory_mib = info.spec.memory_mib;
    n.inventory_error = info.inventory_error;
    if (auto b = blocked.find(info.name); b != blocked.end()) n.gpus_blocked = b->second;
    if (!info.spec.gpus.empty()) {
      ++t.gpu_nodes;
      n.interconnect =
          info.spec.gpus.size() > 1 && core::MeetsTopology(info.spec, info.spec.all_gpus_mask(),
                                                           core::GpuTopology::kNvLink)
              ? "NVLink"
          : info.spec.gpus.size() > 1 ? "PCIe"
                                      : "";
    }
    const core::NodeId id = cluster.FindNode(info.name);
    // The scheduler's tessera.dev/spare-gpus (a list it wrote; anything else shows no spares).
    std::vector<int32_t> spares;
    if (absl::StatusOr<std::vector<int32_t>> read = records::ParseGpuIndices(info.spare_gpus);
        read.ok()) {
      spares = *std::move(read);
    }
    for (const core::GpuSpec& g : info.spec.gpus) {
      GpuStatus gs;
      gs.spare = std::find(spares.begin(), spares.end(), g.index) != spares.end();
      gs.index = g.index;
      gs.uuid = g.uuid;
      gs.model = g.model;
      gs.memory_mib = g.memory_mib;
      gs.mig_enabled = g.mig_enabled;
      if (!sn.healthy(g.index)) {
        const records::GpuHealth& h = sn.health[static_cast<size_t>(g.index)];
        gs.healthy = false;
        gs.health_reason = h.reason.empty() ? "unhealthy" : h.reason;
        gs.xids = h.xids;
      }
      if (id.valid()) {
        gs.free_memory_mib = state.gpu(id, g.index).free_memory_mib;
        if (g.mig_enabled) {
          for (const auto& inst : state.mig(id, g.index).instances) {
            gs.mig_instances.push_back(
                MigInstanceStatus{MigName(g.model, inst.placement), inst.placement.start, ""});
          }
        }
      }
      n.gpus.push_back(std::move(gs));
    }
    node_at[n.name] = out.nodes.size();
    out.nodes.push_back(std::move(n));
  }

  // --- what bound pods hold ---
  std::map<std::string, QueueStatus> queues;
  for (const PodInfo* p : snapshot.BoundPods()) {
    if (!options.ns.empty() && shown_ns(*p) && p->assignment && !p->assignment->gpus.empty()) {
      out.running.push_back(RunningPodStatus{p->key, p->node_name, p->queue, p->assignment->gpus});
    }
    auto at = node_at.find(p->node_name);
    const Holding* h = ledger->Find(p->key);
    if (at == node_at.end()) continue;  // a node without GPUs (or not listed)
    NodeStatus& n = out.nodes[at->second];
    ++n.pods;
    if (h != nullptr) {
      n.cpu_requested_milli += h->cpu_milli;
      n.memory_requested_mib += h->memory_mib;
    }
    if (h == nullptr || h->gpus.gpus.empty()) continue;
    ++t.running_gpu_pods;
    QueueStatus& q = queues[p->queue];
    q.name = p->queue;
    if (shown_ns(*p)) ++q.running;
    for (const records::AssignedGpu& a : h->gpus.gpus) {
      if (a.grant.gpu < 0 || static_cast<size_t>(a.grant.gpu) >= n.gpus.size()) continue;
      GpuStatus& g = n.gpus[static_cast<size_t>(a.grant.gpu)];
      GpuPodGrant grant;
      grant.pod = p->key;
      grant.memory_mib = a.grant.memory_mib;
      grant.compute_milli = a.grant.compute_milli;
      grant.exclusive = a.grant.exclusive;
      grant.shown = shown_ns(*p);
      if (options.agent_usage != nullptr) {
        auto it = options.agent_usage->find({p->key, g.uuid});
        if (it != options.agent_usage->end()) grant.usage = it->second;
      }
      if (!a.mig_profile.empty()) {
        grant.mig = StrCat(a.mig_profile, "@", a.mig_start);
        for (MigInstanceStatus& m : g.mig_instances) {
          if (m.profile == a.mig_profile && m.start == a.mig_start) m.pod = p->key;
        }
      }
      g.memory_granted_mib += a.grant.memory_mib;
      g.compute_granted_milli += a.grant.compute_milli;
      g.exclusive = g.exclusive || a.grant.exclusive;
      g.pods.push_back(std::move(grant));
      if (shown_ns(*p)) {
        q.memory_granted_mib += a.grant.memory_mib;
        q.compute_granted_milli += a.grant.compute_milli;
        q.gpus_whole += a.grant.exclusive ? 1 : 0;
      }
      // What the pod asked for: a share its memory, a whole GPU all of it, MIG its slice.
      t.memory_requested_mib +=
          p->input_error.empty() && p->request.gpu.kind == core::GpuAsk::Kind::kShare
              ? p->request.gpu.memory_mib
              : a.grant.memory_mib;
    }
  }

  // --- pending pods ---
  std::vector<const PodInfo*> reserved;  // pending pods showing a reservation (of those shown)
  std::vector<Shape> shapes;
  absl::flat_hash_map<ShapeKey, size_t, ShapeKeyHash> shape_at;
  for (const PodInfo* p : snapshot.PendingPods(options.scheduler_name)) {
    const bool asks_gpu =
        !p->input_error.empty() || p->request.gpu.kind != core::GpuAsk::Kind::kNone;
    if (!asks_gpu) continue;
    ++t.pending_gpu_pods;
    PendingPodStatus ps;
    ps.pod = p->key;
    ps.queue = p->queue;
    ps.priority = p->priority;
    ps.created = p->created;
    ps.waiting_seconds = SecondsSince(p->created, options.now);
    if (p->input_error.empty()) {
      const core::GpuAsk& ask = p->request.gpu;
      ps.ask = core::DescribeAsk(p->request);
      ps.gpus = ask.gpu_count();
      if (ask.kind == core::GpuAsk::Kind::kShare) {
        ps.gpu_memory_mib = ask.memory_mib;
        ps.gpu_compute_milli = ask.compute_milli;
        t.pending_memory_mib += ask.memory_mib;
      } else if (ask.kind == core::GpuAsk::Kind::kWhole) {
        t.pending_whole_gpus += ask.count;
      } else if (ask.kind == core::GpuAsk::Kind::kMig) {
        ++t.pending_mig;
      }
      if (p->request.gang) ps.gang = p->request.gang->name;
      core::PodRequest key = p->request;
      key.name.clear();
      key.gang.reset();
      key.priority = 0;
      auto k = std::make_pair(key, p->constraints);
      auto [it, added] = shape_at.try_emplace(k, shapes.size());
      if (added) {
        core::Query q(state, key);
        const bool never = core::NeverFitsReason(state, q).has_value();
        shapes.push_back(Shape{std::move(key), p, never});
      }
      ps.never_fits = shapes[it->second].never_fits;
    } else {
      ps.ask = "(cannot be read)";
    }
    if (!p->input_error.empty()) {
      ps.reason = StrCat("its request cannot be read: ", p->input_error);
    } else if (!p->unschedulable_message.empty()) {
      ps.reason = p->unschedulable_message;
    } else if (p->gated) {
      ps.reason = "waiting for its scheduling gates to be removed";
    } else {
      ps.reason = "not tried by the scheduler yet";
    }
    ps.scale_up = p->scale_up_message;
    if (shown_ns(*p) && !p->reservation_message.empty()) reserved.push_back(p);
    QueueStatus& qs = queues[p->queue];
    qs.name = p->queue;
    if (shown_ns(*p)) {
      ++qs.pending;
      out.pending.push_back(std::move(ps));
    }
  }
  std::sort(out.pending.begin(), out.pending.end(),
            [](const PendingPodStatus& a, const PendingPodStatus& b) {
              return std::tie(a.created, a.pod) < std::tie(b.created, b.pod);
            });
  out.reservations = Reservations(reserved, options.now);
  // The queues' figures, counted as the scheduler counts them (QueueBook).
  {
    QueueBook book;
    book.SetSpecs(options.queues.value_or(std::vector<core::QueueSpec>{}),
                  options.queues.has_value());
    CountQueues(snapshot, *ledger, options.scheduler_name, &book);
    // Usage as of now, read back as a restarted scheduler reads it (after the holdings).
    if (!options.queue_usage.empty()) {
      const int64_t now_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(options.now.time_since_epoch())
              .count();
      book.set_clock([now_ms] { return now_ms; });
      book.SetHalfLife(options.queue_usage.front().half_life_seconds * 1000);
      for (const records::QueueUsageStatus& u : options.queue_usage) book.RestoreUsage(u);
      const int64_t h = options.queue_usage.front().half_life_seconds;
      out.queue_usage_half_life = h % 3600 == 0 ? StrCat(h / 3600, "h")
                                  : h % 60 == 0 ? StrCat(h / 60, "m")
                                                : StrCat(h, "s");
    }
    for (const QueueGauges& g : book.Gauges()) {
      QueueStatus q = queues[g.queue];
      q.name = g.queue;
      q.parent = g.parent;
      q.deserved = g.deserved;
      q.fair_share = g.fair_share;
      q.allocated = g.allocated;
      q.borrowed = g.borrowed;
      q.pending_ask = g.pending;
      q.pending_pods = g.pending_pods;
      q.usage = g.usage;
      if (!g.usable) {
        std::string why;
        (void)book.set().Usable(g.queue, &why);
        q.invalid = why;
      }
      queues.erase(g.queue);
      out.queues.push_back(std::move(q));
    }
    for (const auto& [name, error] : options.queue_errors) {
      QueueStatus q;
      q.name = name;
      q.invalid = StrCat("queue ", name, " cannot be read: ", error);
      out.queues.push_back(std::move(q));
    }
    // Queues pods name that the scheduler would not count (no Queue object while others exist).
    for (auto& [name, q] : queues) {
      if (q.running == 0 && q.pending == 0) continue;
      std::string why;
      if (!book.set().Usable(name, &why)) q.invalid = why;
      out.queues.push_back(std::move(q));
    }
  }

  // --- free memory the pending pods cannot use ---
  // Per node, the GPUs some pending shape could use now (core's CheckNode: the same test every
  // policy places by).
  std::vector<const ClusterLedger::Allowed*> allowed(shapes.size(), nullptr);
  std::vector<std::shared_ptr<const ClusterLedger::Allowed>> keep;
  for (size_t i = 0; i < shapes.size(); ++i) {
    keep.push_back(ledger->AllowedFor(*shapes[i].pod));
    allowed[i] = keep.back().get();
  }
  for (NodeStatus& n : out.nodes) {
    const core::NodeId id = cluster.FindNode(n.name);
    const bool takes = id.valid() && state.accepts_pods(id) && n.gpus_blocked.empty();
    // The scheduler's hot spares: free only to a gang's replacement, so neither free to the
    // pending pods nor theirs to use (this ledger does not hold them: the scheduler's does).
    uint64_t spares = 0;
    for (const GpuStatus& g : n.gpus) spares |= g.spare ? 1ULL << g.index : 0;
    uint64_t usable = 0;
    if (takes) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        const core::NodeSet* set = allowed[i] == nullptr ? nullptr : &allowed[i]->nodes;
        core::Query q(state, shapes[i].request, nullptr, set);
        const core::NodeFit fit = core::CheckNode(state, q, id, ~spares);
        if (fit.ok()) usable |= fit.gpus;
      }
    }
    const core::NodeSpec* spec = id.valid() ? &cluster.node(id) : nullptr;
    for (GpuStatus& g : n.gpus) {
      t.gpus++;
      t.memory_mib += g.memory_mib;
      t.compute_milli += 1000;
      t.memory_granted_mib += g.memory_granted_mib;
      t.compute_granted_milli += g.compute_granted_milli;
      t.gpus_in_use += g.pods.empty() ? 0 : 1;
      t.gpus_exclusive += g.exclusive ? 1 : 0;
      t.gpus_unhealthy += g.healthy ? 0 : 1;
      t.gpus_spare += g.spare ? 1 : 0;
      if (!takes || !g.healthy || g.spare || g.free_memory_mib <= 0) continue;
      t.free_memory_mib += g.free_memory_mib;
      if (shapes.empty() || (usable >> g.index) & 1) continue;
      g.stranded_mib = g.free_memory_mib;
      t.stranded_mib += g.free_memory_mib;
      bool any_applies = false, all_bigger = true;
      for (const Shape& s : shapes) {
        std::optional<int64_t> need =
            MemoryNeedOn(s.request, spec->gpus[static_cast<size_t>(g.index)]);
        if (!need) continue;
        any_applies = true;
        all_bigger = all_bigger && *need > g.free_memory_mib;
      }
      g.stranded_too_small = any_applies && all_bigger;
      if (g.stranded_too_small) t.stranded_too_small_mib += g.free_memory_mib;
    }
  }
  if (!options.node.empty()) {
    std::erase_if(out.nodes, [&](const NodeStatus& n) { return n.name != options.node; });
  }
  return out;
}

// --- rendering ------------------------------------------------------------------------------

std::string Bar(int64_t used, int64_t total, int width) {
  int cells = 0;
  if (total > 0 && used > 0) {
    cells = static_cast<int>(std::min<int64_t>(width, (used * width + total - 1) / total));
  }
  return StrCat("[", std::string(static_cast<size_t>(cells), '#'),
                std::string(static_cast<size_t>(width - cells), '.'), "]");
}

namespace {

// Columns padded to their widest cell; the last column is not padded.
class Table {
 public:
  explicit Table(std::string indent) : indent_(std::move(indent)) {}
  void Row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string Render() const {
    std::vector<size_t> w;
    for (const auto& r : rows_) {
      for (size_t i = 0; i < r.size(); ++i) {
        if (w.size() <= i) w.push_back(0);
        w[i] = std::max(w[i], r[i].size());
      }
    }
    std::string out;
    for (const auto& r : rows_) {
      std::string line = indent_;
      for (size_t i = 0; i < r.size(); ++i) {
        line += r[i];
        if (i + 1 < r.size()) line += std::string(w[i] - r[i].size() + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  std::string indent_;
  std::vector<std::vector<std::string>> rows_;
};

std::string Cores(int64_t milli) {
  if (milli % 1000 == 0) return StrCat(milli / 1000);
  return fmt::format("{:.1f}", static_cast<double>(milli) / 1000.0);
}

std::string Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return StrCat(part * 100 / whole, "%");
}

std::string GrantText(const GpuPodGrant& g) {
  if (!g.mig.empty()) return g.pod;
  if (g.exclusive) return StrCat(g.pod, " (whole)");
  std::string s = StrCat(g.pod, " ", core::FormatMiB(g.memory_mib));
  if (g.compute_milli > 0) StrAppend(&s, " ", g.compute_milli / 10, "%");
  return s;
}

// What the pod's agent measured, for -o wide: " [used 1.2Gi, busy 12m, idle]"; empty when
// nothing was read for it.
std::string UsageText(const GpuPodGrant& g) {
  if (!g.usage) return "";
  std::vector<std::string> parts;
  if (g.usage->memory_used_bytes >= 0) {
    parts.push_back(StrCat("used ", core::FormatMiB(g.usage->memory_used_bytes >> 20)));
  }
  if (g.usage->busy_seconds >= 0) {
    parts.push_back(StrCat("busy ", FormatWait(static_cast<int64_t>(g.usage->busy_seconds))));
  }
  if (g.usage->idle == 1) parts.push_back("IDLE");
  return parts.empty() ? "" : StrCat(" [", StrJoin(parts, ", "), "]");
}

std::string PodsText(const GpuStatus& g, bool wide) {
  std::vector<std::string> shown;
  int hidden = 0;
  for (const GpuPodGrant& p : g.pods) {
    if (p.shown) {
      shown.push_back(wide ? GrantText(p) + UsageText(p) : GrantText(p));
    } else {
      ++hidden;
    }
  }
  constexpr size_t kFew = 3;
  std::string more;
  if (!wide && shown.size() > kFew) {
    more = StrCat(" +", shown.size() - kFew, " more (-o wide)");
    shown.resize(kFew);
  }
  std::string s = StrJoin(shown, ", ") + more;
  if (hidden > 0) {
    StrAppend(&s, s.empty() ? "" : ", ", hidden, hidden == 1 ? " pod" : " pods",
              " of other namespaces");
  }
  return s.empty() ? "-" : s;
}

std::string Models(const NodeStatus& n) {
  std::map<std::string, int> count;
  for (const GpuStatus& g : n.gpus) ++count[g.model];
  std::vector<std::string> parts;
  for (const auto& [m, c] : count) parts.push_back(StrCat(c, " x ", m));
  return StrJoin(parts, " + ");
}

}  // namespace

std::string RenderStatusText(const ClusterStatus& s, const RenderOptions& o) {
  std::string out =
      StrCat("tessera status: ", s.server.empty() ? "(no server)" : s.server, ", read ",
             Time(s.taken_at), " in ", fmt::format("{:.2f}", s.read_seconds), " s");
  if (!s.namespace_filter.empty()) StrAppend(&out, "; pods of namespace ", s.namespace_filter);
  out += "\n";
  if (!s.pods_namespace.empty()) {
    StrAppend(&out, "(only namespace ", s.pods_namespace,
              "'s pods were listed: GPUs' grants, queues and totals count them alone, so GPUs may "
              "be fuller than shown)\n");
  }
  if (!s.nodes_error.empty()) {
    StrAppend(&out, "\nNodes cannot be read (", s.nodes_error,
              "): no node, GPU or total is shown. Ask for `get`/`list` on nodes (a ClusterRole) to "
              "see them.\n");
  }
  for (const NodeStatus& n : s.nodes) {
    std::vector<std::string> flags;
    flags.push_back(n.ready ? "Ready" : "NotReady");
    if (n.cordoned) flags.push_back("cordoned");
    StrAppend(&out, "\nNODE ", n.name);
    if (!n.gpus.empty()) {
      StrAppend(&out, "  ", Models(n), n.interconnect.empty() ? "" : StrCat(", ", n.interconnect));
    }
    StrAppend(&out, "  ", StrJoin(flags, ", "), "  CPU ", Cores(n.cpu_requested_milli), "/",
              Cores(n.cpu_milli), "  memory ", core::FormatMiB(n.memory_requested_mib), "/",
              core::FormatMiB(n.memory_mib), "  ", n.pods, n.pods == 1 ? " pod" : " pods", "\n");
    if (!n.inventory_error.empty()) {
      StrAppend(&out, "  GPUs unusable: its inventory cannot be read: ", n.inventory_error, "\n");
    }
    if (!n.gpus_blocked.empty()) StrAppend(&out, "  takes no GPU pods: ", n.gpus_blocked, "\n");
    if (n.gpus.empty()) continue;
    Table t("  ");
    t.Row({"GPU", "MODEL", "HEALTH", "MEMORY", "", "COMPUTE", "", "PODS"});
    for (const GpuStatus& g : n.gpus) {
      std::string health = g.healthy ? "ok" : g.health_reason;
      if (!g.healthy && !g.xids.empty()) {
        health = StrCat("XID ", StrJoin(g.xids, ","));
      }
      if (g.mig_enabled) {
        std::vector<std::string> inst;
        for (const MigInstanceStatus& m : g.mig_instances) {
          inst.push_back(StrCat(m.profile, "@", m.start, " ", m.pod.empty() ? "idle" : m.pod));
        }
        t.Row({StrCat(g.index), g.model, health,
               Bar(g.memory_granted_mib, g.memory_mib, o.bar_width),
               StrCat(core::FormatMiB(g.memory_granted_mib), "/", core::FormatMiB(g.memory_mib)),
               "MIG", "", inst.empty() ? "no instances configured" : StrJoin(inst, ", ")});
        continue;
      }
      t.Row({StrCat(g.index), g.model, health, Bar(g.memory_granted_mib, g.memory_mib, o.bar_width),
             StrCat(core::FormatMiB(g.memory_granted_mib), "/", core::FormatMiB(g.memory_mib)),
             Bar(g.compute_granted_milli, 1000, o.bar_width / 2),
             StrCat(g.compute_granted_milli / 10, "%"),
             g.spare ? StrCat("spare (kept for gang replacements)",
                              g.pods.empty() ? "" : StrCat(", ", PodsText(g, o.wide)))
                     : PodsText(g, o.wide)});
    }
    out += t.Render();
  }
  if (s.nodes.empty() && s.nodes_error.empty()) {
    out += s.node_filter.empty() ? "\nno node has GPUs (no tessera.dev/gpu-inventory annotation)\n"
                                 : "";
  }
  if (!s.nodes_error.empty()) {
    StrAppend(&out, "\nRUNNING GPU PODS (", s.running.size(), ", namespace ", s.namespace_filter,
              ")\n");
    if (s.running.empty()) out += "  none\n";
    Table t("  ");
    if (!s.running.empty()) t.Row({"POD", "NODE", "QUEUE", "GPUS"});
    for (const RunningPodStatus& r : s.running) {
      std::vector<std::string> gpus;
      for (const records::AssignedGpu& g : r.gpus) {
        GpuPodGrant grant{r.pod, g.grant.memory_mib, g.grant.compute_milli, g.grant.exclusive,
                          g.mig_profile.empty() ? "" : StrCat(g.mig_profile, "@", g.mig_start)};
        std::string what = GrantText(grant).substr(r.pod.size());
        if (!grant.mig.empty()) what = StrCat(" MIG ", grant.mig);
        gpus.push_back(StrCat("GPU ", g.grant.gpu, what));
      }
      t.Row({r.pod, r.node, r.queue, StrJoin(gpus, ", ")});
    }
    out += t.Render();
  }

  StrAppend(&out, "\nPENDING GPU PODS (", s.pending.size(), ", scheduler ", s.scheduler_name,
            ")\n");
  if (s.pending.empty()) {
    out += "  none\n";
  } else {
    Table t("  ");
    t.Row({"POD", "ASK", "QUEUE", "WAITING", "REASON"});
    for (const PendingPodStatus& p : s.pending) {
      std::string ask = p.ask;
      if (!p.gang.empty()) StrAppend(&ask, ", gang ", p.gang);
      std::string reason = p.reason;
      if (p.never_fits && reason.find("never") == std::string::npos) {
        reason = StrCat("can never fit this cluster: ", reason);
      }
      t.Row({p.pod, ask, p.queue, FormatWait(p.waiting_seconds), reason});
    }
    out += t.Render();
    // The scheduler's scale-up signal (scaleUp in its configuration), where it gave one.
    Table su("  ");
    su.Row({"POD", "SCALE-UP SIGNAL"});
    int signals = 0;
    for (const PendingPodStatus& p : s.pending) {
      if (p.scale_up.empty()) continue;
      su.Row({p.pod, p.scale_up});
      ++signals;
    }
    if (signals > 0) out += "\n" + su.Render();
  }

  if (!s.reservations.empty()) {
    StrAppend(&out, "\nRESERVATIONS (", s.reservations.size(),
              "; room held for pods that waited longest: others may use it only if they end "
              "before it is needed, or outrank them)\n");
    Table t("  ");
    t.Row({"OWNER", "PODS", "WHERE", "SINCE", "EXPECTED START"});
    for (const ReservationStatus& r : s.reservations) {
      if (!r.error.empty()) {
        t.Row({StrCat("pod ", r.owner), "1", StrCat("(cannot be read: ", r.error, ")"),
               StrCat(FormatWait(r.held_seconds), " ago"), "?"});
        continue;
      }
      std::vector<std::string> where;
      for (const records::ReservationRecord::Site& site : r.sites) {
        where.push_back(
            StrCat(site.node, " GPU", site.gpus.size() > 1 ? "s " : " ", IndexRuns(site.gpus)));
      }
      const std::string in = r.starts_in_seconds >= 0
                                 ? StrCat("in ", FormatWait(r.starts_in_seconds))
                                 : StrCat("overdue ", FormatWait(-r.starts_in_seconds));
      t.Row({StrCat(r.gang ? "gang " : "pod ", r.owner), StrCat(r.pods.size()),
             StrJoin(where, "; "), StrCat(FormatWait(r.held_seconds), " ago"),
             StrCat(in, " (", r.expected_start, ")")});
    }
    out += t.Render();
  }

  if (!s.queues.empty()) {
    // GPUs as the queues count them (a share is its fraction of its GPU); -o json has memory and
    // compute too.
    out += "\nQUEUES (GPUs; a share counts its fraction)\n";
    Table t("  ");
    // USED LATELY: the decayed usage the order counts (only when the scheduler keeps one).
    const bool usage = !s.queue_usage_half_life.empty();
    std::vector<std::string> header = {"QUEUE",      "PARENT",    "DESERVED",
                                       "FAIR SHARE", "ALLOCATED", "BORROWED",
                                       "PENDING",    "RUNNING",   "MEMORY GRANTED"};
    if (usage) header.insert(header.begin() + 5, "USED LATELY");
    t.Row(header);
    const auto gpus = FormatGpus;
    for (const QueueStatus& q : s.queues) {
      std::vector<std::string> row = {
          q.name,
          q.parent.empty() ? "-" : q.parent,
          gpus(q.deserved[core::kQueueGpu]),
          gpus(q.fair_share[core::kQueueGpu]),
          gpus(q.allocated[core::kQueueGpu]),
          gpus(q.borrowed[core::kQueueGpu]),
          StrCat(gpus(q.pending_ask[core::kQueueGpu]), " (", q.pending_pods, " pods)"),
          StrCat(q.running),
          core::FormatMiB(q.memory_granted_mib)};
      if (usage) row.insert(row.begin() + 5, gpus(q.usage[core::kQueueGpu]));
      t.Row(row);
    }
    out += t.Render();
    if (usage) {
      StrAppend(&out,
                "  used lately: what each queue held, averaged with weights that halve every ",
                s.queue_usage_half_life,
                " (the scheduler orders a priority's queues by it plus what they hold)\n");
    }
    for (const QueueStatus& q : s.queues) {
      if (!q.invalid.empty()) StrAppend(&out, "  ", q.name, ": ", q.invalid, "\n");
    }
  }

  const StatusTotals& t = s.totals;
  if (!s.nodes_error.empty()) return out;  // no totals without nodes
  out += "\nTOTALS\n";
  Table tt("  ");
  tt.Row({"nodes", StrCat(t.nodes, " (", t.gpu_nodes, " with GPUs)")});
  std::string in_use =
      StrCat(t.gpus_in_use, " of ", t.gpus, " in use (", t.gpus_exclusive, " held whole)");
  if (t.gpus_unhealthy > 0) StrAppend(&in_use, "; ", t.gpus_unhealthy, " unhealthy");
  if (t.gpus_spare > 0) {
    StrAppend(&in_use, "; ", t.gpus_spare, " kept spare for gang replacements");
  }
  tt.Row({"GPUs", in_use});
  tt.Row({"GPU memory",
          StrCat(core::FormatMiB(t.memory_granted_mib), " granted of ",
                 core::FormatMiB(t.memory_mib), " (", Percent(t.memory_granted_mib, t.memory_mib),
                 "); asked by running pods ", core::FormatMiB(t.memory_requested_mib))});
  std::vector<std::string> pending;
  if (t.pending_memory_mib > 0)
    pending.push_back(StrCat(core::FormatMiB(t.pending_memory_mib), " in shares"));
  if (t.pending_whole_gpus > 0) pending.push_back(StrCat(t.pending_whole_gpus, " whole GPUs"));
  if (t.pending_mig > 0) pending.push_back(StrCat(t.pending_mig, " MIG instances"));
  tt.Row({"asked by pending pods", pending.empty() ? "nothing" : StrJoin(pending, " + ")});
  tt.Row({"GPU compute",
          fmt::format("{:.1f} of {} GPUs granted ({})",
                      static_cast<double>(t.compute_granted_milli) / 1000.0, t.compute_milli / 1000,
                      Percent(t.compute_granted_milli, t.compute_milli))});
  std::string free = core::FormatMiB(t.free_memory_mib);
  if (t.pending_gpu_pods == 0) {
    StrAppend(&free, " (nothing pending)");
  } else {
    StrAppend(&free, "; ", core::FormatMiB(t.stranded_too_small_mib),
              " of it in pieces too small for every pending ask, ", core::FormatMiB(t.stranded_mib),
              " that no pending pod can use now");
  }
  tt.Row({"free GPU memory", free});
  out += tt.Render();
  if (!s.problems.empty()) {
    out += "\nPROBLEMS\n";
    for (const SnapshotProblem& p : s.problems)
      StrAppend(&out, "  ", p.object, ": ", p.message, "\n");
  }
  return out;
}

namespace {

// A JSON document written as it is made, without a tree: byte for byte what nlohmann's
// dump(indent) writes for the same values (members in key order, as nlohmann's objects keep
// them; its number and string formatting), so that StatusToJson(...).dump(indent), the tree
// parsed back from it, is the same bytes (status_test checks both indents).
class JsonStream {
 public:
  JsonStream(std::ostream& out, int indent) : out_(out), indent_(indent) {}
  ~JsonStream() { Flush(); }
  JsonStream(const JsonStream&) = delete;
  JsonStream& operator=(const JsonStream&) = delete;

  // One member of an object: its key and value (a scalar, or a function that writes it).
  class Member {
   public:
    template <typename T>
    Member(std::string_view key, const T& value) : key_(key) {  // NOLINT(google-explicit-*)
      if constexpr (std::is_same_v<T, bool>) {
        kind_ = kBool;
        int_ = value ? 1 : 0;
      } else if constexpr (std::is_integral_v<T>) {
        kind_ = kInt;
        int_ = static_cast<int64_t>(value);
      } else if constexpr (std::is_floating_point_v<T>) {
        kind_ = kDouble;
        double_ = value;
      } else if constexpr (std::is_same_v<T, std::nullptr_t>) {
        kind_ = kNull;
      } else if constexpr (std::is_convertible_v<const T&, std::string_view>) {
        kind_ = kString;
        string_ = std::string_view(value);
      } else {  // a function that writes the value: it must outlive the member
        kind_ = kWriter;
        writer_ = &value;
        call_ = [](const void* f) { (*static_cast<const T*>(f))(); };
      }
    }
    std::string_view key() const { return key_; }
    void Write(JsonStream& w) const {
      switch (kind_) {
        case kBool:
          w.Raw(int_ != 0 ? "true" : "false");
          break;
        case kInt:
          w.Raw(std::to_string(int_));
          break;
        case kDouble:
          w.Raw(nlohmann::json(double_).dump());
          break;
        case kNull:
          w.Raw("null");
          break;
        case kString:
          w.String(string_);
          break;
        case kWriter:
          call_(writer_);
          break;
      }
    }

   private:
    enum Kind { kBool, kInt, kDouble, kNull, kString, kWriter };
    std::string_view key_;
    Kind kind_ = kNull;
    int64_t int_ = 0;
    double double_ = 0;
    std::string_view string_;
    const void* writer_ = nullptr;
    void (*call_)(const void*) = nullptr;
  };

  void Object(std::vector<Member> members) {
    if (members.empty()) {
      Raw("{}");
      return;
    }
    std::stable_sort(members.begin(), members.end(),
                     [](const Member& a, const Member& b) { return a.key() < b.key(); });
    Raw("{");
    ++depth_;
    for (size_t i = 0; i < members.size(); ++i) {
      if (i > 0) Raw(",");
      Newline();
      String(members[i].key());
      Raw(indent_ >= 0 ? ": " : ":");
      members[i].Write(*this);
    }
    --depth_;
    Newline();
    Raw("}");
  }

  // An array of `n` elements, element i written by each(i).
  template <typename Fn>
  void Array(size_t n, Fn&& each) {
    if (n == 0) {
      Raw("[]");
      return;
    }
    Raw("[");
    ++depth_;
    for (size_t i = 0; i < n; ++i) {
      if (i > 0) Raw(",");
      Newline();
      each(i);
    }
    --depth_;
    Newline();
    Raw("]");
  }

  void String(std::string_view s) {
    bool plain = true;
    for (char c : s) {
      const auto b = static_cast<unsigned char>(c);
      if (b < 0x20 || b >= 0x80 || c == '"' || c == '\\') {
        plain = false;
        break;
      }
    }
    if (plain) {
      buf_ += '"';
      buf_.append(s);
      buf_ += '"';
    } else {
      buf_ += nlohmann::json(std::string(s)).dump();  // escapes; refuses what is not UTF-8
    }
    MaybeFlush();
  }
  void Raw(std::string_view s) {
    buf_.append(s);
    MaybeFlush();
  }
  void Flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  void Newline() {
    if (indent_ < 0) return;
    buf_ += '\n';
    buf_.append(static_cast<size_t>(depth_ * indent_), ' ');
  }
  void MaybeFlush() {
    if (buf_.size() >= (size_t{1} << 16)) Flush();
  }

  std::ostream& out_;
  const int indent_;
  int depth_ = 0;
  std::string buf_;
};

}  // namespace

void WriteStatusJson(const ClusterStatus& s, std::ostream& out, int indent) {
  JsonStream w(out, indent);
  using M = JsonStream::Member;
  auto or_null = [](std::string_view key, const std::string& v) {
    return v.empty() ? M(key, nullptr) : M(key, v);
  };
  auto nodes = [&] {
    w.Array(s.nodes.size(), [&](size_t i) {
      const NodeStatus& n = s.nodes[i];
      auto gpus = [&] {
        w.Array(n.gpus.size(), [&](size_t k) {
          const GpuStatus& g = n.gpus[k];
          std::vector<const GpuPodGrant*> shown;
          int hidden = 0;
          for (const GpuPodGrant& p : g.pods) {
            if (p.shown) {
              shown.push_back(&p);
            } else {
              ++hidden;
            }
          }
          auto pods = [&] {
            w.Array(shown.size(), [&](size_t j) {
              const GpuPodGrant& p = *shown[j];
              auto usage = [&] {
                std::vector<M> u;
                if (p.usage->memory_used_bytes >= 0) {
                  u.emplace_back("memory_used_bytes", p.usage->memory_used_bytes);
                }
                if (p.usage->busy_seconds >= 0)
                  u.emplace_back("busy_seconds", p.usage->busy_seconds);
                if (p.usage->idle >= 0) u.emplace_back("idle", p.usage->idle == 1);
                w.Object(std::move(u));
              };
              std::vector<M> members = {{"pod", p.pod},
                                        {"memory_mib", p.memory_mib},
                                        {"compute_milli", p.compute_milli},
                                        {"exclusive", p.exclusive}};
              if (!p.mig.empty()) members.emplace_back("mig", p.mig);
              if (p.usage) members.emplace_back("usage", usage);
              w.Object(std::move(members));
            });
          };
          auto mig = [&] {
            w.Array(g.mig_instances.size(), [&](size_t j) {
              const MigInstanceStatus& m = g.mig_instances[j];
              w.Object({{"profile", m.profile},
                        {"start", m.start},
                        m.pod.empty() ? M("pod", nullptr) : M("pod", m.pod)});
            });
          };
          auto xids = [&] {
            w.Array(g.xids.size(), [&](size_t j) { w.Raw(std::to_string(g.xids[j])); });
          };
          w.Object({{"index", g.index},
                    {"uuid", g.uuid},
                    {"model", g.model},
                    {"memory_mib", g.memory_mib},
                    {"healthy", g.healthy},
                    {"health_reason", g.health_reason},
                    {"spare", g.spare},
                    {"xids", xids},
                    {"memory_granted_mib", g.memory_granted_mib},
                    {"compute_granted_milli", g.compute_granted_milli},
                    {"exclusive", g.exclusive},
                    {"mig_enabled", g.mig_enabled},
                    {"mig_instances", mig},
                    {"pods", pods},
                    {"pods_hidden", hidden},
                    {"free_memory_mib", g.free_memory_mib},
                    {"stranded_mib", g.stranded_mib},
                    {"stranded_too_small", g.stranded_too_small}});
        });
      };
      w.Object({{"name", n.name},
                {"ready", n.ready},
                {"cordoned", n.cordoned},
                {"cpu_milli", n.cpu_milli},
                {"memory_mib", n.memory_mib},
                {"cpu_requested_milli", n.cpu_requested_milli},
                {"memory_requested_mib", n.memory_requested_mib},
                {"pods", n.pods},
                {"interconnect", n.interconnect},
                {"inventory_error", n.inventory_error},
                {"gpus_blocked", n.gpus_blocked},
                {"gpus", gpus}});
    });
  };
  auto pending = [&] {
    w.Array(s.pending.size(), [&](size_t i) {
      const PendingPodStatus& p = s.pending[i];
      w.Object({{"pod", p.pod},
                {"ask", p.ask},
                {"gpus", p.gpus},
                {"gpu_memory_mib", p.gpu_memory_mib},
                {"gpu_compute_milli", p.gpu_compute_milli},
                p.gang.empty() ? M("gang", nullptr) : M("gang", p.gang),
                {"queue", p.queue},
                {"priority", p.priority},
                {"reason", p.reason},
                {"never_fits", p.never_fits},
                p.scale_up.empty() ? M("scale_up", nullptr) : M("scale_up", p.scale_up),
                {"created", p.created},
                {"waiting_seconds", p.waiting_seconds}});
    });
  };
  auto queues = [&] {
    w.Array(s.queues.size(), [&](size_t i) {
      const QueueStatus& q = s.queues[i];
      auto amounts = [&](const core::QueueResources& r) {
        return [&w, &r] {
          w.Object({{"gpu_milli", r[core::kQueueGpu]},
                    {"gpu_memory_mib", r[core::kQueueGpuMemory]},
                    {"gpu_compute_milli", r[core::kQueueGpuCompute]}});
        };
      };
      auto deserved = amounts(q.deserved), fair_share = amounts(q.fair_share),
           allocated = amounts(q.allocated), borrowed = amounts(q.borrowed),
           pending_ask = amounts(q.pending_ask), usage = amounts(q.usage);
      w.Object({{"name", q.name},
                {"running", q.running},
                {"pending", q.pending},
                {"gpus_whole", q.gpus_whole},
                {"memory_granted_mib", q.memory_granted_mib},
                {"compute_granted_milli", q.compute_granted_milli},
                {"parent", q.parent},
                {"invalid", q.invalid},
                {"deserved", deserved},
                {"fair_share", fair_share},
                {"allocated", allocated},
                {"borrowed", borrowed},
                {"pending_ask", pending_ask},
                {"usage", usage},
                {"pending_pods", q.pending_pods}});
    });
  };
  auto reservations = [&] {
    w.Array(s.reservations.size(), [&](size_t i) {
      const ReservationStatus& r = s.reservations[i];
      auto pods = [&] { w.Array(r.pods.size(), [&](size_t j) { w.String(r.pods[j]); }); };
      auto where = [&] {
        w.Array(r.sites.size(), [&](size_t j) {
          const records::ReservationRecord::Site& site = r.sites[j];
          auto gpus = [&] {
            w.Array(site.gpus.size(), [&](size_t k) { w.Raw(std::to_string(site.gpus[k])); });
          };
          w.Object({{"node", site.node}, {"gpus", gpus}});
        });
      };
      w.Object({{"owner", r.owner},
                {"kind", r.gang ? "gang" : "pod"},
                {"pods", pods},
                {"where", where},
                {"since", r.since},
                {"held_seconds", r.held_seconds},
                or_null("expected_start", r.expected_start),
                r.error.empty() ? M("starts_in_seconds", r.starts_in_seconds)
                                : M("starts_in_seconds", nullptr),
                or_null("error", r.error)});
    });
  };
  const StatusTotals& t = s.totals;
  auto totals = [&] {
    w.Object({{"nodes", t.nodes},
              {"gpu_nodes", t.gpu_nodes},
              {"gpus", t.gpus},
              {"gpus_in_use", t.gpus_in_use},
              {"gpus_exclusive", t.gpus_exclusive},
              {"gpus_unhealthy", t.gpus_unhealthy},
              {"gpus_spare", t.gpus_spare},
              {"memory_mib", t.memory_mib},
              {"memory_granted_mib", t.memory_granted_mib},
              {"memory_requested_mib", t.memory_requested_mib},
              {"compute_milli", t.compute_milli},
              {"compute_granted_milli", t.compute_granted_milli},
              {"running_gpu_pods", t.running_gpu_pods},
              {"pending_gpu_pods", t.pending_gpu_pods},
              {"pending_memory_mib", t.pending_memory_mib},
              {"pending_whole_gpus", t.pending_whole_gpus},
              {"pending_mig", t.pending_mig},
              {"free_memory_mib", t.free_memory_mib},
              {"stranded_mib", t.stranded_mib},
              {"stranded_too_small_mib", t.stranded_too_small_mib}});
  };
  auto problems = [&] {
    w.Array(s.problems.size(), [&](size_t i) {
      const SnapshotProblem& p = s.problems[i];
      w.Object({{"object", p.object}, {"node", p.node}, {"message", p.message}});
    });
  };
  auto running = [&] {
    w.Array(s.running.size(), [&](size_t i) {
      const RunningPodStatus& r = s.running[i];
      auto gpus = [&] {
        w.Array(r.gpus.size(), [&](size_t k) {
          const records::AssignedGpu& g = r.gpus[k];
          const std::string mig =
              g.mig_profile.empty() ? "" : StrCat(g.mig_profile, "@", g.mig_start);
          std::vector<M> members = {{"index", g.grant.gpu},
                                    {"uuid", g.uuid},
                                    {"memory_mib", g.grant.memory_mib},
                                    {"compute_milli", g.grant.compute_milli},
                                    {"exclusive", g.grant.exclusive}};
          if (!mig.empty()) members.emplace_back("mig", mig);
          w.Object(std::move(members));
        });
      };
      w.Object({{"pod", r.pod}, {"node", r.node}, {"queue", r.queue}, {"gpus", gpus}});
    });
  };
  const std::string time = Time(s.taken_at);
  w.Object({{"version", 1},
            {"server", s.server},
            {"time", time},
            {"read_seconds", s.read_seconds},
            {"scheduler_name", s.scheduler_name},
            or_null("node", s.node_filter),
            or_null("namespace", s.namespace_filter),
            {"nodes", nodes},
            {"pending", pending},
            {"queues", queues},
            {"reservations", reservations},
            or_null("queue_usage_half_life", s.queue_usage_half_life),
            {"totals", totals},
            {"problems", problems},
            or_null("pods_namespace", s.pods_namespace),
            or_null("nodes_error", s.nodes_error),
            {"running", running}});
}

json StatusToJson(const ClusterStatus& status) {
  std::ostringstream out;
  WriteStatusJson(status, out, -1);
  return json::parse(out.str());
}

}  // namespace tessera::k8s
