#!/usr/bin/env bash
# Starts and stops a real Kubernetes cluster on loopback for tessera's tests: etcd and
# kube-apiserver, on request the stock kube-scheduler and kube-controller-manager, and nodes: a
# real kubelet and containerd (runc, CNI bridge) per node, with fake GPUs on request. All built
# by build.sh (Kubernetes and containerd from their Go modules). See README.md.
#
# Usage:
#   cluster.sh start DIR [--with-scheduler] [--with-controller-manager]
#                        [--with-service-accounts] [--with-workloads] [--with-job-workloads]
#                        [--owner-pid PID]
#                        [--nodes N] [--node NAME] [--gpus FILE] [--label KEY=VALUE]
#   cluster.sh stop DIR        stop exactly what `start DIR` started; check nothing is left
#   cluster.sh status DIR      list the recorded processes; exit 0 only if all of them run
#   cluster.sh env DIR         print shell exports (KUBECONFIG, KUBECACHEDIR, PATH with kubectl
#                              first)
#   cluster.sh bin-dir         print the folder holding the built binaries
#
# Nodes (need root; see README.md, "Nodes"):
#   --nodes N                  add N nodes, named node-1 ... node-N (counting all nodes)
#   --node NAME                add a node named NAME
#   --gpus FILE                fake GPUs (a description file, README.md) for the nodes added
#                              by the last --node or --nodes
#   --label KEY=VALUE          a label for the nodes added by the last --node or --nodes
#   cluster.sh node-env DIR NODE      the node's facts (paths, sockets, ports) as KEY=VALUE
#   cluster.sh node-exec DIR NODE [--env K=V]... -- CMD...
#                              run CMD in the node's mount namespace and cgroup, with its
#                              environment (NODE_NAME, KUBECONFIG, CONTAINERD_ADDRESS, ...)
#   cluster.sh node-spawn DIR NODE NAME [--env K=V]... -- CMD...
#                              start a long-running CMD the same way, recorded as NAME (log
#                              DIR/nodes/NODE/NAME.log); stop kills it; prints its pid
#   cluster.sh node-kill DIR NODE NAME [--signal SIG]
#                              signal it (default TERM), wait until gone (SIGKILL after 5 s)
#   cluster.sh node-restart DIR NODE NAME
#                              stop and start again with the same command; NAME may be
#                              kubelet or containerd
#   cluster.sh cp-kill DIR NAME [--signal SIG]
#                              signal a control-plane process (etcd, kube-apiserver,
#                              kube-scheduler, kube-controller-manager; default TERM) and wait
#                              until it is gone (SIGKILL after the stop grace)
#   cluster.sh cp-restart DIR NAME
#                              stop it if it runs, start it again with its command line (etcd
#                              keeps its data); for kube-apiserver, wait until /readyz answers
#   cluster.sh host-gc         remove what harness instances killed without a stop left on the
#                              host (their registration, cgroups, bridges; restores sysctls)
#
# start creates DIR (it must not hold a running control plane), writes certificates to DIR/pki,
# the admin kubeconfig to DIR/kubeconfig, logs to DIR/<component>.log, the process ids to
# DIR/pids and connection facts to DIR/cluster.env, then waits until the API server is ready and
# the `default` namespace exists (and the scheduler / controller-manager are healthy), and prints
# the start-to-healthy time. Everything listens on 127.0.0.1 only, with TLS.
#
# --with-workloads serves the Workload and PodGroup APIs (scheduling.k8s.io/v1beta1, beta and off
# by default in 1.37): feature gate GenericWorkload on every component, and the API version on;
# also TopologyAwareWorkloadScheduling (alpha), without which the API server drops a PodGroup's
# spec.schedulingConstraints (pkg/registry/scheduling/podgroup/strategy.go).
#
# --with-job-workloads is --with-workloads plus the Job controller's own Workloads and PodGroups:
# feature gate WorkloadWithJob (alpha, off by default; it needs GenericWorkload) on every
# component, and kube-controller-manager runs (implied). The API server then accepts a Job's
# spec.scheduling, and the Job controller makes a Workload and a PodGroup for every Job it starts
# that has no owner and whose pod template names no PodGroup (docs/workloads.md).
#
# --with-service-accounts makes pods in-cluster clients, as a Helm install needs (the scheduler and
# the agent as pods): the ServiceAccount admission plugin is on (pods get their projected,
# pod-bound tokens and kube-root-ca.crt), kube-controller-manager runs (implied: it creates each
# namespace's `default` ServiceAccount and the kube-root-ca.crt ConfigMaps), and the API server
# also listens on the host's address (pod_api_host= in cluster.env, in its certificate), which
# pods on the node bridges reach; they name it with KUBERNETES_SERVICE_HOST/PORT (no kube-proxy).
#
# --owner-pid PID adds a watchdog: when process PID exits (a test binary that crashed or was
# killed), the watchdog stops the control plane. Tests pass their own pid.
#
# Environment:
#   TESSERA_CONTROLPLANE_BIN_DIR   binaries to run (default: what build.sh --print-bin-dir says,
#                                  else $TESSERA_CACHE_DIR/controlplane/current/bin)
#   TESSERA_CONTROLPLANE_TIMEOUT   seconds to wait for health (default 120)
#   TESSERA_CONTROLPLANE_STOP_GRACE  seconds between SIGTERM and SIGKILL on stop (default 10)
#   TESSERA_NODE_STOP_GRACE  the same for the processes of a node (default 5)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/$(basename "${BASH_SOURCE[0]}")
# shellcheck source=host.sh
source "$here/host.sh"
# shellcheck source=node.sh
source "$here/node.sh"

