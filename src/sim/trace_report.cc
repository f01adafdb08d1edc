#include "sim/trace_report.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/status.h"
#include "common/strings.h"

extern char** environ;

namespace tessera::sim {
namespace {

double MeanFailed(const PolicyRuns& p) {
  double s = 0;
  for (const FgdRunResult& r : p.runs) s += static_cast<double>(r.failed_pods);
  return p.runs.empty() ? 0 : s / static_cast<double>(p.runs.size());
}

double Round(double x, int digits) { return RoundLikePython(x, digits); }

// The mean over the seeds of one figure of the ceiling.
double MeanCeiling(const TraceRunInfo& info, double ProtocolCeiling::*figure) {
  double s = 0;
  for (const ProtocolCeiling& c : info.ceilings) s += c.*figure;
  return info.ceilings.empty() ? 0 : s / static_cast<double>(info.ceilings.size());
}

nlohmann::json Meta(const TraceRunInfo& info, const char* protocol) {
  return {{"protocol", protocol},
          {"nodes", info.nodes_file},
          {"trace", info.trace_file},
          {"seeds", info.seeds},
          {"capacity_gpus", info.capacity_gpus}};
}

absl::Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) return absl::InternalError(StrCat(path.string(), ": cannot write"));
  return absl::OkStatus();
}

// "a" -> "a" for gnuplot titles (underscores would start subscripts).
std::string Title(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '_' || c == '@' || c == '^') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  return out + "\"";
}

std::string BaseName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

constexpr char kTerminal[] = "set terminal pngcairo size 1100,650 font 'Sans,11'\n";

}  // namespace

nlohmann::json FgdJson(const TraceRunInfo& info, const std::vector<PolicyRuns>& results) {
  nlohmann::json doc = Meta(info, "fgd");
  nlohmann::json list = nlohmann::json::array();
  for (const PolicyRuns& p : results) {
    nlohmann::json curve = nlohmann::json::array();
    for (const auto& [x, y] : p.mean.curve) curve.push_back({x, Round(y, 4)});
    list.push_back({{"policy", p.policy},
                    {"final_allocation_ratio", Round(p.mean.final_allocation, 4)},
                    {"curve", std::move(curve)},
                    {"fragmentation_rate", Round(p.mean.fragmentation_rate, 4)},
                    {"failed_pods", Round(MeanFailed(p), 2)},
                    {"seconds", Round(p.mean.seconds, 4)}});
  }
  doc["results"] = std::move(list);
  if (!info.ceilings.empty()) {
    nlohmann::json per_seed = nlohmann::json::array();
    for (size_t i = 0; i < info.ceilings.size(); ++i) {
      const ProtocolCeiling& c = info.ceilings[i];
      per_seed.push_back({{"seed", info.seeds[i]},
                          {"allocation_ratio", Round(c.max_allocation_pct, 4)},
                          {"min_unallocated_gpus", Round(c.min_unallocated_gpus, 2)},
                          {"reference", c.reference.Describe()}});
    }
    doc["ceiling"] = {
        {"allocation_ratio", Round(MeanCeiling(info, &ProtocolCeiling::max_allocation_pct), 4)},
        {"min_unallocated_gpus",
         Round(MeanCeiling(info, &ProtocolCeiling::min_unallocated_gpus), 2)},
        {"per_seed", std::move(per_seed)}};
  }
  return doc;
}

