#include "sim/workload_file.h"

#include "common/strings.h"
#include "core/model/mig.h"
#include "sim/yaml_util.h"

namespace tessera::sim {
namespace {

constexpr int64_t kMaxReplicas = 1'000'000;

absl::Status ReadGpu(const YamlContext& ctx, const YAML::Node& g, core::GpuAsk* ask) {
  TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(g, "gpu"));
  TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(
      g, "gpu", {"count", "memory", "compute", "fraction", "topology", "mode", "mig"}));
  const bool whole = static_cast<bool>(g["count"]);
  const bool share = g["memory"] || g["compute"];
  const bool fraction = static_cast<bool>(g["fraction"]);
  const bool mig = static_cast<bool>(g["mig"]);
  if (whole + share + fraction + mig != 1) {
    return ctx.Error(g,
                     "gpu: give exactly one of count (whole GPUs), memory/compute (a share), "
                     "fraction, or mig (a MIG profile)");
  }
  if (mig) {
    TESSERA_ASSIGN_OR_RETURN(std::string profile, ctx.String(g["mig"], "gpu.mig"));
    if (!core::IsKnownMigProfile(profile)) {
      return ctx.Error(g["mig"], StrCat("gpu.mig: \"", profile,
                                        "\" is not a MIG profile tessera "
                                        "knows (A100-40GB: 1g.5gb .. 7g.40gb; A100-80GB and "
                                        "H100-80GB: 1g.10gb .. 7g.80gb)"));
    }
    *ask = core::GpuAsk::Mig(profile);
  } else if (whole) {
    TESSERA_ASSIGN_OR_RETURN(int64_t n, ctx.Int(g["count"], "gpu.count", 1, 64));
    *ask = core::GpuAsk::Whole(static_cast<int32_t>(n));
  } else if (share) {
    int64_t memory = 0, compute = 0;
    if (g["memory"]) {
      TESSERA_ASSIGN_OR_RETURN(memory, ctx.MemoryMiB(g["memory"], "gpu.memory", false));
      if (memory <= 0) return ctx.Error(g["memory"], "gpu.memory: must be positive");
    }
    if (g["compute"]) {
      TESSERA_ASSIGN_OR_RETURN(compute, ctx.Int(g["compute"], "gpu.compute (percent)", 1, 100));
    }
    *ask = core::GpuAsk::Share(memory, static_cast<int32_t>(compute * 10));
  } else {
    const YAML::Node& f = g["fraction"];
    if (!f.IsScalar()) return ctx.Error(f, "gpu.fraction: expected a number such as 0.25");
    // Exact decimal to milli: "0.25" -> 250; at most three decimals.
    const std::string& s = f.Scalar();
    int64_t milli = 0;
    int decimals = -1;
    bool ok = !s.empty();
    for (char c : s) {
      if (c == '.' && decimals < 0) {
        decimals = 0;
      } else if (c >= '0' && c <= '9' && decimals < 3) {
        milli = milli * 10 + (c - '0');
        if (decimals >= 0) ++decimals;
      } else {
        ok = false;
      }
    }
    if (!ok) {
      return ctx.Error(f, StrCat("gpu.fraction: \"", s,
                                 "\" is not a number between 0 and 1 with at most 3 decimals"));
    }
    for (int d = std::max(decimals, 0); d < 3; ++d) milli *= 10;
    if (milli <= 0 || milli >= 1000) {
      return ctx.Error(f, StrCat("gpu.fraction: ", s,
                                 " must be above 0 and below 1 (use count: 1 "
                                 "for a whole GPU)"));
    }
    *ask = core::GpuAsk::Fraction(static_cast<int32_t>(milli));
  }
  if (g["topology"]) {
    if (!whole) return ctx.Error(g["topology"], "gpu.topology: only for whole-GPU asks (count)");
    TESSERA_ASSIGN_OR_RETURN(std::string t, ctx.String(g["topology"], "gpu.topology"));
    if (std::optional<core::GpuTopology> parsed = core::ParseGpuTopology(t)) {
      ask->topology = *parsed;
    } else {
      return ctx.Error(g["topology"], StrCat("gpu.topology: \"", t,
                                             "\" is not one of: nvlink, pcie-switch, numa, node"));
    }
  }
  if (g["mode"]) {
    TESSERA_ASSIGN_OR_RETURN(std::string m, ctx.String(g["mode"], "gpu.mode"));
    if (m != "required" && m != "preferred") {
      return ctx.Error(g["mode"], StrCat("gpu.mode: \"", m, "\" is not required or preferred"));
    }
    ask->topology_required = m == "required";
  }
  return absl::OkStatus();
}

