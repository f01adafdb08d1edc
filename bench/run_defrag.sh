#!/usr/bin/env bash
# Defragmentation in the simulator: the timeline protocol (src/sim/timeline.h; the Alibaba trace's
# default workload, arrivals compressed 50,000-fold, the pod list tuned to a demand peak of 100%
# and 120% of the GPUs, as bench/run_churn.sh), tessera's policy, seeds 42..51, with and without
# defragmentation plans (core/plan/defrag.h) for multi-GPU pods that waited 30 s (then 10 s).
# Writes bench/results/defrag.md.
#   bench/run_defrag.sh [--preset dev|release]   (dev by default: RelWithDebInfo)
# About 5 minutes on 2 busy cores.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=dev
if [[ "${1:-}" == "--preset" ]]; then preset=$2; fi
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j 2 --target churn_bench >/dev/null
out=bench/results/defrag.md
a="build/$preset/bench/churn_bench defrag --levels 100,120 --seeds 42-51 --threads 2 --after 30 --moves 4 --checks 2000"
b="build/$preset/bench/churn_bench defrag --levels 100,120 --seeds 42-51 --threads 2 --after 10 --moves 4 --checks 2000"
started=$(date -u +%Y-%m-%dT%H:%MZ)
echo "running: $a" >&2
ta=$($a)
echo "running: $b" >&2
tb=$($b)
{
  echo "# Defragmentation plans in the simulator (timeline protocol)"
  echo
  echo "Command: \`bench/run_defrag.sh\` (preset $preset), started $started at commit"
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo ' (with local changes)'), on $(nproc) cores shared with other work."
  echo
  echo "Protocol: as [churn.md](churn.md) (src/sim/timeline.h): the Alibaba trace's \`default\` pods"
  echo "arrive at their creation times compressed 50,000-fold and run their traced run times; the"
  echo "pod list is tuned until the offered demand peaks at the level (100%, 120% of the GPUs);"
  echo "waiting pods are retried whenever pods leave. Policy \`tessera\`; means over seeds 42..51."
  echo "With defragmentation, after the retries that follow a departure, the first waiting pod"
  echo "that asks two or more whole GPUs and has waited at least the threshold gets a plan"
  echo "(core/plan/defrag.h: at most 4 moves, at most 2,000 sets of pods checked, destinations the"
  echo "engine's choices plus 200 tries); a plan found is carried out at once: the moved pods go"
  echo "where it says and keep their departure times, the pod starts. A pod whose search found"
  echo "nothing is searched for again after the threshold once more. Seconds are the replay's"
  echo "(compressed arrivals, real run times). \"multi\": the pods asking 2+ GPUs; \"whole\": 1+ whole"
  echo "GPUs; \"at peak\": mean allocation while the demand is at least 90% of its peak; \"mean"
  echo "allocation\": over the arrival window. searches/plans/moves are means per run."
  echo
  echo "## Threshold 30 s"
  echo
  echo "$ta"
  echo
  echo "## Threshold 10 s"
  echo
  echo "$tb"
} > "$out"
echo "wrote $out" >&2
