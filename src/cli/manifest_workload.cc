#include "cli/manifest_workload.h"

#include <map>

#include "common/strings.h"

namespace tessera::cli {

absl::StatusOr<sim::Workload> WorkloadFromManifests(const k8s::Manifests& manifests,
                                                    std::string_view source) {
  sim::Workload out;
  std::map<std::pair<std::string, std::string>, size_t> bare_gangs;  // (ns, gang) -> job index
  for (const k8s::ManifestWorkload& w : manifests.workloads) {
    if (w.count == 0) continue;
    const core::PodRequest& r = w.pod->request;
    const std::string where = StrCat(source, ":", w.line, " (", w.kind, " ", w.name, ")");
    if (w.kind == "Pod" && r.gang) {
      auto key = std::make_pair(w.ns, r.gang->name);
      if (auto it = bare_gangs.find(key); it != bare_gangs.end()) {
        sim::Job& job = out.jobs[it->second];
        core::PodRequest mine = r, theirs = job.pod;  // the job's pod holds no gang
        mine.name = theirs.name = "";
        mine.gang.reset();
        if (mine != theirs) {
          return absl::InvalidArgumentError(
              StrCat(where, ": members of gang ", r.gang->name,
                     " ask different things; the simulator places gangs of identical members"));
        }
        ++job.replicas;
        continue;
      }
      bare_gangs[key] = out.jobs.size();
      sim::Job job;
      job.name = StrCat(w.ns, "/", r.gang->name);
      job.replicas = 1;
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
  for (const auto& [key, at] : bare_gangs) {
    const sim::Job& job = out.jobs[at];
    if (job.replicas % job.gang->size != 0) {
      return absl::InvalidArgumentError(
          StrCat(source, ":", job.line, ": gang ", key.second, " in namespace ", key.first, " has ",
                 job.replicas, " Pods, not a multiple of its size ", job.gang->size));
    }
  }
  if (out.jobs.empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": no object in it makes pods to simulate"));
  }
  return out;
}

}  // namespace tessera::cli
