#!/usr/bin/env bash
# DRA side-by-side benchmark on the real control plane (test/controlplane): tessera's claim
# allocator against kube-scheduler's DRA allocator (DynamicResources plugin), same nodes, same
# ResourceSlices, same claims:
#
#   stock-whole    the stock kube-scheduler v1.37.2, N pods each with a claim of one whole GPU
#   tessera-whole  tessera scheduler (dra.enabled), the same pods
#   stock-share    the stock kube-scheduler, S pods each with a claim of a 10Gi share
#                  (DRAConsumableCapacity: memory capacity request on allowMultipleAllocations GPUs)
#   tessera-share  tessera scheduler, the same pods
#
# Every phase gets a fresh control plane (cluster.sh start --with-scheduler); nodes (with the
# tessera.dev/gpu-inventory annotation), one ResourceSlice per node in the driver's format
# (notes/dra-contract.md), the DeviceClasses, then every claim and pod are created before the
# stopwatch (dra_bench watch) and the scheduler under test start. The stock scheduler under test
# is its own kube-scheduler process with a profile `schedulerName: stock-bench`, as in
# bench/run_scheduler.sh; the harness's own kube-scheduler runs idle in every phase alike.
# Rates are pods bound / seconds from the scheduler's start to the last binding; GPUs used and
# over-commitment are read from the claims' status.allocation after the last binding.
#
# Usage: bench/run_dra.sh [--rounds N] [--nodes N] [--pods N] [--share-pods N]
#                         [--phases stock-whole,tessera-whole,stock-share,tessera-share]
#                         [--build-dir DIR] [--timeout S]
# Prints one JSON line per run and a Markdown table of medians.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=1 nodes=1000 pods=8000 share_pods=10000 timeout=900
phases=stock-whole,tessera-whole,stock-share,tessera-share
build=$root/build/release
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --share-pods) share_pods=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done

if [[ $build == "$root/build/release" ]]; then
  (cd "$root" && cmake --preset release >/dev/null &&
     nice -n 10 cmake --build --preset release -j2 --target tessera dra_bench >/dev/null)
fi
tessera=$build/tessera
bench=$build/bench/dra_bench
cluster=$root/test/controlplane/cluster.sh
bin=$("$cluster" bin-dir)
out=$(mktemp -d /tmp/tessera-dra-bench-XXXXXX)
echo "results and logs: $out" >&2

dir="" sched_pid="" watch_pid=""
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
    stock-whole) sched=stock-bench; ask=(--whole); n=$pods ;;
    tessera-whole) sched=tessera; ask=(--whole); n=$pods ;;
    stock-share) sched=stock-bench; ask=(--share-memory 10Gi); n=$share_pods ;;
    tessera-share) sched=tessera; ask=(--share-memory 10Gi); n=$share_pods ;;
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
  "$bench" watch --kubeconfig "$k" --namespace bench --count "$n" --timeout "$timeout" \
    --ready-file "$dir/watch.ready" --start-file "$dir/start" >"$dir/watch.json" 2>"$dir/watch.log" &
  watch_pid=$!
  while [[ ! -f $dir/watch.ready ]]; do sleep 0.05; done
  local api_pid etcd_pid api0 etcd0
  api_pid=$(pid_of "$dir" kube-apiserver) etcd_pid=$(pid_of "$dir" etcd)
  api0=$(cpu_s "$api_pid") etcd0=$(cpu_s "$etcd_pid")
  date +%s%N >"$dir/start"
  if [[ $phase == stock-* ]]; then
    { cat "$dir/scheduler-config.yaml"; printf 'profiles:\n- schedulerName: stock-bench\n'; } \
      >"$dir/stock-config.yaml"
    "$bin/kube-scheduler" --config="$dir/stock-config.yaml" --secure-port=0 \
      >"$dir/scheduler.log" 2>&1 &
  else
    printf 'apiVersion: tessera.dev/v1alpha1\nkind: SchedulerConfiguration\ndra: {enabled: true}\n' \
      >"$dir/tessera-config.yaml"
    "$tessera" scheduler --kubeconfig "$k" --config "$dir/tessera-config.yaml" \
      --leader-elect false --metrics-port 0 >"$dir/scheduler.log" 2>&1 &
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
echo "| phase | pods | bound | pods/s (start to last) | first bind s | last bind s | GPUs used | over-committed | scheduler CPU s | apiserver CPU s | etcd CPU s |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for p in "${phase_list[@]}"; do
  sel=$(jq -c "select(.phase == \"$p\")" "$out/results.jsonl")
  m() { echo "$sel" | jq -r "$1 // empty" | median; }
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$p" \
    "$(m .pods)" "$(m .bound)" "$(m .pods_per_second)" "$(m .first_bind_s)" "$(m .last_bind_s)" \
    "$(m .gpus_used)" "$(m .gpus_overcommitted)" "$(m .scheduler_cpu_s)" "$(m .apiserver_cpu_s)" \
    "$(m .etcd_cpu_s)"
done
