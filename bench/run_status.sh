#!/usr/bin/env bash
# `tessera status` at 10,000 nodes, less the API server: builds bench/status_bench (dev preset:
# the tree's usual build, -O2 with assertions) and writes bench/results/status.md.
#   bench/run_status.sh [--nodes N] [--runs R]
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset dev >/dev/null
cmake --build --preset dev -j 2 --target status_bench >/dev/null
cmd="build/dev/bench/status_bench ${*:---nodes 10000 --runs 5}"
echo "running: $cmd" >&2
line=$(nice $cmd)
get() { echo "$line" | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
{
  echo "# \`tessera status\` at scale, less the API server"
  echo
  echo "Command: \`bench/run_status.sh $*\` (runs \`$cmd\`)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (shared with other builds)."
  echo "Build: dev preset (RelWithDebInfo, assertions on). Medians of $(get runs) runs, wall time."
  echo
  echo "$(get nodes) nodes of 8 x A100-80GB (NVSwitch), each with GPUs 0-3 shared by two 20Gi/25% pods, GPUs"
  echo "4-5 held whole, 6-7 free: $(get pods) pods of which $(get pending) pending (half ask 8 whole GPUs with"
  echo "the scheduler's message, half a 70Gi share). What the stages do: decode = the listed objects into"
  echo "a ClusterSnapshot (DecodeNode/DecodePod, what ReadSnapshot does per item); status ="
  echo "ComputeStatus (the ledger a starting scheduler would build, grants per GPU, pending pods,"
  echo "stranded memory); text = the table; json = the JSON document, dumped."
  echo
  echo "| stage | seconds |"
  echo "|---|---:|"
  echo "| decode | $(get decode_s) |"
  echo "| status | $(get status_s) |"
  echo "| text | $(get text_s) |"
  echo "| json | $(get json_s) |"
  echo "| decode + status + text | $(get total_s) |"
  echo
  echo "Output: $(get text_bytes) bytes of text, $(get json_bytes) bytes of JSON; stranded: $(get stranded_mib) MiB."
  echo "Not included: the two list requests themselves (the API server's time to serve"
  echo "$(get nodes) nodes and $(get pods) pods, and the transfer)."
  echo
  echo "Raw: \`$line\`"
} > bench/results/status.md
cat bench/results/status.md
