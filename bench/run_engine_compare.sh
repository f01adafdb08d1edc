#!/usr/bin/env bash
# Side by side: engine_bench of two builds (e.g. before and after a refactor), alternating
# before/after `rounds` times, so both see the same machine. Prints a Markdown table of CPU time
# per placement (median of the rounds' medians) and the ratio after/before.
#   bench/run_engine_compare.sh BEFORE_BUILD_DIR [AFTER_BUILD_DIR (build/dev)] [ROUNDS (2)]
# Each build dir must hold bench/engine_bench (cmake --build --preset dev --target engine_bench
# in a worktree of the "before" commit). FILTER (env) picks the rows (a regex over benchmark
# names; default: tessera and binpack single pods, tessera gangs).
set -euo pipefail
cd "$(dirname "$0")/.."
before=${1:?usage: bench/run_engine_compare.sh BEFORE_BUILD_DIR [AFTER_BUILD_DIR] [ROUNDS]}
after=${2:-build/dev}
rounds=${3:-2}
filter=${FILTER:-'PlaceRelease/(tessera|binpack)/|GangPlaceRelease/tessera/'}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((r = 1; r <= rounds; r++)); do
  for side in before after; do
    dir=$before
    [[ $side == after ]] && dir=$after
    "$dir/bench/engine_bench" --benchmark_filter="$filter" --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true --benchmark_format=json >"$work/$side-$r.json"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "| benchmark | before us (CPU) | after us (CPU) | after / before |"
echo "|---|---:|---:|---:|"
for name in $(jq -r '.benchmarks[] | select(.aggregate_name=="median") | .run_name' "$work/before-1.json"); do
  med() {
    jq -s --arg n "$name" '[.[] | .benchmarks[] | select(.aggregate_name=="median" and .run_name==$n)
      | .cpu_time] | sort | if length % 2 == 1 then .[length / 2 | floor]
      else (.[length / 2 - 1] + .[length / 2]) / 2 end' "$work"/"$1"-*.json
  }
  b=$(med before) a=$(med after)
  awk -v n="$name" -v b="$b" -v a="$a" 'BEGIN { printf "| %s | %.2f | %.2f | %.3f |\n", n, b, a, a / b }'
done
