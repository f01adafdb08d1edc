#!/usr/bin/env bash
# The simulator's queues on the Alibaba trace (issue 18): fairness, pending times and evictions
# with reclaim and priority preemption against a policy that never preempts. Builds the release
# preset, runs bench/queue_sim and writes bench/results/queues.md.
#   bench/run_queue_sim.sh [--nodes N] [trace [speedups...]]
#   (default: all of the trace's nodes, openb_pod_list_default.csv, speedups 30000 100000)
# --nodes N replays on N of the trace's nodes (spread evenly over its node list) so that the
# queues compete for GPUs.
#   bench/run_queue_sim.sh --teams [--nodes 40] [--days 3] [--seed 42]
# Fair share that remembers (issue 31): a steady and a bursty team under usage half-lives 0, 1 h
# and 1 day; writes bench/results/queues_decay.md.
set -euo pipefail
cd "$(dirname "$0")/.."
# PRESET=dev uses the development build instead (the same figures; the replay is deterministic).
preset=${PRESET:-release}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" --target queue_sim >/dev/null
cmd="build/$preset/bench/queue_sim $*"
echo "running: $cmd" >&2
load=$(cut -d' ' -f1-3 /proc/loadavg)
if [[ "${1:-}" == "--teams" ]]; then
  out=bench/results/queues_decay.md
  raw=$($cmd)
  {
    echo "# Fair share that remembers: a steady and a bursty team"
    echo
    echo "Command: \`bench/run_queue_sim.sh $*\` (runs \`$cmd\`)"
    echo
    echo "The queue replay (src/sim/queue_timeline.h) on the replay's own clock (no compression):"
    echo "two queues of one priority, each deserving half of the GPUs. \`steady\` submits jobs all"
    echo "day (Poisson arrivals keeping 45% of the GPUs busy); \`burst\` submits, every day at"
    echo "08:00, jobs worth four hours of the whole cluster within a minute, and nothing else. Jobs"
    echo "are drawn (seeded) from the trace's GPU pods that ran 10 minutes to 8 hours, with their"
    echo "shapes and run times, any GPU model. The order within the priority is dominant-resource"
    echo "fairness over allocation + decayed usage (docs/queues.md, \"Fair share that remembers\");"
    echo "half-life 0 orders by allocation alone. 'reclaim on' adds reclaim and priority preemption."
    echo "\"After a burst\": the steady team's pods that began to wait in the 12 hours from each"
    echo "08:00 (mean, and the worst hour's mean). Jain's index over sliding 6-hour windows (stepped"
    echo "by 1.5 h) of each team's time-weighted allocation against its fair share, in windows"
    echo "where both wanted GPUs; and time-weighted while both want GPUs."
    echo
    echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $load, at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo
    echo "$raw"
  } > "$out"
  cat "$out"
  exit 0
fi
out=bench/results/queues.md
raw=$($cmd)
{
  echo "# Queues on the Alibaba trace: fairness, pending time, evictions"
  echo
  echo "Command: \`bench/run_queue_sim.sh $*\` (runs \`$cmd\`)"
  echo
  echo "The timeline protocol (src/sim/timeline.h) with queues (src/sim/queue_timeline.h): pods of"
  echo "qos LS, Guaranteed and Burstable go to queue latency (priorities 100, 200, 50), BE pods to"
  echo "batch (priority 0); each queue deserves half of the GPUs. Pending pods are served highest"
  echo "priority first, then the queue furthest below its fair share (dominant-resource fairness);"
  echo "'on' adds reclaim and priority preemption (src/core/preemption/planner.h), evicted pods"
  echo "wait again and start over. Jain's index is of allocation / fair share over the time both"
  echo "queues want GPUs (1 = each holds its fair share). Arrival gaps are divided by the speedup;"
  echo "run times are kept. GPU counts are time-weighted means over the arrival window; the"
  echo "tables after the first give them per period of the window (allocation against fair share"
  echo "over time). Within a queue pods are served strictly in order: a queue whose first pod does"
  echo "not fit waits until something changes (no backfill)."
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $load."
  echo
  echo "$raw"
} > "$out"
cat "$out"
