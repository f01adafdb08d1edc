#include "sim/trace/alibaba.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"
#include "common/strings.h"
#include "core/model/cluster.h"
#include "core/model/profiles.h"
#include "sim/trace/csv.h"

namespace tessera::sim {
namespace {

// Upper bounds that keep every later product in range; far above any real machine.
constexpr int64_t kMaxCpuMilli = int64_t{1} << 40;
constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;
constexpr int64_t kMaxPodGpus = 1 << 20;
constexpr int64_t kMaxTime = int64_t{1} << 50;

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

std::string TracePod::gpu_spec() const { return StrJoin(gpu_models, "|"); }

int64_t TraceGpuMemoryMiB(std::string_view model) {
  if (int64_t known = core::KnownGpuMemoryMiB(model); known > 0) return known;
  struct Entry {
    std::string_view model;
    int64_t mib;
  };
  static constexpr Entry kTable[] = {
      {"P100", 16280},
      {"V100M16", 16160},
      {"V100M32", 32510},
      {"A10", 22731},
  };
  for (const Entry& e : kTable) {
    if (e.model == model) return e.mib;
  }
  return 32768;
}

absl::StatusOr<std::vector<core::NodeSpec>> ParseAlibabaNodes(std::string_view text,
                                                              const std::string& source) {
  TESSERA_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(text, source));
  TESSERA_ASSIGN_OR_RETURN(int c_name, t.RequireColumn("sn"));
  TESSERA_ASSIGN_OR_RETURN(int c_cpu, t.RequireColumn("cpu_milli"));
  TESSERA_ASSIGN_OR_RETURN(int c_mem, t.RequireColumn("memory_mib"));
  TESSERA_ASSIGN_OR_RETURN(int c_gpu, t.RequireColumn("gpu"));
  TESSERA_ASSIGN_OR_RETURN(int c_model, t.RequireColumn("model"));
  if (t.rows().empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": no nodes (only a header)"));
  }
  std::vector<core::NodeSpec> nodes;
  nodes.reserve(t.rows().size());
  absl::flat_hash_map<std::string, int> seen;
  for (const CsvRow& row : t.rows()) {
    core::NodeSpec n;
    n.name = t.Cell(row, c_name);
    if (n.name.empty()) return t.CellError(row, c_name, "empty node name");
    if (auto [it, fresh] = seen.emplace(n.name, row.line); !fresh) {
      return t.CellError(row, c_name,
                         StrCat("node ", n.name, " already appears on line ", it->second));
    }
    TESSERA_ASSIGN_OR_RETURN(n.cpu_milli, t.Int(row, c_cpu, 0, kMaxCpuMilli));
    TESSERA_ASSIGN_OR_RETURN(n.memory_mib, t.Int(row, c_mem, 0, kMaxMemoryMib));
    TESSERA_ASSIGN_OR_RETURN(int64_t gpus, t.Int(row, c_gpu, 0, core::kMaxGpusPerNode));
    const std::string& model = t.Cell(row, c_model);
    if (gpus > 0 && model.empty()) {
      return t.CellError(row, c_model, StrCat("the node has ", gpus, " GPUs but no model"));
    }
    for (int g = 0; g < gpus; ++g) {
      core::GpuSpec spec;
      spec.index = g;
      spec.model = model;
      spec.memory_mib = TraceGpuMemoryMiB(model);
      n.gpus.push_back(std::move(spec));
    }
    n.links = core::LinkMatrix(static_cast<int>(gpus));
    nodes.push_back(std::move(n));
  }
  return nodes;
}

absl::StatusOr<std::vector<core::NodeSpec>> ReadAlibabaNodes(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseAlibabaNodes(text, BaseName(path));
}

