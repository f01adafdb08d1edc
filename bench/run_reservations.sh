#!/usr/bin/env bash
# Reservations with backfill in the simulator (issue 31): the timeline protocol
# (src/sim/timeline.h; the Alibaba trace's pods arriving compressed 50,000-fold, the pod list tuned
# to a demand peak of 100-130% of the GPUs, as bench/run_churn.sh), tessera with and without
# reservations (core/reservations/reservations.h), FGD without for reference, seeds 42..51. First
# `default` at every level, then the same with every pod declaring its exact run time (the most
# reservations can do: the choice of where to hold room is exact), then every workload with
# timestamps at 120% (all four levels take an hour more on 2 busy cores: --levels-all 100,110,
# 120,130 runs them). Writes bench/results/reservations.md.
#   bench/run_reservations.sh [--preset dev|release] [--levels-all 100,110,120,130]   (dev by default)
# About 30 minutes on 2 busy cores.
set -euo pipefail
cd "$(dirname "$0")/.."
preset=dev
levels_all=120
while [[ $# -gt 0 ]]; do
  case "$1" in
    --preset) preset=$2; shift 2 ;;
    --levels-all) levels_all=$2; shift 2 ;;
    *) echo "usage: $0 [--preset dev|release] [--levels-all 100,110,120,130]" >&2; exit 2 ;;
  esac
done
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j 1 --target churn_bench >/dev/null
out=bench/results/reservations.md
# The setting measured (the defaults of the reservations' options but the bound and threshold,
# chosen by the sweep in reservations.md): at most 16 at once, held as soon as a big pod waits,
# pods without a declared run time expected to run an hour, half the pods declaring theirs
# rounded up to a minute.
on="--max 16 --after 0 --min-gpus 2 --estimate 3600 --grace 60 --declare 50 --bucket 60"
bin="build/$preset/bench/churn_bench reservations --seeds 42-51 --threads 1"
a="$bin --workloads default --levels 100,110,120,130 --reference fgd $on"
b="$bin --workloads default --levels 100,110,120,130 --max 16 --after 0 --min-gpus 2 --estimate 3600 --grace 60 --declare 100 --bucket 1"
c="$bin --workloads all --levels $levels_all $on"
started=$(date -u +%Y-%m-%dT%H:%MZ)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "running: $a" >&2
ta=$($a)
echo "running: $b" >&2
tb=$($b)
echo "running: $c" >&2
tc=$($c)
{
  echo "# Reservations with backfill in the simulator (timeline protocol)"
  echo
  echo "Command: \`bench/run_reservations.sh\` (preset $preset), started $started at commit"
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo ' (with local changes)'), on $(nproc) cores shared with other work (load"
  echo "average at the start $load_start: other engineers' builds and tests)."
  echo
  echo "Protocol: as [churn.md](churn.md) (src/sim/timeline.h): the trace's pods arrive at their"
  echo "creation times compressed 50,000-fold and run their traced run times; the pod list is"
  echo "tuned until the offered demand peaks at the level; waiting pods are retried in the live"
  echo "scheduler's order whenever pods leave. Means over seeds 42..51. With reservations"
  echo "(core/reservations/reservations.h), at every arrival and departure the first 16 waiting pods"
  echo "asking 2+ whole GPUs, in the queue's order, hold the GPUs (and CPU and memory) of the node"
  echo "where they are expected to free first; other pods may take held room only if they declare"
  echo "a run time ending before the expected start (backfill). Declared run times, the model: half"
  echo "the pods (drawn by the seed) declare their traced run time rounded up to a minute; the"
  echo "others declare none, cannot backfill, and are expected to run an hour from their start (one"
  echo "that ran longer: an hour from now). A reservation whose expected start passes its first"
  echo "estimate plus 60 s is chosen again. \"multi\": pods asking 2+ GPUs; \"single\": pods asking"
  echo "one GPU or part of one; \"bound\": the GPU-hours no policy can wait less than; \"at peak\":"
  echo "mean allocation while the demand is at least 90% of its peak; \"reservations made\" counts"
  echo "a re-choice again; \"backfilled\": pods that started on held room. Seconds are the"
  echo "replay's (compressed arrivals, real run times)."
  echo
  echo "## default, FGD for reference"
  echo
  echo "\`$a\`"
  echo
  echo "$ta"
  echo
  echo "## default, every pod declaring its exact run time (the choice of where to hold is exact)"
  echo
  echo "\`$b\`"
  echo
  echo "$tb"
  echo
  echo "## Every workload with timestamps, at $levels_all%"
  echo
  echo "\`$c\`"
  echo
  echo "$tc"
} > "$out"
echo "wrote $out" >&2
