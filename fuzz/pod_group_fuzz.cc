// Upstream PodGroups (scheduling.k8s.io/v1beta1) and the pods that name them or carry Kueue's
// pod-group label, as the API server sends them: anyone who may create a pod or a PodGroup may
// write anything in it. Decoding never throws or crashes, and PodGroups (pod_groups.h) keeps its
// word whatever the objects say: a resolved pod is the same pod (key, namespace, name, group);
// a pod naming a missing PodGroup waits, in no gang, until the group appears; a present group
// decides the gang (named as the group, minCount members, no fixed size) or makes the pod's input
// invalid; OnGroup returns exactly the pods that name the group; Forget leaves nothing behind.
//
// Input: up to kMaxDocuments JSON objects separated by a line "---" (as in the YAML examples),
// each decoded both as a PodGroup and as a Pod, so that pods and groups meet. The script: resolve
// every pod (no group yet), add every group, resolve again, write conditions, update and delete
// the groups, resolve again, forget every pod.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "core/topology/domains.h"
#include "k8s/client/watch.h"
#include "k8s/scheduler/objects.h"
#include "k8s/scheduler/pod_groups.h"
#include "records/names.h"

namespace {

using tessera::k8s::Change;
using tessera::k8s::PodGroupInfo;
using tessera::k8s::PodGroups;
using tessera::k8s::PodInfo;

constexpr size_t kMaxDocuments = 6;
constexpr std::string_view kSeparator = "\n---\n";

// The check that failed, for the crash report (libFuzzer and fuzz/driver.cc both stop on abort).
[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "pod_group_fuzz: invariant broken: %s\n", what);
  std::abort();
}
#define CHECK(cond)           \
  do {                        \
    if (!(cond)) Fail(#cond); \
  } while (false)

std::string GroupKeyOf(const PodInfo& pod) { return tessera::StrCat(pod.ns, "/", pod.pod_group); }

// What a decoded PodGroup promises whatever its object held.
void CheckGroup(const PodGroupInfo& g) {
  CHECK(g.key == tessera::StrCat(g.ns, "/", g.name));
  CHECK(g.conditions.is_array());
  for (const nlohmann::json& c : g.conditions) CHECK(c.is_object());
  for (const std::string& key : g.topology_keys) CHECK(!key.empty());
  if (g.error.empty() && g.gang) {
    CHECK(g.min_count >= 1 && g.min_count <= tessera::records::kMaxGangSize);
  }
  const std::string scheduled = g.InitiallyScheduled();
  (void)scheduled;
}

// What a decoded pod promises about its gang, whichever way it was asked.
void CheckPod(const PodInfo& p) {
  CHECK(p.key == tessera::StrCat(p.ns, "/", p.name));
  CHECK(!p.pod_group_missing);  // only PodGroups::Resolve sets it
  CHECK(p.SameAsk(p));
  if (!p.input_error.empty()) return;
  CHECK(p.request.name == p.key);
  if (p.request.gang) {
    const tessera::core::GangAsk& g = *p.request.gang;
    CHECK(!g.name.empty());  // a nameless one is only where a PodGroup's gang goes
    CHECK(g.size >= 1 && g.size <= tessera::records::kMaxGangSize);
    CHECK(g.min_members() >= 1 && g.min_members() <= g.size);
  }
  if (p.pod_group_topology) {
    CHECK(!p.pod_group.empty());
    CHECK(!p.pod_group_topology->level.empty());
  }
}

// A model of PodGroups' membership: pod key -> the group key its last resolved raw names.
class Script {
 public:
  Script(std::vector<std::shared_ptr<const PodGroupInfo>> groups,
         std::vector<std::shared_ptr<const PodInfo>> pods)
      : groups_(std::move(groups)), pods_(std::move(pods)) {}

  void Run() {
    for (const auto& pod : pods_) Resolve(pod);
    for (const auto& group : groups_) OnGroup(Change::kAdded, group);
    for (const auto& pod : pods_) Resolve(pod);
    for (const auto& group : groups_) Conditions(*group);
    for (const auto& group : groups_) OnGroup(Change::kUpdated, group);
    for (const auto& pod : pods_) ResolveRaw(pod->key);
    OnGroup(Change::kDeleted, groups_.front());
    for (const auto& pod : pods_) ResolveRaw(pod->key);
    for (const auto& pod : pods_) Forget(pod->key);
    CHECK(state_.Waiting().empty());
    for (const auto& group : groups_) OnGroup(Change::kAdded, group);
  }

 private:
  const PodGroupInfo* Present(const std::string& group_key) const { return state_.Find(group_key); }

  // Waiting: exactly the remembered pods whose group is missing, sorted.
  void CheckWaiting() const {
    std::vector<std::string> want;
    for (const auto& [pod, group] : member_) {
      if (Present(group) == nullptr) want.push_back(pod);
    }
    CHECK(state_.Waiting() == want);  // member_ is ordered, so `want` is sorted
  }

  void OnGroup(Change change, const std::shared_ptr<const PodGroupInfo>& group) {
    std::vector<std::string> told = state_.OnGroup(change, group);
    std::vector<std::string> want;
    for (const auto& [pod, g] : member_) {
      if (g == group->key) want.push_back(pod);
    }
    std::sort(told.begin(), told.end());
    CHECK(told == want);  // the pods that name it, and no other
    if (change == Change::kDeleted) {
      CHECK(state_.Find(group->key) == nullptr);
    } else {
      CHECK(state_.Find(group->key) == group.get());
    }
    CheckWaiting();
  }

  void ResolveRaw(const std::string& pod_key) {
    std::shared_ptr<const PodInfo> raw = state_.Raw(pod_key);
    if (raw == nullptr) {
      CHECK(!member_.contains(pod_key));
      return;
    }
    CHECK(raw->key == pod_key);
    Resolve(raw);
  }

  void Resolve(const std::shared_ptr<const PodInfo>& raw) {
    PodGroups::Resolved r = state_.Resolve(raw);
    CHECK(r.pod != nullptr);
    // The same pod, whatever its group says.
    CHECK(r.pod->key == raw->key && r.pod->ns == raw->ns && r.pod->name == raw->name);
    CHECK(r.pod->uid == raw->uid && r.pod->pod_group == raw->pod_group);
    CHECK(r.pod->request.name == raw->request.name);
    CHECK(r.pod->SameAsk(*r.pod));
    if (raw->pod_group.empty()) {
      CHECK(r.pod == raw && r.ignored.empty());
      CHECK(state_.Raw(raw->key) == nullptr);
      CHECK(state_.GroupOf(*r.pod) == nullptr);
      member_.erase(raw->key);
      CheckWaiting();
      return;
    }
    const std::string group_key = GroupKeyOf(*raw);
    member_[raw->key] = group_key;
    CHECK(state_.Raw(raw->key) == raw);
    const PodGroupInfo* group = Present(group_key);
    CHECK(state_.GroupOf(*r.pod) == group);
    CHECK(r.pod->pod_group_missing == (group == nullptr));
    CheckWaiting();
    if (!r.ignored.empty()) CHECK(raw->request.gang.has_value());  // only the pod's own gang is
    if (!raw->input_error.empty()) {
      CHECK(r.pod->input_error == raw->input_error);
    }
    if (group == nullptr) {
      CHECK(!r.pod->request.gang.has_value());  // in no gang until the PodGroup says which
    } else if (raw->input_error.empty() && !group->error.empty()) {
      CHECK(!r.pod->input_error.empty());  // the group's error is the pod's
    } else if (r.pod->input_error.empty()) {
      CHECK(group->error.empty());
      if (!group->gang) {
        // basic asks for no gang: the pod's own, if it has one, else none
        CHECK(r.pod->request.gang == raw->request.gang);
        CHECK(r.ignored.empty());
      } else {
        CHECK(r.pod->request.gang.has_value());
        const tessera::core::GangAsk& g = *r.pod->request.gang;
        CHECK(g.name == raw->pod_group);
        CHECK(g.size == tessera::records::kMaxGangSize);
        CHECK(g.min_members() == group->min_count);
        if (!group->topology_keys.empty()) {
          CHECK(g.required);
          CHECK(std::any_of(
              levels_.begin(), levels_.end(),
              [&](const tessera::core::TopologyLevel& l) { return l.name == g.level; }));
        }
      }
    }
    // Resolving the same pod again changes nothing, and says nothing new: told once.
    PodGroups::Resolved again = state_.Resolve(raw);
    CHECK(again.ignored.empty());
    CHECK(again.pod->SameAsk(*r.pod));
    CHECK(again.pod->pod_group_missing == r.pod->pod_group_missing);
  }

  // PodGroupInitiallyScheduled: never over a True one, never the same twice in a row.
  void Conditions(const PodGroupInfo& group) {
    const bool final_on_object = group.InitiallyScheduled() == "True";
    for (const auto& [scheduled, message] :
         {std::pair{false, "no room"}, std::pair{false, "no room"}, std::pair{true, "placed"},
          std::pair{false, "no room"}}) {
      const bool wrote = state_.ShouldWrite(group, scheduled, message);
      if (final_on_object) CHECK(!wrote);
      if (wrote) {
        CHECK(!state_.ShouldWrite(group, scheduled, message));
        if (scheduled) CHECK(!state_.ShouldWrite(group, false, "after True"));
      }
    }
  }

  void Forget(const std::string& pod_key) {
    state_.Forget(pod_key);
    member_.erase(pod_key);
    CHECK(state_.Raw(pod_key) == nullptr);
    CheckWaiting();
  }

  const std::vector<tessera::core::TopologyLevel> levels_ = tessera::core::DefaultTopologyLevels();
  PodGroups state_{levels_};
  std::map<std::string, std::string> member_;
  std::vector<std::shared_ptr<const PodGroupInfo>> groups_;
  std::vector<std::shared_ptr<const PodInfo>> pods_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::shared_ptr<const PodGroupInfo>> groups;
  std::vector<std::shared_ptr<const PodInfo>> pods;
  while (groups.size() < kMaxDocuments) {
    const size_t end = text.find(kSeparator);
    std::string_view document = text.substr(0, end);
    absl::StatusOr<nlohmann::json> j =
        tessera::k8s::ParseApiJson(document, /*drop_managed_fields=*/true);
    if (j.ok()) {
      auto group = tessera::k8s::DecodePodGroup(*j);
      CheckGroup(*group);
      groups.push_back(std::move(group));
      auto pod = tessera::k8s::DecodePod(*j);
      CheckPod(*pod);
      pods.push_back(std::move(pod));
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + kSeparator.size());
  }
  if (groups.empty()) return 0;
  Script(std::move(groups), std::move(pods)).Run();
  return 0;
}
