#!/usr/bin/env bash
# Side-by-side scheduler benchmark on the real control plane (test/controlplane): tessera against
# the stock kube-scheduler and Koordinator's koord-scheduler v1.8.0 (bench/peers/koordinator),
# the same nodes and the same pods for each, run one after another in one invocation.
#
#   phase        scheduler        pods (all with cpu 100m, memory 128Mi)
#   stock        kube-scheduler   --pods x 1 whole GPU (tessera.dev/gpu: 1: counted per node only)
#   koord        koord-scheduler  --pods x nvidia.com/gpu: 1 (per GPU: DeviceShare)
#   tessera      tessera          --pods x tessera.dev/gpu: 1
#   tessera-json tessera          the same, its lists and watches of Pods and Nodes in JSON
#                                 (--wire json; `tessera` speaks protobuf, the default): what the
#                                 API server's cheaper encoding does to the binding rate
#   koord-share  koord-scheduler  --share-pods x koordinator.sh/gpu-memory: 10Gi
#   share        tessera          --share-pods x tessera.dev/gpu-memory: 10Gi
#   koord-gang   koord-scheduler  --gangs x --gang-size pods of nvidia.com/gpu: 1, Koordinator gangs
#                                 (gang.scheduling.koordinator.sh/name, min-available)
#   gang         tessera          the same gangs (tessera.dev/gang, gang-size; gang-topology
#                                 nvlink-domain, required: each gang inside one NVLink domain)
#   stock-podgroup kube-scheduler --gangs upstream PodGroups (scheduling.k8s.io/v1beta1: gang
#                                 minCount --gang-size, topology key tessera.dev/nvlink-domain)
#                                 of --gang-size pods of tessera.dev/gpu: 1 each naming theirs in
#                                 spec.schedulingGroup; kube-scheduler with feature gates
#                                 GenericWorkload (its GangScheduling plugin) and
#                                 TopologyAwareWorkloadScheduling (TopologyPlacementGenerator,
#                                 PodGroupPodsCount); the control plane with --with-workloads
#   podgroup     tessera          the same PodGroups and pods
#                                 In both, every node is labelled tessera.dev/nvlink-domain=<its
#                                 name> (an 8-GPU NVSwitch server is one NVLink domain), the key
#                                 the PodGroups name.
#   stock-podgroup-notopo, podgroup-notopo
#                                 the same PodGroups without the topology constraint (gang only):
#                                 what the constraint costs, and where the gangs land without it
#   churn        tessera          as `tessera`, while --churn-rate nodes a second change (half a
#                                 label, half a NoSchedule taint taken off the next second); the
#                                 JSON line says how many of these patches the API server had
#                                 applied by the end (churn_patches_applied[_per_second]): on a
#                                 busy machine it falls behind the asked rate
#   stock-churn, koord-churn      the peers under the same churn
#   gang-churn   tessera          `gang` under the same churn (the tainted nodes change every
#                                 second: each gang's domain is found inside the nodes its
#                                 members tolerate)
#   churn-alone  (none)           the churn alone for --churn-seconds, no pods and no scheduler:
#                                 how many of the asked patches this API server applies at all
#   bind         (none)           --pods x tessera.dev/gpu: 1, bound by `k8s_bench bind` with no
#                                 scheduling at all (pod I to node I mod --nodes, the request and
#                                 one-GPU assignment record tessera's binder sends, 64 in flight
#                                 on HTTP/1.1 keep-alive connections, as tessera's default): the
#                                 API server's own binding ceiling on this machine
#   bind-h2      (none)           the same multiplexed on HTTP/2
#   bind-churn   (none)           `bind` under the same churn as `churn`: the API server's own
#                                 binding ceiling while the nodes change, the part of churn's
#                                 cost that no scheduler can avoid on this machine
#
# Priority: run the script with a negative nice (e.g. `nice -n -10`) to give the scheduler under
# test, kube-apiserver and etcd the same raised priority against the rest of the machine
# (bench/priority.sh: the kernel weighs session groups, so the control plane's sessions get the
# nice too). Every phase alike.
#
# Every scheduler uses the control plane's admin kubeconfig (koord-scheduler reads Koordinator's
# custom resources, which kube-scheduler's RBAC role does not cover) and the same client limits.
# Every phase gets a fresh control plane (cluster.sh start), --nodes Nodes of 8 GPUs (status
# capacity/allocatable: cpu 64, memory 512Gi, tessera.dev/gpu, nvidia.com/gpu and Koordinator's
# GPU resources; the tessera.dev/gpu-inventory of an 8-GPU NVSwitch server; for koord phases
# Koordinator's CRDs and one Device object per node), then all its pods (64 creates in flight),
# before the scheduler under test starts: pod creation is never the bottleneck. Then `k8s_bench
# watch` lists and watches the pods, the script notes the time and starts the scheduler, and the
# stopwatch records when it first sees each pod bound. Rates are pods bound / seconds from the
# scheduler's start to the last binding (start-up and the initial lists included). A phase ends
# when every pod is bound, or after --limit seconds (then the rate is over what was bound).
#
# Phases with gangs (gang, koord-gang, podgroup, stock-podgroup) also record the groups whose
# every member was bound (groups_complete) and those bound only in part, groups per second
# (complete groups / the time the last of them completed), and how many complete groups have all
# their members on one node (groups_one_node: one NVLink domain on these servers; and, where the
# nodes carry the label, on one tessera.dev/nvlink-domain value: groups_one_nvlink_domain_label).
#
# Recorded per phase: the load average (1 min) at its start and end (the machine is shared), the
# scheduler's, kube-apiserver's and etcd's CPU seconds, the scheduler's resident memory at the end
# and its peak (VmRSS, VmHWM), and for tessera its own decision-time histogram
# (tessera_scheduler_decision_duration_seconds: p50 and p99 as the bucket bounds that hold them)
# and the scheduler thread's CPU time in the same decisions (tessera_scheduler_decision_cpu_seconds).
#
# Usage: bench/run_scheduler.sh [--rounds N] [--nodes N] [--pods N] [--share-pods N] [--gangs N]
#            [--gang-size N] [--churn-rate N] [--churn-seconds S] [--limit S] [--phases a,b,...]
#            [--build-dir DIR]
#            [--tessera-config FILE] [--out DIR] [--report-only]
# Defaults: 1 round; 10,000 nodes; 80,000 pods; 40,000 shares; 1,000 gangs of 8; churn 100
# nodes/s (churn-alone: for 60 s); limit 1,800 s; phases stock,koord,tessera,koord-share,share,koord-gang,gang,churn
# (podgroup and stock-podgroup run when named).
# Prints one JSON line per run and Markdown tables of medians and ratios. --report-only runs
# nothing: it prints the tables from --out DIR's results.jsonl (runs appended there by earlier
# invocations, or a run stopped part-way), for the phases found in it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=1 nodes=10000 pods=80000 share_pods=40000 gangs=1000 gang_size=8 churn_rate=100
churn_seconds=60
limit=1800 phases=stock,koord,tessera,koord-share,share,koord-gang,gang,churn
build=$root/build/release
tessera_config="" out="" report_only=0
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --share-pods) share_pods=$2; shift 2 ;;
    --gangs) gangs=$2; shift 2 ;;
    --gang-size) gang_size=$2; shift 2 ;;
    --churn-rate) churn_rate=$2; shift 2 ;;
    --churn-seconds) churn_seconds=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --phases) phases=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --tessera-config) tessera_config=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --report-only) report_only=1; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done

