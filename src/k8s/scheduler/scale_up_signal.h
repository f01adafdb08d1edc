// The scale-up signal in the scheduler: for the pods that wait (the scheduler found no room for
// them), which of the configured node templates, and how many nodes of it, would let them run.
// The what-if is core/plan/scale_up.h (plan::PlanScaleUp), on the scheduler's own ledger read the
// way `tessera plan scale-up --from-cluster` reads a snapshot's (plan_inputs.h): one owner of the
// answer, so the metric, the Events and the offline command agree.
//
// Off unless templates are configured (scaleUp.templates). Recomputed at most once per interval,
// and only while pods wait; the answer is kept for the metrics
// (tessera_scheduler_scale_up_nodes{template}, ..._pods{template}, ..._waiting_pods) and for
// Events: each waiting pod gets a Normal Event (reason ScaleUpSignal) and the pod condition
// tessera.dev/ScaleUp (shown by `tessera status`) when what the signal says about it changes, not
// at every computation.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/model/node.h"
#include "core/plan/scale_up.h"
#include "k8s/scheduler/ledger.h"
#include "k8s/scheduler/metrics.h"
#include "k8s/scheduler/objects.h"

namespace tessera::k8s {

struct ScaleUpSignalOptions {
  // Node templates (names unique): nodes an operator or an autoscaler can add. None: off.
  std::vector<core::NodeSpec> templates;
  std::chrono::milliseconds interval{30'000};
  int max_nodes = 64;  // most nodes of one template
};

class ScaleUpSignal {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // `metrics` may be null.
  ScaleUpSignal(ScaleUpSignalOptions options, SchedulerMetrics* metrics);

  bool enabled() const { return !options_.templates.empty(); }
  // Whether Update should run now: enabled, and the interval has passed since the last one (or
  // there was none); a signal computed while pods waited is cleared at once when none waits.
  bool Due(TimePoint now, bool pods_wait) const;

  struct Notice {
    const PodInfo* pod;
    std::string message;
    bool helps = false;  // some template lets the pod run
  };
  // Computes the signal for `waiting` (pods the scheduler could not place) on `ledger`; `find`
  // gives the decoded pod of a key the ledger holds. Returns an Event for each waiting pod whose
  // message changed. Publishes the metrics. `make_policy`: the scheduler's policy, fresh. The
  // plan runs on copies of the ledger's engine (plan::ScaleUpInput::base): its topology levels.
  std::vector<Notice> Update(const ClusterLedger& ledger,
                             const std::function<const PodInfo*(const std::string&)>& find,
                             const std::vector<const PodInfo*>& waiting,
                             const std::function<std::unique_ptr<core::Policy>()>& make_policy,
                             TimePoint now);

  // The last answer (empty options before the first Update).
  const plan::ScaleUpPlan& last() const { return last_; }
  // The message for one pod under `plan` (the Event's text).
  static std::string MessageFor(const plan::ScaleUpPlan& plan, const std::string& pod_key);

 private:
  void Publish();

  ScaleUpSignalOptions options_;
  SchedulerMetrics* metrics_;
  plan::ScaleUpPlan last_;
  bool computed_ = false;
  TimePoint last_at_{};
  absl::flat_hash_map<std::string, std::string> told_;  // pod key -> last message
};

}  // namespace tessera::k8s
