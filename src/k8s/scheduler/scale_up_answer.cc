#include "k8s/scheduler/scale_up_answer.h"

#include <vector>

#include "spdlog/spdlog.h"

namespace tessera::k8s {

void ScaleUpAnswer::EndCycle(TimePoint now) {
  const PodTracker& pods = host_.pods();
  if (!signal_.Due(now, pods.count(Stage::kUnschedulable) > 0)) return;
  std::vector<const PodInfo*> waiting;
  pods.ForEach([&](const std::string&, const PodTracker::Pod& p) {
    if (p.stage == Stage::kUnschedulable) waiting.push_back(p.info.get());
  });
  const auto started = std::chrono::steady_clock::now();
  std::vector<ScaleUpSignal::Notice> notices = signal_.Update(
      host_.ledger(),
      [&pods](const std::string& key) -> const PodInfo* {
        const PodTracker::Pod* p = pods.Find(key);
        return p == nullptr ? nullptr : p->info.get();
      },
      waiting, [this] { return host_.NewPolicy(); }, now);
  for (const ScaleUpSignal::Notice& n : notices) {
    host_.reporter().ReportScaleUp(*n.pod, n.message, n.helps);
  }
  spdlog::debug("scale-up signal for {} waiting pods in {:.3f}s: {}", waiting.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(),
                signal_.last().reason);
}

}  // namespace tessera::k8s
