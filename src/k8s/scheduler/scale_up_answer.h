// The scale-up signal as the scheduler's last answer to "this pod does not fit now" (no_fit.h):
// which node template, and how many nodes of it, would let the waiting pods run
// (scale_up_signal.h computes it). It takes no pod itself (Answer passes) and speaks for all the
// unschedulable pods at once, at the end of a cycle when the signal is due: each pod whose word
// changed hears it (Reporter::ReportScaleUp: a Normal Event and the tessera.dev/ScaleUp condition).
// Off without templates.
#pragma once

#include <string_view>

#include "k8s/scheduler/no_fit.h"
#include "k8s/scheduler/scale_up_signal.h"

namespace tessera::k8s {

class ScaleUpAnswer final : public NoFitAnswer {
 public:
  // `metrics` may be null.
  ScaleUpAnswer(NoFitHost& host, ScaleUpSignalOptions options, SchedulerMetrics* metrics)
      : host_(host), signal_(std::move(options), metrics) {}

  const ScaleUpSignal& signal() const { return signal_; }

  std::string_view name() const override { return "scale-up signal"; }
  Verdict Answer(const NoFit& unfit) override {
    (void)unfit;
    return Verdict::Pass();
  }
  void EndCycle(TimePoint now) override;

 private:
  NoFitHost& host_;
  ScaleUpSignal signal_;
};

}  // namespace tessera::k8s
