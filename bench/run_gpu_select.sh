#!/usr/bin/env bash
# Multi-GPU selection time per call (issue 4: topology). Builds the release preset, runs
# bench/gpu_select_bench with repetitions and writes the medians to bench/results/gpu_select.md.
#   bench/run_gpu_select.sh [extra google-benchmark flags]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target gpu_select_bench >/dev/null
out=bench/results/gpu_select.md
raw=$(mktemp)
cmd="build/release/bench/gpu_select_bench --benchmark_repetitions=5 --benchmark_min_time=0.1 --benchmark_report_aggregates_only=true --benchmark_format=json $*"
echo "running: $cmd" >&2
$cmd > "$raw"
{
  echo "# Multi-GPU selection: time per call"
  echo
  echo "Command: \`bench/run_gpu_select.sh\` (runs \`$cmd\`)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)."
  echo "Medians of 5 repetitions, CPU time of the one benchmark thread, in microseconds."
  echo "- all free: GpuSetSelector::Select on a prepared node (what the engine calls; nodes of one"
  echo "  topology share a prepared selector), every GPU free;"
  echo "- mixed: the same over 64 fixed random free patterns with at least N free;"
  echo "- one-off: SelectGpuSet(node, ...), which prepares the node first (every GPU free)."
  echo "16-GPU nodes: nvswitch-16 (all pairs NV6, two NUMA nodes), pcie-16 (pairs per PCIe switch,"
  echo "four switches per socket), random-16 (a fixed random topology: NVLink islands with 1-18"
  echo "lanes, random PCIe levels and NUMA nodes). Target (issue 4): under 20 us on 8-GPU servers."
  echo
  echo "| node | N | all free (us) | mixed (us) | one-off (us) |"
  echo "|---|---:|---:|---:|---:|"
  jq -r '
    def r: if . == null then "-" else (. * 100 | round / 100 | tostring) end;
    [.benchmarks[] | select(.aggregate_name=="median")
     | {kind: (.run_name | split("/")[0]), node: .["label"],
        n: ((.run_name | split("/")[2]) | tonumber), us: (.cpu_time / 1000)}]
    | group_by([.node, .n])
    | sort_by((.[0].node) as $n
              | [(["dgx-a100","hgx-h100","pcie-8gpu","nvswitch-16","pcie-16","random-16"] | index($n)), .[0].n])
    | .[] | (map({(.kind): .us}) | add) as $t
    | "| \(.[0].node) | \(.[0].n) | \($t.BM_Select | r) | \($t.BM_SelectMixed | r) | \($t.BM_SelectGpuSet | r) |"' "$raw"
} > "$out"
rm -f "$raw"
cat "$out"
