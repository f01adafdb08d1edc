# Test nodes: a real kubelet and containerd (with runc and the CNI bridge) per node, beside the
# control plane (sourced by cluster.sh; see README.md, "Nodes").
#
# Each node lives in DIR/nodes/NAME (below: N) and in a mount namespace of its own, held open by
# a process that does nothing else (`tessera-node-ns N`). In that namespace the node's folders are
# bind-mounted over the fixed paths that the kubelet, containerd, the CNI plugins and device
# plugins use, so every node has its own and the host's are never touched:
#
#   /var/lib/kubelet      <- N/kubelet          (root-dir: device-plugins/, plugins_registry/,
#                                                plugins/, pod-resources/, pki/, pods/)
#   /run/containerd       <- N/run              (containerd's state, sockets, shim sockets, runc)
#   /var/lib/cni          <- N/cni-cache        (libcni's result cache)
#   /var/log/containers   <- N/container-logs   (the kubelet's log symlinks)
#   /run/nri              <- N/nri              (nri.sock: NRI plugins connect here)
#   /run/cdi, /etc/cdi    <- N/cdi/run, N/cdi/etc   (containerd's cdi_spec_dirs)
#   /run/tessera          <- N/tessera          (the tessera agent's per-pod files, its shim copy)
#
# Mounts in the namespace are shared (within it, as systemd makes them on a real host), so that
# containers may ask for HostToContainer propagation (the agent's /host); none is a peer of the
# host's.
#
# The folders are also reachable from the host under N (so tests need not enter the namespace to
# find a socket); the mounts themselves vanish with the namespace, when its last process exits.
# Every process of the node (the holder, containerd, the kubelet, processes started with
# node-exec and node-spawn, containerd's shims and the containers) is in the cgroup
# tessera/ID/NAME (ID: the instance), so that a stop can kill all of them, whatever they forked.
#
# N/svc/NAME.pid ("pid start-time"), NAME.argv (NUL-separated), NAME.env (K=V lines) record each
# long-running process ("service") of the node: ns, containerd, kubelet and what node-spawn
# started; N/NAME.log is its output.

pause_image=tessera.local/pause:3.10.2
test_image=tessera.local/busybox:1
node_grace=${TESSERA_NODE_STOP_GRACE:-5}
node_name_re='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
svc_name_re='^[A-Za-z0-9][A-Za-z0-9_.-]*$'

node_dir() { echo "$1/nodes/$2"; }

# node_fact N KEY: a value from N/node.env.
node_fact() { sed -n "s|^$2=||p" "$1/node.env" 2>/dev/null | head -1; }

check_node_tools() {
  local t
  (($(id -u) == 0)) || die "nodes need root (mount namespaces, cgroups, bridges, device nodes)"
  for t in unshare nsenter mount mknod ip jq curl runc; do
    command -v "$t" >/dev/null || die "nodes need '$t'; run ./scripts/setup.sh"
  done
  for t in bridge host-local loopback; do
    [[ -x /usr/lib/cni/$t ]] || die "no CNI plugin /usr/lib/cni/$t; run ./scripts/setup.sh" \
      "(Debian's containernetworking-plugins)"
  done
  [[ -d /sys/fs/cgroup/freezer ]] ||
    die "nodes need the cgroup v1 freezer hierarchy (/sys/fs/cgroup/freezer); this host has" \
      "only cgroup v2, which the harness does not support yet"
}

check_node_bin_dir() {
  local b=$1 c
  for c in kubelet containerd containerd-shim-runc-v2 ctr pause; do
    [[ -x $b/$c ]] || die "no $c in $b: rebuild with test/controlplane/build.sh"
  done
  for c in pause busybox; do
    [[ -f $b/../images/$c.tar ]] || die "no image $b/../images/$c.tar: rebuild with build.sh"
  done
}

# --- the node's files -------------------------------------------------------------------

