#!/usr/bin/env bash
# Issue 31's model-aware packing, measured: tessera keeps whole-GPU pods that may use any model
# off a bound model set's last free GPUs while the cluster fills (TesseraOptions::
# reserve_bound_models, core/policy/tessera.h). On the five workloads whose pods name GPU models
# (gpuspec05..33), FGD beside tessera with the rule and, when --before names another build,
# tessera without it (that build's binaries), all on the same seeds:
#   - under churn (the timeline protocol): `churn_bench table` at 100-130% and `churn_bench
#     speedups` at the trace's own arrivals compressed 50,000-200,000x;
#   - the FGD paper's protocol (the cluster fills once): `fgd_bench table`, GPU allocation at
#     130% arrived demand.
# The figures are simulated (pods waited, seconds pending in simulated time, GPUs allocated):
# they do not depend on the machine's load, only on the code and the seeds. Writes
# bench/results/model-reserve.md.
#   bench/run_model_reserve.sh [--build-dir build/dev] [--before DIR] [--seeds 42-51]
#                              [--threads 2]
# DIR: a build folder of the commit before the rule (its bench/churn_bench and bench/fgd_bench),
# e.g. a worktree of that commit built with `cmake --build --preset dev --target churn_bench
# fgd_bench`. About 30 minutes on 2 quiet cores with --before (dev build).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/dev
before=""
seeds=42-51
threads=2
while (($#)); do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    --seeds) seeds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_model_reserve.sh: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
for b in "$build" ${before:+"$before"}; do
  for t in churn_bench fgd_bench; do
    if [[ ! -x $b/bench/$t ]]; then
      echo "run_model_reserve.sh: $b/bench/$t is missing (build it: cmake --build <preset> --target $t)" >&2
      exit 1
    fi
  done
done
workloads=gpuspec05,gpuspec10,gpuspec20,gpuspec25,gpuspec33
out=bench/results/model-reserve.md
started=$(date -u +%Y-%m-%dT%H:%MZ)
commit=$(git rev-parse --short HEAD)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
run() { echo "running: $*" >&2; "$@"; }
churn_cmd=(churn_bench table --workloads "$workloads" --policies fgd,tessera --seeds "$seeds"
           --threads "$threads")
speed_cmd=(churn_bench speedups --workloads "$workloads" --policies fgd,tessera --seeds "$seeds"
           --threads "$threads")
fgd_cmd=(fgd_bench table --workloads "$workloads" --policies fgd,tessera --seeds "$seeds"
         --threads "$threads")
churn=$(run "$build/bench/${churn_cmd[0]}" "${churn_cmd[@]:1}")
speed=$(run "$build/bench/${speed_cmd[0]}" "${speed_cmd[@]:1}")
fgd=$(run "$build/bench/${fgd_cmd[0]}" "${fgd_cmd[@]:1}")
if [[ -n $before ]]; then
  churn_b=$(run "$before/bench/churn_bench" table --workloads "$workloads" --policies tessera \
            --seeds "$seeds" --threads "$threads")
  speed_b=$(run "$before/bench/churn_bench" speedups --workloads "$workloads" --policies tessera \
            --seeds "$seeds" --threads "$threads")
  fgd_b=$(run "$before/bench/fgd_bench" table --workloads "$workloads" --policies tessera \
          --seeds "$seeds" --threads "$threads")
fi
{
  echo "# Model-aware packing: a bound model set's last free GPUs (issue 31)"
  echo
  echo "Command: \`bench/run_model_reserve.sh --build-dir $build${before:+ --before $before} --seeds $seeds --threads $threads\`,"
  echo "started $started at commit $commit (load average $load_start at the start; the figures"
  echo "are simulated and do not depend on it). It runs, from \`$build/bench\`:"
  echo
  echo "    ${churn_cmd[*]}"
  echo "    ${speed_cmd[*]}"
  echo "    ${fgd_cmd[*]}"
  if [[ -n $before ]]; then
    echo
    echo "and the same three with \`--policies tessera\` from \`$before/bench\` (the rule before)."
  fi
  echo
  echo "## Under churn, at load levels (this commit: FGD and tessera)"
  echo
  echo "$churn"
  if [[ -n $before ]]; then
    echo
    echo "### tessera before the rule"
    echo
    echo "$churn_b"
  fi
  echo
  echo "## Under churn, the trace's own arrivals compressed (this commit)"
  echo
  echo "$speed"
  if [[ -n $before ]]; then
    echo
    echo "### tessera before the rule"
    echo
    echo "$speed_b"
  fi
  echo
  echo "## The FGD paper's protocol: GPU allocation at 130% (this commit)"
  echo
  echo "$fgd"
  if [[ -n $before ]]; then
    echo
    echo "### tessera before the rule"
    echo
    echo "$fgd_b"
  fi
} > "$out"
echo "wrote $out" >&2