nlohmann::json TimelineJson(const TraceRunInfo& info,
                            const std::vector<TimelinePolicyRuns>& results) {
  nlohmann::json doc = Meta(info, "timeline");
  doc["speedup"] = info.speedup;
  doc["load"] = info.load;
  auto pending = [](const PendingStats& g) {
    return nlohmann::json{
        {"started", g.started},   {"waited", g.waited},      {"still_waiting", g.still_waiting},
        {"p50", Round(g.p50, 3)}, {"p90", Round(g.p90, 3)},  {"p99", Round(g.p99, 3)},
        {"max", Round(g.max, 3)}, {"mean", Round(g.mean, 3)}};
  };
  nlohmann::json list = nlohmann::json::array();
  for (const TimelinePolicyRuns& p : results) {
    const TimelineResult& m = p.mean;
    nlohmann::json curve = nlohmann::json::array();
    for (const auto& [x, y] : m.curve) curve.push_back({Round(x, 4), Round(y, 4)});
    nlohmann::json split = {{"repack", Round(m.wait_split.repack, 4)},
                            {"cross_node", Round(m.wait_split.cross_node, 4)},
                            {"capacity", Round(m.wait_split.capacity, 4)}};
    const nlohmann::json reservations = info.max_reservations > 0
                                            ? nlohmann::json{{"made", m.reservations_made},
                                                             {"backfilled", m.backfilled},
                                                             {"declared", m.declared}}
                                            : nlohmann::json();
    list.push_back({{"policy", p.policy},
                    {"pods", m.pods},
                    {"started", m.started},
                    {"waited", m.waited},
                    {"never_fit", m.never_fits},
                    {"still_waiting", m.still_waiting},
                    {"pending_seconds",
                     {{"p50", Round(m.pending_p50, 3)},
                      {"p90", Round(m.pending_p90, 3)},
                      {"p99", Round(m.pending_p99, 3)},
                      {"max", Round(m.pending_max, 3)},
                      {"mean", Round(m.pending_mean, 3)}}},
                    {"pending_seconds_whole_gpu", pending(m.whole_gpu)},
                    {"pending_seconds_multi_gpu", pending(m.multi_gpu)},
                    {"pending_seconds_single_gpu", pending(m.single_gpu)},
                    {"reservations", reservations},
                    {"wait_gpu_hours", Round(m.wait_gpu_hours, 4)},
                    {"wait_gpu_hours_bound", Round(m.wait_gpu_hours_bound, 4)},
                    {"wait_gpu_hours_split", info.classify_waits ? split : nlohmann::json()},
                    {"gangs", info.gang_min_percent > 0
                                  ? nlohmann::json{{"min_percent", info.gang_min_percent},
                                                   {"gangs", m.gangs.gangs},
                                                   {"started", m.gangs.started},
                                                   {"full", m.gangs.full},
                                                   {"still_waiting", m.gangs.still_waiting},
                                                   {"start_seconds",
                                                    {{"p50", Round(m.gangs.start_p50, 3)},
                                                     {"p99", Round(m.gangs.start_p99, 3)},
                                                     {"mean", Round(m.gangs.start_mean, 3)}}},
                                                   {"full_seconds",
                                                    {{"p50", Round(m.gangs.full_p50, 3)},
                                                     {"p99", Round(m.gangs.full_p99, 3)},
                                                     {"max", Round(m.gangs.full_max, 3)}}},
                                                   {"member_wait_gpu_hours",
                                                    Round(m.gangs.member_wait_gpu_hours, 4)},
                                                   {"stretch", Round(m.gangs.stretch, 4)}}
                                  : nlohmann::json()},
                    {"mean_allocation_ratio", Round(m.mean_allocation, 4)},
                    {"peak_allocation_ratio", Round(m.peak_allocation, 4)},
                    {"peak_window_allocation_ratio", Round(m.peak_window_allocation, 4)},
                    {"offered_load", Round(m.offered_load, 4)},
                    {"peak_demand", Round(m.peak_demand, 4)},
                    {"clones", m.clones},
                    {"removed", m.removed},
                    {"curve", std::move(curve)},
                    {"seconds", Round(m.seconds, 4)}});
  }
  doc["results"] = std::move(list);
  return doc;
}

