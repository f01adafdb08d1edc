#include "k8s/scheduler/gang_assembler.h"

#include <algorithm>
#include <tuple>

#include "common/strings.h"
#include "records/names.h"

namespace tessera::k8s {

std::string GangAssembler::KeyOf(const PodInfo& pod) {
  if (!pod.input_error.empty() || !pod.request.gang) return "";
  return StrCat(pod.ns, "/", pod.request.gang->name);
}

void GangAssembler::Join(const std::string& key, PodTracker::Pod& pod) {
  const std::string gang = KeyOf(*pod.info);
  if (gang.empty() || pod.gang == gang) return;
  Leave(key, pod);
  Gang& g = gangs_[gang];
  if (g.members.empty()) {
    g.size = pod.info->request.gang->size;
    g.min = pod.info->request.gang->min;
  }
  g.members.insert(key);
  pod.gang = gang;
}

void GangAssembler::Leave(const std::string& key, PodTracker::Pod& pod) {
  if (pod.gang.empty()) return;
  auto it = gangs_.find(pod.gang);
  if (it != gangs_.end()) {
    it->second.members.erase(key);
    if (it->second.members.empty()) gangs_.erase(it);
  }
  pod.gang.clear();
}

std::string GangAssembler::Mismatch(const std::string& gang_key, const Round& round,
                                    const core::GangAsk& ask) {
  if (ask.size != round.size) {
    return StrCat("invalid pod: metadata.annotations[", records::kGangSizeAnnotation,
                  "]: ", ask.size, " differs from ", round.size,
                  ", the size other members of gang ", gang_key, " give");
  }
  return StrCat("invalid pod: metadata.annotations[", records::kGangMinAnnotation,
                "]: ", ask.min_members(), " differs from ", round.min,
                ", the min other members of gang ", gang_key, " give");
}

const PodInfo* GangAssembler::OldestRunning(const Round& round, const PodTracker& pods) {
  const PodInfo* oldest = nullptr;
  for (const std::string& m : round.running) {
    const PodInfo* p = pods.Find(m)->info.get();
    if (!oldest || std::tie(p->created, p->name) < std::tie(oldest->created, oldest->name)) {
      oldest = p;
    }
  }
  return oldest;
}

GangAssembler::Round GangAssembler::Assemble(const std::string& gang_key,
                                             const PodTracker& pods) const {
  Round r;
  auto it = gangs_.find(gang_key);
  if (it == gangs_.end()) return r;
  const Gang& g = it->second;
  r.size = g.size;
  const core::GangAsk ask{"", g.size, "", false, g.min};
  r.min = ask.min_members();
  for (const std::string& m : g.members) {
    const PodTracker::Pod& p = *pods.Find(m);
    if (p.info->request.gang->size != g.size || p.info->request.gang->min != g.min) {
      r.wrong_size.push_back(m);
      continue;
    }
    switch (p.stage) {
      case Stage::kQueued:
      case Stage::kUnschedulable:
      case Stage::kGangWaiting:
        r.pending.push_back(m);
        break;
      case Stage::kBinding:
      case Stage::kBindConflict:
      case Stage::kBound:
        ++r.placed;
        r.running.push_back(m);
        break;
      default:
        break;
    }
  }
  const int need = g.size - r.placed;  // at most this many more
  if (r.pending.empty() || r.placed + static_cast<int>(r.pending.size()) < r.min) return r;
  // Oldest first; members beyond the gang's size wait.
  std::sort(r.pending.begin(), r.pending.end(), [&](const std::string& a, const std::string& b) {
    const PodInfo& pa = *pods.Find(a)->info;
    const PodInfo& pb = *pods.Find(b)->info;
    return std::tie(pa.created, pa.name) < std::tie(pb.created, pb.name);
  });
  // An elastic gang may be ready before all its members exist: fewer pending than `need`.
  const size_t take = std::min(r.pending.size(), static_cast<size_t>(std::max(need, 0)));
  r.extra.assign(r.pending.begin() + static_cast<std::ptrdiff_t>(take), r.pending.end());
  r.pending.resize(take);
  r.ready = !r.pending.empty();
  return r;
}

void GangAssembler::Assembled(const std::string& gang_key) {
  auto it = gangs_.find(gang_key);
  if (it != gangs_.end()) it->second.shortage_reported = false;
}

std::vector<GangAssembler::Shortage> GangAssembler::TakeShortages(const PodTracker& pods) {
  std::vector<Shortage> out;
  for (auto& [gk, g] : gangs_) {
    if (g.shortage_reported) continue;
    Shortage s{gk, g.size, core::GangAsk{"", g.size, "", false, g.min}.min_members(), 0, {}};
    for (const std::string& m : g.members) {
      const PodTracker::Pod& p = *pods.Find(m);
      if (p.stage != Stage::kIgnored && p.stage != Stage::kBadInput) ++s.present;
      if (p.stage == Stage::kGangWaiting) s.waiting.push_back(m);
    }
    if (s.waiting.empty() || s.present >= s.min) continue;
    g.shortage_reported = true;
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace tessera::k8s
