#!/usr/bin/env bash
# The fault-injection soak as a benchmark (issue 30): the ctest soak (test/soak/soak_e2e_test.cc:
# three harness nodes, two scheduler replicas, agents, a seeded workload and fault plan, the
# independent invariant checker) run for DURATION seconds, its figures written to
# bench/results/soak.md (duration, pods processed, faults by kind, violations, fault-to-recovery
# p50/p99 by kind, pods that waited and why) with the command, the machine and the load.
#
# Usage: bench/run_soak.sh [DURATION_SECONDS] [SEED]     (default 3600, 30)
#        SOAK_FAULT_GAP=25 bench/run_soak.sh 3600 30
# Run it alone: flock /work/wt/notes/bench.lock bench/run_soak.sh 3600
# Needs: the dev build (cmake --build --preset dev --target soak_e2e_test) and the control plane
# (test/controlplane/build.sh); root, as every harness node does.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
duration=${1:-3600}
seed=${2:-30}
gap=${SOAK_FAULT_GAP:-25}
build=$root/build/dev
binary=$build/test/soak/soak_e2e_test
[[ -x $binary ]] || { echo "run_soak.sh: $binary is missing: cmake --build --preset dev --target soak_e2e_test" >&2; exit 2; }
out=$root/bench/results/soak.md
report=$(mktemp)
trap 'rm -f "$report"' EXIT

started=$(date -u +%FT%TZ)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
cd "$build"
set +e
SOAK_DURATION=$duration SOAK_SEED=$seed SOAK_FAULT_GAP=$gap SOAK_REPORT=$report \
  ctest -R '^soak_e2e_test$' --output-on-failure --timeout $((duration + 2400)) >"$report.log" 2>&1
rc=$?
set -e
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
{
  echo "# The fault-injection soak"
  echo
  echo "Command: \`flock /work/wt/notes/bench.lock bench/run_soak.sh $duration $seed\` (SOAK_FAULT_GAP=$gap)."
  echo "Started $started on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'));"
  echo "load average before $load_before, after $load_after; ctest exit status $rc."
  echo "What the run is and checks: test/soak/soak_e2e_test.cc and test/soak/checker.h."
  echo
  if [[ -s $report ]]; then cat "$report"; else echo "No report: the run failed before its end (see the log)."; tail -n 60 "$report.log"; fi
} >"$out"
rm -f "$report.log"
echo "run_soak.sh: $out (ctest exit $rc)"
exit $rc