std::string FgdTable(const TraceRunInfo& info, const std::vector<PolicyRuns>& results) {
  std::string out =
      StrCat("FGD protocol: ", info.trace_file, " on ", info.nodes_file, " (", info.capacity_gpus,
             " GPUs), ", info.seeds.size(), " seed(s); means over the seeds\n\n");
  StrAppend(&out, fmt::format("{:<16} {:>10} {:>10} {:>10} {:>10} {:>11} {:>10}\n", "policy",
                              "alloc@130%", "unalloc", "frag rate", "failed", "s/run", "us/pod"));
  for (const PolicyRuns& p : results) {
    const FgdRunResult& m = p.mean;
    const double unallocated = info.capacity_gpus * (1.0 - m.final_allocation / 100.0);
    const double us_per_pod = m.pods > 0 ? 1e6 * m.seconds / static_cast<double>(m.pods) : 0;
    StrAppend(&out,
              fmt::format("{:<16} {:>9.2f}% {:>10.0f} {:>9.2f}% {:>10.1f} {:>11.3f} {:>10.1f}\n",
                          p.policy, m.final_allocation, unallocated, m.fragmentation_rate,
                          MeanFailed(p), m.seconds, us_per_pod));
  }
  StrAppend(&out, "\nGPU allocation ratio (%) by arrived GPU demand (%):\n");
  const int points[] = {80, 90, 95, 100, 110, 120, 130};
  StrAppend(&out, fmt::format("{:<16}", "arrived"));
  for (int x : points) StrAppend(&out, fmt::format(" {:>7}", x));
  StrAppend(&out, "\n");
  for (const PolicyRuns& p : results) {
    StrAppend(&out, fmt::format("{:<16}", p.policy));
    for (int x : points) {
      double y = -1;
      for (const auto& [px, py] : p.mean.curve) {
        if (px == x) y = py;
      }
      StrAppend(&out, y < 0 ? fmt::format(" {:>7}", "-") : fmt::format(" {:>7.2f}", y));
    }
    StrAppend(&out, "\n");
  }
  if (!info.ceilings.empty()) {
    StrAppend(&out, fmt::format(
                        "\nceiling: no policy can allocate more than {:.2f}% of the GPUs on these "
                        "sequences (mean over the seeds; at least {:.1f} GPUs stay unallocated "
                        "whatever the placement)\n",
                        MeanCeiling(info, &ProtocolCeiling::max_allocation_pct),
                        MeanCeiling(info, &ProtocolCeiling::min_unallocated_gpus)));
  }
  return out;
}

std::string TimelineTable(const TraceRunInfo& info,
                          const std::vector<TimelinePolicyRuns>& results) {
  std::string out;
  if (!results.empty()) {
    const TimelineResult& m = results[0].mean;
    out = StrCat("Timeline: ", info.trace_file, " on ", info.nodes_file, " (", info.capacity_gpus,
                 " GPUs), ", m.pods, " pods, arrivals over ", fmt::format("{:.1f}", m.span_hours),
                 " h (speedup ", info.speedup, ", offered load ",
                 fmt::format("{:.1f}", m.offered_load), "%, demand peaks at ",
                 fmt::format("{:.1f}", m.peak_demand), "% of the GPUs");
    if (info.load > 0) {
      StrAppend(&out, "; load level ", info.load, "%: ", m.clones, " pods copied, ", m.removed,
                " left out");
    }
    StrAppend(&out, "), ", info.seeds.size(), " seed(s); means over the seeds\n\n");
  }
  StrAppend(&out,
            fmt::format("{:<16} {:>8} {:>7} {:>7} {:>7} | {:>9} {:>9} {:>9} {:>9} | {:>9} {:>9}\n",
                        "policy", "started", "waited", "waiting", "never", "p50 s", "p90 s",
                        "p99 s", "max s", "mean all", "peak all"));
  for (const TimelinePolicyRuns& p : results) {
    const TimelineResult& m = p.mean;
    StrAppend(&out,
              fmt::format("{:<16} {:>8} {:>7} {:>7} {:>7} | {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} | "
                          "{:>8.2f}% {:>8.2f}%\n",
                          p.policy, m.started, m.waited, m.still_waiting, m.never_fits,
                          m.pending_p50, m.pending_p90, m.pending_p99, m.pending_max,
                          m.mean_allocation, m.peak_allocation));
  }
  StrAppend(&out,
            "\nBy group, waiting in GPU-hours (bound: no policy waits less), allocation at "
            "the peak (while demand >= 90% of its peak):\n");
  StrAppend(&out, fmt::format("{:<16} {:>12} {:>10} {:>12} {:>10} | {:>10} {:>10} | {:>9}\n",
                              "policy", "whole waited", "whole p99", "multi waited", "multi p99",
                              "GPU-h wait", "bound", "at peak"));
  for (const TimelinePolicyRuns& p : results) {
    const TimelineResult& m = p.mean;
    StrAppend(&out, fmt::format("{:<16} {:>12} {:>10.1f} {:>12} {:>10.1f} | {:>10.2f} {:>10.2f} | "
                                "{:>8.2f}%\n",
                                p.policy, m.whole_gpu.waited, m.whole_gpu.p99, m.multi_gpu.waited,
                                m.multi_gpu.p99, m.wait_gpu_hours, m.wait_gpu_hours_bound,
                                m.peak_window_allocation));
  }
  if (info.gang_min_percent > 0) {
    StrAppend(&out, fmt::format("\nPods of 2+ whole GPUs as elastic gangs starting at {}% of their "
                                "members (waits in s):\n",
                                info.gang_min_percent));
    StrAppend(&out, fmt::format("{:<16} {:>6} {:>19} {:>19} {:>10} {:>17} {:>8}\n", "policy",
                                "gangs", "to start p50/p99", "to full p50/p99", "never full",
                                "members wait GPU-h", "stretch"));
    for (const TimelinePolicyRuns& p : results) {
      const GangStats& g = p.mean.gangs;
      StrAppend(&out,
                fmt::format("{:<16} {:>6} {:>9.1f}/{:<9.1f} {:>9.1f}/{:<9.1f} {:>10} {:>17.2f} "
                            "{:>8.2f}\n",
                            p.policy, g.gangs, g.start_p50, g.start_p99, g.full_p50, g.full_p99,
                            g.started - g.full, g.member_wait_gpu_hours, g.stretch));
    }
  }
  if (info.max_reservations > 0) {
    StrAppend(&out, fmt::format("\nReservations with backfill (at most {} at once; waits in s):\n",
                                info.max_reservations));
    StrAppend(&out,
              fmt::format("{:<16} {:>13} {:>11} {:>9} {:>11} {:>10}\n", "policy", "reservations",
                          "backfilled", "declared", "multi max", "single p99"));
    for (const TimelinePolicyRuns& p : results) {
      const TimelineResult& m = p.mean;
      StrAppend(&out, fmt::format("{:<16} {:>13} {:>11} {:>9} {:>11.1f} {:>10.1f}\n", p.policy,
                                  m.reservations_made, m.backfilled, m.declared, m.multi_gpu.max,
                                  m.single_gpu.p99));
    }
  }
  if (info.classify_waits) {
    StrAppend(&out, "\nGPU-hours of waiting by what the cluster offered the waiting pod:\n");
    StrAppend(&out, fmt::format("{:<16} {:>22} {:>22} {:>22}\n", "policy", "room after repacking",
                                "only without shares", "no room"));
    for (const TimelinePolicyRuns& p : results) {
      const WaitSplit& w = p.mean.wait_split;
      StrAppend(&out, fmt::format("{:<16} {:>22.2f} {:>22.2f} {:>22.2f}\n", p.policy, w.repack,
                                  w.cross_node, w.capacity));
    }
  }
  return out;
}