if ((report_only)); then
  [[ -n $out && -s $out/results.jsonl ]] || {
    echo "--report-only needs --out DIR holding a results.jsonl" >&2; exit 2; }
fi
if ((!report_only)) && [[ $build == "$root/build/release" ]]; then
  (cd "$root" && cmake --preset release >/dev/null &&
     nice -n 10 cmake --build --preset release -j2 --target tessera k8s_bench >/dev/null)
fi
tessera=$build/tessera
bench=$build/bench/k8s_bench
cluster=$root/test/controlplane/cluster.sh
bin=$("$cluster" bin-dir)
koord_dir=""
if ((!report_only)) && [[ ,$phases, == *,koord* ]]; then
  koord_dir=$("$root/bench/peers/koordinator/build.sh" | tail -1)
fi
out=${out:-$(mktemp -d /tmp/tessera-bench-XXXXXX)}
mkdir -p "$out"
echo "results and logs: $out" >&2

dir="" sched_pid="" watch_pid="" churn_pid=""
# CPU seconds (user + system) a process has used so far.
cpu_s() {
  local st f
  read -r st 2>/dev/null <"/proc/$1/stat" || { echo 0; return; }
  st=${st##*) }
  read -r -a f <<<"$st"
  awk -v u="${f[11]}" -v s="${f[12]}" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.1f", (u + s) / hz }'
}
# A /proc/PID/status field in MiB.
mem_mib() { awk -v k="$2:" '$1 == k { printf "%.0f", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo 0; }
load1() { cut -d' ' -f1 /proc/loadavg; }
pid_of() { awk -v n="$2" '$1 == n { print $2 }' "$1/pids"; }
stop_pid() {
  [[ -n $1 ]] || return 0
  kill -TERM "$1" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  [[ -n $dir ]] && touch "$dir/churn.stop"
  stop_pid "$sched_pid"
  stop_pid "$watch_pid"
  stop_pid "$churn_pid"
  [[ -n $dir && -f $dir/pids ]] && "$cluster" stop "$dir" >/dev/null 2>&1
  [[ -n $dir ]] && rm -rf "$dir/etcd-data"
  sched_pid="" watch_pid="" churn_pid="" dir=""
}
# shellcheck source=bench/priority.sh
source "$root/bench/priority.sh"
finish() {
  cleanup
  restore_priority
}
trap finish EXIT
trap 'finish; exit 130' INT TERM

# p50 and p99 of a Prometheus histogram in a metrics dump: the upper bounds of the buckets that
# hold them ("+Inf" beyond the last).
quantiles() {
  awk -v name="$2" '
    index($0, name "_bucket{le=\"") == 1 {
      le = $0; sub(/.*le="/, "", le); sub(/".*/, "", le); n++; les[n] = le; cum[n] = $2 }
    index($0, name "_count ") == 1 { total = $2 }
    END {
      if (total == 0) { print "null null 0"; exit }
      p50 = "null"; p99 = "null"
      for (i = 1; i <= n; i++) {
        if (p50 == "null" && cum[i] >= 0.5 * total) p50 = les[i]
        if (p99 == "null" && cum[i] >= 0.99 * total) p99 = les[i]
      }
      printf "\"%s\" \"%s\" %d\n", p50, p99, total }' "$1"
}

# The churn client alone on a fresh cluster of --nodes nodes, for --churn-seconds.
run_churn_alone() {
  local round=$1 phase=churn-alone
  dir=$out/$phase-$round
  mkdir -p "$dir"
  local load_start
  load_start=$(load1)
  "$cluster" start "$dir" --owner-pid $$ >/dev/null 2>"$dir/start.err"
  local k=$dir/kubeconfig
  prioritize "$(pid_of "$dir" kube-apiserver)" "$(pid_of "$dir" etcd)" $$
  "$bench" nodes --kubeconfig "$k" --count "$nodes" --gpus 8 2>>"$dir/load.log"
  local api_pid etcd_pid api0 etcd0
  api_pid=$(pid_of "$dir" kube-apiserver) etcd_pid=$(pid_of "$dir" etcd)
  api0=$(cpu_s "$api_pid") etcd0=$(cpu_s "$etcd_pid")
  "$bench" churn --kubeconfig "$k" --count "$nodes" --rate "$churn_rate" \
    --stop-file "$dir/churn.stop" >"$dir/churn.json" 2>"$dir/churn.log" &
  churn_pid=$!
  sleep "$churn_seconds"
  touch "$dir/churn.stop"
  for _ in $(seq 100); do [[ -s $dir/churn.json ]] && break; sleep 0.1; done
  local load_end api_cpu etcd_cpu
  load_end=$(load1)
  api_cpu=$(awk -v a="$(cpu_s "$api_pid")" -v b="$api0" 'BEGIN { printf "%.1f", a - b }')
  etcd_cpu=$(awk -v a="$(cpu_s "$etcd_pid")" -v b="$etcd0" 'BEGIN { printf "%.1f", a - b }')
  stop_pid "$churn_pid"
  churn_pid=""
  "$cluster" stop "$dir" >/dev/null 2>&1 || echo "cluster.sh stop $dir failed" >&2
  rm -rf "$dir/etcd-data"
  local churn_json='{}'
  [[ -s $dir/churn.json ]] && churn_json=$(cat "$dir/churn.json")
  dir=""
  jq -nc --arg phase "$phase" --argjson round "$round" --argjson nodes "$nodes" \
    --argjson api_cpu "$api_cpu" --argjson etcd_cpu "$etcd_cpu" \
    --argjson load_start "$load_start" --argjson load_end "$load_end" --argjson churn "$churn_json" \
    '{phase: $phase, scheduler: "none", round: $round, nodes: $nodes,
      apiserver_cpu_s: $api_cpu, etcd_cpu_s: $etcd_cpu,
      load_start: $load_start, load_end: $load_end} + $churn' | tee -a "$out/results.jsonl"
}

run_phase() {
  local phase=$1 round=$2 n sched flavour=tessera scheduler_name ask=() koord=0 churn=0
  local workloads=0
  case $phase in
    stock | stock-churn) sched=stock; scheduler_name=stock-bench; ask=(--gpu 1); n=$pods ;;
    koord | koord-churn) sched=koord; flavour=koordinator; ask=(--gpu 1); n=$pods ;;
    tessera | tessera-json | churn) sched=tessera; ask=(--gpu 1); n=$pods ;;
    koord-share) sched=koord; flavour=koordinator; ask=(--gpu-memory 10Gi); n=$share_pods ;;
    share) sched=tessera; ask=(--gpu-memory 10Gi); n=$share_pods ;;
    koord-gang) sched=koord; flavour=koordinator; n=$((gangs * gang_size))
                ask=(--gpu 1 --gang-size "$gang_size") ;;
    gang | gang-churn) sched=tessera; n=$((gangs * gang_size))
          ask=(--gpu 1 --gang-size "$gang_size" --gang-topology nvlink-domain) ;;
    podgroup | stock-podgroup | podgroup-notopo | stock-podgroup-notopo)
      sched=tessera; [[ $phase == stock-* ]] && sched=stock
      n=$((gangs * gang_size)) workloads=1
      ask=(--gpu 1 --gang-size "$gang_size" --pod-groups)
      [[ $phase == *-notopo ]] && ask+=(--pod-group-topology "") ;;
    bind | bind-h2 | bind-churn) sched=bind; scheduler_name=nobody-bench; ask=(--gpu 1); n=$pods ;;
    churn-alone) run_churn_alone "$round"; return ;;
    *) echo "unknown phase $phase" >&2; exit 2 ;;
  esac
  [[ $phase == *churn ]] && churn=1
  case $sched in
    stock) scheduler_name=stock-bench ;;
    koord) scheduler_name=koord-scheduler; koord=1 ;;
    tessera) scheduler_name=tessera ;;
    bind) ;;
  esac
  dir=$out/$phase-$round
  mkdir -p "$dir"
  local load_start
  load_start=$(load1)
  local cluster_args=() stock_gates=()
  if ((workloads)); then
    cluster_args=(--with-workloads)
    stock_gates=(--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true)
  fi
  "$cluster" start "$dir" --owner-pid $$ "${cluster_args[@]}" >/dev/null 2>"$dir/start.err"
  local k=$dir/kubeconfig
  prioritize "$(pid_of "$dir" kube-apiserver)" "$(pid_of "$dir" etcd)" $$
  if ((koord)); then
    KUBECONFIG=$k "$bin/kubectl" apply -f "$koord_dir/crds/" >"$dir/crds.log" 2>&1
  fi
  local node_args=()
  ((koord)) && node_args=(--koordinator)
  ((workloads)) && node_args=(--nvlink-domain-label)
  "$bench" nodes --kubeconfig "$k" --count "$nodes" --gpus 8 "${node_args[@]}" 2>>"$dir/load.log"
  local created
  created=$("$bench" pods --kubeconfig "$k" --namespace bench --count "$n" \
              --scheduler "$scheduler_name" --flavour "$flavour" "${ask[@]}" 2>>"$dir/load.log" |
            grep '^{' | tail -n 1)
  "$bench" watch --kubeconfig "$k" --namespace bench --count "$n" --timeout "$limit" \
    --ready-file "$dir/watch.ready" --start-file "$dir/start" >"$dir/watch.json" 2>"$dir/watch.log" &
  watch_pid=$!
  while [[ ! -f $dir/watch.ready ]]; do sleep 0.05; done
  local api_pid etcd_pid api0 etcd0
  api_pid=$(pid_of "$dir" kube-apiserver) etcd_pid=$(pid_of "$dir" etcd)
  api0=$(cpu_s "$api_pid") etcd0=$(cpu_s "$etcd_pid")
  if ((churn)); then
    "$bench" churn --kubeconfig "$k" --count "$nodes" --rate "$churn_rate" \
      --stop-file "$dir/churn.stop" >"$dir/churn.json" 2>"$dir/churn.log" &
    churn_pid=$!
  fi
  date +%s%N >"$dir/start"
  case $sched in
    stock)
      cat >"$dir/stock-config.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $k
  qps: 5000
  burst: 10000
