#!/usr/bin/env bash
# The scale-up signal's cost at 10,000 nodes (issue 19): the planner alone, and the scheduler's
# cycle with and without the signal while pods wait (bench/scale_up_bench.cc says what each
# measures). Builds bench/scale_up_bench, runs it with repetitions and writes the medians to
# bench/results/scale_up.md.
#   bench/run_scale_up.sh [--preset dev|release] [--nodes N] [--baseline BIN] [--rounds R]
# (dev: RelWithDebInfo; 10000 nodes). --baseline: another build's scale_up_bench (an earlier
# commit's), run in turn with this one, R rounds each (default 3 with a baseline, else 1), so that
# both tables come from the same minutes of a shared machine; medians over every repetition.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=dev
nodes=10000
baseline=
rounds=
while [[ $# -gt 0 ]]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --baseline) baseline=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "run_scale_up.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -n "$baseline" && ! -x "$baseline" ]]; then
  echo "run_scale_up.sh: --baseline $baseline is not an executable scale_up_bench" >&2
  exit 2
fi
[[ -n "$rounds" ]] || rounds=$([[ -n "$baseline" ]] && echo 3 || echo 1)
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j 2 --target scale_up_bench >/dev/null
out=bench/results/scale_up.md
raw=$(mktemp)
raw_base=$(mktemp)
trap 'rm -f "$raw" "$raw_base"' EXIT
args="--benchmark_repetitions=5 --benchmark_min_time=0.1 --benchmark_format=json"
cmd="build/$preset/bench/scale_up_bench $args"
load=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u +%FT%TZ)
for ((r = 1; r <= rounds; r++)); do
  echo "round $r of $rounds: SCALE_UP_BENCH_NODES=$nodes $cmd" >&2
  SCALE_UP_BENCH_NODES=$nodes $cmd >> "$raw" 2>/dev/null
  if [[ -n "$baseline" ]]; then
    echo "round $r of $rounds: SCALE_UP_BENCH_NODES=$nodes $baseline $args" >&2
    SCALE_UP_BENCH_NODES=$nodes "$baseline" $args >> "$raw_base" 2>/dev/null
  fi
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# One row per W: medians over every repetition of every round in the file.
table() {
  echo "| W waiting | planner CPU (ms) | planner wall (ms) | cycle without signal CPU (ms) | cycle with signal CPU (ms) | signal cost per interval CPU (ms) | with / without | recommended nodes |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
  jq -rs '
    def r: (. * 10 | round / 10 | tostring);
    def median: sort | if length % 2 == 1 then .[length / 2 | floor]
                       else (.[length / 2 - 1] + .[length / 2]) / 2 end;
    [.[].benchmarks[] | select(.run_type == "iteration")
     | {name: (.run_name | split("/")[0]), w: ((.run_name | split("/")[1]) | tonumber),
        signal: (.run_name | split("/")[2]), cpu: .cpu_time, wall: .real_time,
        rec: .recommended_nodes}]
    | group_by(.w) | .[]
    | (map(select(.name == "BM_PlanScaleUp"))) as $p
    | (map(select(.name == "BM_Cycle" and .signal == "0")) | map(.cpu) | median) as $off
    | (map(select(.name == "BM_Cycle" and .signal == "1")) | map(.cpu) | median) as $on
    | "| \($p[0].w) | \($p | map(.cpu) | median | r) | \($p | map(.wall) | median | r) | \($off | r) | \($on | r) | \(($on - $off) | r) | \(($on / $off) | r)x | \($p[0].rec) |"' "$1"
}

{
  echo "# The scale-up signal's cost at $nodes nodes"
  echo
  echo "Command: \`bench/run_scale_up.sh --preset $preset --nodes $nodes${baseline:+ --baseline $baseline} --rounds $rounds\`"
  echo "(runs \`SCALE_UP_BENCH_NODES=$nodes $cmd\`, $rounds round(s)${baseline:+, each followed by the baseline}),"
  echo "started $started at commit $(git rev-parse --short HEAD)."
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $load, at the end: $load_end"
  echo "(a machine shared with other builds: CPU time, the benchmark thread's, is the measure; wall time"
  echo "includes waiting for a core)."
  echo
  echo "The cluster: $nodes nodes of 8 H100-80GB GPUs on an NVSwitch, each running one 7-GPU pod"
  echo "(bound, with its assignment): one GPU free per node, so none of the W waiting pods fits"
  echo "(2-GPU pods, every fourth an 8-GPU pod). Templates: hgx-h100 and l40s-4gpu, at most 64 nodes"
  echo "each. Medians of every repetition (5 per round), in milliseconds."
  echo "- planner: plan::PlanScaleUp alone (src/core/plan/scale_up.h), as the scheduler's signal"
  echo "  calls it;"
  echo "- cycle: one SchedulerCore::ScheduleSome when the W pods are due for their periodic retry"
  echo "  (every retry.period, 30s), without the signal, and with it recomputed in that cycle (as it"
  echo "  is once per scaleUp.interval, 30s by default, while pods wait). The signal's cost per"
  echo "  interval is the difference."
  echo
  echo "This build:"
  echo
  table "$raw"
  if [[ -n "$baseline" ]]; then
    echo
    echo "The baseline, \`$baseline\`, run in turn with it:"
    echo
    table "$raw_base"
  fi
} > "$out"
cat "$out"
