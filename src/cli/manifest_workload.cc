#include "cli/manifest_workload.h"

#include <map>

#include "common/status.h"
#include "common/strings.h"

namespace tessera::cli {

absl::StatusOr<sim::Workload> WorkloadFromManifests(const k8s::Manifests& manifests,
                                                    std::string_view source) {
  sim::Workload out;
  // Gangs whose members several objects make: bare Pods of one tessera.dev/gang, and all the
  // objects whose pods name one PodGroup. (ns, gang) -> the one job they become.
  struct Shared {
    size_t job;
    std::string where;  // the first object's place
    bool pod_group;
  };
  std::map<std::pair<std::string, std::string>, Shared> shared;
  for (const k8s::ManifestWorkload& w : manifests.workloads) {
    if (w.count == 0) continue;
    // Else a pod naming a PodGroup would be simulated with its own annotations' gang.
    TESSERA_CHECK_MSG(w.pod->pod_group.empty() || manifests.pod_groups_resolved,
                      "WorkloadFromManifests before ResolvePodGroups");
    const core::PodRequest& r = w.pod->request;
    const std::string where = StrCat(w.source, ":", w.line, " (", w.kind, " ", w.name, ")");
    const bool pod_group = r.gang && !w.pod->pod_group.empty();
    if (r.gang && (w.kind == "Pod" || pod_group)) {
      auto key = std::make_pair(w.ns, r.gang->name);
      if (auto it = shared.find(key); it != shared.end()) {
        if (it->second.pod_group != pod_group) {
          return absl::InvalidArgumentError(
              StrCat(where, ": gang ", r.gang->name, " is also the name of ",
                     pod_group ? "a tessera.dev/gang" : "a PodGroup's gang", " (", it->second.where,
                     "); the simulator cannot tell them apart"));
        }
        sim::Job& job = out.jobs[it->second.job];
        core::PodRequest mine = r, theirs = job.pod;  // the job's pod holds no gang
        mine.name = theirs.name = "";
        mine.gang.reset();
        if (mine != theirs) {
          return absl::InvalidArgumentError(
              StrCat(where, ": members of gang ", r.gang->name,
                     " ask different things; the simulator places gangs of identical members"));
        }
        job.replicas += w.count;
        continue;
      }
      shared[key] = Shared{out.jobs.size(), where, pod_group};
      sim::Job job;
      job.name = StrCat(w.ns, "/", r.gang->name);
      job.replicas = w.count;
      job.pod = r;
      job.pod.gang.reset();
      job.gang = r.gang;
      job.line = w.line;
      out.jobs.push_back(std::move(job));
      continue;
    }
    sim::Job job;
    job.name = StrCat(w.ns, "/", w.name);
    job.replicas = w.count;
    job.pod = r;
    job.pod.gang.reset();
    job.line = w.line;
    if (r.gang) {
      if (w.count % r.gang->size != 0) {
        return absl::InvalidArgumentError(StrCat(where, ": makes ", w.count,
                                                 " pods, not a multiple of its gang size ",
                                                 r.gang->size, " (tessera.dev/gang-size)"));
      }
      job.gang = r.gang;
    }
    out.jobs.push_back(std::move(job));
  }
  for (const auto& [key, s] : shared) {
    sim::Job& job = out.jobs[s.job];
    if (s.pod_group) {
      // A PodGroup's gang has no upper bound (pod_groups.h): here it is the pods the manifests
      // make, all placed at once when they fit, else at least minCount of them.
      const int32_t min = job.gang->min_members();
      if (job.replicas < min) {
        return absl::InvalidArgumentError(
            StrCat(s.where, ": PodGroup ", key.first, "/", key.second, " needs at least ", min,
                   " pods (gang.minCount) but the manifests make ", job.replicas,
                   " that name it; it would wait for the rest"));
      }
      job.gang->size = job.replicas;
      job.gang->min = min < job.replicas ? min : 0;
      continue;
    }
    if (job.replicas % job.gang->size != 0) {
      return absl::InvalidArgumentError(
          StrCat(s.where, ": gang ", key.second, " in namespace ", key.first, " has ", job.replicas,
                 " Pods, not a multiple of its size ", job.gang->size));
    }
  }
  if (out.jobs.empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": no object in it makes pods to simulate"));
  }
  return out;
}

}  // namespace tessera::cli
