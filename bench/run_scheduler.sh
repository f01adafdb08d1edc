#!/usr/bin/env bash
# Side-by-side scheduler benchmark on the real control plane (test/controlplane):
#
#   stock    the stock kube-scheduler (same build, v1.37.2; the harness's client limits QPS 5000 /
#            burst 10000), 1,000 nodes x 8 GPUs, 8,000 pods asking tessera.dev/gpu: 1
#   tessera  tessera scheduler, same nodes, same 8,000 pods
#   share    tessera scheduler, same nodes, 10,000 pods asking tessera.dev/gpu-memory: 10Gi
#            (a share of one GPU, which the stock scheduler cannot place per GPU)
#
# Every phase of every round gets a fresh control plane (cluster.sh start --with-scheduler), so
# no phase inherits another's objects. Nodes and pods are all created first (k8s_bench, 64
# requests in flight), then a stopwatch starts watching, then the scheduler under test starts:
# pod creation is never the bottleneck. The stock scheduler under test is its own kube-scheduler
# process started from the harness's configuration plus a profile `schedulerName: stock-bench`
# (the pods' schedulerName), so that it starts only when the pods exist; the harness's own
# kube-scheduler runs idle in every phase alike.
#
# Usage: bench/run_scheduler.sh [--rounds N] [--nodes N] [--pods N] [--share-pods N]
#                               [--phases stock,tessera,share] [--build-dir DIR]
#                               [--tessera-config FILE]   (a scheduler configuration to use)
# Prints one JSON line per run and a Markdown table of medians.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=3 nodes=1000 pods=8000 share_pods=10000 phases=stock,tessera,share
build=$root/build/release
tessera_config=""
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --share-pods) share_pods=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --tessera-config) tessera_config=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ $build == "$root/build/release" ]]; then
  (cd "$root" && cmake --preset release >/dev/null &&
     nice -n 10 cmake --build --preset release -j2 --target tessera k8s_bench >/dev/null)
fi
tessera=$build/tessera
bench=$build/bench/k8s_bench
cluster=$root/test/controlplane/cluster.sh
bin=$("$cluster" bin-dir)
out=$(mktemp -d /tmp/tessera-bench-XXXXXX)
echo "results and logs: $out" >&2

