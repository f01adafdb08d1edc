#include "k8s/scheduler/scale_up_signal.h"

#include <algorithm>

#include "common/strings.h"
#include "k8s/scheduler/plan_inputs.h"
#include "spdlog/spdlog.h"

namespace tessera::k8s {

ScaleUpSignal::ScaleUpSignal(ScaleUpSignalOptions options, SchedulerMetrics* metrics)
    : options_(std::move(options)), metrics_(metrics) {}

bool ScaleUpSignal::Due(TimePoint now, bool pods_wait) const {
  if (!enabled()) return false;
  if (!pods_wait) return computed_ && last_.waiting_pods > 0;  // clear it once
  return !computed_ || now - last_at_ >= options_.interval;
}

std::string ScaleUpSignal::MessageFor(const plan::ScaleUpPlan& plan, const std::string& pod_key) {
  if (plan.recommended < 0) {
    // Why: the engine's reason for this pod under the first template that names it.
    for (const plan::TemplateOption& o : plan.options) {
      for (const plan::Unplaced& u : o.unplaced) {
        if (std::find(u.pods.begin(), u.pods.end(), pod_key) != u.pods.end()) {
          return StrCat("no configured node template would let it run (", o.name, ": ", u.reason,
                        ")");
        }
      }
    }
    return "no configured node template would let it run";
  }
  const plan::TemplateOption& best = plan.options[static_cast<size_t>(plan.recommended)];
  for (const plan::Unplaced& u : best.unplaced) {
    if (std::find(u.pods.begin(), u.pods.end(), pod_key) != u.pods.end()) {
      return StrCat("no configured node template would let it run; adding ", best.nodes, " x ",
                    best.name, " would run ", best.pods_placed, " of the ", plan.waiting_pods,
                    " waiting pods, not this one (", u.reason, ")");
    }
  }
  if (best.nodes == 0) {
    return StrCat("it fits without new nodes (the cluster changed since it was last tried)");
  }
  for (const plan::PartialGang& g : best.partial) {
    if (std::find(g.waiting.begin(), g.waiting.end(), pod_key) != g.waiting.end()) {
      return StrCat("adding ", best.nodes, " node", best.nodes == 1 ? "" : "s", " of template ",
                    best.name, " (", best.gpus, " GPUs) would start ", plan::Describe(g));
    }
  }
  return StrCat("adding ", best.nodes, " node", best.nodes == 1 ? "" : "s", " of template ",
                best.name, " (", best.gpus, " GPUs) would let it run, with ", best.pods_placed - 1,
                " of the other ", plan.waiting_pods - 1, " waiting pods");
}

namespace {
// The recommended template runs the pod.
bool Helps(const plan::ScaleUpPlan& plan, const std::string& pod_key) {
  if (plan.recommended < 0) return false;
  for (const plan::Unplaced& u : plan.options[static_cast<size_t>(plan.recommended)].unplaced) {
    if (std::find(u.pods.begin(), u.pods.end(), pod_key) != u.pods.end()) return false;
  }
  return true;
}
}  // namespace

std::vector<ScaleUpSignal::Notice> ScaleUpSignal::Update(
    const ClusterLedger& ledger, const std::function<const PodInfo*(const std::string&)>& find,
    const std::vector<const PodInfo*>& waiting,
    const std::function<std::unique_ptr<core::Policy>()>& make_policy, TimePoint now) {
  computed_ = true;
  last_at_ = now;
  std::vector<Notice> notices;
  std::vector<WaitingGroup> groups = GroupWaiting(waiting);
  if (groups.empty()) {
    last_ = plan::ScaleUpPlan{};
    for (const core::NodeSpec& t : options_.templates) {
      plan::TemplateOption o;
      o.name = t.name;
      last_.options.push_back(std::move(o));
    }
    told_.clear();
    Publish();
    return notices;
  }
  // An elastic gang running grows with no new nodes.
  DropRunningGangs(RunningGangs(ledger, find), &groups);
  // The cluster as it runs is the ledger's engine, copied per template (no view of every running
  // pod, no engine rebuilt).
  plan::ScaleUpInput in;
  in.base = &ledger.engine();
  in.make_policy = make_policy;
  for (const WaitingGroup& g : groups) in.waiting.push_back(g.requests());
  in.templates = options_.templates;
  plan::ScaleUpOptions so;
  so.max_nodes = options_.max_nodes;
  absl::StatusOr<plan::ScaleUpPlan> plan = plan::PlanScaleUp(in, so);
  if (!plan.ok()) {
    // The templates were checked at start; the ledger is consistent by its invariants.
    spdlog::error("scale-up signal: {}", plan.status().message());
    return notices;
  }
  last_ = *std::move(plan);
  Publish();
  absl::flat_hash_map<std::string, std::string> told;
  for (const WaitingGroup& g : groups) {
    for (const PodInfo* p : g.pods) {
      std::string message = MessageFor(last_, p->key);
      auto it = told_.find(p->key);
      if (it == told_.end() || it->second != message) {
        notices.push_back(Notice{p, message, Helps(last_, p->key)});
      }
      told[p->key] = std::move(message);
    }
  }
  told_ = std::move(told);
  return notices;
}

void ScaleUpSignal::Publish() {
  if (metrics_ == nullptr) return;
  std::vector<ScaleUpGauges> gauges;
  for (const plan::TemplateOption& o : last_.options) {
    gauges.push_back(ScaleUpGauges{o.name, o.pods_placed > 0 ? o.nodes : 0, o.pods_placed});
  }
  metrics_->SetScaleUp(std::move(gauges), last_.waiting_pods);
}

}  // namespace tessera::k8s