# Feature gates and API versions every component gets, so DRA work needs no change here.
# DRAExtendedResource is GA and locked on in 1.37; naming it is allowed and keeps 1.36 working.
feature_gates=DRAConsumableCapacity=true,DRAPartitionableDevices=true,DRAExtendedResource=true
runtime_config=resource.k8s.io/v1=true,resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true
# Client rate limits of the stock scheduler: high enough that comparisons measure scheduling.
scheduler_qps=5000
scheduler_burst=10000

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { echo "cluster.sh: $*" >&2; }
usage() { sed -n '2,/^set -euo/p' "$self" | sed '$d; s/^# \{0,1\}//'; }

now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

find_bin_dir() {
  if [[ -n ${TESSERA_CONTROLPLANE_BIN_DIR:-} ]]; then
    echo "$TESSERA_CONTROLPLANE_BIN_DIR"
  elif command -v go >/dev/null && "$here/build.sh" --print-bin-dir 2>/dev/null; then
    :
  else
    echo "${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/controlplane/current/bin"
  fi
}

check_bin_dir() {
  local b=$1 c
  for c in etcd kube-apiserver kube-scheduler kube-controller-manager kubectl; do
    [[ -x $b/$c ]] || die "no $c in $b: build the control plane first with" \
      "test/controlplane/build.sh (the first build takes about 16 minutes on 2 cores;" \
      "later ones a second)"
  done
}

# --- processes -----------------------------------------------------------------------------