absl::StatusOr<Job> ReadJob(const YamlContext& ctx, const YAML::Node& j) {
  TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(j, "job"));
  TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(
      j, "a job", {"name", "replicas", "cpu", "memory", "gpu", "model", "gang", "priority"}));
  Job job;
  job.line = j.Mark().line + 1;
  if (!j["name"]) return ctx.Error(j, "job: missing \"name\"");
  TESSERA_ASSIGN_OR_RETURN(job.name, ctx.String(j["name"], "name"));
  if (job.name.empty()) return ctx.Error(j["name"], "name: must not be empty");
  if (j["replicas"]) {
    TESSERA_ASSIGN_OR_RETURN(int64_t r, ctx.Int(j["replicas"], "replicas", 1, kMaxReplicas));
    job.replicas = static_cast<int32_t>(r);
  }
  if (j["cpu"]) {
    TESSERA_ASSIGN_OR_RETURN(job.pod.cpu_milli, ctx.CpuMilli(j["cpu"], "cpu", false));
  }
  if (j["memory"]) {
    TESSERA_ASSIGN_OR_RETURN(job.pod.memory_mib, ctx.MemoryMiB(j["memory"], "memory", false));
  }
  if (j["gpu"]) TESSERA_RETURN_IF_ERROR(ReadGpu(ctx, j["gpu"], &job.pod.gpu));
  if (j["model"]) {
    const YAML::Node& m = j["model"];
    if (m.IsSequence()) {
      for (const YAML::Node& x : m) {
        TESSERA_ASSIGN_OR_RETURN(std::string s, ctx.String(x, "model"));
        job.pod.gpu_models.push_back(s);
      }
    } else {
      TESSERA_ASSIGN_OR_RETURN(std::string s, ctx.String(m, "model"));
      job.pod.gpu_models.push_back(s);
    }
    if (job.pod.gpu.kind == core::GpuAsk::Kind::kNone) {
      return ctx.Error(m, "model: a GPU model constraint needs a gpu ask");
    }
  }
  if (j["priority"]) {
    TESSERA_ASSIGN_OR_RETURN(int64_t p,
                             ctx.Int(j["priority"], "priority", -1'000'000'000, 1'000'000'000));
    job.pod.priority = static_cast<int32_t>(p);
  }
  if (j["gang"]) {
    const YAML::Node& g = j["gang"];
    TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(g, "gang"));
    TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(g, "gang", {"size", "min", "topology", "mode"}));
    core::GangAsk gang;
    gang.size = job.replicas;
    if (g["size"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t size, ctx.Int(g["size"], "gang.size", 1, kMaxReplicas));
      if (size > job.replicas) {
        return ctx.Error(g["size"], StrCat("gang.size: ", size, " is larger than the job's ",
                                           job.replicas, " replicas"));
      }
      if (job.replicas % size != 0) {
        return ctx.Error(g["size"], StrCat("gang.size: ", job.replicas,
                                           " replicas do not split "
                                           "into gangs of ",
                                           size));
      }
      gang.size = static_cast<int32_t>(size);
    }
    if (g["topology"]) {
      TESSERA_ASSIGN_OR_RETURN(gang.level, ctx.String(g["topology"], "gang.topology"));
    }
    gang.required = !gang.level.empty();
    if (g["mode"]) {
      TESSERA_ASSIGN_OR_RETURN(std::string m, ctx.String(g["mode"], "gang.mode"));
      if (m != "required" && m != "preferred") {
        return ctx.Error(g["mode"], StrCat("gang.mode: \"", m, "\" is not required or preferred"));
      }
      if (gang.level.empty()) return ctx.Error(g["mode"], "gang.mode: needs gang.topology");
      gang.required = m == "required";
    }
    if (g["min"]) {
      TESSERA_ASSIGN_OR_RETURN(int64_t min, ctx.Int(g["min"], "gang.min", 1, kMaxReplicas));
      if (min > gang.size) {
        return ctx.Error(g["min"],
                         StrCat("gang.min: ", min, " is more than gang.size ", gang.size));
      }
      gang.min = min < gang.size ? static_cast<int32_t>(min) : 0;  // min = size: all or nothing
    }
    job.gang = gang;
  }
  return job;
}

}  // namespace

absl::StatusOr<Workload> ParseWorkloadYaml(std::string_view text, std::string_view source) {
  TESSERA_ASSIGN_OR_RETURN(YAML::Node doc, ParseYaml(text, source));
  YamlContext ctx{std::string(source)};
  if (doc.IsNull()) return ctx.Error(doc, "the workload file is empty (expected jobs: [...])");
  TESSERA_RETURN_IF_ERROR(ctx.ExpectMap(doc, "the workload file"));
  TESSERA_RETURN_IF_ERROR(ctx.OnlyKeys(doc, "the workload file", {"jobs"}));
  if (!doc["jobs"]) return ctx.Error(doc, "missing \"jobs\" (the list of jobs)");
  TESSERA_RETURN_IF_ERROR(ctx.ExpectSequence(doc["jobs"], "jobs"));
  Workload w;
  for (const YAML::Node& j : doc["jobs"]) {
    TESSERA_ASSIGN_OR_RETURN(Job job, ReadJob(ctx, j));
    for (const Job& other : w.jobs) {
      if (other.name == job.name) {
        return ctx.Error(j["name"],
                         StrCat("two jobs are named \"", job.name, "\" (line ", other.line, ")"));
      }
    }
    w.jobs.push_back(std::move(job));
  }
  return w;
}

absl::StatusOr<Workload> LoadWorkloadFile(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseWorkloadYaml(text, path);
}

std::vector<core::PodRequest> ExpandJob(const Job& job) {
  std::vector<core::PodRequest> pods;
  pods.reserve(job.replicas);
  const int gangs = job.gang ? job.replicas / job.gang->size : 0;
  for (int i = 0; i < job.replicas; ++i) {
    core::PodRequest p = job.pod;
    p.name = StrCat(job.name, "-", i);
    if (job.gang) {
      core::GangAsk g = *job.gang;
      g.name = gangs == 1 ? job.name : StrCat(job.name, "-g", i / job.gang->size);
      p.gang = g;
    }
    pods.push_back(std::move(p));
  }
  return pods;
}

}  // namespace tessera::sim