leaderElection:
  leaderElect: false
profiles:
- schedulerName: stock-bench
EOF
      "$bin/kube-scheduler" --config="$dir/stock-config.yaml" --secure-port=0 "${stock_gates[@]}" \
        >"$dir/scheduler.log" 2>&1 &
      ;;
    koord)
      sed "s|KUBECONFIG|$k|" "$root/bench/peers/koordinator/scheduler-config.yaml" \
        >"$dir/koord-config.yaml"
      "$koord_dir/bin/koord-scheduler" --config="$dir/koord-config.yaml" --secure-port=0 \
        >"$dir/scheduler.log" 2>&1 &
      ;;
    tessera)
      local config_args=()
      [[ -n $tessera_config ]] && config_args=(--config "$tessera_config")
      [[ $phase == tessera-json ]] && config_args+=(--wire json)
      "$tessera" scheduler --kubeconfig "$k" "${config_args[@]}" --leader-elect false \
        --metrics-port 0 >"$dir/scheduler.log" 2>&1 &
      ;;
    bind)
      local h2=()
      [[ $phase == bind-h2 ]] && h2=(--http2)
      "$bench" bind --kubeconfig "$k" --namespace bench --count "$n" --nodes "$nodes" \
        --concurrency 64 "${h2[@]}" >"$dir/bind.json" 2>"$dir/scheduler.log" &
      ;;
  esac
  sched_pid=$!
  local rc=0
  wait "$watch_pid" || rc=$?
  watch_pid=""
  local load_end sched_cpu api_cpu etcd_cpu rss hwm
  load_end=$(load1)
  sched_cpu=$(cpu_s "$sched_pid")
  rss=$(mem_mib "$sched_pid" VmRSS) hwm=$(mem_mib "$sched_pid" VmHWM)
  api_cpu=$(awk -v a="$(cpu_s "$api_pid")" -v b="$api0" 'BEGIN { printf "%.1f", a - b }')
  etcd_cpu=$(awk -v a="$(cpu_s "$etcd_pid")" -v b="$etcd0" 'BEGIN { printf "%.1f", a - b }')
  local p50=null p99=null decisions=0 cpu50=null cpu99=null
  if [[ $sched == tessera ]]; then
    local port
    port=$(sed -n 's|.*/readyz on http://127.0.0.1:\([0-9]*\).*|\1|p' "$dir/scheduler.log" | head -1)
    if [[ -n $port ]] && curl -sf "http://127.0.0.1:$port/metrics" >"$dir/metrics.txt"; then
      read -r p50 p99 decisions < <(quantiles "$dir/metrics.txt" tessera_scheduler_decision_duration_seconds)
      read -r cpu50 cpu99 _ < <(quantiles "$dir/metrics.txt" tessera_scheduler_decision_cpu_seconds)
    fi
  fi
  touch "$dir/churn.stop"
  # The binding client ends by itself once its answers are in (shortly after the stopwatch).
  if [[ $sched == bind ]]; then
    for _ in $(seq 300); do kill -0 "$sched_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  stop_pid "$sched_pid"
  sched_pid=""
  if [[ -n $churn_pid ]]; then
    # Its figures come within a second or two of the stop file; the changes it still has queued
    # (the API server falls behind on a busy machine) are not waited for: the cluster goes.
    for _ in $(seq 100); do [[ -s $dir/churn.json ]] && break; sleep 0.1; done
    stop_pid "$churn_pid"
  fi
  churn_pid=""
  "$cluster" stop "$dir" >/dev/null 2>&1 || echo "cluster.sh stop $dir failed" >&2
  rm -rf "$dir/etcd-data"
  local churn_json='{}'
  [[ -s $dir/churn.json ]] && churn_json=$(cat "$dir/churn.json")
  # The binding client's figures (bind phases) join the churn client's (bind-churn has both).
  [[ -s $dir/bind.json ]] &&
    churn_json=$(jq -c --argjson c "$churn_json" '$c + .' <(grep '^{' "$dir/bind.json" | tail -n 1))
  dir=""
  local result
  result=$(jq -c --arg phase "$phase" --arg scheduler "$sched" --argjson round "$round" \
             --argjson nodes "$nodes" --argjson created "$created" \
             --argjson sched_cpu "$sched_cpu" --argjson api_cpu "$api_cpu" \
             --argjson etcd_cpu "$etcd_cpu" --argjson rss "$rss" --argjson hwm "$hwm" \
             --argjson p50 "$p50" --argjson p99 "$p99" --argjson decisions "$decisions" \
             --argjson cpu50 "$cpu50" --argjson cpu99 "$cpu99" \
             --argjson load_start "$load_start" --argjson load_end "$load_end" \
             --argjson churn "$churn_json" \
             '{phase: $phase, scheduler: $scheduler, round: $round, nodes: $nodes,
               create_pods_per_second: $created.pods_per_second,
               scheduler_cpu_s: $sched_cpu, apiserver_cpu_s: $api_cpu, etcd_cpu_s: $etcd_cpu,
               scheduler_rss_mib: $rss, scheduler_peak_rss_mib: $hwm,
               decision_p50_s: $p50, decision_p99_s: $p99, decisions: $decisions,
               decision_cpu_p50_s: $cpu50, decision_cpu_p99_s: $cpu99,
               load_start: $load_start, load_end: $load_end} + $churn + .' \
             <(grep '^{' "$out/$phase-$round/watch.json" | tail -n 1))
  echo "$result" | tee -a "$out/results.jsonl"
  ((rc == 0)) || echo "phase $phase round $round: not every pod was bound within ${limit}s" >&2
}

