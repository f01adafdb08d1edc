#!/usr/bin/env bash
# The scale-up signal's cost at 10,000 nodes (issue 19): the planner alone, and the scheduler's
# cycle with and without the signal while pods wait (bench/scale_up_bench.cc says what each
# measures). Builds bench/scale_up_bench, runs it with repetitions and writes the medians to
# bench/results/scale_up.md.
#   bench/run_scale_up.sh [--preset dev|release] [--nodes N]   (dev: RelWithDebInfo; 10000 nodes)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=dev
nodes=10000
while [[ $# -gt 0 ]]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "run_scale_up.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j 2 --target scale_up_bench >/dev/null
out=bench/results/scale_up.md
raw=$(mktemp)
trap 'rm -f "$raw"' EXIT
cmd="build/$preset/bench/scale_up_bench --benchmark_repetitions=5 --benchmark_min_time=0.1 --benchmark_report_aggregates_only=true --benchmark_format=json"
echo "running: SCALE_UP_BENCH_NODES=$nodes $cmd" >&2
load=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%FT%TZ)
SCALE_UP_BENCH_NODES=$nodes $cmd > "$raw" 2>/dev/null
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# The scale-up signal's cost at $nodes nodes"
  echo
  echo "Command: \`bench/run_scale_up.sh --preset $preset --nodes $nodes\` (runs \`SCALE_UP_BENCH_NODES=$nodes $cmd\`),"
  echo "started $started at commit $(git rev-parse --short HEAD)."
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $load, at the end: $load_end"
  echo "(a machine shared with other builds: CPU time, the benchmark thread's, is the measure; wall time"
  echo "includes waiting for a core)."
  echo
  echo "The cluster: $nodes nodes of 8 H100-80GB GPUs on an NVSwitch, each running one 7-GPU pod"
  echo "(bound, with its assignment): one GPU free per node, so none of the W waiting pods fits"
  echo "(2-GPU pods, every fourth an 8-GPU pod). Templates: hgx-h100 and l40s-4gpu, at most 64 nodes"
  echo "each. Medians of 5 repetitions, in milliseconds."
  echo "- planner: plan::PlanScaleUp alone (src/core/plan/scale_up.h) on the scheduler's engine (copied per template);"
  echo "- cycle: one SchedulerCore::ScheduleSome when the W pods are due for their periodic retry"
  echo "  (every retry.period, 30s), without the signal, and with it recomputed in that cycle (as it"
  echo "  is once per scaleUp.interval, 30s by default, while pods wait). The signal's cost per"
  echo "  interval is the difference."
  echo
  echo "| W waiting | planner CPU (ms) | planner wall (ms) | cycle without signal CPU (ms) | cycle with signal CPU (ms) | signal cost per interval CPU (ms) | with / without | recommended nodes |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  jq -r '
    def r: (. * 10 | round / 10 | tostring);
    [.benchmarks[] | select(.aggregate_name=="median")
     | {name: (.run_name | split("/")[0]), w: ((.run_name | split("/")[1]) | tonumber),
        signal: (.run_name | split("/")[2]), cpu: .cpu_time, wall: .real_time,
        rec: .recommended_nodes}]
    | group_by(.w) | .[]
    | (map(select(.name=="BM_PlanScaleUp"))[0]) as $p
    | (map(select(.name=="BM_Cycle" and .signal=="0"))[0]) as $off
    | (map(select(.name=="BM_Cycle" and .signal=="1"))[0]) as $on
    | "| \($p.w) | \($p.cpu | r) | \($p.wall | r) | \($off.cpu | r) | \($on.cpu | r) | \(($on.cpu - $off.cpu) | r) | \(($on.cpu / $off.cpu) | r)x | \($p.rec) |"' "$raw"
} > "$out"
cat "$out"
