#include "k8s/scheduler/pod_groups.h"

#include <algorithm>

#include "common/strings.h"
#include "records/names.h"

namespace tessera::k8s {

std::vector<std::string> PodGroups::OnGroup(Change change,
                                            std::shared_ptr<const PodGroupInfo> group) {
  const std::string key = group->key;
  if (change == Change::kDeleted) {
    groups_.erase(key);
    written_.erase(key);
  } else {
    if (auto it = groups_.find(key); it != groups_.end() && it->second->uid != group->uid) {
      written_.erase(key);  // recreated: a new object, nothing written on it yet
    }
    groups_[key] = std::move(group);
  }
  auto it = members_.find(key);
  if (it == members_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

const PodGroupInfo* PodGroups::Find(const std::string& group_key) const {
  auto it = groups_.find(group_key);
  return it == groups_.end() ? nullptr : it->second.get();
}

const PodGroupInfo* PodGroups::GroupOf(const PodInfo& pod) const {
  if (pod.pod_group.empty()) return nullptr;
  return Find(StrCat(pod.ns, "/", pod.pod_group));
}

std::shared_ptr<const PodInfo> PodGroups::Raw(const std::string& pod_key) const {
  auto it = raw_.find(pod_key);
  return it == raw_.end() ? nullptr : it->second.raw;
}

std::vector<std::string> PodGroups::Waiting() const {
  std::vector<std::string> out;
  for (const auto& [key, m] : raw_) {
    if (Find(StrCat(m.raw->ns, "/", m.raw->pod_group)) == nullptr) out.push_back(key);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void PodGroups::Forget(const std::string& pod_key) {
  auto it = raw_.find(pod_key);
  if (it == raw_.end()) return;
  const PodInfo& raw = *it->second.raw;
  const std::string group = StrCat(raw.ns, "/", raw.pod_group);
  if (auto m = members_.find(group); m != members_.end()) {
    m->second.erase(pod_key);
    if (m->second.empty()) members_.erase(m);
  }
  raw_.erase(it);
}

PodGroups::Resolved PodGroups::Resolve(std::shared_ptr<const PodInfo> raw) {
  if (raw->pod_group.empty()) {
    Forget(raw->key);  // (a pod's group is immutable; a recreated pod may have none)
    return {std::move(raw), ""};
  }
  Member& m = raw_[raw->key];
  const std::string group_key = StrCat(raw->ns, "/", raw->pod_group);
  // The group key it was in, not only the podGroupName: a key may come back in another namespace
  // when a name holds a '/' (which the API server refuses, but the decoder lets through).
  if (m.raw) {
    if (const std::string was = StrCat(m.raw->ns, "/", m.raw->pod_group); was != group_key) {
      if (auto old = members_.find(was); old != members_.end()) {
        old->second.erase(raw->key);
        if (old->second.empty()) members_.erase(old);
      }
    }
  }
  members_[group_key].insert(raw->key);
  m.raw = raw;
  std::string ignored;
  Resolved out{Apply(*raw, Find(group_key), &ignored), ""};
  if (ignored != m.ignored) {
    m.ignored = ignored;
    out.ignored = ignored;
  }
  return out;
}

std::shared_ptr<const PodInfo> PodGroups::Apply(const PodInfo& raw, const PodGroupInfo* group,
                                                std::string* ignored) const {
  auto pod = std::make_shared<PodInfo>(raw);
  const std::string group_key = StrCat(raw.ns, "/", raw.pod_group);
  if (group == nullptr) {
    pod->pod_group_missing = true;
    pod->request.gang.reset();  // in no gang until the PodGroup says which
    return pod;
  }
  if (!pod->input_error.empty()) return pod;
  if (!group->error.empty()) {
    pod->input_error = StrCat("PodGroup ", group_key, ": ", group->error);
    return pod;
  }
  // Workload-aware preemption (1.37): the group's priority and preemption policy are its pods',
  // and disruptionMode all makes the group one victim, whichever policy it has.
  if (group->priority) {  // both copies: preemption reads the pod's, the engine the request's
    pod->priority = *group->priority;
    pod->request.priority = *group->priority;
  }
  if (group->preempt_never) pod->may_preempt = false;
  pod->disrupted_with_group = group->disrupt_all;
  if (group->gang && group->disrupt_all) pod->gang_restart_all = true;
  // What the pod's own annotations (or Kueue label) ask: kept for its topology, else ignored.
  const std::optional<core::GangAsk> own = raw.request.gang;
  // A basic PodGroup asks for no gang (the Job controller gives one to every Job without
  // spec.scheduling): the pod's own gang, if it asks one, is not contradicted and applies.
  if (!group->gang && own) return pod;
  std::optional<core::GangAsk> gang;
  if (group->gang) {
    core::GangAsk g;
    g.name = raw.pod_group;
    g.size = records::kMaxGangSize;  // no fixed size: the group grows as room allows
    g.min = group->min_count < g.size ? group->min_count : 0;
    if (!group->topology_keys.empty()) {
      // Narrowest level any key names (levels_ is narrowest first); every key must be a level.
      int narrowest = static_cast<int>(levels_.size());
      for (size_t i = 0; i < group->topology_keys.size(); ++i) {
        const std::string& key = group->topology_keys[i];
        auto it = std::find_if(levels_.begin(), levels_.end(), [&](const core::TopologyLevel& l) {
          return l.label == key || l.name == key;
        });
        if (it == levels_.end()) {
          std::vector<std::string> labels;
          for (const core::TopologyLevel& l : levels_) labels.push_back(l.label);
          pod->input_error = StrCat(
              "PodGroup ", group_key, ": spec.schedulingConstraints.topology[", i, "].key: \"", key,
              "\" is not a topology level of this scheduler (node labels: ", StrJoin(labels, ", "),
              ")");
          return pod;
        }
        narrowest = std::min(narrowest, static_cast<int>(it - levels_.begin()));
      }
      g.level = levels_[narrowest].name;
      g.required = true;
    } else if (const std::optional<core::GangAsk>& where = own ? own : raw.pod_group_topology;
               where && !where->level.empty()) {
      g.level = where->level;
      g.required = where->required;
    }
    gang = g;
  }
  if (own) {
    const bool agrees =
        gang && own->name == gang->name && own->min_members() == gang->min_members();
    if (!agrees) {
      *ignored = StrCat("the pod's gang ", own->name, " (", records::kGangAnnotation, " or ",
                        records::kKueueGroupNameLabel, ", min ", own->min_members(),
                        ") is ignored: spec.schedulingGroup names PodGroup ", group_key,
                        ", which decides (",
                        gang ? StrCat("gang, minCount ", group->min_count)
                             : std::string("basic: independent pods"),
                        ")");
    }
  }
  pod->request.gang = gang;
  return pod;
}

bool PodGroups::ShouldWrite(const PodGroupInfo& group, bool scheduled, const std::string& message) {
  if (group.InitiallyScheduled() == "True") return false;
  std::string what = StrCat(scheduled ? "True: " : "False: ", message);
  std::string& last = written_[group.key];
  if (last.starts_with("True: ") || last == what) return false;
  last = std::move(what);
  return true;
}

}  // namespace tessera::k8s
