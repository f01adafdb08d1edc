#!/usr/bin/env bash
# How close each policy comes to the best its own placements allow on the FGD protocol: per seed,
# the GPUs it leaves unallocated against the least that any placement of the shares it placed
# could leave (bin-packing LP bound, src/sim/packing_bound.h), and for tessera on seed 42 where
# the rest is and what fewer 0.81-GPU shares would allow. Builds the release preset, runs
# `fgd_bench bound` and `fgd_bench holes`, writes bench/results/fgd_bound.md.
#   bench/run_fgd_bound.sh [--workload default] [--seeds 42-51]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset release >/dev/null
cmake --build --preset release -j 2 --target fgd_bench >/dev/null
out=bench/results/fgd_bound.md
bound="build/release/bench/fgd_bench bound --policies random,dotprod,gpu-clustering,gpu-packing,bestfit,fgd,tessera $*"
holes="build/release/bench/fgd_bench holes --policy tessera --seed 42"
echo "running: $bound" >&2
table=$($bound)
echo "running: $holes" >&2
detail=$($holes)
{
  echo "# How much of the unallocated capacity placement could still win back"
  echo
  echo "Commands: \`bench/run_fgd_bound.sh\` (runs \`$bound\` and \`$holes\`)"
  echo
  echo "At 130% arrived demand the unallocated GPUs are the pieces left beside shares (and any"
  echo "whole GPU left free). 'least any placement of them leaves' is a proven lower bound: the"
  echo "shares the policy placed, however arranged, cannot fit on fewer GPUs than the linear"
  echo "relaxation of bin packing allows (src/sim/packing_bound.h). Whole-GPU pods are never short"
  echo "on these traces (over a thousand of them fail in every run), so every GPU the shares do not"
  echo "need could be full: with those shares placed the allocation is at most 100% minus the bound"
  echo "as a part of the cluster's GPUs (the last column)."
  echo
  echo "$table"
  echo
  echo "## tessera, seed 42, in detail"
  echo
  echo "$detail"
} > "$out"
cat "$out"
