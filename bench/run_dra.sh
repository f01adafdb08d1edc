#!/usr/bin/env bash
# DRA side-by-side benchmark on the real control plane (test/controlplane): tessera's claim
# allocator against kube-scheduler's DRA allocator (DynamicResources plugin), same nodes, same
# ResourceSlices, same claims:
#
#   stock-whole    the stock kube-scheduler v1.37.2, N pods each with a claim of one whole GPU
#   tessera-whole  tessera scheduler (dra.enabled), the same pods
#   writes-whole   no scheduler: `dra_bench writes` makes each pod's writes (the claim's
#                  finalizer, its status, the binding) through tessera's ClaimBinder with a fixed
#                  placement, and nothing else: the API server's ceiling for any allocator that
#                  makes these writes (--writes-pods pods)
#   stock-share    the stock kube-scheduler, S pods each with a claim of a 10Gi share
#                  (DRAConsumableCapacity: memory capacity request on allowMultipleAllocations GPUs)
#   tessera-share  tessera scheduler, the same pods
#   writes-share   the ceiling again, for share claims (8 to a GPU)
#
# Every phase gets a fresh control plane (cluster.sh start --with-scheduler); nodes (with the
# tessera.dev/gpu-inventory annotation), one ResourceSlice per node in the driver's format
# (notes/dra-contract.md), the DeviceClasses, then every claim and pod are created before the
# stopwatch (dra_bench watch) and the scheduler under test start. The stock scheduler under test
# is its own kube-scheduler process with a profile `schedulerName: stock-bench`, as in
# bench/run_scheduler.sh; the harness's own kube-scheduler runs idle in every phase alike.
# Rates are pods bound / seconds from the scheduler's start to the last binding; GPUs used and
# over-commitment are read from the claims' status.allocation after the last binding. A stock
# phase ends when every pod is bound or after --stock-limit seconds, whichever is first (the
# rate is then over the pods bound by then, from the same backlog); other phases after
# --timeout seconds.
#
# Priority: the kernel groups processes by session (sched_autogroup) and weighs the groups, not
# the processes, against each other; nice only orders processes within a group. The control
# plane's daemons run in sessions of their own (setsid), so `nice -n -10 bench/run_dra.sh` alone
# would not reach them. When this script runs with a negative nice, it gives the same nice to
# the session groups of kube-apiserver, etcd and of the scheduler under test (this script's
# own, which is the caller's session: its nice is put back when the script ends), alike for
# every phase.
#
# kube-apiserver's /metrics before and after each phase are kept beside the logs
# (apiserver-metrics.0, .1: request and etcd latencies by verb and resource); with
# --apiserver-profile S, also a CPU profile of kube-apiserver over the S seconds after the
# scheduler under test starts (apiserver.pprof: `go tool pprof -top FILE`).
#
# Usage: bench/run_dra.sh [--rounds N] [--nodes N] [--pods N] [--share-pods N]
#                         [--writes-pods N] [--stock-limit S] [--timeout S] [--apiserver-profile S]
#                         [--phases stock-whole,tessera-whole,stock-share,tessera-share,...]
#                         [--build-dir DIR]
# Defaults: 1 round, 1,000 nodes, 8,000 pods, 10,000 share pods, 2,000 pods for the writes
# phases, stock limit 200 s, timeout 900 s, all six phases (the issue's counts; about 23 minutes
# on the project's machine).
# Prints one JSON line per run and a Markdown table of medians.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=1 nodes=1000 pods=8000 share_pods=10000 writes_pods=2000 stock_limit=200 timeout=900
profile_s=0
phases=stock-whole,tessera-whole,writes-whole,stock-share,tessera-share,writes-share
build=$root/build/release
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --share-pods) share_pods=$2; shift 2 ;;
    --writes-pods) writes_pods=$2; shift 2 ;;
    --stock-limit) stock_limit=$2; shift 2 ;;
    --apiserver-profile) profile_s=$2; shift 2 ;;
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
# shellcheck source=bench/priority.sh
source "$root/bench/priority.sh"
cleanup() {
  [[ -n $sched_pid ]] && kill -KILL "$sched_pid" 2>/dev/null && wait "$sched_pid" 2>/dev/null
  [[ -n $watch_pid ]] && kill -KILL "$watch_pid" 2>/dev/null && wait "$watch_pid" 2>/dev/null
  [[ -n $dir && -f $dir/pids ]] && "$cluster" stop "$dir" >/dev/null 2>&1
  sched_pid="" watch_pid="" dir=""
}
finish() {
  cleanup
  restore_priority
}
trap finish EXIT
trap 'finish; exit 130' INT TERM