if ((report_only)); then
  mapfile -t phase_list < <(jq -r .phase "$out/results.jsonl" | awk '!seen[$0]++')
else
  IFS=, read -r -a phase_list <<<"$phases"
  for ((r = 1; r <= rounds; r++)); do
    for p in "${phase_list[@]}"; do run_phase "$p" "$r"; done
  done
fi

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "-"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
m() { jq -r "select(.phase == \"$1\") | $2 // empty" "$out/results.jsonl" | median; }
echo
echo "| phase | pods | bound | pods/s | last bind s | scheduler CPU s | RSS MiB (peak) | decision p50 / p99 | decision CPU p50 / p99 | apiserver CPU s | etcd CPU s | load start / end |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
first() { jq -r "select(.phase == \"$1\") | $2 // \"-\"" "$out/results.jsonl" | head -1; }
for p in "${phase_list[@]}"; do
  [[ $p == churn-alone ]] && continue
  printf '| %s | %s | %s | %.1f | %.1f | %s | %s (%s) | %s / %s | %s / %s | %s | %s | %s / %s |\n' "$p" \
    "$(m "$p" .pods)" "$(m "$p" .bound)" "$(m "$p" .pods_per_second)" "$(m "$p" .last_bind_s)" \
    "$(m "$p" .scheduler_cpu_s)" "$(m "$p" .scheduler_rss_mib)" "$(m "$p" .scheduler_peak_rss_mib)" \
    "$(first "$p" .decision_p50_s)" "$(first "$p" .decision_p99_s)" \
    "$(first "$p" .decision_cpu_p50_s)" "$(first "$p" .decision_cpu_p99_s)" \
    "$(m "$p" .apiserver_cpu_s)" "$(m "$p" .etcd_cpu_s)" "$(m "$p" .load_start)" "$(m "$p" .load_end)"
