#!/usr/bin/env bash
# The node agent's maintenance step (PodManager::Maintain, every 250 ms) before and after the
# tenant-boundary hardening of issue 27, side by side: agent_bench built from this tree and from
# BASE (default: the branch point with main, `git merge-base HEAD main`; on main itself give the
# tenant boundary's branch point, bc4cd7f), in a temporary worktree
# under build/, where the shared compile cache serves it), PRESET (default dev: -O2, the unit
# tests' build; release when the machine is free enough to build it twice), run alternately REPS
# times (default 5) at 8 and 64 share pods of 4 processes;
# this tree also with the NVML sampler over the fake driver (the memory backstop and the
# controller's measurements). Medians of each run's per-step p50 to bench/results/agent.md.
# Needs root (agent_bench: mount namespace, pod cgroups). Build first, then run it alone:
#   BUILD_ONLY=1 bench/run_agent.sh && flock /work/wt/notes/bench.lock bench/run_agent.sh [REPS] [BASE]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-5}
base=${2:-$(git merge-base HEAD main)}
steps=400
preset=${PRESET:-dev}
work=$(mktemp -d /tmp/tessera-agent-bench-run-XXXXXX)
basetree=$(pwd)/build/agent-bench-base
trap 'rm -rf "$work"' EXIT
# The base tree is kept between runs at the same BASE (BUILD_ONLY=1 builds both trees and stops, so
# that the measured run under the bench lock builds nothing), and removed after a measured run that
# succeeded (one that failed keeps it for the next).
if [[ "$(git -C "$basetree" rev-parse HEAD 2>/dev/null)" != "$(git rev-parse "$base")" ]]; then
  git worktree remove --force "$basetree" >/dev/null 2>&1 || rm -rf "$basetree"
  git worktree add --detach "$basetree" "$base" >/dev/null 2>&1
  cp bench/agent_bench.cc "$basetree/bench/"
  sed -n '/^# The node agent.s maintenance step/,$p' bench/CMakeLists.txt >>"$basetree/bench/CMakeLists.txt"
fi
for tree in . "$basetree"; do
  (cd "$tree" && cmake --preset "$preset" >/dev/null &&
     cmake --build --preset "$preset" -j "$(nproc)" --target agent_bench fake_nvml >/dev/null)
done
[[ ${BUILD_ONLY:-0} == 1 ]] && exit 0
new=build/$preset/bench/agent_bench
old=$basetree/build/$preset/bench/agent_bench
nvml=$(pwd)/build/$preset/test/fake_cuda/lib/libnvidia-ml.so.1
raw=$work/raw.jsonl
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 0; r < reps; r++)); do
  for pods in 8 64; do
    "$old" "$pods" 4 "$steps" | jq -c '. + {tree: "before"}' >>"$raw"
    "$new" "$pods" 4 "$steps" | jq -c '. + {tree: "after"}' >>"$raw"
    AGENT_BENCH_NVML=$nvml "$new" "$pods" 4 "$steps" |
      jq -c '. + {tree: "after, with NVML"}' >>"$raw"
  done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
out=bench/results/agent.md
median() { jq -s "[.[] | select(.tree == \"$1\" and .pods == $2) | .$3] | sort | .[length/2|floor]" "$raw"; }
{
  echo "# The node agent's maintenance step, before and after the tenant-boundary hardening"
  echo
  echo "Command: \`flock /work/wt/notes/bench.lock bench/run_agent.sh $reps${2:+ $2}\` (agent_bench, $preset"
  echo "preset; before: $(git rev-parse --short "$base"), the branch point; after: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' plus uncommitted changes'))."
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
  echo "load average at start: $load_start, at end: $load_end."
  echo "One Maintain (what the agent does every 250 ms) on a node of 8 GPUs with N share pods of 1 GiB,"
  echo "each a process in its own pod cgroup holding 4 ledger slots; $steps steps per run, medians over"
  echo "$reps runs of each run's per-step p50 (CPU: the agent thread's CPU time)."
  echo
  echo "| share pods | before: CPU us p50 | after: CPU us p50 | ratio | after, with NVML: CPU us p50 | before: wall us p50 | after: wall us p50 |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for pods in 8 64; do
    b=$(median before "$pods" cpu_us_p50)
    a=$(median after "$pods" cpu_us_p50)
    n=$(median "after, with NVML" "$pods" cpu_us_p50)
    bw=$(median before "$pods" wall_us_p50)
    aw=$(median after "$pods" wall_us_p50)
    ratio=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')
    echo "| $pods | $b | $a | $ratio | $n | $bw | $aw |"
  done
} >"$out"
cat "$out"
# Measured: the base tree goes (a failed run keeps it, so the next run builds nothing).
git worktree remove --force "$basetree" >/dev/null 2>&1 || true