# make_fake_gpus N FILE: copies the description to N/gpus.json and makes N/dev/nvidia<minor>
# for each GPU plus nvidiactl, nvidia-uvm, nvidia-uvm-tools: character devices with /dev/null's
# numbers (1:3), so they can be injected into containers and opened harmlessly.
make_fake_gpus() {
  local n=$1 file=$2 minor
  jq -e '.gpus | type == "array"' "$file" >/dev/null 2>&1 ||
    die "$file is not a fake-GPU description (JSON with a \"gpus\" array; see README.md)"
  cp "$file" "$n/gpus.json"
  mkdir -p "$n/dev"
  for minor in $(jq -r '.gpus[] | (.minor // .index) | tostring' "$file") nvidiactl nvidia-uvm \
    nvidia-uvm-tools; do
    [[ $minor =~ ^([0-9]+|nvidiactl|nvidia-uvm|nvidia-uvm-tools)$ ]] ||
      die "$file: bad GPU minor/index '$minor'"
    local path=$n/dev/nvidia$minor
    [[ $minor == nvidia* ]] && path=$n/dev/$minor
    [[ -e $path ]] && die "$file: two GPUs with minor $minor"
    mknod -m 666 "$path" c 1 3
  done
}

# write_node_files N NAME ID INDEX BRIDGE: the node's folders and configuration.
write_node_files() {
  local n=$1 name=$2 id=$3 index=$4 bridge=$5
  mkdir -p "$n"/{svc,kubelet,run,cni-cache,container-logs,nri,cdi/run,cdi/etc,containerd,tmp,opt,tessera} \
    "$n"/{cni-conf,ipam,pod-logs,nri-plugins,nri-conf.d,volume-plugins}
  cat >"$n/containerd.toml" <<EOF
# containerd of test node $name (written by cluster.sh). Paths under /run and /var are the
# node's own folders, bind-mounted in its mount namespace.
version = 4
root = '$n/containerd'
state = '/run/containerd'
temp = '$n/tmp'
[grpc]
  address = '/run/containerd/containerd.sock'
[ttrpc]
  address = '/run/containerd/containerd.sock.ttrpc'
[plugins.'io.containerd.internal.v1.opt']
  path = '$n/opt'
[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '/var/run/nri/nri.sock'
  plugin_path = '$n/nri-plugins'
  plugin_config_path = '$n/nri-conf.d'
# NRI's built-in validator, for pods that require NRI plugins (the annotation
# required-plugins.noderesource.dev/pod: a tessera GPU pod is not started without tessera's
# agent). Nothing is required globally: pods without the annotation are not affected.
[plugins.'io.containerd.nri.v1.nri'.default_validator]
  enable = true
[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '$pause_image'
[plugins.'io.containerd.cri.v1.runtime']
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj below the parent's.
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ['/etc/cdi', '/var/run/cdi']
[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = 'runc'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
  sandboxer = 'podsandbox'
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = '$(command -v runc)'
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dirs = ['/usr/lib/cni']
  conf_dir = '$n/cni-conf'
  max_conf_num = 1
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
EOF
  # The bridge gets the subnet's first address; ipMasq off: no iptables rules.
  jq -n --arg name "tessera-$name" --arg bridge "$bridge" --arg ipam "$n/ipam" \
    --arg subnet "$subnet_prefix.$index.0/24" \
    '{cniVersion: "1.0.0", name: $name, plugins: [{type: "bridge", bridge: $bridge,
      isGateway: true, ipMasq: false, hairpinMode: true,
      ipam: {type: "host-local", dataDir: $ipam, ranges: [[{subnet: $subnet}]],
             routes: [{dst: "0.0.0.0/0"}]}}]}' >"$n/cni-conf/10-tessera.conflist"
}