done
rate() { m "$1" .pods_per_second | awk '{ if ($1 == "-") print "-"; else printf "%.1f", $1 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2fx", a / b }'; }
better() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-") print b; else if (b == "-") print a; else print (a > b ? a : b) }'; }
echo
echo "| phase | tessera pods/s | better peer pods/s | tessera / better peer |"
echo "| --- | --- | --- | --- |"
peer=$(better "$(rate stock)" "$(rate koord)")
echo "| 1 GPU | $(rate tessera) | $peer | $(ratio "$(rate tessera)" "$peer") |"
if [[ $(rate tessera-json) != - ]]; then
  echo "| 1 GPU, tessera's lists and watches in JSON | $(rate tessera-json) | $peer | $(ratio "$(rate tessera-json)" "$peer") |"
fi
echo "| 10Gi shares | $(rate share) | $(rate koord-share) | $(ratio "$(rate share)" "$(rate koord-share)") |"
echo "| gangs of $gang_size | $(rate gang) | $(rate koord-gang) | $(ratio "$(rate gang)" "$(rate koord-gang)") |"
echo "| gangs of $gang_size, churn | $(rate gang-churn) | - | - |"
echo "| 1 GPU, churn | $(rate churn) | $(better "$(rate stock-churn)" "$(rate koord-churn)") | $(ratio "$(rate churn)" "$(better "$(rate stock-churn)" "$(rate koord-churn)")") |"
# Upstream PodGroups (issue 28): groups per second and where the groups landed, side by side.
if [[ " ${phase_list[*]} " == *" podgroup"* || " ${phase_list[*]} " == *" stock-podgroup"* ]]; then
  grate() { m "$1" .groups_per_second | awk '{ if ($1 == "-") print "-"; else printf "%.2f", $1 }'; }
  echo
  echo "| PodGroups of $gang_size | scheduler | pods/s | groups/s | groups complete / bound in part / all | complete groups in one NVLink domain | decision p99 |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  for p in podgroup stock-podgroup podgroup-notopo stock-podgroup-notopo; do
    [[ $(m "$p" .pods) == - ]] && continue
    who=tessera
    [[ $p == stock-* ]] && who=kube-scheduler
    printf '| %s | %s | %s | %s | %s / %s / %s | %s of %s | %s |\n' "$p" "$who" "$(rate "$p")" \
      "$(grate "$p")" "$(m "$p" .groups_complete)" "$(m "$p" .groups_partly_bound)" \
      "$(m "$p" .groups)" "$(m "$p" .groups_one_node)" "$(m "$p" .groups_complete)" \
      "$(first "$p" .decision_p99_s)"
  done
  for t in podgroup podgroup-notopo; do
    [[ $(m "$t" .pods) == - || $(m "stock-$t" .pods) == - ]] && continue
    echo "| $t: tessera / kube-scheduler | | $(ratio "$(m "$t" .pods_per_second)" "$(m "stock-$t" .pods_per_second)") | $(ratio "$(m "$t" .groups_per_second)" "$(m "stock-$t" .groups_per_second)") | | | |"
  done
