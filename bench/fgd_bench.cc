// Drivers for the FGD-protocol benchmark scripts (bench/run_fgd_speed.sh, bench/run_fgd_table.sh).
//
//   fgd_bench speed [--workload default] [--seeds 42-51] [--repeat 3]
//       Each policy's runs of the FGD protocol, one at a time on one thread, repeated: median
//       seconds per run and microseconds per pod. Markdown on stdout.
//   fgd_bench table [--seeds 42-51] [--threads 2] [--workloads default,cpu050,...]
//                   [--policies fgd,tessera]
//       Every workload of the paper's table x the six paper policies and tessera (or the policies
//       given): our means beside the paper's, per-seed spread on default, tessera's margin over
//       FGD. Markdown on stdout.
//   fgd_bench holes [--workload default] [--policy tessera] [--seed 42]
//       Where the unallocated GPUs are at the end of one run: pods placed and failed by size, the
//       free capacity by piece size, and the shared GPUs by what they hold (the pairings that leave
//       the pieces), with the least any placement of the same shares could leave
//       (sim/packing_bound.h) and what fewer of the most stranding share would allow. Markdown.
//   fgd_bench bound [--workload default] [--seeds 42-51] [--policies fgd,tessera]
//       Per seed: what each policy leaves unallocated against the least any placement of the
//       shares it placed could leave. Markdown on stdout.
//   fgd_bench ceiling [--workloads default,cpu050,...|all] [--seeds 42-51]
//       Per workload and seed: the most any policy could allocate (sim/protocol_bound.h) beside
//       what tessera allocates on the same pod sequence; per seed in detail for the first
//       workload. Markdown on stdout.
// Progress goes to stderr.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/strings.h"
#include "core/policy/fragmentation.h"
#include "sim/fgd_replay.h"
#include "sim/packing_bound.h"
#include "sim/paper_reference.h"
#include "sim/protocol_bound.h"
#include "sim/trace_runs.h"

namespace tessera::bench {
namespace {

const std::string kData = TESSERA_DATA_DIR;
const std::string kTraceDir = kData + "/traces/alibaba-gpu-v2023/";
const std::vector<std::string> kPolicies = {"random",  "dotprod", "gpu-clustering", "gpu-packing",
                                            "bestfit", "fgd",     "tessera"};

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "fgd_bench: " << what << "\n";
  std::exit(2);
}

template <typename T>
T OrDie(absl::StatusOr<T> v) {
  if (!v.ok()) Die(std::string(v.status().message()));
  return *std::move(v);
}

std::map<std::string, std::string> Flags(int argc, char** argv, int from) {
  std::map<std::string, std::string> flags;
  for (int i = from; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || i + 1 >= argc) Die(StrCat("bad argument ", a));
    flags[a.substr(2)] = argv[++i];
  }
  return flags;
}

// A flag's value; `fallback` when absent.
std::string Flag(const std::map<std::string, std::string>& flags, const std::string& name,
                 const std::string& fallback) {
  return flags.count(name) ? flags.at(name) : fallback;
}

// --seeds (default 42-51).
std::vector<uint64_t> SeedsFlag(const std::map<std::string, std::string>& flags) {
  return OrDie(sim::ParseSeeds(Flag(flags, "seeds", "42-51")));
}

// A comma-separated flag ("--policies fgd,tessera") as a list; `fallback` when absent.
std::vector<std::string> ListFlag(const std::map<std::string, std::string>& flags,
                                  const std::string& name, std::vector<std::string> fallback) {
  if (!flags.count(name)) return fallback;
  return absl::StrSplit(flags.at(name), ',');
}

// One of the trace's pod lists ("default", "gpushare100", ...).
sim::PodTrace LoadPods(const std::string& workload) {
  return OrDie(sim::ReadAlibabaPods(kTraceDir + "openb_pod_list_" + workload + ".csv"));
}

core::Cluster LoadCluster() {
  return OrDie(core::Cluster::Create(
      OrDie(sim::ReadAlibabaNodes(kTraceDir + "openb_node_list_gpu_node.csv"))));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string Machine() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  char load[64] = "?";
  if (f) {
    if (std::fscanf(f, "%63[^\n]", load) != 1) load[0] = '?';
    std::fclose(f);
  }
  return StrCat("load average at the end: ", load);
}

