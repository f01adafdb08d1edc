#!/usr/bin/env bash
# `tessera status` at 10,000 nodes: builds bench/status_bench and tessera (dev preset: the tree's
# usual build, -O2 with assertions), runs it in memory (from listed objects to the table and the
# JSON, by stage) and end to end against a real API server (a control plane of
# test/controlplane holding the nodes and pods; `tessera status` and `-o json` as a user runs
# them), and writes bench/results/status.md.
#   bench/run_status.sh [--nodes N] [--runs R]
# For committed figures, run it alone and ahead of builds (see the preamble of the project's
# notes): flock /work/wt/notes/bench.lock nice -n -10 bench/run_status.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset dev >/dev/null
cmake --build --preset dev -j 2 --target status_bench tessera >/dev/null
args=("$@")
(($#)) || args=(--nodes 10000 --runs 5)
mem_cmd="build/dev/bench/status_bench ${args[*]}"
api_cmd="build/dev/bench/status_bench --apiserver ${args[*]}"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
echo "running: $mem_cmd" >&2
mem=$($mem_cmd)
echo "running: $api_cmd" >&2
api=$($api_cmd)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
get() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p"; }
{
  echo "# \`tessera status\` at scale"
  echo
  echo "Command: \`bench/run_status.sh ${args[*]}\` (runs \`$mem_cmd\`, then \`$api_cmd\`), under"
  echo "\`flock /work/wt/notes/bench.lock nice -n -10\`."
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), shared with other"
  echo "engineers' builds: load average $load_start at start, $load_end at the end. Build: dev preset"
  echo "(RelWithDebInfo, assertions on). Medians of $(get "$mem" runs) runs, wall time."
  echo
  echo "The cluster: $(get "$mem" nodes) nodes of 8 x A100-80GB (NVSwitch), each with GPUs 0-1 shared by two"
  echo "20Gi/25% inference pods, GPUs 2-5 held by one 4-GPU training pod, GPUs 6-7 free; $(get "$mem" pods) pods"
  echo "of which $(get "$mem" pending) pending (half ask 8 whole GPUs with the scheduler's message, half a 70Gi share)."
  echo
  echo "## End to end, against the real API server"
  echo
  echo "A control plane of test/controlplane (etcd, kube-apiserver v1.37.2 on this machine) holding"
  echo "the nodes (with status and the tessera.dev/gpu-inventory annotation) and the pods (bound ones"
  echo "with spec.nodeName and tessera.dev/assignment, pending ones with PodScheduled=False); each"
  echo "run starts \`tessera status\`, \`tessera status -o json\` and \`kubectl get pods -A -o json\` as new"
  echo "processes, output to a file."
  echo
  echo "| what | seconds |"
  echo "|---|---:|"
  echo "| \`tessera status --wire json\` (the table), process start to exit | **$(get "$api" status_text_s)** |"
  echo "| \`tessera status -o json --wire json\`, process start to exit | **$(get "$api" status_json_s)** |"
  echo "| of which: the two paginated lists and decoding (ReadSnapshot, in the bench's process) | $(get "$api" read_snapshot_s) |"
  echo "| of which: ComputeStatus and the table (same process) | $(get "$api" status_and_text_s) |"
  echo "| \`tessera status --wire protobuf\` (the table), process start to exit | **$(get "$api" status_text_protobuf_s)** |"
  echo "| \`tessera status -o json --wire protobuf\`, process start to exit | **$(get "$api" status_json_protobuf_s)** |"
  echo "| of which: the two paginated lists in protobuf and decoding (ReadSnapshot) | $(get "$api" read_snapshot_protobuf_s) |"
  echo "| the everyday reference: \`kubectl get pods -A -o json\` (v1.37.2, the harness's), output to a file | $(get "$api" kubectl_get_pods_json_s) |"
  echo
  echo "$(get "$api" list_pages) list requests (500 objects a page) per run, $(get "$api" listed_pods) pods listed (the"
  echo "field selector leaves out finished pods). Output: $(get "$api" text_bytes) bytes of text, $(get "$api" json_bytes) bytes of JSON."
  echo "Setting up (not timed above): control plane start $(get "$api" control_plane_start_s) s, creating the"
  echo "objects $(get "$api" create_s) s (load average at the bench's start: $(get "$api" load_at_start))."
  echo
  echo "## In memory, by stage (no API server)"
  echo
  echo "decode = the listed objects into a ClusterSnapshot (DecodeNode/DecodePod, what ReadSnapshot"
  echo "does per item); status = ComputeStatus (the ledger a starting scheduler would build, grants"
  echo "per GPU, pending pods, stranded memory); text = the table; json = the JSON document written"
  echo "as it is made (WriteStatusJson, indented, as \`-o json\` prints it)."
  echo
  echo "| stage | seconds |"
  echo "|---|---:|"
  echo "| decode | $(get "$mem" decode_s) |"
  echo "| status | $(get "$mem" status_s) |"
  echo "| text | $(get "$mem" text_s) |"
  echo "| json (streamed) | $(get "$mem" json_s) |"
  echo "| decode + status + text | $(get "$mem" total_s) |"
  echo
  echo "Stranded: $(get "$mem" stranded_mib) MiB (GPUs 0-1's 40Gi free on every node: too small for the"
  echo "70Gi share, and no node has 8 free GPUs)."
  echo
  echo "Raw:"
  echo
  echo "\`$mem\`"
  echo
  echo "\`$api\`"
} >bench/results/status.md
cat bench/results/status.md
