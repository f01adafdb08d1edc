#!/usr/bin/env bash
# The scheduler's start-up at scale, its lists and watches in JSON against protobuf (issue 33),
# side by side on one cluster: a fresh control plane (test/controlplane), --nodes Nodes of 8 GPUs
# and --pods pending pods of tessera.dev/gpu: 1 (k8s_bench nodes / pods, as run_scheduler.sh),
# then --rounds rounds of two runs, `tessera scheduler --wire json` and `--wire protobuf`, in
# alternating order (json first in odd rounds, protobuf first in even ones, so that neither gets
# the quieter machine). Each run starts the scheduler, waits for its first binding, and stops it:
# it binds a few hundred of the pods, so every run lists about the same objects (bound pods stay
# in the list; they are larger by their nodeName and assignment annotation).
#
# Recorded per run (one JSON line in OUT/results.jsonl; the scheduler's log in OUT/WIRE-ROUND.log):
# - first_binding_s: from the process start to the first binding the scheduler counted
#   (tessera_scheduler_pods_scheduled_total > 0 on its /metrics, polled every 20 ms);
# - synced_s, first_decisions_s: the scheduler's own log ("caches synced", "first decisions"),
#   seconds after its start; pods_list_s / nodes_list_s, their MB and waits, from the informers'
#   "listed" lines (pods_wait_s: waiting for the API server's next page);
# - apiserver_cpu_to_synced_s / apiserver_cpu_to_first_s: kube-apiserver's CPU seconds (user +
#   system, /proc/PID/stat) from the start to the moment the script saw the caches synced / the
#   first binding: the lists and the watches' start, which is what the wire changes;
# - scheduler_cpu_s: the scheduler's CPU seconds at its first binding;
# - load: the 1-minute load average before the run.
#
# Usage: bench/run_startup.sh [--nodes N] [--pods N] [--rounds R] [--build-dir DIR] [--out DIR]
# Defaults: 10,000 nodes, 80,000 pods, 3 rounds, build/release (built here if it is the default).
# Run it under `flock /work/wt/notes/bench.lock` on a shared machine; `nice -n -10` gives the
# scheduler and the control plane the same raised priority (bench/priority.sh).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
nodes=10000 pods=80000 rounds=3 build=$root/build/release out=""
while (($#)); do
  case $1 in
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
if [[ $build == "$root/build/release" ]]; then
  (cd "$root" && cmake --preset release >/dev/null &&
     nice -n 10 cmake --build --preset release -j2 --target tessera k8s_bench >/dev/null)
fi
tessera=$build/tessera
bench=$build/bench/k8s_bench
cluster=$root/test/controlplane/cluster.sh
out=${out:-$(mktemp -d /tmp/tessera-startup-XXXXXX)}
mkdir -p "$out"
echo "results and logs: $out" >&2

# CPU seconds (user + system) a process has used so far.
cpu_s() {
  local st f
  read -r st 2>/dev/null <"/proc/$1/stat" || { echo 0; return; }
  st=${st##*) }
  read -r -a f <<<"$st"
  awk -v u="${f[11]}" -v s="${f[12]}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", (u + s) / hz }'
}
load1() { cut -d' ' -f1 /proc/loadavg; }
now_ns() { date +%s%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (a - b) / 1e9 }'; }
minus() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a - b }'; }

dir=$out/cluster sched_pid=""
stop_pid() {
  [[ -n $1 ]] || return 0
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
# shellcheck source=bench/priority.sh
source "$root/bench/priority.sh"
finish() {
  stop_pid "$sched_pid"
  [[ -f $dir/pids ]] && "$cluster" stop "$dir" >/dev/null 2>&1
  rm -rf "$dir/etcd-data"
  restore_priority
}
trap finish EXIT

"$cluster" start "$dir" --owner-pid $$ >/dev/null 2>"$out/start.err"
k=$dir/kubeconfig
api_pid=$(awk '$1 == "kube-apiserver" { print $2 }' "$dir/pids")
etcd_pid=$(awk '$1 == "etcd" { print $2 }' "$dir/pids")
prioritize "$api_pid" "$etcd_pid" $$
"$bench" nodes --kubeconfig "$k" --count "$nodes" --gpus 8 2>>"$out/load.log"
"$bench" pods --kubeconfig "$k" --namespace bench --count "$pods" --scheduler tessera \
  --flavour tessera --gpu 1 2>>"$out/load.log" | grep '^{' | tail -n 1 >"$out/pods.json"

# The value of a "listed" line's field for `what` (pods, nodes): seconds, MB, waiting seconds.
listed() {
  sed -n "s/^.* $2: listed [0-9]* at resourceVersion [0-9]*: [0-9]* pages\{0,1\}, \([0-9.]*\) MB of \([a-zA-Z ]*\) in \([0-9.]*\) s (\([0-9.]*\) s waiting.*/\1 \2 \3 \4/p" "$1" |
    head -n 1
}

run_one() {
  local round=$1 wire=$2 log=$out/$2-$1.log
  local load api0 t0 port="" synced_ns="" api_synced="" first_ns="" api_first="" sched_cpu=""
  sleep 5  # the previous run's last requests
  load=$(load1)
  api0=$(cpu_s "$api_pid")
  t0=$(now_ns)
  "$tessera" scheduler --kubeconfig "$k" --leader-elect false --metrics-port 0 --wire "$wire" \
    >"$log" 2>&1 &
  sched_pid=$!
  while :; do
    if [[ -z $synced_ns ]] && grep -q 'caches synced' "$log" 2>/dev/null; then
      synced_ns=$(now_ns) api_synced=$(cpu_s "$api_pid")
    fi
    [[ -z $port ]] && port=$(sed -n 's|.*/readyz on http://127\.0\.0\.1:\([0-9]*\).*|\1|p' "$log" 2>/dev/null | head -n 1)
    if [[ -n $port ]] &&
       curl -s "http://127.0.0.1:$port/metrics" |
         awk '$1 == "tessera_scheduler_pods_scheduled_total" && $2 > 0 { found = 1 } END { exit !found }'; then
      first_ns=$(now_ns) api_first=$(cpu_s "$api_pid") sched_cpu=$(cpu_s "$sched_pid")
      break
    fi
    if ! kill -0 "$sched_pid" 2>/dev/null || (($(now_ns) - t0 > 180000000000)); then
      echo "run $wire-$round: no binding (see $log)" >&2
      break
    fi
    sleep 0.02
  done
  stop_pid "$sched_pid"
  sched_pid=""
  [[ -n $first_ns ]] || return 1
  [[ -n $synced_ns ]] || synced_ns=$first_ns api_synced=$api_first
  local synced first pods_l nodes_l
  synced=$(sed -n 's/.*caches synced: .*(\([0-9.]*\) s after start).*/\1/p' "$log" | head -n 1)
  first=$(sed -n 's/.*first decisions \([0-9.]*\) s after start.*/\1/p' "$log" | head -n 1)
  read -r pods_mb pods_wire pods_s pods_wait <<<"$(listed "$log" pods)"
  read -r nodes_mb nodes_wire nodes_s nodes_wait <<<"$(listed "$log" nodes)"
  printf '{"round":%d,"wire":"%s","first_binding_s":%s,"synced_s":%s,"first_decisions_s":%s,' \
    "$round" "$wire" "$(secs "$first_ns" "$t0")" "${synced:-null}" "${first:-null}"
  printf '"pods_list_s":%s,"pods_mb":%s,"pods_wait_s":%s,"pods_wire":"%s",' \
    "${pods_s:-null}" "${pods_mb:-null}" "${pods_wait:-null}" "${pods_wire:-}"
  printf '"nodes_list_s":%s,"nodes_mb":%s,"nodes_wait_s":%s,"nodes_wire":"%s",' \
    "${nodes_s:-null}" "${nodes_mb:-null}" "${nodes_wait:-null}" "${nodes_wire:-}"
  printf '"apiserver_cpu_to_synced_s":%s,"apiserver_cpu_to_first_s":%s,"scheduler_cpu_s":%s,' \
    "$(minus "$api_synced" "$api0")" "$(minus "$api_first" "$api0")" "$sched_cpu"
  printf '"load":%s}\n' "$load"
}

for round in $(seq "$rounds"); do
  order=(json protobuf)
  ((round % 2 == 0)) && order=(protobuf json)
  for wire in "${order[@]}"; do
    run_one "$round" "$wire" | tee -a "$out/results.jsonl" || echo "run $wire-$round: no result" >&2
  done
done

# Medians per wire.
python3 - "$out/results.jsonl" "$nodes" "$pods" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
keys = ["first_binding_s", "synced_s", "pods_list_s", "pods_wait_s", "nodes_list_s",
        "apiserver_cpu_to_synced_s", "apiserver_cpu_to_first_s", "scheduler_cpu_s", "pods_mb",
        "nodes_mb"]
print(f"\nStart-up at {int(sys.argv[2]):,} nodes and {int(sys.argv[3]):,} pending pods, medians of "
      f"{len(runs) // 2} runs each:\n")
print("| | " + " | ".join(keys) + " |")
print("| --- " * (len(keys) + 1) + "|")
for wire in ("json", "protobuf"):
    rs = [r for r in runs if r["wire"] == wire]
    if not rs:
        continue
    cells = []
    for k in keys:
        vals = [r[k] for r in rs if r.get(k) is not None]
        cells.append(f"{statistics.median(vals):.2f}" if vals else "-")
    print(f"| {wire} | " + " | ".join(cells) + " |")
EOF
