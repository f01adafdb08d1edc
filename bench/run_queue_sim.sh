#!/usr/bin/env bash
# The simulator's queues on the Alibaba trace (issue 18): fairness, pending times and evictions
# with reclaim and priority preemption against a policy that never preempts. Builds the release
# preset, runs bench/queue_sim and writes bench/results/queues.md.
#   bench/run_queue_sim.sh [--nodes N] [trace [speedups...]]
#   (default: all of the trace's nodes, openb_pod_list_default.csv, speedups 30000 100000)
# --nodes N replays on N of the trace's nodes (spread evenly over its node list) so that the
# queues compete for GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target queue_sim >/dev/null
out=bench/results/queues.md
cmd="build/release/bench/queue_sim $*"
echo "running: $cmd" >&2
load=$(cut -d' ' -f1-3 /proc/loadavg)
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
