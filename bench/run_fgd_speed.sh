#!/usr/bin/env bash
# Speed of one FGD-protocol run of the `default` trace (about 10,800 pods on 1,213 nodes) per
# policy, on one core: builds the release preset and runs `fgd_bench speed`, every seed 42..51
# three times, one run at a time. Writes bench/results/fgd_speed.md.
#   bench/run_fgd_speed.sh [--repeat N] [--seeds 42-51]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j 2 --target fgd_bench >/dev/null
out=bench/results/fgd_speed.md
cmd="build/release/bench/fgd_bench speed --workload default --seeds 42-51 --repeat 3 $*"
echo "running: $cmd" >&2
table=$(taskset -c 0 $cmd 2>/dev/null || $cmd)
{
  echo "# FGD protocol: time per run of \`default\`, per policy"
  echo
  echo "Command: \`bench/run_fgd_speed.sh\` (runs \`$cmd\`, pinned to one core with taskset)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), shared with other builds."
  echo "One run = build the sequence (shuffle, sample to 130% of 6212 GPUs), place every pod on a"
  echo "fresh cluster of 1213 nodes, and measure (curve, FGD fragmentation). Seconds are wall time"
  echo "of a single-threaded run; the median is over every seed and repetition. The target is under"
  echo "1 second per run for every policy. (The paper's simulator takes about 10 minutes.)"
  echo
  echo "$table"
} > "$out"
cat "$out"