# True if pid runs and is not a zombie.
alive() {
  local st
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  st=${st##*) }
  [[ ${st%% *} != Z ]]
}

# The process start time (clock ticks after boot), to tell a pid from a later reuse of it.
start_time() {
  local st f
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  st=${st##*) }
  read -r -a f <<<"$st"
  echo "${f[19]}"
}

# True if pid is one of ours: an argument is DIR or a path inside it.
ours() {
  local dir=$1 pid=$2 arg
  while IFS= read -r -d '' arg; do
    [[ $arg == "$dir" || $arg == *"$dir/"* ]] && return 0
  done 2>/dev/null <"/proc/$pid/cmdline"
  return 1
}

# Recorded pids ("name pid" lines), optionally excluding the watchdog.
recorded() {
  local dir=$1 what=${2:-all} name pid
  [[ -f $dir/pids ]] || return 0
  while read -r name pid; do
    [[ $what == components && $name == watchdog ]] && continue
    echo "$name $pid"
  done <"$dir/pids"
}

# Live processes running one of the control-plane binaries for DIR, recorded or not (the stop
# check): the executable is in the bin folder that start used, and an argument names DIR.
strays() {
  local dir=$1 b p c
  b=$(cat "$dir/bin_dir" 2>/dev/null) || return 0
  for p in /proc/[0-9]*; do
    for c in etcd kube-apiserver kube-scheduler kube-controller-manager; do
      if [[ $p/exe -ef $b/$c ]]; then
        alive "${p#/proc/}" && ours "$dir" "${p#/proc/}" && echo "${p#/proc/} ($c)"
        break
      fi
    done
  done
  return 0
}

# term_wait GRACE PID...: SIGTERM the pids, wait up to GRACE seconds, then SIGKILL the rest.
term_wait() {
  local grace=$1 pid deadline left
  shift
  (($#)) || return 0
  kill -TERM "$@" 2>/dev/null || true
  deadline=$(($(date +%s) + grace))
  while :; do
    left=()
    for pid in "$@"; do alive "$pid" && left+=("$pid"); done
    ((${#left[@]} == 0)) && return 0
    if (($(date +%s) >= deadline)); then
      log "killing ${left[*]} (still running ${grace}s after SIGTERM)"
      kill -KILL "${left[@]}" 2>/dev/null || true
      sleep 0.2
      return 0
    fi
    sleep 0.05
  done
}

# stop_cluster DIR: the nodes (their kubelets are clients of the API server), then the control
# plane.
stop_cluster() {
  local dir=$1 rc=0
  stop_nodes "$dir" || { log "a node's state could not all be removed (see above)"; rc=1; }
  if [[ -f $dir/pids ]]; then
    stop_control_plane "$dir" || rc=1
  elif ((rc == 0)); then
    log "nothing recorded in $dir/pids"
  fi
  return $rc
}

# stop_control_plane DIR: the processes recorded in DIR/pids.
stop_control_plane() {
  local dir=$1 grace=${TESSERA_CONTROLPLANE_STOP_GRACE:-10} name pid first=() last=() left
  # The API clients and the API server first, etcd after them (an API server whose etcd is
  # gone takes long to shut down), the watchdog last unless it is us.
  while read -r name pid; do
    [[ $name == watchdog ]] && continue
    alive "$pid" && ours "$dir" "$pid" || continue
    if [[ $name == etcd ]]; then last+=("$pid"); else first+=("$pid"); fi
  done <"$dir/pids"
  term_wait "$grace" "${first[@]}"
  term_wait "$grace" "${last[@]}"
  while read -r name pid; do
    [[ $name == watchdog && $pid != "$$" && $pid != "$BASHPID" ]] || continue
    if alive "$pid" && ours "$dir" "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      for _ in {1..40}; do alive "$pid" || break; sleep 0.05; done
    fi
  done <"$dir/pids"
  # Verify: nothing recorded, nothing else naming DIR.
  left=()
  while read -r name pid; do
    [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
    if alive "$pid" && ours "$dir" "$pid"; then left+=("$name:$pid"); fi
  done <"$dir/pids"
  mapfile -t strays_left < <(strays "$dir")
  if ((${#left[@]} + ${#strays_left[@]} > 0)); then
    log "still running after stop: ${left[*]} ${strays_left[*]}"
    return 1
  fi
  mv "$dir/pids" "$dir/pids.stopped"
}

# --- ports ---------------------------------------------------------------------------------

# Local TCP ports in LISTEN state (st 0A), read from /proc so no extra tool is needed.
listening_ports() {
  local f _ local_addr st
  for f in /proc/net/tcp /proc/net/tcp6; do
    [[ -r $f ]] || continue
    while read -r _ local_addr _ st _; do
      [[ $st == 0A ]] && echo $((16#${local_addr##*:}))
    done < <(tail -n +2 "$f")
  done
  return 0
}
# pick_ports VAR...: free ports below the usual ephemeral range (32768+), so that outgoing
# connections do not take them meanwhile. Another process may still bind one first; start
# notices ("address already in use") and retries with new ports.
pick_ports() {
  local busy p v
  busy=" $(listening_ports | tr '\n' ' ') "
  for v in "$@"; do
    while :; do
      p=$((20000 + (RANDOM * 32768 + RANDOM) % 12000))
      [[ $busy == *" $p "* ]] && continue
      busy+="$p "
      printf -v "$v" '%s' "$p"
      break
    done
  done
}

# --- certificates and kubeconfigs ----------------------------------------------------------

# host_address: the host's IPv4 address that pods on the node bridges reach the API server at: the
# source address of the default route (the kubelets' InternalIP), else the first global one.
host_address() {
  local a
  a=$(ip -4 -o route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
  if [[ -z $a || $a == 127.* ]]; then
    a=$(ip -4 -o addr show scope global 2>/dev/null | awk '{print $4; exit}')
    a=${a%/*}
  fi
  [[ -n $a ]] && echo "$a"
}

gen_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# sign NAME SUBJECT EXTENSIONS: key + certificate NAME.{key,crt} signed by the test CA.
sign() {
  local pki=$1 name=$2 subj=$3 ext=$4
  gen_key "$pki/$name.key"
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
}

make_pki() {
  local pki=$1 extra_sans=${2:-}
  mkdir -p "$pki"
  chmod 700 "$pki"
  gen_key "$pki/ca.key"
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=tessera-test-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$pki/ca.crt" 2>/dev/null
  local server_ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local$extra_sans"
  local client_ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  # One serving certificate for every component (all on 127.0.0.1); it is also etcd's client
  # certificate for the API server.
  sign "$pki" serving "/CN=tessera-test-server" "$server_ext"
  sign "$pki" admin "/O=system:masters/CN=tessera-admin" "$client_ext"
  sign "$pki" scheduler "/CN=system:kube-scheduler" "$client_ext"
  # Service-account token signing key pair (ES256).
  gen_key "$pki/sa.key"
  openssl pkey -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
}

write_kubeconfig() {
  local file=$1 server=$2 pki=$3 user=$4
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tessera-test
  cluster:
    server: $server
    certificate-authority-data: $(base64 -w0 <"$pki/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$pki/$user.crt")
    client-key-data: $(base64 -w0 <"$pki/$user.key")
contexts:
- name: tessera-test
  context:
    cluster: tessera-test
    user: $user
current-context: tessera-test
EOF
  chmod 600 "$file"
}

# --- start ---------------------------------------------------------------------------------

# launch NAME ARGS...: start a component in its own session, logging to DIR/NAME.log.
launch() {
  local name=$1
  shift
  printf '%s\0' "$@" >"$dir/$name.argv"  # for cp-restart
  setsid "$@" </dev/null >"$dir/$name.log" 2>&1 &
  echo "$name $!" >>"$dir/pids"
}

# The recorded pid of control-plane process NAME (the last line for it), or nothing.
cp_pid() {
  local dir=$1 want=$2 name pid found=
  while read -r name pid; do [[ $name == "$want" ]] && found=$pid; done <"$dir/pids"
  echo "$found"
}

cmd_cp_kill() {
  local dir name sig=TERM pid
  dir=$(cd "$1" && pwd); name=$2; shift 2
  while (($#)); do
    case $1 in
      --signal) sig=${2:?--signal needs a name}; shift 2 ;;
      --signal=*) sig=${1#*=}; shift ;;
      *) die "unknown option '$1' for cp-kill" ;;
    esac
  done
  [[ -f $dir/pids ]] || die "no running control plane recorded in $dir"
  pid=$(cp_pid "$dir" "$name")
  [[ -n $pid ]] || die "no control-plane process '$name' recorded in $dir/pids"
  alive "$pid" && ours "$dir" "$pid" || return 0
  kill -"$sig" "$pid" 2>/dev/null || true
  local i grace=${TESSERA_CONTROLPLANE_STOP_GRACE:-10}
  for ((i = 0; i < grace * 20; i++)); do alive "$pid" || return 0; sleep 0.05; done
  kill -KILL "$pid" 2>/dev/null || true
  for i in {1..50}; do alive "$pid" || return 0; sleep 0.1; done
  die "'$name' ($pid) still runs"
}

cmd_cp_restart() {
  local dir name pid argv=() server pki i
  dir=$(cd "$1" && pwd); name=$2
  [[ -f $dir/$name.argv ]] || die "no command line recorded for '$name' in $dir"
  cmd_cp_kill "$dir" "$name"
  mapfile -d '' argv <"$dir/$name.argv"
  setsid "${argv[@]}" </dev/null >>"$dir/$name.log" 2>&1 &
  pid=$!
  # The new pid replaces the old one's line, so that status and stop see one live process.
  sed -i "/^$name /d" "$dir/pids"
  echo "$name $pid" >>"$dir/pids"
  if [[ $name == kube-apiserver ]]; then
    server=$(sed -n 's/^server=//p' "$dir/cluster.env")
    pki=$dir/pki
    for ((i = 0; i < ${TESSERA_CONTROLPLANE_TIMEOUT:-120} * 4; i++)); do
      alive "$pid" || { dump_log "$name"; die "'$name' exited after its restart"; }
      [[ $(admin_get "$server/readyz") == 200 ]] && return 0
      sleep 0.25
    done
    die "'$name' not ready after its restart"
  fi
  sleep 0.2
  alive "$pid" || { dump_log "$name"; die "'$name' exited after its restart"; }
}

# HTTP status of an HTTPS GET with the admin certificate ("000" if no answer).
admin_get() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$pki/ca.crt" \
    --cert "$pki/admin.crt" --key "$pki/admin.key" "$1" 2>/dev/null || true
}
# Same, anonymous: the scheduler and controller-manager allow /healthz and /readyz to anyone.
anon_get() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 2 --cacert "$pki/ca.crt" "$1" \
    2>/dev/null || true
}

dump_log() {
  local f=$dir/$1.log
  [[ -f $f ]] || return 0
  echo "---- last 30 lines of $f ----" >&2
  tail -n 30 "$f" >&2
}

# Starts everything once. Returns 0 when healthy, 2 on a port clash (caller retries), 1 else.
start_once() {
  local t0=$1 etcd_port etcd_peer api_port sched_port kcm_port server
  : >"$dir/pids"
  pick_ports etcd_port etcd_peer api_port sched_port kcm_port
  server=https://127.0.0.1:$api_port

  write_kubeconfig "$dir/kubeconfig" "$server" "$pki" admin
  write_kubeconfig "$dir/scheduler.kubeconfig" "$server" "$pki" scheduler

  rm -rf "$dir/etcd-data"
  launch etcd "$bin/etcd" \
    --name=tessera-test \
    --data-dir="$dir/etcd-data" \
    --listen-client-urls="https://127.0.0.1:$etcd_port" \
    --advertise-client-urls="https://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$etcd_peer" \
    --initial-advertise-peer-urls="http://127.0.0.1:$etcd_peer" \
    --initial-cluster="tessera-test=http://127.0.0.1:$etcd_peer" \
    --cert-file="$pki/serving.crt" --key-file="$pki/serving.key" \
    --client-cert-auth --trusted-ca-file="$pki/ca.crt" \
    --unsafe-no-fsync \
    --log-level=warn

  # Pods as in-cluster clients (--with-service-accounts): ServiceAccount admission on, and the
  # API server reachable from the node bridges (all addresses; certificate: pod_api_host).
  local bind_address=127.0.0.1 disabled_admission=ServiceAccount,TaintNodesByCondition,Priority
  if ((with_sa)); then
    bind_address=0.0.0.0 disabled_admission=TaintNodesByCondition,Priority
  fi
  launch kube-apiserver "$bin/kube-apiserver" \
    --bind-address="$bind_address" \
    --advertise-address=127.0.0.1 \
    --secure-port="$api_port" \
    --cert-dir="$pki" \
    --tls-cert-file="$pki/serving.crt" --tls-private-key-file="$pki/serving.key" \
    --client-ca-file="$pki/ca.crt" \
    --etcd-servers="https://127.0.0.1:$etcd_port" \
    --etcd-cafile="$pki/ca.crt" --etcd-certfile="$pki/serving.crt" \
    --etcd-keyfile="$pki/serving.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$pki/sa.pub" \
    --service-account-signing-key-file="$pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --endpoint-reconciler-type=none \
    --authorization-mode=RBAC \
    --allow-privileged=true \
    --disable-admission-plugins="$disabled_admission" \
    --max-requests-inflight=2000 --max-mutating-requests-inflight=1000 \
    --runtime-config="$runtime_config" \
    --feature-gates="$feature_gates"

  if ((with_scheduler)); then
    cat >"$dir/scheduler-config.yaml" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $dir/scheduler.kubeconfig
  qps: $scheduler_qps
  burst: $scheduler_burst
leaderElection:
  leaderElect: false
EOF
    launch kube-scheduler "$bin/kube-scheduler" \
      --config="$dir/scheduler-config.yaml" \
      --bind-address=127.0.0.1 --secure-port="$sched_port" \
      --tls-cert-file="$pki/serving.crt" --tls-private-key-file="$pki/serving.key" \
      --feature-gates="$feature_gates"
  fi
  # kube-controller-manager gives the API server 20 s to answer /healthz and exits if it does
  # not: on a loaded machine the API server's RBAC bootstrap alone took longer. So it is started
  # once the API server is healthy (in the wait below).
  launch_kcm() {
    # Runs as the admin (system:masters) since it does not use per-controller service-account
    # credentials. The node lifecycle controller is off: with no kubelet to renew leases it
    # would taint every Node unreachable after ~50 s.
    launch kube-controller-manager "$bin/kube-controller-manager" \
      --kubeconfig="$dir/kubeconfig" \
      --bind-address=127.0.0.1 --secure-port="$kcm_port" \
      --tls-cert-file="$pki/serving.crt" --tls-private-key-file="$pki/serving.key" \
      --leader-elect=false \
      --use-service-account-credentials=false \
      --service-account-private-key-file="$pki/sa.key" \
      --root-ca-file="$pki/ca.crt" \
      --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
      --controllers='*,-node-lifecycle-controller' \
      --feature-gates="$feature_gates"
  }

  local timeout=${TESSERA_CONTROLPLANE_TIMEOUT:-120} deadline name pid api_ok=0 ns_ok=0
  local sched_ok=$((!with_scheduler)) kcm_ok=$((!with_kcm)) kcm_launched=0
  deadline=$(($(date +%s) + timeout))
  while :; do
    while read -r name pid; do
      if ! alive "$pid"; then
        if grep -qi "address already in use" "$dir/$name.log" 2>/dev/null; then
          log "$name lost a race for its port; retrying with new ports"
          return 2
        fi
        log "$name (pid $pid) exited during start"
        dump_log "$name"
        return 1
      fi
    done <"$dir/pids"
    ((api_ok)) || { [[ $(admin_get "$server/readyz") == 200 ]] && api_ok=1; }
    if ((api_ok && !ns_ok)); then
      [[ $(admin_get "$server/api/v1/namespaces/default") == 200 ]] && ns_ok=1
    fi
    if ((!sched_ok)); then
      [[ $(anon_get "https://127.0.0.1:$sched_port/readyz") == 200 ]] && sched_ok=1
    fi
    if ((with_kcm && !kcm_launched)) && [[ $(admin_get "$server/healthz") == 200 ]]; then
      launch_kcm
      kcm_launched=1
    fi
    if ((kcm_launched && !kcm_ok)); then
      [[ $(anon_get "https://127.0.0.1:$kcm_port/healthz") == 200 ]] && kcm_ok=1
    fi
    ((api_ok && ns_ok && sched_ok && kcm_ok)) && break
    if (($(date +%s) >= deadline)); then
      log "not healthy after ${timeout}s (api ready=$api_ok, default namespace=$ns_ok," \
        "scheduler=$sched_ok, controller-manager=$kcm_ok)"
      while read -r name pid; do dump_log "$name"; done <"$dir/pids"
      return 1
    fi
    sleep 0.1
  done

  local secs
  secs=$(elapsed "$t0")
  cat >"$dir/cluster.env" <<EOF
server=$server
kubeconfig=$dir/kubeconfig
ca_file=$pki/ca.crt
client_cert_file=$pki/admin.crt
client_key_file=$pki/admin.key
bin_dir=$bin
etcd_url=https://127.0.0.1:$etcd_port
scheduler_url=$( ((with_scheduler)) && echo "https://127.0.0.1:$sched_port")
controller_manager_url=$( ((with_kcm)) && echo "https://127.0.0.1:$kcm_port")
pod_api_host=$( ((with_sa)) && echo "$pod_api_host")
pod_api_port=$( ((with_sa)) && echo "$api_port")
start_seconds=$secs
EOF
  return 0
}

start_cluster() {
  dir=$1
  shift
  with_scheduler=0 with_kcm=0 with_sa=0 pod_api_host=""
  local workloads=0 job_workloads=0
  node_names=() node_gpus=() node_labels=() prepare_pids=()
  local owner="" group=() i count
  # add_nodes NAME...: new nodes; --gpus and --label apply to the last group added.
  add_nodes() {
    group=()
    local name
    for name in "$@"; do
      [[ $name =~ $node_name_re && ${#name} -le 63 ]] ||
        die "bad node name '$name' (lower-case letters, digits and '-', at most 63)"
      group+=("${#node_names[@]}")
      node_names+=("$name") node_gpus+=("") node_labels+=("")
    done
  }
  while (($#)); do
    case $1 in
      --with-scheduler) with_scheduler=1 ;;
      --with-controller-manager) with_kcm=1 ;;
      --with-service-accounts) with_sa=1 with_kcm=1 ;;
      --with-workloads) workloads=1 ;;
      --with-job-workloads) workloads=1 job_workloads=1 with_kcm=1 ;;
      --owner-pid) owner=${2:?--owner-pid needs a pid}; shift ;;
      --owner-pid=*) owner=${1#*=} ;;
      --nodes | --nodes=*)
        if [[ $1 == --nodes ]]; then count=${2:-}; shift; else count=${1#*=}; fi
        [[ $count =~ ^[0-9]+$ ]] || die "--nodes needs a number"
        local names=()
        for ((i = ${#node_names[@]} + 1; i <= ${#node_names[@]} + count; i++)); do names+=("node-$i"); done
        add_nodes "${names[@]}"
        ;;
      --node) add_nodes "${2:?--node needs a name}"; shift ;;
      --node=*) add_nodes "${1#*=}" ;;
      --gpus | --gpus=* | --label | --label=*)
        local opt=${1%%=*} val
        if [[ $1 == *=* ]]; then val=${1#*=}; else val=${2:?$1 needs a value}; shift; fi
        ((${#group[@]})) || die "$opt applies to nodes: put it after --node or --nodes"
        for i in "${group[@]}"; do
          if [[ $opt == --gpus ]]; then
            [[ -f $val ]] || die "no fake-GPU file $val"
            jq -e '.gpus | type == "array"' "$val" >/dev/null 2>&1 ||
              die "$val is not a fake-GPU description (JSON with a \"gpus\" array; see README.md)"
            node_gpus[i]=$(cd "$(dirname "$val")" && pwd)/$(basename "$val")
          else
            [[ $val == ?*=* ]] || die "--label needs KEY=VALUE"
            node_labels[i]+=${node_labels[i]:+,}$val
          fi
        done
        ;;
      *) die "unknown option '$1' for start (see --help)" ;;
    esac
    shift
  done
  if ((workloads)); then
    feature_gates+=,GenericWorkload=true,TopologyAwareWorkloadScheduling=true
    runtime_config+=,scheduling.k8s.io/v1beta1=true
  fi
  if ((job_workloads)); then feature_gates+=,WorkloadWithJob=true; fi
  [[ -z $owner ]] || alive "$owner" || die "owner process $owner is not running"
  if ((${#node_names[@]})); then
    [[ $(printf '%s\n' "${node_names[@]}" | sort | uniq -d) == "" ]] || die "two nodes with one name"
    check_node_tools
  fi

  local t0
  t0=$(now)
  bin=$(find_bin_dir)
  check_bin_dir "$bin"
  ((${#node_names[@]} == 0)) || check_node_bin_dir "$bin"
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if [[ -f $dir/pids ]]; then
    local name pid
    while read -r name pid; do
      alive "$pid" && ours "$dir" "$pid" &&
        die "$dir already has a running control plane ($name pid $pid); stop it first"
    done <"$dir/pids"
  fi
  chmod 700 "$dir"
  [[ ! -f $dir/instance ]] || die "$dir still has nodes of an earlier start; run: $self stop $dir"
  rm -f "$dir/pids" "$dir/pids.stopped" "$dir/cluster.env"
  rm -rf "$dir/nodes"
  echo "$bin" >"$dir/bin_dir"
  pki=$dir/pki
  local extra_sans=""
  if ((with_sa)); then
    pod_api_host=$(host_address) ||
      die "--with-service-accounts: this host has no IPv4 address besides loopback for pods to reach"
    extra_sans=",IP:$pod_api_host"
  fi
  make_pki "$pki" "$extra_sans"

  if ((${#node_names[@]})); then
    # From here on a failure (or SIGINT/SIGTERM) stops everything started so far.
    trap 'start_failed' EXIT
    trap 'exit 130' INT TERM
    # The nodes' namespaces, containerd and images while the control plane comes up.
    begin_nodes
  fi
  local attempt rc
  for attempt in 1 2 3; do
    rc=0
    start_once "$t0" || rc=$?
    ((rc == 0)) && break
    stop_control_plane "$dir" >/dev/null 2>&1 || true
    rm -f "$dir/pids.stopped"
    ((rc == 2)) || die "start failed; logs are in $dir"
  done
  ((rc == 0)) || die "start failed after $attempt attempts (ports kept clashing); logs in $dir"

  if ((${#node_names[@]})); then
    local cp_secs
    cp_secs=$(sed -n 's/^start_seconds=//p' "$dir/cluster.env")
    finish_nodes || exit 1
    trap - EXIT INT TERM
    sed -i "s/^start_seconds=.*/start_seconds=$(elapsed "$t0")/" "$dir/cluster.env"
    {
      echo "control_plane_seconds=$cp_secs"
      echo "nodes=${node_names[*]}"
      echo "instance=$instance"
      echo "pause_image=$pause_image"
      echo "test_image=$test_image"
    } >>"$dir/cluster.env"
  fi

  if [[ -n $owner ]]; then
    setsid "$self" _watchdog "$dir" "$owner" "$(start_time "$owner")" </dev/null \
      >>"$dir/watchdog.log" 2>&1 &
    echo "watchdog $!" >>"$dir/pids"
  fi
  local secs what="control plane"
  secs=$(sed -n 's/^start_seconds=//p' "$dir/cluster.env")
  ((${#node_names[@]} == 0)) || what+=" and ${#node_names[@]} node(s) (${node_names[*]})"
  echo "$what ready in ${secs}s: $(sed -n 's/^server=//p' "$dir/cluster.env")" \
    "(kubeconfig $dir/kubeconfig; stop with: $self stop $dir)"
}

start_failed() {
  log "start failed; stopping what was started (logs stay in $dir)"
  # Node preparations still running would start processes behind the stop's back.
  local p
  for p in "${prepare_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  stop_cluster "$dir" >&2 || true
}

# Watchdog: poll the owner; when it is gone (or its pid was reused), stop the control plane.
watchdog() {
  local dir=$1 owner=$2 owner_start=$3
  while alive "$owner" && [[ $(start_time "$owner") == "$owner_start" ]]; do
    [[ -f $dir/pids ]] || exit 0   # stopped normally
    sleep 0.5
  done
  [[ -f $dir/pids ]] || exit 0
  echo "$(date -u +%FT%TZ) owner $owner exited; stopping the control plane"
  stop_cluster "$dir"
}

status_cluster() {
  local dir=$1 name pid rc=0
  [[ -f $dir/pids ]] || { echo "no running control plane recorded in $dir"; return 1; }
  while read -r name pid; do
    if alive "$pid"; then echo "$name $pid running"; else echo "$name $pid NOT running"; rc=1; fi
  done <"$dir/pids"
  [[ -f $dir/cluster.env ]] && sed -n 's/^server=/server /p' "$dir/cluster.env"
  status_nodes "$dir" || rc=1
  return $rc
}

env_cluster() {
  local dir b
  dir=$(cd "$1" && pwd)
  [[ -f $dir/cluster.env ]] || die "no control plane started in $dir"
  b=$(sed -n 's/^bin_dir=//p' "$dir/cluster.env")
  echo "export KUBECONFIG='$dir/kubeconfig'"
  # kubectl's discovery cache inside DIR, not one more folder per port in ~/.kube/cache.
  echo "export KUBECACHEDIR='$dir/kube-cache'"
  echo "export PATH='$b':\"\$PATH\""
}

cmd=${1:-}
case $cmd in
  start) [[ -n ${2:-} ]] || die "usage: cluster.sh start DIR [options]"; start_cluster "${@:2}" ;;
  stop)
    [[ -n ${2:-} ]] || die "usage: cluster.sh stop DIR"
    [[ -d $2 ]] || die "no such folder $2"
    stop_cluster "$(cd "$2" && pwd)"
    ;;
  status)
    [[ -n ${2:-} && -d $2 ]] || die "usage: cluster.sh status DIR"
    status_cluster "$(cd "$2" && pwd)"
    ;;
  env) [[ -n ${2:-} && -d $2 ]] || die "usage: cluster.sh env DIR"; env_cluster "$2" ;;
  bin-dir) b=$(find_bin_dir); check_bin_dir "$b"; echo "$b" ;;
  node-env) (($# >= 3)) || die "usage: cluster.sh node-env DIR NODE"; cmd_node_env "$2" "$3" ;;
  node-exec) (($# >= 4)) || die "usage: cluster.sh node-exec DIR NODE [--env K=V]... -- CMD..."
    cmd_node_exec "${@:2}" ;;
  node-spawn) (($# >= 5)) || die "usage: cluster.sh node-spawn DIR NODE NAME [--env K=V]... -- CMD..."
    cmd_node_spawn "${@:2}" ;;
  node-kill) (($# >= 4)) || die "usage: cluster.sh node-kill DIR NODE NAME [--signal SIG]"
    cmd_node_kill "${@:2}" ;;
  node-restart) (($# == 4)) || die "usage: cluster.sh node-restart DIR NODE NAME"
    cmd_node_restart "${@:2}" ;;
  cp-kill) (($# >= 3)) || die "usage: cluster.sh cp-kill DIR NAME [--signal SIG]"
    cmd_cp_kill "${@:2}" ;;
  cp-restart) (($# == 3)) || die "usage: cluster.sh cp-restart DIR NAME"
    cmd_cp_restart "${@:2}" ;;
  host-gc) host_gc ;;
  _watchdog) watchdog "$2" "$3" "$4" ;;
  _node_enter) node_enter_svc "${@:2}" ;;
  _node_ns) node_ns "$2" ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