dir="" sched_pid="" watch_pid=""
# CPU seconds (user + system) a process has used so far.
cpu_s() {
  local st f
  read -r st 2>/dev/null <"/proc/$1/stat" || { echo 0; return; }
  st=${st##*) }
  read -r -a f <<<"$st"
  awk -v u="${f[11]}" -v s="${f[12]}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (u + s) / hz }'
}
pid_of() { awk -v n="$2" '$1 == n { print $2 }' "$1/pids"; }
cleanup() {
  [[ -n $sched_pid ]] && kill -KILL "$sched_pid" 2>/dev/null && wait "$sched_pid" 2>/dev/null
  [[ -n $watch_pid ]] && kill -KILL "$watch_pid" 2>/dev/null && wait "$watch_pid" 2>/dev/null
  [[ -n $dir && -f $dir/pids ]] && "$cluster" stop "$dir" >/dev/null 2>&1
  sched_pid="" watch_pid="" dir=""
}
trap cleanup EXIT INT TERM

run_phase() {
  local phase=$1 round=$2 n sched ask
  case $phase in
    stock) sched=stock-bench; ask=(--gpu 1); n=$pods ;;
    tessera) sched=tessera; ask=(--gpu 1); n=$pods ;;
    share) sched=tessera; ask=(--gpu-memory 10Gi); n=$share_pods ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
  esac
  dir=$out/$phase-$round
  mkdir -p "$dir"
  "$cluster" start "$dir" --with-scheduler --owner-pid $$ >/dev/null 2>"$dir/start.err"
  local k=$dir/kubeconfig
  "$bench" nodes --kubeconfig "$k" --count "$nodes" --gpus 8 2>>"$dir/load.log"
  local created
  created=$("$bench" pods --kubeconfig "$k" --namespace bench --count "$n" --scheduler "$sched" \
              "${ask[@]}" 2>>"$dir/load.log")
  "$bench" watch --kubeconfig "$k" --namespace bench --count "$n" --timeout 900 \
    --ready-file "$dir/watch.ready" --start-file "$dir/start" >"$dir/watch.json" 2>"$dir/watch.log" &
  watch_pid=$!
  while [[ ! -f $dir/watch.ready ]]; do sleep 0.05; done
  local api_pid etcd_pid api0 etcd0
  api_pid=$(pid_of "$dir" kube-apiserver) etcd_pid=$(pid_of "$dir" etcd)
  api0=$(cpu_s "$api_pid") etcd0=$(cpu_s "$etcd_pid")
  date +%s%N >"$dir/start"
  if [[ $phase == stock ]]; then
    { cat "$dir/scheduler-config.yaml"; printf 'profiles:\n- schedulerName: stock-bench\n'; } \
      >"$dir/stock-config.yaml"
    "$bin/kube-scheduler" --config="$dir/stock-config.yaml" --secure-port=0 \
      >"$dir/scheduler.log" 2>&1 &
  else
    local config_args=()
    [[ -n $tessera_config ]] && config_args=(--config "$tessera_config")
    "$tessera" scheduler --kubeconfig "$k" "${config_args[@]}" --leader-elect false \
      --metrics-port 0 >"$dir/scheduler.log" 2>&1 &
  fi
  sched_pid=$!
  local rc=0
  wait "$watch_pid" || rc=$?
  watch_pid=""
  local sched_cpu api_cpu etcd_cpu
  sched_cpu=$(cpu_s "$sched_pid")
  api_cpu=$(awk -v a="$(cpu_s "$api_pid")" -v b="$api0" 'BEGIN { printf "%.1f", a - b }')
  etcd_cpu=$(awk -v a="$(cpu_s "$etcd_pid")" -v b="$etcd0" 'BEGIN { printf "%.1f", a - b }')
  kill -TERM "$sched_pid" 2>/dev/null || true
  wait "$sched_pid" 2>/dev/null || true
  sched_pid=""
  "$cluster" stop "$dir" >/dev/null 2>&1 || echo "cluster.sh stop $dir failed" >&2
  dir=""
  local result
  result=$(jq -c --arg phase "$phase" --argjson round "$round" --argjson created "$created" \
             --argjson sched_cpu "$sched_cpu" --argjson api_cpu "$api_cpu" \
             --argjson etcd_cpu "$etcd_cpu" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
             '{phase: $phase, round: $round, create_pods_per_second: $created.pods_per_second,
               scheduler_cpu_s: $sched_cpu, apiserver_cpu_s: $api_cpu, etcd_cpu_s: $etcd_cpu,
               loadavg: $load} + .' \
             "$out/$phase-$round/watch.json")
  echo "$result" | tee -a "$out/results.jsonl"
  ((rc == 0)) || echo "phase $phase round $round: not every pod was bound" >&2
}

IFS=, read -r -a phase_list <<<"$phases"
for ((r = 1; r <= rounds; r++)); do
  for p in "${phase_list[@]}"; do run_phase "$p" "$r"; done
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
echo
echo "| phase | pods | bound | pods/s (start to last) | first bind s | last bind s | GPUs used | over-committed | scheduler CPU s | apiserver CPU s | etcd CPU s | create pods/s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for p in "${phase_list[@]}"; do
  sel=$(jq -c "select(.phase == \"$p\")" "$out/results.jsonl")
  m() { echo "$sel" | jq -r "$1 // empty" | median; }
  printf '| %s | %s | %s | %.0f | %.1f | %.1f | %s | %s | %s | %s | %s | %.0f |\n' "$p" \
    "$(m .pods)" "$(m .bound)" "$(m .pods_per_second)" "$(m .first_bind_s)" "$(m .last_bind_s)" \
    "$(m .gpus_used)" "$(m .gpus_overcommitted)" "$(m .scheduler_cpu_s)" "$(m .apiserver_cpu_s)" \
    "$(m .etcd_cpu_s)" "$(m .create_pods_per_second)"
done