fi
echo
for p in churn churn-alone stock-churn koord-churn bind-churn gang-churn; do
  asked=$(m "$p" 'if .churn_patches_submitted then .churn_patches_submitted / .churn_seconds else null end')
  [[ $asked == - ]] && continue
  printf '%s: the API server applied %.1f of the %.1f node patches a second asked (%s changes a second)\n' \
    "$p" "$(m "$p" .churn_patches_applied_per_second)" "$asked" "$(m "$p" .node_changes_per_second)"
done
for p in bind bind-h2 bind-churn; do
  b=$(rate "$p")
  [[ $b == - ]] && continue
  # Under churn, the schedulers' churn phases are the ones to set beside the ceiling.
  t=tessera s=stock
  [[ $p == bind-churn ]] && t=churn s=stock-churn
  printf '%s: the API server bound %s pods/s with no scheduling (first to last %s); in phases %s/%s tessera %s (first to last %s), kube-scheduler %s: 3x kube-scheduler would need %s\n' \
    "$p" "$b" "$(m "$p" .pods_per_second_first_to_last)" "$t" "$s" "$(rate "$t")" \
    "$(m "$t" .pods_per_second_first_to_last)" "$(rate "$s")" \
    "$(awk -v s="$(rate "$s")" 'BEGIN { if (s == "-") print "-"; else printf "%.1f", 3 * s }')"
done
cost() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.1f%%", 100 * (1 - a / b) }'; }
echo "churn cost (tessera): $(cost "$(rate churn)" "$(rate tessera)") of its throughput"
echo "churn cost (binding alone, no scheduler): $(cost "$(rate bind-churn)" "$(rate bind)") of the API server's binding rate"
echo "churn cost (kube-scheduler): $(cost "$(rate stock-churn)" "$(rate stock)") of its throughput"
echo "churn cost (tessera, gangs): $(cost "$(rate gang-churn)" "$(rate gang)") of its throughput"
