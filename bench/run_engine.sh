#!/usr/bin/env bash
# Engine place-and-release throughput (issue: foundation). Builds the release preset, runs
# bench/engine_bench with repetitions and writes the medians to bench/results/engine.md.
#   bench/run_engine.sh [extra google-benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target engine_bench >/dev/null
out=bench/results/engine.md
raw=$(mktemp)
cmd="build/release/bench/engine_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true --benchmark_format=json $*"
echo "running: $cmd" >&2
$cmd > "$raw"
{
  echo "# Engine throughput: place-and-release, steady state at ~60% of GPUs"
  echo
  echo "Command: \`bench/run_engine.sh\` (runs \`$cmd\`)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Clusters of hgx-h100 nodes (8 GPUs each). kind 0 = shares (1-20Gi, half with 10-50% compute),"
  echo "kind 1 = whole GPUs (1,1,1,1,2,2,4,8). Figures are medians of 5 repetitions; placements/s uses"
  echo "CPU time of the one benchmark thread (one core). Gang rows: one iteration releases the oldest"
  echo "gang and places a new one (PlaceGang: all 8 members), so their time is one gang decision."
  echo
  echo "| policy | nodes | request | median us/placement (CPU) | median placements/s | live pods |"
  echo "|---|---:|---|---:|---:|---:|"
  jq -r '.benchmarks[] | select(.aggregate_name=="median") |
     (.run_name | split("/")) as $p |
     [$p[1], ($p[2]|sub("nodes:";"")), (if $p[0]=="GangPlaceRelease" then "gang of " + ($p[3]|sub("size:";"")) + " x 1 GPU, one NVLink domain" elif ($p[3]|sub("kind:";""))=="0" then "share" else "whole" end),
      (.cpu_time|tostring|.[0:6]), ((.items_per_second|floor)|tostring), ((.live_pods|floor)|tostring)] |
     "| " + join(" | ") + " |"' "$raw"
} > "$out"
rm -f "$raw"
cat "$out"