absl::Status RunGnuplot(const std::string& dir, const std::string& script) {
  const std::string path = (std::filesystem::path(dir) / script).string();
  std::vector<std::string> args = {"gnuplot", path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int err = posix_spawnp(&pid, "gnuplot", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) {
    return absl::FailedPreconditionError(StrCat("cannot run gnuplot (", std::strerror(err),
                                                "); the data files are in ", dir,
                                                "; install gnuplot (Debian: gnuplot-nox) to "
                                                "draw the charts"));
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return absl::InternalError(StrCat("waiting for gnuplot: ", std::strerror(errno)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(StrCat("gnuplot failed on ", path, " (exit status ",
                                      WIFEXITED(status) ? WEXITSTATUS(status) : -1, ")"));
  }
  return absl::OkStatus();
}

absl::Status WriteFgdReport(const std::string& dir, const TraceRunInfo& info,
                            const std::vector<PolicyRuns>& results) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(StrCat(dir, ": cannot create: ", ec.message()));
  const std::filesystem::path d(dir);

  std::string curve = "arrived_pct";
  for (const PolicyRuns& p : results) StrAppend(&curve, ",", CsvField(p.policy));
  curve += "\n";
  if (!results.empty()) {
    for (const auto& [x, y] : results[0].mean.curve) {
      StrAppend(&curve, x);
      for (const PolicyRuns& p : results) {
        double v = 0;
        for (const auto& [px, py] : p.mean.curve) {
          if (px == x) v = py;
        }
        StrAppend(&curve, ",", fmt::format("{:.4f}", v));
      }
      curve += "\n";
    }
  }
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "allocation_curve.csv", curve));

  std::string summary =
      "policy,final_allocation_pct,unallocated_gpus,fragmentation_rate_pct,failed_pods,"
      "seconds_per_run,us_per_pod\n";
  std::string runs =
      "policy,seed,final_allocation_pct,fragmentation_rate_pct,failed_pods,never_fits,pods,"
      "seconds\n";
  for (const PolicyRuns& p : results) {
    const FgdRunResult& m = p.mean;
    StrAppend(&summary, CsvField(p.policy), ",", fmt::format("{:.4f}", m.final_allocation), ",",
              fmt::format("{:.1f}", info.capacity_gpus * (1.0 - m.final_allocation / 100.0)), ",",
              fmt::format("{:.4f}", m.fragmentation_rate), ",",
              fmt::format("{:.2f}", MeanFailed(p)), ",", fmt::format("{:.4f}", m.seconds), ",",
              fmt::format("{:.2f}", m.pods ? 1e6 * m.seconds / static_cast<double>(m.pods) : 0),
              "\n");
    for (const FgdRunResult& r : p.runs) {
      StrAppend(&runs, CsvField(p.policy), ",", r.seed, ",",
                fmt::format("{:.4f}", r.final_allocation), ",",
                fmt::format("{:.4f}", r.fragmentation_rate), ",", r.failed_pods, ",", r.never_fits,
                ",", r.pods, ",", fmt::format("{:.4f}", r.seconds), "\n");
    }
  }
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "summary.csv", summary));
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "runs.csv", runs));
  std::string ceiling_line;
  if (!info.ceilings.empty()) {
    std::string csv = "seed,ceiling_allocation_pct,min_unallocated_gpus,reference\n";
    for (size_t i = 0; i < info.ceilings.size(); ++i) {
      const ProtocolCeiling& c = info.ceilings[i];
      StrAppend(&csv, info.seeds[i], ",", fmt::format("{:.4f}", c.max_allocation_pct), ",",
                fmt::format("{:.2f}", c.min_unallocated_gpus), ",",
                CsvField(c.reference.Describe()), "\n");
    }
    TESSERA_RETURN_IF_ERROR(WriteFile(d / "ceiling.csv", csv));
    ceiling_line = fmt::format(
        ", {:.4f} with lines dt 2 lw 2 lc 'black' title 'ceiling at 130%: no policy ends higher'",
        MeanCeiling(info, &ProtocolCeiling::max_allocation_pct));
  }

  auto plot = [&](const std::string& name, const std::string& ranges, const std::string& extra,
                  const std::string& more_lines) {
    std::string s = kTerminal;
    StrAppend(&s, "set output '", (d / (name + ".png")).string(), "'\n",
              "set datafile separator ','\n",
              "set title 'GPU allocation vs arrived GPU demand (FGD protocol, ",
              Title(BaseName(info.trace_file)), ", ", info.seeds.size(), " seeds)'\n",
              "set xlabel 'arrived GPU demand (% of capacity)'\n",
              "set ylabel 'GPUs allocated (% of capacity)'\n", "set grid\n", "set key left top\n",
              ranges, extra, "plot ");
    for (size_t i = 0; i < results.size(); ++i) {
      StrAppend(&s, i ? ", " : "", "'", (d / "allocation_curve.csv").string(), "' using 1:", i + 2,
                " with lines lw 2 title '", Title(results[i].policy), "'");
    }
    s += more_lines + "\n";
    return WriteFile(d / (name + ".gp"), s);
  };
  TESSERA_RETURN_IF_ERROR(plot("allocation", "set xrange [0:130]\nset yrange [0:100]\n",
                               "set arrow from 0,0 to 100,100 nohead dt 2 lc 'gray'\n", ""));
  TESSERA_RETURN_IF_ERROR(plot("allocation_zoom", "set xrange [85:130]\nset yrange [85:100]\n",
                               "set key right bottom\n", ceiling_line));
  TESSERA_RETURN_IF_ERROR(RunGnuplot(dir, "allocation.gp"));
  return RunGnuplot(dir, "allocation_zoom.gp");
}