absl::StatusOr<PodTrace> ParseAlibabaPods(std::string_view text, const std::string& source) {
  TESSERA_ASSIGN_OR_RETURN(CsvTable t, CsvTable::Parse(text, source));
  TESSERA_ASSIGN_OR_RETURN(int c_name, t.RequireColumn("name"));
  TESSERA_ASSIGN_OR_RETURN(int c_cpu, t.RequireColumn("cpu_milli"));
  TESSERA_ASSIGN_OR_RETURN(int c_mem, t.RequireColumn("memory_mib"));
  TESSERA_ASSIGN_OR_RETURN(int c_ngpu, t.RequireColumn("num_gpu"));
  TESSERA_ASSIGN_OR_RETURN(int c_milli, t.RequireColumn("gpu_milli"));
  const int c_spec = t.Column("gpu_spec");
  const int c_qos = t.Column("qos");
  const int c_phase = t.Column("pod_phase");
  const int c_create = t.Column("creation_time");
  const int c_delete = t.Column("deletion_time");
  const int c_sched = t.Column("scheduled_time");
  if (t.rows().empty()) {
    return absl::InvalidArgumentError(StrCat(source, ": no pods (only a header)"));
  }
  PodTrace trace;
  trace.source = source;
  trace.has_times = c_create >= 0 && c_delete >= 0;
  trace.pods.reserve(t.rows().size());
  absl::flat_hash_map<std::string, int> seen;
  for (const CsvRow& row : t.rows()) {
    TracePod p;
    p.line = row.line;
    p.name = t.Cell(row, c_name);
    if (p.name.empty()) return t.CellError(row, c_name, "empty pod name");
    if (auto [it, fresh] = seen.emplace(p.name, row.line); !fresh) {
      return t.CellError(row, c_name,
                         StrCat("pod ", p.name, " already appears on line ", it->second));
    }
    TESSERA_ASSIGN_OR_RETURN(p.cpu_milli, t.Int(row, c_cpu, 0, kMaxCpuMilli));
    TESSERA_ASSIGN_OR_RETURN(p.memory_mib, t.Int(row, c_mem, 0, kMaxMemoryMib));
    TESSERA_ASSIGN_OR_RETURN(int64_t ngpu, t.Int(row, c_ngpu, 0, kMaxPodGpus));
    TESSERA_ASSIGN_OR_RETURN(int64_t milli, t.Int(row, c_milli, 0, kMaxCpuMilli));
    if (ngpu > 0 && milli > 0) {
      p.num_gpu = static_cast<int32_t>(ngpu);
      p.gpu_milli = static_cast<int32_t>(std::min<int64_t>(milli, 1000));
      if (p.num_gpu > 1 && p.gpu_milli < 1000) {
        return t.CellError(row, c_milli,
                           StrCat(p.gpu_milli, " on ", p.num_gpu,
                                  " GPUs: a share (gpu_milli below 1000) must be of one GPU"));
      }
    }
    if (c_spec >= 0 && p.num_gpu > 0) {
      const std::string& spec = t.Cell(row, c_spec);
      size_t start = 0;
      while (start <= spec.size()) {
        size_t bar = spec.find('|', start);
        if (bar == std::string::npos) bar = spec.size();
        if (bar > start) p.gpu_models.push_back(spec.substr(start, bar - start));
        start = bar + 1;
      }
    }
    if (c_qos >= 0) p.qos = t.Cell(row, c_qos);
    if (c_phase >= 0) p.phase = t.Cell(row, c_phase);
    if (c_create >= 0) {
      TESSERA_ASSIGN_OR_RETURN(p.creation_time, t.OptionalInt(row, c_create, 0, kMaxTime));
    }
    if (c_delete >= 0) {
      TESSERA_ASSIGN_OR_RETURN(p.deletion_time, t.OptionalInt(row, c_delete, 0, kMaxTime));
    }
    if (c_sched >= 0) {
      TESSERA_ASSIGN_OR_RETURN(p.scheduled_time, t.OptionalInt(row, c_sched, 0, kMaxTime));
    }
    if (p.creation_time && p.deletion_time && *p.deletion_time < *p.creation_time) {
      return t.CellError(
          row, c_delete,
          StrCat(*p.deletion_time, " is before the creation time ", *p.creation_time));
    }
    trace.pods.push_back(std::move(p));
  }
  return trace;
}

absl::StatusOr<PodTrace> ReadAlibabaPods(const std::string& path) {
  TESSERA_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  return ParseAlibabaPods(text, BaseName(path));
}

core::PodRequest ToPodRequest(const TracePod& pod, std::string name) {
  core::PodRequest r;
  r.name = std::move(name);
  r.cpu_milli = pod.cpu_milli;
  r.memory_mib = pod.memory_mib;
  if (pod.num_gpu == 0) {
    r.gpu = core::GpuAsk::None();
  } else if (pod.gpu_milli >= 1000) {
    r.gpu = core::GpuAsk::Whole(pod.num_gpu);
  } else {
    r.gpu = core::GpuAsk::Fraction(pod.gpu_milli);
  }
  r.gpu_models = pod.gpu_models;
  return r;
}

}  // namespace tessera::sim
