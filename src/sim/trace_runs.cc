#include "sim/trace_runs.h"

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "common/strings.h"

namespace tessera::sim {

absl::StatusOr<std::vector<uint64_t>> ParseSeeds(std::string_view text) {
  std::vector<uint64_t> seeds;
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        StrCat("--seeds \"", text, "\": ", why, " (write 42-51, 42,43,44 or 42)"));
  };
  for (absl::string_view part : absl::StrSplit(ToAbsl(text), ',')) {
    if (part.empty()) return bad("an empty item");
    std::vector<absl::string_view> ends = absl::StrSplit(part, absl::MaxSplits('-', 1));
    uint64_t lo = 0, hi = 0;
    if (!absl::SimpleAtoi(ends[0], &lo)) return bad(StrCat("\"", ends[0], "\" is not a seed"));
    hi = lo;
    if (ends.size() == 2 && !absl::SimpleAtoi(ends[1], &hi)) {
      return bad(StrCat("\"", ends[1], "\" is not a seed"));
    }
    if (hi < lo) return bad(StrCat("the range ", lo, "-", hi, " is backwards"));
    if (hi - lo >= 100000 || seeds.size() + (hi - lo) >= 100000) return bad("too many seeds");
    for (uint64_t s = lo; s <= hi; ++s) seeds.push_back(s);
  }
  if (seeds.empty()) return bad("no seeds");
  return seeds;
}

namespace {

// Runs job(i) for i in [0, n) on `threads` threads; the first error wins.
template <typename Job>
absl::Status Parallel(int n, int threads, Job&& job) {
  std::atomic<int> next{0};
  std::mutex mu;
  absl::Status first = absl::OkStatus();
  auto worker = [&]() {
    while (true) {
      const int i = next.fetch_add(1);
      if (i >= n) return;
      absl::Status s = job(i);
      if (!s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first.ok()) first = s;
        next.store(n);
      }
    }
  };
  const int count = std::max(1, std::min(threads, n));
  std::vector<std::thread> pool;
  for (int t = 1; t < count; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  return first;
}

template <typename Result, typename RunOne>
absl::StatusOr<std::vector<std::vector<Result>>> RunAll(const std::vector<std::string>& policies,
                                                        const std::vector<uint64_t>& seeds,
                                                        int threads, const ProgressFn& progress,
                                                        RunOne&& run_one) {
  const int n = static_cast<int>(policies.size() * seeds.size());
  std::vector<std::optional<Result>> results(n);
  std::mutex mu;
  int done = 0;
  const auto start = std::chrono::steady_clock::now();
  TESSERA_RETURN_IF_ERROR(Parallel(n, threads, [&](int i) -> absl::Status {
    const std::string& policy = policies[i / seeds.size()];
    const uint64_t seed = seeds[i % seeds.size()];
    absl::StatusOr<Result> r = run_one(policy, seed);
    if (!r.ok()) return r.status();
    results[i] = std::move(*r);
    std::lock_guard<std::mutex> lock(mu);
    ++done;
    if (progress) {
      progress(RunProgress{
          done, n, policy, seed,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()});
    }
    return absl::OkStatus();
  }));
  std::vector<std::vector<Result>> by_policy(policies.size());
  for (int i = 0; i < n; ++i) by_policy[i / seeds.size()].push_back(std::move(*results[i]));
  return by_policy;
}

}  // namespace

absl::StatusOr<std::vector<PolicyRuns>> RunFgdSeeds(const core::Cluster& cluster,
                                                    const PodTrace& trace,
                                                    const std::vector<std::string>& policies,
                                                    const std::vector<uint64_t>& seeds,
                                                    double target_ratio, int threads,
                                                    const ProgressFn& progress) {
  const std::vector<core::TypicalTask> typical = TraceTypicalTasks(trace, cluster);
  TESSERA_ASSIGN_OR_RETURN(auto by_policy,
                           RunAll<FgdRunResult>(policies, seeds, threads, progress,
                                                [&](const std::string& policy, uint64_t seed) {
                                                  FgdRunOptions o;
                                                  o.policy = policy;
                                                  o.seed = seed;
                                                  o.target_ratio = target_ratio;
                                                  o.typical_tasks = typical;
                                                  return RunFgdProtocol(cluster, trace, o);
                                                }));
  std::vector<PolicyRuns> out;
  for (size_t p = 0; p < policies.size(); ++p) {
    PolicyRuns pr;
    pr.policy = policies[p];
    pr.runs = std::move(by_policy[p]);
    pr.mean = MeanOfRuns(pr.runs);
    out.push_back(std::move(pr));
  }
  return out;
}

absl::StatusOr<std::vector<ProtocolCeiling>> FgdCeilingSeeds(const core::Cluster& cluster,
                                                             const PodTrace& trace,
                                                             const std::vector<uint64_t>& seeds,
                                                             double target_ratio, int threads) {
  std::vector<ProtocolCeiling> out(seeds.size());
  const int64_t capacity = int64_t{cluster.total_gpus()} * 1000;
  TESSERA_RETURN_IF_ERROR(
      Parallel(static_cast<int>(seeds.size()), threads, [&](int i) -> absl::Status {
        // The sequence the runs of this seed replayed (a function of the seed alone).
        TESSERA_ASSIGN_OR_RETURN(
            out[i],
            FgdCeiling(cluster, trace, BuildFgdSequence(trace, capacity, target_ratio, seeds[i])));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<TimelinePolicyRuns>> RunTimelineSeeds(
    const core::Cluster& cluster, const PodTrace& trace, const std::vector<std::string>& policies,
    const std::vector<uint64_t>& seeds, const TimelineOptions& base, int threads,
    const ProgressFn& progress) {
  const std::vector<core::TypicalTask> typical = TraceTypicalTasks(trace, cluster);
  TESSERA_ASSIGN_OR_RETURN(auto by_policy,
                           RunAll<TimelineResult>(policies, seeds, threads, progress,
                                                  [&](const std::string& policy, uint64_t seed) {
                                                    TimelineOptions o = base;
                                                    o.policy = policy;
                                                    o.seed = seed;
                                                    o.typical_tasks = typical;
                                                    return RunTimeline(cluster, trace, o);
                                                  }));
  std::vector<TimelinePolicyRuns> out;
  for (size_t p = 0; p < policies.size(); ++p) {
    TimelinePolicyRuns pr;
    pr.policy = policies[p];
    pr.runs = std::move(by_policy[p]);
    pr.mean = MeanOfTimelines(pr.runs);
    out.push_back(std::move(pr));
  }
  return out;
}

}  // namespace tessera::sim
