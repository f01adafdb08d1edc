#include "sim/report.h"

#include <algorithm>
#include <map>

#include "common/strings.h"
#include "core/model/quantity.h"

namespace tessera::sim {

std::string DescribeCluster(const core::Cluster& cluster) {
  // Group identical node shapes to keep the line short on big clusters.
  std::map<std::string, int> shapes;
  std::vector<std::string> order;
  for (const core::NodeSpec& n : cluster.nodes()) {
    std::string shape;
    if (n.gpus.empty()) {
      shape = "no GPUs";
    } else {
      bool nvlink = false;
      for (int a = 0; a < n.gpu_count(); ++a) {
        for (int b = a + 1; b < n.gpu_count(); ++b) {
          nvlink = nvlink || n.links.at(a, b).kind == core::LinkKind::kNvLink;
        }
      }
      shape = StrCat(n.gpu_count(), " x ", n.gpus[0].model, " ",
                     core::FormatMiB(n.gpus[0].memory_mib), nvlink ? " (NVLink)" : " (PCIe)");
    }
    if (!shapes.contains(shape)) order.push_back(shape);
    ++shapes[shape];
  }
  std::vector<std::string> parts;
  for (const std::string& s : order) {
    int count = shapes[s];
    parts.push_back(count == 1 ? StrCat("1 node of ", s) : StrCat(count, " nodes of ", s));
  }
  return StrCat(cluster.node_count(), cluster.node_count() == 1 ? " node, " : " nodes, ",
                cluster.total_gpus(), " GPUs: ", StrJoin(parts, "; "));
}

namespace {

std::string Percent(int64_t part, int64_t whole) {
  if (whole <= 0) return "-";
  return fmt::format("{:.0f}%", 100.0 * double(part) / double(whole));
}

// Pending pods of one result, grouped by job and reason: "inference-10..19 (10 pods): why".
std::vector<std::string> PendingLines(const ScenarioResult& r) {
  struct Group {
    std::string first, last;
    int count = 0;
  };
  std::vector<std::pair<std::string, Group>> groups;  // key: job + reason, in order of first pod
  for (const PodOutcome& p : r.pods) {
    if (p.result.placed()) continue;
    std::string key = StrCat(p.job, "\n", p.result.reason);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, Group{p.request.name, p.request.name, 0}});
      it = groups.end() - 1;
    }
    it->second.last = p.request.name;
    ++it->second.count;
  }
  std::vector<std::string> lines;
  for (const auto& [key, g] : groups) {
    std::string reason = key.substr(key.find('\n') + 1);
    std::string who =
        g.count == 1 ? g.first : StrCat(g.first, " .. ", g.last, " (", g.count, " pods)");
    lines.push_back(StrCat(who, ": ", reason));
  }
  return lines;
}

}  // namespace