run_phase() {
  local phase=$1 round=$2 n sched ask limit=$timeout
  case $phase in
    stock-whole) sched=stock-bench; ask=(--whole); n=$pods; limit=$stock_limit ;;
    tessera-whole) sched=tessera; ask=(--whole); n=$pods ;;
    writes-whole) sched=tessera; ask=(--whole); n=$writes_pods ;;
    stock-share) sched=stock-bench; ask=(--share-memory 10Gi); n=$share_pods; limit=$stock_limit ;;
    tessera-share) sched=tessera; ask=(--share-memory 10Gi); n=$share_pods ;;
    writes-share) sched=tessera; ask=(--share-memory 10Gi); n=$writes_pods ;;
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
  "$bench" watch --kubeconfig "$k" --namespace bench --count "$n" --timeout "$limit" \
    --ready-file "$dir/watch.ready" --start-file "$dir/start" >"$dir/watch.json" 2>"$dir/watch.log" &
  watch_pid=$!
  while [[ ! -f $dir/watch.ready ]]; do sleep 0.05; done
  local api_pid etcd_pid api0 etcd0
  api_pid=$(pid_of "$dir" kube-apiserver) etcd_pid=$(pid_of "$dir" etcd)
  prioritize "$api_pid" "$etcd_pid" $$
  api0=$(cpu_s "$api_pid") etcd0=$(cpu_s "$etcd_pid")
  "$bin/kubectl" --kubeconfig "$k" get --raw /metrics >"$dir/apiserver-metrics.0" 2>/dev/null || true
  date +%s%N >"$dir/start"
  if [[ $phase == stock-* ]]; then
    { cat "$dir/scheduler-config.yaml"; printf 'profiles:\n- schedulerName: stock-bench\n'; } \
      >"$dir/stock-config.yaml"
    "$bin/kube-scheduler" --config="$dir/stock-config.yaml" --secure-port=0 \
      >"$dir/scheduler.log" 2>&1 &
  elif [[ $phase == writes-* ]]; then
    "$bench" writes --kubeconfig "$k" --namespace bench --count "$n" --nodes "$nodes" --gpus 8 \
      "${ask[@]}" --linger >"$dir/scheduler.log" 2>&1 &
  else
    printf 'apiVersion: tessera.dev/v1alpha1\nkind: SchedulerConfiguration\ndra: {enabled: true}\n' \
      >"$dir/tessera-config.yaml"
    "$tessera" scheduler --kubeconfig "$k" --config "$dir/tessera-config.yaml" \
      --leader-elect false --metrics-port 0 >"$dir/scheduler.log" 2>&1 &
  fi
  sched_pid=$!
  if ((profile_s > 0)); then
    "$bin/kubectl" --kubeconfig "$k" get --raw "/debug/pprof/profile?seconds=$profile_s" \
      >"$dir/apiserver.pprof" 2>"$dir/apiserver-pprof.err" &
  fi
  local rc=0
  local load0
  load0=$(cut -d' ' -f1 /proc/loadavg)
  wait "$watch_pid" || rc=$?
  watch_pid=""
  local sched_cpu api_cpu etcd_cpu
  sched_cpu=$(cpu_s "$sched_pid")
  api_cpu=$(awk -v a="$(cpu_s "$api_pid")" -v b="$api0" 'BEGIN { printf "%.1f", a - b }')
  etcd_cpu=$(awk -v a="$(cpu_s "$etcd_pid")" -v b="$etcd0" 'BEGIN { printf "%.1f", a - b }')
  "$bin/kubectl" --kubeconfig "$k" get --raw /metrics >"$dir/apiserver-metrics.1" 2>/dev/null || true
  kill -TERM "$sched_pid" 2>/dev/null || true
  wait "$sched_pid" 2>/dev/null || true
  sched_pid=""
  "$cluster" stop "$dir" >/dev/null 2>&1 || echo "cluster.sh stop $dir failed" >&2
  dir=""
  local result
  result=$(jq -c --arg phase "$phase" --argjson round "$round" --argjson created "$created" \
             --argjson sched_cpu "$sched_cpu" --argjson api_cpu "$api_cpu" \
             --argjson etcd_cpu "$etcd_cpu" --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
             --arg load0 "$load0" --argjson limit "$limit" \
             '{phase: $phase, round: $round, create_pods_per_second: $created.pods_per_second,
               scheduler_cpu_s: $sched_cpu, apiserver_cpu_s: $api_cpu, etcd_cpu_s: $etcd_cpu,
               limit_s: $limit, load_start: ($load0 | tonumber), loadavg: $load} + .' \
             "$out/$phase-$round/watch.json")
  echo "$result" | tee -a "$out/results.jsonl"
  ((rc == 0)) || echo "phase $phase round $round: not every pod was bound within ${limit}s" >&2
}

IFS=, read -r -a phase_list <<<"$phases"
for ((r = 1; r <= rounds; r++)); do
  for p in "${phase_list[@]}"; do run_phase "$p" "$r"; done
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
echo
echo "| phase | pods | bound | pods/s (start to last) | first bind s | last bind s | limit s | GPUs used | GPUs needed | over-committed | scheduler CPU s | apiserver CPU s | etcd CPU s | load at start |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
m() { jq -r "select(.phase == \"$1\") | $2 // empty" "$out/results.jsonl" | median; }
for p in "${phase_list[@]}"; do
  printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$p" \
    "$(m "$p" .pods)" "$(m "$p" .bound)" "$(m "$p" .pods_per_second)" "$(m "$p" .first_bind_s)" \
    "$(m "$p" .last_bind_s)" "$(m "$p" .limit_s)" "$(m "$p" .gpus_used)" "$(m "$p" .gpus_min)" \
    "$(m "$p" .gpus_overcommitted)" "$(m "$p" .scheduler_cpu_s)" "$(m "$p" .apiserver_cpu_s)" \
    "$(m "$p" .etcd_cpu_s)" "$(m "$p" .load_start)"
done
# Ratios of the medians: tessera against kube-scheduler, and against the writes-only ceiling.
echo
for kind in whole share; do
  t=$(m "tessera-$kind" .pods_per_second)
  for peer in stock writes; do
    o=$(m "$peer-$kind" .pods_per_second)
    [[ $t == - || $o == - || -z $t || -z $o ]] && continue
    awk -v t="$t" -v o="$o" -v k="$kind" -v p="$peer" \
      'BEGIN { printf "tessera-%s / %s-%s pods/s: %.2f\n", k, p, k, t / o }'
  done
done
