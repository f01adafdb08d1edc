#include "k8s/scheduler/gang_restarts.h"

namespace tessera::k8s {

std::vector<std::string> GangRestarts::Start(const std::string& gang, const std::string& lost,
                                             const std::vector<std::string>& placed,
                                             TimePoint now) {
  if (restarts_.contains(gang)) return {};
  Restart& r = restarts_[gang];
  r.lost = lost;
  r.old[lost] = now;  // leaving already: never evicted again
  std::vector<std::string> evict;
  for (const std::string& key : placed) {
    if (key == lost || r.old.contains(key)) continue;
    r.old[key] = now;
    evict.push_back(key);
  }
  return evict;
}

void GangRestarts::Resume(const std::string& gang, const std::string& key, TimePoint now) {
  if (!GangOf(key).empty()) return;
  restarts_[gang].old.emplace(key, now - retry_);
}

bool GangRestarts::Gone(const std::string& key) {
  for (auto it = restarts_.begin(); it != restarts_.end(); ++it) {
    if (it->second.old.erase(key) == 0) continue;
    if (!it->second.old.empty()) return false;
    restarts_.erase(it);
    return true;
  }
  return false;
}

int GangRestarts::Leaving(const std::string& gang) const {
  auto it = restarts_.find(gang);
  return it == restarts_.end() ? 0 : static_cast<int>(it->second.old.size());
}

std::string GangRestarts::GangOf(const std::string& key) const {
  for (const auto& [gang, r] : restarts_) {
    if (r.old.contains(key)) return gang;
  }
  return "";
}

}  // namespace tessera::k8s