std::string FormatComparison(const std::vector<ScenarioResult>& results) {
  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](std::string label, auto&& cell) {
    std::vector<std::string> cells;
    for (const ScenarioResult& r : results) cells.push_back(cell(r));
    rows.emplace_back(std::move(label), std::move(cells));
  };
  row("pods placed / pending",
      [](const ScenarioResult& r) { return StrCat(r.placed, " / ", r.pending); });
  row("GPUs in use",
      [](const ScenarioResult& r) { return StrCat(r.gpus_in_use, " of ", r.total_gpus); });
  row("GPU memory allocated", [](const ScenarioResult& r) {
    return StrCat(core::FormatMiB(r.gpu_memory_allocated_mib), " of ",
                  core::FormatMiB(r.gpu_memory_total_mib));
  });
  row("  of it asked for by pods", [](const ScenarioResult& r) {
    return StrCat(core::FormatMiB(r.gpu_memory_requested_mib), " (",
                  Percent(r.gpu_memory_requested_mib, r.gpu_memory_allocated_mib), ")");
  });
  bool any_multi = std::any_of(results.begin(), results.end(),
                               [](const ScenarioResult& r) { return r.multi_gpu_pods > 0; });
  if (any_multi) {
    row("multi-GPU pods on NVLink", [](const ScenarioResult& r) {
      return StrCat(r.multi_gpu_nvlink_pods, " of ", r.multi_gpu_pods, " (",
                    Percent(r.multi_gpu_nvlink_pods, r.multi_gpu_pods), ")");
    });
  }
  const bool any_gangs = !results.empty() && !results[0].gangs.empty();
  if (any_gangs) {
    row("gangs inside one domain of their level", [](const ScenarioResult& r) {
      return StrCat(r.gangs_one_domain, " of ", r.gangs.size(), " (",
                    Percent(r.gangs_one_domain, static_cast<int64_t>(r.gangs.size())), ")");
    });
    row("gangs inside one NVLink domain", [](const ScenarioResult& r) {
      int n = 0;
      for (const GangOutcome& g : r.gangs) n += g.placed && g.one_nvlink_domain;
      return StrCat(n, " of ", r.gangs.size(), " (",
                    Percent(n, static_cast<int64_t>(r.gangs.size())), ")");
    });
  }
  const bool any_mig = std::any_of(results.begin(), results.end(),
                                   [](const ScenarioResult& r) { return r.mig_pods > 0; });
  if (any_mig) {
    row("MIG instances placed", [](const ScenarioResult& r) {
      return StrCat(r.mig_pods, " (", r.mig_plans.size(), " after re-partitioning)");
    });
  }
  // One row per gang while that stays readable.
  if (any_gangs && results[0].gangs.size() <= 6) {
    for (size_t g = 0; g < results[0].gangs.size(); ++g) {
      row(StrCat("gang ", results[0].gangs[g].gang, " in one NVLink domain"),
          [g](const ScenarioResult& r) -> std::string {
            if (g >= r.gangs.size()) return "-";
            const GangOutcome& o = r.gangs[g];
            if (!o.placed && o.where.empty()) return "not placed";
            return StrCat(o.one_nvlink_domain ? "yes" : "no", " (", o.where,
                          o.running < o.members && o.placed
                              ? StrCat(", ", o.running, " of ", o.members, " running, min ", o.min)
                              : "",
                          o.placed ? "" : ", incomplete", ")");
          });
    }
  }
  size_t label_width = 0;
  for (const auto& [label, cells] : rows) label_width = std::max(label_width, label.size());
  std::vector<size_t> widths(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    widths[i] = results[i].policy.size();
    for (const auto& [label, cells] : rows) widths[i] = std::max(widths[i], cells[i].size());
  }
  auto line = [&](const std::string& label, const std::vector<std::string>& cells) {
    std::string l = fmt::format("  {:<{}}", label, label_width);
    for (size_t i = 0; i < cells.size(); ++i) l += fmt::format("   {:<{}}", cells[i], widths[i]);
    while (!l.empty() && l.back() == ' ') l.pop_back();
    return l + "\n";
  };
  std::vector<std::string> names;
  for (const ScenarioResult& r : results) names.push_back(r.policy);
  std::string out = line("", names);
  for (const auto& [label, cells] : rows) out += line(label, cells);
  for (const ScenarioResult& r : results) {
    std::vector<std::string> lines = PendingLines(r);
    if (lines.empty()) continue;
    out += StrCat("  pending under ", r.policy, ":\n");
    for (const std::string& l : lines) out += StrCat("    ", l, "\n");
  }
  for (const ScenarioResult& r : results) {
    if (r.mig_plans.empty()) continue;
    out += StrCat("  MIG re-partitioning plans under ", r.policy,
                  " (idle instances destroyed to make room):\n");
    const size_t shown = std::min<size_t>(r.mig_plans.size(), 10);
    for (size_t i = 0; i < shown; ++i) out += StrCat("    ", r.mig_plans[i], "\n");
    if (shown < r.mig_plans.size()) {
      out += StrCat("    ... and ", r.mig_plans.size() - shown, " more (--json lists all)\n");
    }
  }
  return out;
}

nlohmann::json ResultToJson(const core::Cluster& cluster, const ScenarioResult& r) {
  using nlohmann::json;
  json placements = json::array();
  json unplaced = json::array();
  for (const PodOutcome& p : r.pods) {
    if (!p.result.placed()) {
      unplaced.push_back({{"pod", p.request.name},
                          {"reason", p.result.reason},
                          {"never_fits", p.result.outcome == core::Outcome::kNeverFits}});
      continue;
    }
    json gpus = json::array();
    for (const core::GpuGrant& g : p.result.placement.gpus) {
      json j = {{"index", g.gpu},
                {"memory_mib", g.memory_mib},
                {"compute_milli", g.compute_milli},
                {"exclusive", g.exclusive}};
      if (g.is_mig()) {
        const core::MigModel& m = *cluster.mig_model(p.result.placement.node, g.gpu);
        j["mig"] = {{"profile", std::string(m.profiles[g.mig.profile].name)},
                    {"start", g.mig.start}};
      }
      gpus.push_back(std::move(j));
    }
    placements.push_back({{"pod", p.request.name},
                          {"node", cluster.node(p.result.placement.node).name},
                          {"gpus", std::move(gpus)}});
  }
  json gangs = json::array();
  for (const GangOutcome& g : r.gangs) {
    gangs.push_back({{"gang", g.gang},
                     {"job", g.job},
                     {"members", g.members},
                     {"placed", g.placed},
                     {"running", g.running},
                     {"min", g.min},
                     {"one_nvlink_domain", g.one_nvlink_domain},
                     {"level", g.level},
                     {"one_domain", g.one_domain}});
  }
  return {{"policy", r.policy},
          {"placed", r.placed},
          {"pending", r.pending},
          {"gpus_in_use", r.gpus_in_use},
          {"gpu_memory_allocated_mib", r.gpu_memory_allocated_mib},
          {"gpu_memory_requested_mib", r.gpu_memory_requested_mib},
          {"multi_gpu_pods", r.multi_gpu_pods},
          {"multi_gpu_nvlink_pods", r.multi_gpu_nvlink_pods},
          {"gangs_placed", r.gangs_placed},
          {"gangs_one_domain", r.gangs_one_domain},
          {"mig_pods", r.mig_pods},
          {"mig_plans", r.mig_plans},
          {"gangs", std::move(gangs)},
          {"placements", std::move(placements)},
          {"unplaced", std::move(unplaced)}};
}

}  // namespace tessera::sim