absl::Status WriteTimelineReport(const std::string& dir, const TraceRunInfo& info,
                                 const std::vector<TimelinePolicyRuns>& results) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(StrCat(dir, ": cannot create: ", ec.message()));
  const std::filesystem::path d(dir);
  std::string curve = "hours";
  for (const TimelinePolicyRuns& p : results) StrAppend(&curve, ",", CsvField(p.policy));
  curve += "\n";
  if (!results.empty()) {
    for (size_t i = 0; i < results[0].mean.curve.size(); ++i) {
      StrAppend(&curve, fmt::format("{:.4f}", results[0].mean.curve[i].first));
      for (const TimelinePolicyRuns& p : results) {
        StrAppend(&curve, ",",
                  fmt::format("{:.4f}", i < p.mean.curve.size() ? p.mean.curve[i].second : 0));
      }
      curve += "\n";
    }
  }
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "allocation_over_time.csv", curve));
  std::string summary =
      "policy,started,waited,still_waiting,never_fit,pending_p50_s,pending_p90_s,pending_p99_s,"
      "pending_max_s,pending_mean_s,mean_allocation_pct,peak_allocation_pct,seconds,"
      "whole_gpu_waited,whole_gpu_pending_p99_s,multi_gpu_waited,multi_gpu_pending_p99_s,"
      "wait_gpu_hours,wait_gpu_hours_bound,peak_window_allocation_pct,peak_demand_pct\n";
  std::string runs =
      "policy,seed,started,waited,still_waiting,never_fit,pending_p50_s,"
      "pending_p90_s,pending_p99_s,mean_allocation_pct,seconds,wait_gpu_hours,clones,removed\n";
  for (const TimelinePolicyRuns& p : results) {
    const TimelineResult& m = p.mean;
    StrAppend(&summary, CsvField(p.policy), ",", m.started, ",", m.waited, ",", m.still_waiting,
              ",", m.never_fits, ",",
              fmt::format("{:.3f},{:.3f},{:.3f},{:.3f},{:.3f}", m.pending_p50, m.pending_p90,
                          m.pending_p99, m.pending_max, m.pending_mean),
              ",",
              fmt::format("{:.4f},{:.4f},{:.4f}", m.mean_allocation, m.peak_allocation, m.seconds),
              ",", m.whole_gpu.waited, ",", fmt::format("{:.3f}", m.whole_gpu.p99), ",",
              m.multi_gpu.waited, ",",
              fmt::format("{:.3f},{:.4f},{:.4f},{:.4f},{:.4f}", m.multi_gpu.p99, m.wait_gpu_hours,
                          m.wait_gpu_hours_bound, m.peak_window_allocation, m.peak_demand),
              "\n");
    for (const TimelineResult& r : p.runs) {
      StrAppend(
          &runs, CsvField(p.policy), ",", r.seed, ",", r.started, ",", r.waited, ",",
          r.still_waiting, ",", r.never_fits, ",",
          fmt::format("{:.3f},{:.3f},{:.3f},{:.4f},{:.4f},{:.4f}", r.pending_p50, r.pending_p90,
                      r.pending_p99, r.mean_allocation, r.seconds, r.wait_gpu_hours),
          ",", r.clones, ",", r.removed, "\n");
    }
  }
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "summary.csv", summary));
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "runs.csv", runs));

  std::string s = kTerminal;
  StrAppend(&s, "set output '", (d / "allocation_over_time.png").string(), "'\n",
            "set datafile separator ','\n", "set title 'GPU allocation over time (timeline, ",
            Title(BaseName(info.trace_file)), ", speedup ", info.speedup, ")'\n",
            "set xlabel 'hours since the first arrival'\n",
            "set ylabel 'GPUs allocated (% of capacity)'\n", "set grid\nset key left top\n",
            "set yrange [0:100]\nplot ");
  for (size_t i = 0; i < results.size(); ++i) {
    StrAppend(&s, i ? ", " : "", "'", (d / "allocation_over_time.csv").string(),
              "' using 1:", i + 2, " with lines lw 2 title '", Title(results[i].policy), "'");
  }
  s += "\n";
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "allocation_over_time.gp", s));
  std::string bars = kTerminal;
  StrAppend(&bars, "set output '", (d / "pending_time.png").string(), "'\n",
            "set datafile separator ','\n",
            "set title 'Pending time of the pods that started (timeline, ",
            Title(BaseName(info.trace_file)), ")'\n", "set ylabel 'seconds'\nset grid ytics\n",
            "set style data histograms\nset style histogram clustered gap 1\n",
            "set style fill solid 0.8 border -1\nset key left top\nset xtics rotate by -20\n",
            "plot '", (d / "summary.csv").string(),
            "' every ::1 using 6:xtic(1) title 'p50', '' every ::1 using 7 title 'p90', '' every "
            "::1 using 8 title 'p99'\n");
  TESSERA_RETURN_IF_ERROR(WriteFile(d / "pending_time.gp", bars));
  TESSERA_RETURN_IF_ERROR(RunGnuplot(dir, "allocation_over_time.gp"));
  return RunGnuplot(dir, "pending_time.gp");
}

}  // namespace tessera::sim