# write_kubelet_config N NAME ID PORT HEALTHZ_PORT
write_kubelet_config() {
  local n=$1 name=$2 id=$3 port=$4 healthz=$5 gate gates=""
  for gate in ${feature_gates//,/ }; do gates+="  ${gate%%=*}: ${gate#*=}"$'\n'; done
  cat >"$n/kubelet-config.yaml" <<EOF
# kubelet of test node $name (written by cluster.sh)
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false          # the project's machines are cgroup v1 (hybrid)
cgroupDriver: cgroupfs       # no systemd
cgroupsPerQOS: true
cgroupRoot: /tessera/$id/$name
enforceNodeAllocatable: [pods]
failSwapOn: false
oomScoreAdj: 0               # no CAP_SYS_RESOURCE for -999
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
imageServiceEndpoint: unix:///run/containerd/containerd.sock
address: 127.0.0.1
port: $port
healthzBindAddress: 127.0.0.1
healthzPort: $healthz
readOnlyPort: 0
podLogsDir: $n/pod-logs
volumePluginDir: $n/volume-plugins   # else the kubelet creates /usr/libexec/kubernetes/...
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
imageGCHighThresholdPercent: 100   # never remove the imported images
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 50Mi, nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
registerNode: true
serializeImagePulls: false
nodeStatusUpdateFrequency: 2s      # allocatable shows a device plugin's resource within ~2 s
# Otherwise the kubelet adds KUBE-FIREWALL (a DROP rule in INPUT and OUTPUT) and canary chains
# to the host's iptables, which nothing here needs (no kube-proxy) and nothing would remove.
makeIPTablesUtilChains: false
featureGates:
$gates
EOF
}

# --- processes of a node ---------------------------------------------------------------

# svc_pid N NAME: the recorded pid of a service if it still runs (same start time), else fails.
svc_pid() {
  local f=$1/svc/$2.pid pid st
  [[ -f $f ]] || return 1
  read -r pid st <"$f"
  alive "$pid" && [[ $(start_time "$pid") == "$st" ]] || return 1
  echo "$pid"
}

# The cgroup folders (one per hierarchy) that the node's own processes join.
runtime_cgroups() {
  local rel=$1 m
  while read -r m; do
    case ${m##*/} in freezer | pids | cpuacct | cpu,cpuacct) echo "$m/$rel/runtime" ;; esac
  done < <(cgroup_mounts)
}

# make_node_cgroups REL: REL (tessera/ID/NAME) and REL/runtime in every v1 hierarchy, with the
# cpuset copied down each level (a new cpuset is empty and takes no task).
make_node_cgroups() {
  local rel=$1 m path part
  while read -r m; do
    [[ $(stat -f -c %T "$m") == cgroup2fs ]] && continue
    path=$m
    for part in ${rel//\// } runtime; do
      path=$path/$part
      mkdir -p "$path"
      if [[ -f $path/cpuset.cpus && -z $(cat "$path/cpuset.cpus") ]]; then
        cat "${path%/*}/cpuset.cpus" >"$path/cpuset.cpus"
        cat "${path%/*}/cpuset.mems" >"$path/cpuset.mems"
      fi
    done
  done < <(cgroup_mounts)
}

# export_env_file FILE: exports its K=V lines.
export_env_file() {
  local line
  [[ -f $1 ]] || return 0
  while IFS= read -r line; do [[ $line == *=* ]] && export "${line?}"; done <"$1"
  return 0
}

# node_enter N HOLDER -- CMD...: this process joins the node's cgroups, enters the mount
# namespace of HOLDER (none: stays) in the node's folder and becomes CMD. The caller has set the
# environment (N/exec.env, then the process's own).
node_enter() {
  local n=$1 holder=$2 cg
  shift 3
  while read -r cg; do
    echo $$ >"$cg/cgroup.procs" || die "cannot join cgroup $cg"
  done < <(runtime_cgroups "$(node_fact "$n" cgroup)")
  cd "$n"
  [[ -z $holder ]] || exec nsenter --target "$holder" --mount -- "$@"
  exec "$@"
}

# _node_enter N HOLDER ENVFILE -- CMD...: (internal) how launch_svc starts a service.
node_enter_svc() {
  local n=$1 holder=$2 envfile=$3
  shift 4
  export_env_file "$n/exec.env"
  export_env_file "$envfile"
  node_enter "$n" "$holder" -- "$@"
}

# _node_ns N: (internal) runs inside the new mount namespace: the bind mounts, then holds it.
node_ns() {
  local n=$1
  mount --bind "$n/kubelet" /var/lib/kubelet
  mount --bind "$n/run" /run/containerd
  mount --bind "$n/cni-cache" /var/lib/cni
  mount --bind "$n/container-logs" /var/log/containers
  mount --bind "$n/nri" /run/nri
  mount --bind "$n/cdi/run" /run/cdi
  mount --bind "$n/cdi/etc" /etc/cdi
  mount --bind "$n/tessera" /run/tessera
  # containerd always imports /etc/containerd/conf.d/*.toml: hide a host's drop-ins.
  if [[ -d /etc/containerd/conf.d ]]; then
    mkdir -p "$n/containerd-conf.d"
    mount --bind "$n/containerd-conf.d" /etc/containerd/conf.d
  fi
  # Shared inside the namespace only (it was made private first): a container's rslave mount of
  # a host path (HostToContainer) needs its source to be a shared or slave mount.
  mount --make-rshared /
  echo $$ >"$n/ns.ready"
  exec -a "tessera-node-ns $n" sleep infinity
}

# launch_svc N NAME ARGV...: starts a service of the node in its namespace, records it.
launch_svc() {
  local n=$1 name=$2 holder=""
  shift 2
  if [[ $name != ns ]]; then
    holder=$(svc_pid "$n" ns) || { log "node $(node_fact "$n" name): its namespace is gone"; return 1; }
  fi
  printf '%s\0' "$@" >"$n/svc/$name.argv"
  [[ -f $n/svc/$name.env ]] || : >"$n/svc/$name.env"
  echo "---- $(date -u +%FT%TZ) starting: $*" >>"$n/$name.log"
  setsid "$self" _node_enter "$n" "$holder" "$n/svc/$name.env" -- "$@" </dev/null \
    >>"$n/$name.log" 2>&1 &
  local pid=$!
  disown "$pid"   # no "Killed" notice from this shell when a stop kills it
  echo "$pid $(start_time "$pid")" >"$n/svc/$name.pid"
}

# relaunch_svc N NAME: starts a service again with the command it was recorded with.
relaunch_svc() {
  local n=$1 name=$2 argv=()
  [[ -f $n/svc/$name.argv ]] || { log "no service '$name' recorded on this node"; return 1; }
  mapfile -d '' argv <"$n/svc/$name.argv"
  launch_svc "$n" "$name" "${argv[@]}"
}

# kill_svc N NAME [SIGNAL]: signals a service (default TERM) and waits until it is gone, with
# SIGKILL after the grace period.
kill_svc() {
  local n=$1 name=$2 sig=${3:-TERM} pid i
  pid=$(svc_pid "$n" "$name") || return 0
  kill -"$sig" "$pid" 2>/dev/null || true
  for ((i = 0; i < node_grace * 20; i++)); do alive "$pid" || return 0; sleep 0.05; done
  log "node $(node_fact "$n" name): killing $name ($pid), still running ${node_grace}s after SIG$sig"
  kill -KILL "$pid" 2>/dev/null || true
  for i in {1..50}; do alive "$pid" || return 0; sleep 0.1; done
  return 1
}

# wait_containerd N: until containerd answers on its socket (or died).
wait_containerd() {
  local n=$1 i
  for i in {1..300}; do
    svc_pid "$n" containerd >/dev/null || return 1
    [[ -S $n/run/containerd.sock ]] && "$self" node-exec "$dir" "$(node_fact "$n" name)" -- \
      ctr version >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

dump_node_log() {
  local n=$1 svc=$2
  [[ -f $n/$svc.log ]] || return 0
  echo "---- last 30 lines of $n/$svc.log ----" >&2
  tail -n 30 "$n/$svc.log" >&2
}

# --- start and stop ----------------------------------------------------------------------

# prepare_node INDEX NAME GPUS LABELS: files, cgroups, subnet; then the namespace and containerd.
# Globals: dir, bin, instance.
prepare_node() {
  local i=$1 name=$2 gpus=$3 labels=$4 n index bridge rel port healthz
  n=$(node_dir "$dir" "$name")
  rm -rf "$n"
  mkdir -p "$n"
  rel=tessera/$instance/$name
  bridge=tsr$instance-$i
  read -r index bridge < <(host_take_subnet "$instance" "$name" "$bridge") ||
    die "no subnet for node $name"
  write_node_files "$n" "$name" "$instance" "$index" "$bridge"
  [[ -z $gpus ]] || make_fake_gpus "$n" "$gpus"
  pick_ports port healthz
  write_kubelet_config "$n" "$name" "$instance" "$port" "$healthz"
  make_node_cgroups "$rel"
  cat >"$n/node.env" <<EOF
name=$name
dir=$n
kubelet_root_dir=$n/kubelet
device_plugin_dir=$n/kubelet/device-plugins
plugins_registry_dir=$n/kubelet/plugins_registry
plugins_dir=$n/kubelet/plugins
pod_resources_socket=$n/kubelet/pod-resources/kubelet.sock
cdi_dir=$n/cdi/run
cdi_static_dir=$n/cdi/etc
nri_socket=$n/nri/nri.sock
containerd_socket=$n/run/containerd.sock
fake_gpus=$([[ -n $gpus ]] && echo "$n/gpus.json")
dev_dir=$n/dev
labels=$labels
cgroup=$rel
cgroup_root=/$rel
bridge=$bridge
subnet=$subnet_prefix.$index.0/24
kubelet_port=$port
kubelet_healthz_port=$healthz
EOF
  cat >"$n/exec.env" <<EOF
NODE_NAME=$name
TESSERA_NODE_NAME=$name
TESSERA_NODE_DIR=$n
TESSERA_FAKE_GPUS=$([[ -n $gpus ]] && echo "$n/gpus.json")
TESSERA_FAKE_DEV_DIR=$n/dev
KUBECONFIG=$dir/kubeconfig
KUBECACHEDIR=$dir/kube-cache
CONTAINERD_ADDRESS=/run/containerd/containerd.sock
CONTAINERD_NAMESPACE=k8s.io
PATH=$bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${PATH:-}
EOF

  launch_svc "$n" ns unshare --mount --propagation private -- "$self" _node_ns "$n"
  local k
  for k in {1..100}; do
    [[ -f $n/ns.ready ]] && break
    svc_pid "$n" ns >/dev/null || break
    sleep 0.05
  done
  [[ -f $n/ns.ready ]] || { dump_node_log "$n" ns; log "node $name: no mount namespace"; return 1; }
  echo "mnt_ns=$(stat -L -c %i "/proc/$(svc_pid "$n" ns)/ns/mnt")" >>"$n/node.env"

  launch_svc "$n" containerd "$bin/containerd" --config "$n/containerd.toml"
  wait_containerd "$n" || { dump_node_log "$n" containerd; log "node $name: containerd did not start"; return 1; }
  local image
  for image in pause busybox; do
    # One archive per call: given several, ctr imports only the first.
    "$self" node-exec "$dir" "$name" -- ctr -n k8s.io images import "$bin/../images/$image.tar" \
      >>"$n/images.log" 2>&1 ||
      { dump_node_log "$n" images; log "node $name: cannot import $image.tar"; return 1; }
  done
}

# start_kubelet N
start_kubelet() {
  local n=$1 name labels args
  name=$(node_fact "$n" name)
  labels=$(node_fact "$n" labels)
  args=("$bin/kubelet" --config="$n/kubelet-config.yaml" --kubeconfig="$dir/kubeconfig"
        --root-dir=/var/lib/kubelet --cert-dir=/var/lib/kubelet/pki --hostname-override="$name"
        --v=2)
  [[ -z $labels ]] || args+=(--node-labels="$labels")
  launch_svc "$n" kubelet "${args[@]}"
}

# nodes_ready NAME...: true when every named Node has condition Ready=True.
nodes_ready() {
  local server cert=$dir/pki
  server=$(sed -n 's/^server=//p' "$dir/cluster.env")
  curl -s --max-time 5 --cacert "$cert/ca.crt" --cert "$cert/admin.crt" --key "$cert/admin.key" \
    "$server/api/v1/nodes" 2>/dev/null |
    jq -e --args '[.items[] | select(.status.conditions // [] | any(.type == "Ready" and .status == "True"))
                   | .metadata.name] as $ready | $ARGS.positional - $ready | length == 0' "$@" \
      >/dev/null 2>&1
}

# wait_nodes_ready NAME...: starts nothing; fails with logs if a kubelet or containerd dies,
# restarts a kubelet that lost a race for its port with new ports.
wait_nodes_ready() {
  local timeout=${TESSERA_CONTROLPLANE_TIMEOUT:-120} deadline name n svc port healthz
  declare -A retries=()
  deadline=$(($(date +%s) + timeout))
  while ! nodes_ready "$@"; do
    for name in "$@"; do
      n=$(node_dir "$dir" "$name")
      for svc in ns containerd kubelet; do
        svc_pid "$n" "$svc" >/dev/null && continue
        if [[ $svc == kubelet ]] && tail -n 20 "$n/kubelet.log" | grep -q "address already in use" &&
          ((${retries[$name]:-0} < 3)); then
          retries[$name]=$((${retries[$name]:-0} + 1))
          log "node $name: the kubelet lost a race for its port; retrying with new ports"
          pick_ports port healthz
          write_kubelet_config "$n" "$name" "$instance" "$port" "$healthz"
          sed -i "s/^kubelet_port=.*/kubelet_port=$port/; s/^kubelet_healthz_port=.*/kubelet_healthz_port=$healthz/" "$n/node.env"
          start_kubelet "$n"
          continue
        fi
        log "node $name: $svc exited during start"
        dump_node_log "$n" "$svc"
        return 1
      done
    done
    if (($(date +%s) >= deadline)); then
      log "nodes not Ready after ${timeout}s"
      for name in "$@"; do dump_node_log "$(node_dir "$dir" "$name")" kubelet; done
      return 1
    fi
    sleep 0.2
  done
}

# begin_nodes: registers the instance and prepares every node in the background (all but the
# kubelet, which needs the API server). Globals: dir, bin, node_names, node_gpus, node_labels
# (parallel arrays); sets instance and prepare_pids.
begin_nodes() {
  local i
  instance=$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
  echo "$instance" >"$dir/instance"
  host_register "$instance" "$dir" "$$" || die "cannot register with $host_state"
  prepare_pids=()
  for i in "${!node_names[@]}"; do
    prepare_node "$((i + 1))" "${node_names[$i]}" "${node_gpus[$i]}" "${node_labels[$i]}" &
    prepare_pids+=("$!")
  done
}

# finish_nodes: after the control plane is healthy: waits for the preparations, starts the
# kubelets, waits until every node is Ready.
finish_nodes() {
  local i rc=0
  for i in "${!prepare_pids[@]}"; do
    wait "${prepare_pids[$i]}" || { log "node ${node_names[$i]} could not be prepared"; rc=1; }
  done
  ((rc == 0)) || return 1
  for i in "${!node_names[@]}"; do start_kubelet "$(node_dir "$dir" "${node_names[$i]}")"; done
  wait_nodes_ready "${node_names[@]}"
}

# stop_node N: every process of the node, then its bridge and cgroups; verifies.
stop_node() {
  local n=$1 name rel bridge ns_inode svc f ports=() left=0 p
  name=$(node_fact "$n" name)
  rel=$(node_fact "$n" cgroup)
  bridge=$(node_fact "$n" bridge)
  ns_inode=$(node_fact "$n" mnt_ns)
  # Spawned services first (they may talk to the kubelet), the kubelet, then containerd.
  local first=() pid
  for f in "$n"/svc/*.pid; do
    [[ -f $f ]] || continue
    svc=${f##*/}; svc=${svc%.pid}
    [[ $svc == ns || $svc == kubelet || $svc == containerd ]] && continue
    pid=$(svc_pid "$n" "$svc") && first+=("$pid")
  done
  term_wait "$node_grace" "${first[@]}"
  kill_svc "$n" kubelet || true
  kill_svc "$n" containerd || true
  # Shims, containers, the namespace holder and anything else left in the node's cgroups.
  if [[ -n $rel ]]; then
    cgroup_kill "$rel" || left=1
  fi
  if [[ -n $ns_inode ]]; then
    # /proc/PID/ns/mnt links read "mnt:[INODE]"; one find instead of a stat per process.
    for p in $(find /proc/[0-9]*/ns/mnt -maxdepth 0 -lname "mnt:\\[$ns_inode\\]" 2>/dev/null); do
      p=${p#/proc/}; p=${p%%/*}
      alive "$p" || continue
      log "node $name: process $p still in the node's mount namespace"
      kill -KILL "$p" 2>/dev/null || true
      left=1
    done
  fi
  if [[ -n $bridge && -d /sys/class/net/$bridge ]]; then
    mapfile -t ports < <(ls "/sys/class/net/$bridge/brif" 2>/dev/null)
    ip link del "$bridge" || left=1
    # The pods' veths go with their network namespaces, which the kernel frees shortly after.
    local i
    for i in {1..50}; do
      local still=()
      for p in "${ports[@]}"; do [[ -e /sys/class/net/$p ]] && still+=("$p"); done
      ((${#still[@]} == 0)) && break
      sleep 0.1
    done
    ((${#still[@]} == 0)) || { log "node $name: interfaces ${still[*]} remain"; left=1; }
  fi
  [[ -z $rel ]] || cgroup_remove "$rel" || left=1
  return $left
}

# stop_nodes: every node of the instance in DIR, then the instance's registration.
stop_nodes() {
  local d=$1 id n rc=0
  [[ -f $d/instance ]] || return 0
  id=$(cat "$d/instance")
  host_set_owner "$id" "$$"
  local pids=() p
  for n in "$d"/nodes/*/; do
    [[ -f $n/node.env ]] || continue
    stop_node "${n%/}" &
    pids+=("$!")
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cgroup_remove "tessera/$id" || rc=1
  if ((rc == 0)); then
    host_unregister "$id"
    rm -f "$d/instance"
  fi
  return $rc
}

# --- commands on a running node ------------------------------------------------------------

# resolve_node DIR NAME: the node's folder, or dies with the known names.
resolve_node() {
  local d=$1 name=$2 n
  n=$(node_dir "$d" "$name")
  [[ -f $n/node.env ]] && { echo "$n"; return 0; }
  local known
  known=$(ls "$d/nodes" 2>/dev/null | tr '\n' ' ')
  die "no node '$name' in $d (nodes: ${known:-none})"
}

# parse_env_opts: leading --env K=V options into env_lines; the rest after -- into cmd_argv.
parse_env_opts() {
  env_lines=() cmd_argv=()
  while (($#)); do
    case $1 in
      --env) [[ ${2:-} == *=* ]] || die "--env needs K=V"; env_lines+=("$2"); shift 2 ;;
      --env=*) env_lines+=("${1#--env=}"); shift ;;
      --) shift; cmd_argv=("$@"); return 0 ;;
      *) die "expected --env K=V or -- before the command, got '$1'" ;;
    esac
  done
  ((${#cmd_argv[@]})) || die "no command given (after --)"
}

cmd_node_exec() {
  local d n holder line
  d=$(cd "$1" && pwd); n=$(resolve_node "$d" "$2"); shift 2
  parse_env_opts "$@"
  holder=$(svc_pid "$n" ns) || die "node $(node_fact "$n" name) is not running"
  export_env_file "$n/exec.env"
  for line in "${env_lines[@]}"; do export "${line?}"; done
  node_enter "$n" "$holder" -- "${cmd_argv[@]}"
}

cmd_node_spawn() {
  local d n name pid
  d=$(cd "$1" && pwd); n=$(resolve_node "$d" "$2"); name=$3; shift 3
  [[ $name =~ $svc_name_re ]] || die "bad process name '$name' (letters, digits, . _ -)"
  [[ $name == ns || $name == kubelet || $name == containerd ]] &&
    die "'$name' is the node's own; use node-restart"
  parse_env_opts "$@"
  svc_pid "$n" "$name" >/dev/null && die "'$name' already runs on this node; node-kill it first"
  printf '%s\n' "${env_lines[@]}" >"$n/svc/$name.env"
  launch_svc "$n" "$name" "${cmd_argv[@]}" || exit 1
  pid=$(svc_pid "$n" "$name") || { dump_node_log "$n" "$name"; die "'$name' exited at once"; }
  echo "$pid"
}

cmd_node_kill() {
  local d n name sig=TERM
  d=$(cd "$1" && pwd); n=$(resolve_node "$d" "$2"); name=$3; shift 3
  while (($#)); do
    case $1 in
      --signal) sig=${2:?--signal needs a name}; shift 2 ;;
      --signal=*) sig=${1#*=}; shift ;;
      *) die "unknown option '$1' for node-kill" ;;
    esac
  done
  [[ -f $n/svc/$name.pid ]] || die "no process '$name' recorded on node $(node_fact "$n" name)"
  kill_svc "$n" "$name" "$sig" || die "'$name' still runs"
}

cmd_node_restart() {
  local d n name
  d=$(cd "$1" && pwd); n=$(resolve_node "$d" "$2"); name=$3
  [[ $name != ns ]] || die "the namespace holder cannot be restarted; stop and start the cluster"
  [[ -f $n/svc/$name.argv ]] || die "no process '$name' recorded on node $(node_fact "$n" name)"
  dir=$d
  kill_svc "$n" "$name" || die "'$name' still runs"
  relaunch_svc "$n" "$name" || exit 1
  if [[ $name == containerd ]]; then
    wait_containerd "$n" || { dump_node_log "$n" containerd; die "containerd did not come back"; }
  fi
  svc_pid "$n" "$name" || { dump_node_log "$n" "$name"; die "'$name' exited at once"; }
}

cmd_node_env() {
  local d n
  d=$(cd "$1" && pwd); n=$(resolve_node "$d" "$2")
  cat "$n/node.env"
}

status_nodes() {
  local d=$1 n f svc pid rc=0
  for n in "$d"/nodes/*/; do
    [[ -f $n/node.env ]] || continue
    n=${n%/}
    for f in "$n"/svc/*.pid; do
      [[ -f $f ]] || continue
      svc=${f##*/}; svc=${svc%.pid}
      if pid=$(svc_pid "$n" "$svc"); then
        echo "node $(node_fact "$n" name) $svc $pid running"
      else
        echo "node $(node_fact "$n" name) $svc NOT running"
        [[ $svc == ns || $svc == kubelet || $svc == containerd ]] && rc=1
      fi
    done
  done
  return $rc
}
