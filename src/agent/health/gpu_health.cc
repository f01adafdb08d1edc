#include "agent/health/gpu_health.h"

#include <algorithm>

#include "common/strings.h"

namespace tessera::agent {
namespace {

// Higher is better: NVLink by lanes above every PCIe relation, PCIe relations by closeness.
int LinkRank(core::Link link) {
  if (link.kind == core::LinkKind::kNvLink) return 1000 + link.nvlink_lanes;
  return 100 - static_cast<int>(link.kind);
}

std::string FormatDuration(std::chrono::milliseconds d) {
  if (d.count() % 60'000 == 0) return StrCat(d.count() / 60'000, "m");
  if (d.count() % 1000 == 0) return StrCat(d.count() / 1000, "s");
  return StrCat(d.count(), "ms");
}

// A change of the link between GPUs i and k of `gpus`.
HealthChange LinkChange(HealthChange::Kind kind, const NodeGpus& gpus, int i, int k,
                        std::string reason, std::chrono::steady_clock::time_point since) {
  HealthChange c;
  c.kind = kind;
  c.gpu = i;
  c.uuid = gpus.gpus[i].spec.uuid;
  c.peer = k;
  c.peer_uuid = gpus.gpus[k].spec.uuid;
  c.effect = FaultEffect::kLinks;
  c.reason = std::move(reason);
  c.since = since;
  return c;
}

}  // namespace

std::string_view HealthChangeName(HealthChange::Kind kind) {
  switch (kind) {
    case HealthChange::Kind::kOutOfService:
      return "out-of-service";
    case HealthChange::Kind::kDraining:
      return "draining";
    case HealthChange::Kind::kBackInService:
      return "back-in-service";
    case HealthChange::Kind::kLinkDown:
      return "link-down";
    case HealthChange::Kind::kLinkUp:
      return "link-up";
  }
  return "?";
}

void GpuHealthTracker::Observe(const NodeGpus& found, Clock::time_point now) {
  if (found.gpus.size() != found_.gpus.size()) links_.clear();  // another node's worth of GPUs
  found_ = found;
  for (const DiscoveredGpu& g : found.gpus) {
    GpuState& state = gpus_[g.spec.uuid];
    for (auto& [key, fault] : state.faults) fault.present = false;
    for (const GpuCondition& c : g.conditions) {
      if (c.effect < FaultEffect::kDrain) continue;
      const std::string key(ClassifyCondition(c.condition).name);
      auto [it, fresh] = state.faults.try_emplace(key);
      Fault& f = it->second;
      if (fresh) f.first_seen = now;
      f.key = key;
      f.effect = c.effect;
      f.xids = c.xids;
      f.text = c.detail.empty() ? std::string(ClassifyCondition(c.condition).text) : c.detail;
      f.last_seen = now;
      f.present = true;
    }
  }
  const int n = static_cast<int>(found.gpus.size());
  for (int i = 0; i < n; ++i) {
    for (int k = i + 1; k < n; ++k) {
      const core::Link now_link = found.links.at(i, k);
      auto [it, fresh] = links_.try_emplace(std::make_pair(i, k));
      LinkState& l = it->second;
      if (fresh || LinkRank(now_link) > LinkRank(l.best)) l.best = now_link;
      l.down_now = l.best.kind == core::LinkKind::kNvLink && LinkRank(now_link) < LinkRank(l.best);
      if (!l.down_now) continue;
      if (!l.held) {
        l.held = true;
        l.first_seen = now;
        changes_.push_back(LinkChange(
            HealthChange::Kind::kLinkDown, found, i, k,
            StrCat("the NVLink between GPU ", i, " and GPU ", k, " is down (",
                   core::LinkName(now_link), " instead of ", core::LinkName(l.best), ")"),
            now));
      }
      l.degraded = now_link;
      l.last_seen = now;
    }
  }
  Release(now);
  Publish(now);
}

void GpuHealthTracker::OnXid(const HealthEvent& event, Clock::time_point now) {
  if (event.klass.effect < FaultEffect::kDrain || event.uuid.empty()) return;
  GpuState& state = gpus_[event.uuid];
  const std::string key = StrCat("xid-", event.xid);
  auto [it, fresh] = state.faults.try_emplace(key);
  Fault& f = it->second;
  if (fresh) f.first_seen = now;
  f.key = key;
  f.effect = event.klass.effect;
  f.xids = {event.xid};
  f.text = event.text;
  f.last_seen = now;
  f.present = false;
  Publish(now);
}

void GpuHealthTracker::Tick(Clock::time_point now) {
  Release(now);
  Publish(now);
}

void GpuHealthTracker::Release(Clock::time_point now) {
  for (auto& [uuid, state] : gpus_) {
    for (auto it = state.faults.begin(); it != state.faults.end();) {
      const Fault& f = it->second;
      if (!f.present && now - f.last_seen >= options_.quiet_period) {
        it = state.faults.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [pair, l] : links_) {
    if (!l.held || l.down_now || now - l.last_seen < options_.quiet_period) continue;
    l.held = false;
    const auto [i, k] = pair;
    if (static_cast<size_t>(k) >= found_.gpus.size()) continue;
    changes_.push_back(
        LinkChange(HealthChange::Kind::kLinkUp, found_, i, k,
                   StrCat("the NVLink between GPU ", i, " and GPU ", k, " is back (",
                          core::LinkName(l.best), ") for ", FormatDuration(options_.quiet_period)),
                   l.first_seen));
  }
}

void GpuHealthTracker::Publish(Clock::time_point now) {
  published_ = found_;
  for (DiscoveredGpu& g : published_.gpus) {
    GpuState& state = gpus_[g.spec.uuid];
    FaultEffect effect = FaultEffect::kNone;
    for (const auto& [key, f] : state.faults) effect = std::max(effect, f.effect);
    records::GpuHealth health;
    bool cleared = true;  // every fault it holds is gone, waiting out the quiet period
    std::vector<std::string> texts;
    for (const auto& [key, f] : state.faults) {
      cleared = cleared && !f.present;
      for (int32_t x : f.xids) {
        if (std::find(health.xids.begin(), health.xids.end(), x) == health.xids.end()) {
          health.xids.push_back(x);
        }
      }
      texts.push_back(f.text);
    }
    if (effect >= FaultEffect::kDrain) {
      health.healthy = false;
      std::sort(health.xids.begin(), health.xids.end());
      health.reason = StrJoin(texts, "; ");
      if (cleared) {
        StrAppend(&health.reason, " (cleared; back in service after ",
                  FormatDuration(options_.quiet_period), " without a fault)");
      }
    } else {
      health = records::GpuHealth{};
      effect = FaultEffect::kNone;
    }
    g.health = health;
    g.fault = effect;
    if (effect == state.published) continue;
    HealthChange c;
    c.gpu = g.spec.index;
    c.uuid = g.spec.uuid;
    c.effect = effect;
    c.xids = health.xids;
    c.reason = health.reason;
    if (state.published == FaultEffect::kNone) state.since = now;
    c.since = state.since;
    if (effect == FaultEffect::kNone) {
      c.kind = HealthChange::Kind::kBackInService;
      c.reason = StrCat("GPU ", g.spec.index, " (", g.spec.uuid, ") is back in service after ",
                        FormatDuration(options_.quiet_period), " without a fault");
      changes_.push_back(std::move(c));
    } else if (effect == FaultEffect::kFail) {
      c.kind = HealthChange::Kind::kOutOfService;
      changes_.push_back(std::move(c));
    } else if (state.published == FaultEffect::kNone) {
      c.kind = HealthChange::Kind::kDraining;
      changes_.push_back(std::move(c));
    }
    state.published = effect;
  }
  for (const auto& [pair, l] : links_) {
    if (!l.held || static_cast<size_t>(pair.second) >= published_.gpus.size()) continue;
    if (!l.down_now) published_.links.Set(pair.first, pair.second, l.degraded);
  }
}

std::vector<HealthChange> GpuHealthTracker::TakeChanges() {
  std::vector<HealthChange> out;
  out.swap(changes_);
  return out;
}

std::vector<int32_t> GpuHealthTracker::FailedGpus() const {
  std::vector<int32_t> out;
  for (const DiscoveredGpu& g : published_.gpus) {
    if (g.fault == FaultEffect::kFail) out.push_back(g.spec.index);
  }
  return out;
}

std::vector<std::pair<int32_t, int32_t>> GpuHealthTracker::DownLinks() const {
  std::vector<std::pair<int32_t, int32_t>> out;
  for (const auto& [pair, l] : links_) {
    if (l.held) out.push_back(pair);
  }
  return out;
}

GpuHealthTracker::Clock::time_point GpuHealthTracker::NextRelease() const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& [uuid, state] : gpus_) {
    for (const auto& [key, f] : state.faults) {
      if (!f.present) next = std::min(next, f.last_seen + options_.quiet_period);
    }
  }
  for (const auto& [pair, l] : links_) {
    if (l.held && !l.down_now) next = std::min(next, l.last_seen + options_.quiet_period);
  }
  return next;
}

}  // namespace tessera::agent
