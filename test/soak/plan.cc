#include "soak/plan.h"

#include <algorithm>
#include <sstream>

namespace tessera::soak {

std::string_view FaultKindName(FaultKind k) {
  switch (k) {
    case FaultKind::kSchedulerKill:
      return "scheduler-kill";
    case FaultKind::kAgentKill:
      return "agent-kill";
    case FaultKind::kKubeletKill:
      return "kubelet-kill";
    case FaultKind::kContainerdKill:
      return "containerd-kill";
    case FaultKind::kApiServerRestart:
      return "apiserver-restart";
    case FaultKind::kEtcdRestart:
      return "etcd-restart";
    case FaultKind::kNodeNotReady:
      return "node-notready";
    case FaultKind::kXidApplication:
      return "xid-application";
    case FaultKind::kXidHardware:
      return "xid-hardware";
    case FaultKind::kShimLockKill:
      return "shim-lock-kill";
    case FaultKind::kLeaseSkew:
      return "lease-skew";
  }
  return "?";
}

std::vector<FaultKind> AllFaultKinds() {
  return {FaultKind::kSchedulerKill,  FaultKind::kAgentKill,        FaultKind::kKubeletKill,
          FaultKind::kContainerdKill, FaultKind::kApiServerRestart, FaultKind::kEtcdRestart,
          FaultKind::kNodeNotReady,   FaultKind::kXidApplication,   FaultKind::kXidHardware,
          FaultKind::kShimLockKill,   FaultKind::kLeaseSkew};
}

std::vector<PlannedFault> PlanFaults(uint64_t seed, std::chrono::seconds duration,
                                     std::chrono::seconds mean_gap, std::chrono::seconds min_gap,
                                     const std::vector<FaultKind>& kinds) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(1.0 / static_cast<double>(mean_gap.count()));
  std::vector<FaultKind> deck;
  std::vector<PlannedFault> out;
  double t = static_cast<double>(min_gap.count());
  while (true) {
    t += std::max<double>(static_cast<double>(min_gap.count()), gap(rng));
    if (t >= static_cast<double>(duration.count()) || kinds.empty()) break;
    if (deck.empty()) {
      deck = kinds;
      std::shuffle(deck.begin(), deck.end(), rng);
    }
    PlannedFault f;
    f.at = std::chrono::seconds(static_cast<int64_t>(t));
    f.kind = deck.back();
    deck.pop_back();
    f.pick = static_cast<uint32_t>(rng());
    out.push_back(f);
  }
  return out;
}

std::string DescribePlan(const std::vector<PlannedFault>& plan) {
  std::ostringstream out;
  for (size_t i = 0; i < plan.size(); ++i) {
    if (i > 0) out << "; ";
    out << "t+" << plan[i].at.count() << "s " << FaultKindName(plan[i].kind)
        << " pick=" << plan[i].pick;
  }
  return out.str();
}

std::string_view UnitKindName(UnitKind k) {
  switch (k) {
    case UnitKind::kShare:
      return "share";
    case UnitKind::kWhole:
      return "whole";
    case UnitKind::kGang:
      return "gang";
    case UnitKind::kMig:
      return "mig";
    case UnitKind::kDraShare:
      return "dra-share";
    case UnitKind::kDraWhole:
      return "dra-whole";
    case UnitKind::kDraMig:
      return "dra-mig";
  }
  return "?";
}

PlannedUnit WorkloadDraws::Next() {
  // Shares most often, as in inference-heavy clusters.
  static constexpr UnitKind kWeighted[] = {
      UnitKind::kShare,    UnitKind::kShare,    UnitKind::kShare, UnitKind::kWhole,
      UnitKind::kWhole,    UnitKind::kGang,     UnitKind::kMig,   UnitKind::kDraShare,
      UnitKind::kDraShare, UnitKind::kDraWhole, UnitKind::kDraMig};
  std::uniform_int_distribution<size_t> kind(0, std::size(kWeighted) - 1);
  std::uniform_int_distribution<int> members(2, 3);
  std::uniform_int_distribution<int> gib(1, 3);
  std::uniform_int_distribution<int> life(30, 120);
  PlannedUnit u;
  u.kind = kWeighted[kind(rng_)];
  u.members = u.kind == UnitKind::kGang ? members(rng_) : 1;
  u.memory_gib = 4 * gib(rng_);  // 4, 8 or 12 GiB
  u.lifetime = std::chrono::seconds(life(rng_));
  return u;
}

std::chrono::milliseconds WorkloadDraws::Gap() {
  std::uniform_int_distribution<int> ms(1500, 4500);
  return std::chrono::milliseconds(ms(rng_));
}

}  // namespace tessera::soak
