#!/usr/bin/env bash
# The preemption decision's latency (issue 18: p99 under 10 ms at 1,000 nodes x 8 GPUs with 8,000
# running pods). Builds the release preset, runs bench/preemption_bench and writes
# bench/results/preemption.md.
#   bench/run_preemption.sh [nodes [pods [decisions]]]   (default 1000 8000 500)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target preemption_bench >/dev/null
nodes=${1:-1000}
pods=${2:-8000}
decisions=${3:-500}
out=bench/results/preemption.md
cmd="build/release/bench/preemption_bench $nodes $pods $decisions"
echo "running: $cmd" >&2
load=$(cut -d' ' -f1-3 /proc/loadavg)
raw=$($cmd)
# bench/run_reclaim.sh's section is kept.
kept=""
if grep -q '^## Reclaiming many GPUs at once' "$out" 2>/dev/null; then
  kept=$(sed -n '/^## Reclaiming many GPUs at once/,$p' "$out")
fi
{
  echo "# Preemption decision latency"
  echo
  echo "Command: \`bench/run_preemption.sh $*\` (runs \`$cmd\`)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $load."
  echo "One decision = PreemptionPlanner::Plan (src/core/preemption/planner.h) for one preemptor on a"
  echo "full cluster (no GPU wholly free): building its candidates from every running pod, screening"
  echo "nodes, the engine's what-ifs and the reprieve. Running pods' priorities (0..9) and queues are"
  echo "drawn afresh per decision; the preemptors have priority 10 (every pod of their queue is a"
  echo "candidate), the reclaim one priority 0 in queue infer (deserves half, holds about a quarter)."
  echo "CPU is the deciding thread's CPU time (the target's measure on a shared machine); wall"
  echo "includes waiting for a core, which on this shared machine is most of it."
  echo
  echo "$raw"
  if [ -n "$kept" ]; then printf '\n%s\n' "$kept"; fi
} > "$out"
cat "$out"