int Speed(const std::map<std::string, std::string>& flags) {
  const std::string workload = Flag(flags, "workload", "default");
  const std::vector<uint64_t> seeds = SeedsFlag(flags);
  const int repeat = flags.count("repeat") ? std::stoi(flags.at("repeat")) : 3;
  const core::Cluster cluster = LoadCluster();
  const sim::PodTrace trace = LoadPods(workload);
  const std::vector<core::TypicalTask> typical = sim::TraceTypicalTasks(trace, cluster);
  std::cout
      << "| policy | runs | median s/run | min s/run | max s/run | median us/pod | pods/run | "
         "allocation @130% (mean) |\n|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& policy : kPolicies) {
    std::vector<double> seconds, us_per_pod;
    double alloc = 0;
    int64_t pods = 0;
    for (int r = 0; r < repeat; ++r) {
      for (uint64_t seed : seeds) {
        sim::FgdRunOptions o;
        o.policy = policy;
        o.seed = seed;
        o.typical_tasks = typical;
        sim::FgdRunResult res = OrDie(sim::RunFgdProtocol(cluster, trace, o));
        seconds.push_back(res.seconds);
        us_per_pod.push_back(1e6 * res.seconds / static_cast<double>(res.pods));
        if (r == 0) {
          alloc += res.final_allocation / static_cast<double>(seeds.size());
          pods += res.pods;
        }
      }
    }
    std::cerr << "fgd_bench: " << policy << " done\n";
    std::cout << fmt::format("| {} | {} | {:.3f} | {:.3f} | {:.3f} | {:.1f} | {} | {:.2f} |\n",
                             policy, seconds.size(), Median(seconds),
                             *std::min_element(seconds.begin(), seconds.end()),
                             *std::max_element(seconds.begin(), seconds.end()), Median(us_per_pod),
                             pods / static_cast<int64_t>(seeds.size()), alloc);
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

double StdDev(const std::vector<sim::FgdRunResult>& runs) {
  double mean = 0;
  for (const auto& r : runs) mean += r.final_allocation / static_cast<double>(runs.size());
  double var = 0;
  for (const auto& r : runs) var += (r.final_allocation - mean) * (r.final_allocation - mean);
  return runs.size() > 1 ? std::sqrt(var / static_cast<double>(runs.size() - 1)) : 0;
}

int Table(const std::map<std::string, std::string>& flags) {
  const std::vector<uint64_t> seeds = SeedsFlag(flags);
  const int threads = flags.count("threads") ? std::stoi(flags.at("threads")) : 2;
  const sim::PaperTable paper = OrDie(sim::ReadFgdReference(kData + "/reference/fgd-results.md"));
  std::vector<std::string> workloads = ListFlag(flags, "workloads", {});
  if (workloads.empty()) {
    for (const auto& [w, row] : paper) workloads.push_back(w);
    std::stable_partition(workloads.begin(), workloads.end(),
                          [](const std::string& w) { return w == "default"; });
  }
  const std::vector<std::string> policies = ListFlag(flags, "policies", kPolicies);
  const core::Cluster cluster = LoadCluster();
  std::map<std::string, std::vector<sim::PolicyRuns>> all;
  for (const std::string& w : workloads) {
    const sim::PodTrace trace = LoadPods(w);
    all[w] = OrDie(sim::RunFgdSeeds(cluster, trace, policies, seeds, 1.3, threads, nullptr));
    std::cerr << "fgd_bench: " << w << " done\n";
  }
  auto paper_of = [&](const std::string& w, const std::string& p) {
    auto row = paper.find(w);
    if (row == paper.end() || !row->second.count(p)) return std::string("-");
    return fmt::format("{:.2f}", row->second.at(p));
  };
  std::cout
      << "## GPU allocation ratio (%) at 130% arrived demand: ours (paper)\n\n"
         "Means over seeds "
      << seeds.front() << ".." << seeds.back()
      << ". The last columns: tessera's margin over our FGD and over the paper's FGD, and "
         "the GPUs tessera leaves unallocated (of 6212).\n\n"
         "| workload | Random | DotProd | GpuClustering | GpuPacking | BestFit | FGD | tessera "
         "| tessera - FGD | tessera - paper FGD | tessera unallocated |\n"
         "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  int wins = 0;
  for (const std::string& w : workloads) {
    std::map<std::string, double> ran;
    for (const sim::PolicyRuns& p : all[w]) ran[p.policy] = p.mean.final_allocation;
    // A policy left out by --policies shows as nan, not as 0, and wins nothing.
    auto ours = [&](const std::string& p) { return ran.count(p) ? ran.at(p) : NAN; };
    std::string row = "| " + w + " |";
    for (const std::string& p : kPolicies) {
      if (p == "tessera") {
        row += fmt::format(" **{:.2f}** |", ours(p));
      } else {
        row += fmt::format(" {:.2f} ({}) |", ours(p), paper_of(w, p));
      }
    }
    const double paper_fgd =
        paper.count(w) && paper.at(w).count("fgd") ? paper.at(w).at("fgd") : NAN;
    row += fmt::format(" {:+.2f} | {:+.2f} | {:.0f} |", ours("tessera") - ours("fgd"),
                       ours("tessera") - paper_fgd, 6212 * (1 - ours("tessera") / 100));
    if (ours("tessera") >= ours("fgd") && ours("tessera") >= paper_fgd) ++wins;
    std::cout << row << "\n";
  }
  std::cout << "\ntessera at least matches FGD (ours and the paper's) on " << wins << " of "
            << workloads.size() << " workloads.\n";
  if (all.count("default")) {
    std::cout << "\n## Fidelity on default: per-seed spread\n\n"
                 "| policy | ours mean | paper | ours - paper | ours per-seed std | paper per-seed "
                 "std |\n"
                 "|---|---:|---:|---:|---:|---:|\n";
    const std::map<std::string, std::string> paper_std = {
        {"random", "0.32"},      {"dotprod", "0.20"}, {"gpu-clustering", "0.62"},
        {"gpu-packing", "0.54"}, {"bestfit", "0.13"}, {"fgd", "0.08"}};
    for (const sim::PolicyRuns& p : all["default"]) {
      const std::string pub = paper_of("default", p.policy);
      std::cout << fmt::format(
          "| {} | {:.2f} | {} | {} | {:.2f} | {} |\n", p.policy, p.mean.final_allocation, pub,
          pub == "-" ? std::string("-")
                     : fmt::format("{:+.2f}", p.mean.final_allocation - std::stod(pub)),
          StdDev(p.runs), paper_std.count(p.policy) ? paper_std.at(p.policy) : "-");
    }
    std::cout << "\n(The paper's per-seed standard deviations are those quoted in "
                 "data/reference/fgd-results.md.)\n";
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

// The end of one FGD-protocol run, for Holes and Bound.
struct EndState {
  double allocation = 0;                                      // % of the cluster's GPUs
  std::map<int, std::pair<int, int>> by_size;                 // milli-GPU per pod -> placed, failed
  std::map<std::pair<int, int>, std::vector<int>> shares_on;  // (node, GPU) -> shares placed
  std::map<int, double> pieces;  // free milli-GPU on a partly used GPU, by 50-milli bucket
  double whole_free = 0;         // GPUs with nothing on them
  double unallocated = 0;        // GPUs' worth in all
  double beside_shares = 0;      // GPUs' worth left on the GPUs that hold shares

  // The shares placed: milli-GPU -> count.
  std::map<int32_t, int64_t> Shares() const {
    std::map<int32_t, int64_t> out;
    for (const auto& [size, c] : by_size) {
      if (size > 0 && size < 1000 && c.first > 0) out[size] = c.first;
    }
    return out;
  }
};

EndState RunOne(const core::Cluster& cluster, const sim::PodTrace& trace, const std::string& policy,
                uint64_t seed) {
  EndState end;
  sim::FgdRunOptions o;
  o.policy = policy;
  o.seed = seed;
  o.typical_tasks = sim::TraceTypicalTasks(trace, cluster);
  o.on_pod = [&](const sim::TracePod& p, core::Outcome outcome, const core::Placement& pl) {
    const bool ok = outcome == core::Outcome::kPlaced;
    auto& c = end.by_size[static_cast<int>(p.total_gpu_milli())];
    (ok ? c.first : c.second)++;
    if (ok && p.num_gpu == 1 && p.gpu_milli < 1000) {
      end.shares_on[{pl.node.value(), pl.gpus.front().gpu}].push_back(
          static_cast<int>(p.gpu_milli));
    }
  };
  o.on_end = [&](const core::ClusterState& st) {
    for (int n = 0; n < cluster.node_count(); ++n) {
      for (int g = 0; g < cluster.node(core::NodeId(n)).gpu_count(); ++g) {
        const int32_t left = core::GpuMilliLeft(st, core::NodeId(n), g);
        end.unallocated += left / 1000.0;
        if (left >= 1000) {
          end.whole_free += 1;
        } else if (left > 0) {
          end.pieces[left / 50 * 50] += left / 1000.0;
        }
        if (end.shares_on.count({n, g})) end.beside_shares += left / 1000.0;
      }
    }
  };
  const sim::FgdRunResult r = OrDie(sim::RunFgdProtocol(cluster, trace, o));
  end.allocation = 100.0 * static_cast<double>(r.allocated_milli) / r.capacity_milli;
  return end;
}

int Holes(const std::map<std::string, std::string>& flags) {
  const std::string workload = Flag(flags, "workload", "default");
  const std::string policy = Flag(flags, "policy", "tessera");
  const uint64_t seed = flags.count("seed") ? std::stoull(flags.at("seed")) : 42;
  const core::Cluster cluster = LoadCluster();
  const sim::PodTrace trace = LoadPods(workload);
  EndState end = RunOne(cluster, trace, policy, seed);
  std::cout << "## " << policy << " on " << workload << ", seed " << seed << ": allocation "
            << fmt::format("{:.2f}%", end.allocation) << "\n\n"
            << "| GPU ask (milli-GPU) | placed | failed |\n|---:|---:|---:|\n";
  for (const auto& [size, c] : end.by_size) {
    std::cout << "| " << size << " | " << c.first << " | " << c.second << " |\n";
  }
  std::cout << "\n| free piece on a GPU (milli-GPU) | GPUs' worth |\n|---|---:|\n";
  for (const auto& [b, v] : end.pieces) {
    std::cout << fmt::format("| {}-{} | {:.1f} |\n", b, b + 49, v);
  }
  std::cout << fmt::format("| whole free GPUs | {:.1f} |\n| total unallocated | {:.1f} |\n",
                           end.whole_free, end.unallocated);
  // The shared GPUs by what they hold, the most wasteful first: which pairings leave the pieces.
  std::map<std::vector<int>, int> compositions;
  for (auto& [gpu, shares] : end.shares_on) {
    std::sort(shares.rbegin(), shares.rend());
    ++compositions[shares];
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [shares, count] : compositions) {
    int used = 0;
    std::string name;
    for (int s : shares) {
      used += s;
      name += (name.empty() ? "" : " + ") + std::to_string(s);
    }
    const double left = count * (1000 - std::min(used, 1000)) / 1000.0;
    rows.emplace_back(left, fmt::format("| {} | {} | {} | {:.1f} |", name, count,
                                        1000 - std::min(used, 1000), left));
  }
  std::sort(rows.rbegin(), rows.rend());
  std::cout << "\n| shares on one GPU (milli-GPU) | GPUs | left on each | GPUs' worth left |\n"
               "|---|---:|---:|---:|\n";
  for (size_t r = 0; r < rows.size() && r < static_cast<size_t>(30); ++r) {
    std::cout << rows[r].second << "\n";
  }
  // How much of what is left beside the shares any placement of them would leave.
  const std::map<int32_t, int64_t> shares = end.Shares();
  const sim::PackingBound bound = OrDie(sim::SharePackingBound(shares));
  std::cout << fmt::format(
      "\nBeside the shares this run leaves {:.1f} GPUs' worth; no placement of the same shares "
      "could leave less than {:.1f} (they need at least {} GPUs: bin-packing LP bound, "
      "sim/packing_bound.h).\n",
      end.beside_shares, bound.stranded_gpus, bound.min_gpus);
  // The share size that strands the most, and the bound had fewer of it been placed.
  int32_t worst = 0;
  double worst_drop = 0;
  for (const auto& [size, count] : shares) {
    std::map<int32_t, int64_t> without = shares;
    without.erase(size);
    const double drop = bound.stranded_gpus - OrDie(sim::SharePackingBound(without)).stranded_gpus;
    if (drop > worst_drop) {
      worst = size;
      worst_drop = drop;
    }
  }
  if (worst > 0) {
    std::cout << "\n| shares of " << worst
              << " placed | at least left beside the shares (GPUs' worth) |\n|---:|---:|\n";
    const int64_t placed = shares.at(worst);
    for (int step = 0; step <= 6; ++step) {
      std::map<int32_t, int64_t> fewer = shares;
      fewer[worst] = placed - placed * step / 20;
      std::cout << fmt::format("| {} | {:.1f} |\n", fewer[worst],
                               OrDie(sim::SharePackingBound(fewer)).stranded_gpus);
    }
  }
  return 0;
}

// Per seed: what each policy leaves unallocated, and the least that any placement of the shares
// it placed could leave (sim/packing_bound.h).
int Bound(const std::map<std::string, std::string>& flags) {
  const std::string workload = Flag(flags, "workload", "default");
  const std::vector<uint64_t> seeds = SeedsFlag(flags);
  const std::vector<std::string> policies = ListFlag(flags, "policies", {"fgd", "tessera"});
  const core::Cluster cluster = LoadCluster();
  const sim::PodTrace trace = LoadPods(workload);
  std::cout << "| policy | seed | allocation | unallocated GPUs | whole GPUs free | left beside "
               "shares | shares placed | least any placement of them leaves | best allocation "
               "with them |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const std::string& policy : policies) {
    double sum_alloc = 0, sum_best = 0, sum_left = 0, sum_bound = 0;
    for (uint64_t seed : seeds) {
      const EndState end = RunOne(cluster, trace, policy, seed);
      const std::map<int32_t, int64_t> shares = end.Shares();
      int64_t count = 0;
      for (const auto& [size, c] : shares) count += c;
      const sim::PackingBound bound = OrDie(sim::SharePackingBound(shares));
      // The best allocation with these pods placed: every GPU not needed by them is full.
      const double best =
          end.allocation + 100.0 * (end.unallocated - bound.stranded_gpus) / cluster.total_gpus();
      std::cout << fmt::format(
          "| {} | {} | {:.2f}% | {:.1f} | {:.0f} | {:.1f} | {} | {:.1f} | "
          "{:.2f}% |\n",
          policy, seed, end.allocation, end.unallocated, end.whole_free, end.beside_shares, count,
          bound.stranded_gpus, best);
      sum_alloc += end.allocation;
      sum_best += best;
      sum_left += end.unallocated;
      sum_bound += bound.stranded_gpus;
      std::cerr << "fgd_bench: " << policy << " seed " << seed << " done\n";
    }
    const double n = static_cast<double>(seeds.size());
    std::cout << fmt::format("| {} | mean | {:.2f}% | {:.1f} | | | | {:.1f} | {:.2f}% |\n", policy,
                             sum_alloc / n, sum_left / n, sum_bound / n, sum_best / n);
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

// The most any policy could allocate on each seed's pod sequence (sim/protocol_bound.h), beside
// tessera's run on the same sequence.
int Ceiling(const std::map<std::string, std::string>& flags) {
  const std::vector<uint64_t> seeds = SeedsFlag(flags);
  const sim::PaperTable paper = OrDie(sim::ReadFgdReference(kData + "/reference/fgd-results.md"));
  std::vector<std::string> workloads = ListFlag(flags, "workloads", {"default"});
  if (workloads == std::vector<std::string>{"all"}) {
    workloads.clear();
    for (const auto& [w, row] : paper) workloads.push_back(w);
    std::stable_partition(workloads.begin(), workloads.end(),
                          [](const std::string& w) { return w == "default"; });
  }
  const core::Cluster cluster = LoadCluster();
  const int64_t capacity = int64_t{cluster.total_gpus()} * 1000;
  struct Row {
    std::string workload;
    double ceiling = 0, least_unallocated = 0, tessera = 0, tessera_end = 0, seconds = 0;
  };
  std::vector<Row> rows;
  std::string detail;
  std::vector<double> first_ceilings;  // per seed, for the first workload
  for (const std::string& w : workloads) {
    const sim::PodTrace trace = LoadPods(w);
    const std::vector<core::TypicalTask> typical = sim::TraceTypicalTasks(trace, cluster);
    Row row{w};
    const double n = static_cast<double>(seeds.size());
    for (uint64_t seed : seeds) {
      const auto start = std::chrono::steady_clock::now();
      const sim::FgdSequence seq = sim::BuildFgdSequence(trace, capacity, 1.3, seed);
      const sim::ProtocolCeiling c = OrDie(sim::FgdCeiling(cluster, trace, seq));
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      sim::FgdRunOptions o;
      o.policy = "tessera";
      o.seed = seed;
      o.typical_tasks = typical;
      const sim::FgdRunResult t = OrDie(sim::RunFgdProtocol(cluster, trace, o));
      const double t_end = 100.0 * static_cast<double>(t.allocated_milli) / capacity;
      row.ceiling += c.max_allocation_pct / n;
      if (rows.empty()) first_ceilings.push_back(c.max_allocation_pct);
      row.least_unallocated += c.min_unallocated_gpus / n;
      row.tessera += t.final_allocation / n;
      row.tessera_end += t_end / n;
      row.seconds += secs / n;
      if (rows.empty()) {
        detail += fmt::format(
            "| {} | {} | {} of {} | {} ({}) | {:.2f}% | {:.1f} | {:.2f}% | {:.1f} | {:.1f} | "
            "{:.2f} |\n",
            seed, c.reference.Describe(), c.worst_exhaustion, c.pods, c.lps, c.lps_not_optimal,
            c.max_allocation_pct, c.min_unallocated_gpus, t_end,
            (capacity - t.allocated_milli) / 1000.0,
            (capacity - t.allocated_milli) / 1000.0 - c.min_unallocated_gpus, secs);
      }
      std::cerr << "fgd_bench: " << w << " seed " << seed << " done\n";
    }
    rows.push_back(row);
  }
  std::cout << "## " << workloads.front() << ", per seed\n\n"
            << "| seed | reference ask | worst case: stops fitting at pod | LPs (not optimal) | "
               "ceiling | least "
               "unallocated GPUs | tessera at the end | tessera unallocated GPUs | tessera - least "
               "| s (ceiling) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n"
            << detail;
  const Row& first = rows.front();
  std::cout << fmt::format(
      "| mean | | | | {:.2f}% | {:.1f} | {:.2f}% | {:.1f} | {:.1f} | {:.2f} |\n", first.ceiling,
      first.least_unallocated, first.tessera_end,
      (100.0 - first.tessera_end) * cluster.total_gpus() / 100.0,
      (100.0 - first.tessera_end) * cluster.total_gpus() / 100.0 - first.least_unallocated,
      first.seconds);
  std::sort(first_ceilings.begin(), first_ceilings.end());
  std::cout << fmt::format(
      "\nThe ceiling over these {} seeds: lowest {:.2f}%, median {:.2f}%, highest {:.2f}%.\n",
      first_ceilings.size(), first_ceilings.front(), Median(first_ceilings), first_ceilings.back());
  std::cout << "\n## Every workload: means over seeds " << seeds.front() << ".." << seeds.back()
            << "\n\n| workload | paper FGD | tessera (reported, at 130%) | ceiling: no policy "
               "allocates more | least unallocated GPUs | tessera's distance to the ceiling "
               "(points) |\n|---|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    const double paper_fgd = paper.count(r.workload) && paper.at(r.workload).count("fgd")
                                 ? paper.at(r.workload).at("fgd")
                                 : NAN;
    std::cout << fmt::format("| {} | {:.2f} | {:.2f} | {:.2f} | {:.1f} | {:.2f} |\n", r.workload,
                             paper_fgd, r.tessera, r.ceiling, r.least_unallocated,
                             r.ceiling - r.tessera);
  }
  std::cout << "\n" << Machine() << "\n";
  return 0;
}

}  // namespace
}  // namespace tessera::bench

int main(int argc, char** argv) {
  if (argc < 2) {
    tessera::bench::Die("usage: fgd_bench speed|table|holes|bound|ceiling [--flag value ...]");
  }
  const std::string mode = argv[1];
  auto flags = tessera::bench::Flags(argc, argv, 2);
  if (mode == "speed") return tessera::bench::Speed(flags);
  if (mode == "table") return tessera::bench::Table(flags);
  if (mode == "holes") return tessera::bench::Holes(flags);
  if (mode == "bound") return tessera::bench::Bound(flags);
  if (mode == "ceiling") return tessera::bench::Ceiling(flags);
  tessera::bench::Die("usage: fgd_bench speed|table|holes|bound|ceiling [--flag value ...]");
}
