# Host-wide state of the test nodes, shared by every harness instance on this machine (sourced
# by cluster.sh; see README.md, "Host state").
#
# A node changes a few things that belong to the whole host: the kubelet rewrites sysctls
# (vm.overcommit_memory, vm.panic_on_oom, kernel.panic, kernel.panic_on_oops,
# kernel.keys.root_max{keys,bytes}), the CNI bridge turns on net.ipv4.ip_forward, each node
# needs a bridge name and a subnet no other node uses, and the node's mount namespace needs
# mount points (/var/lib/kubelet, /run/containerd, ...) that may not exist on the host. Several
# engineers' tests may run nodes at once, each instance with its own control plane, so none of
# them may restore a sysctl while another still runs a kubelet.
#
# So the instances register in $host_state (under a lock): the first one to arrive records the
# host's values and creates the missing mount points; each takes subnets and bridge names that
# no other instance (nor the host's routes) use; the last one to leave restores the values and
# removes the mount points it created (rmdir: only if empty). An instance whose processes are all
# gone without having unregistered (its test and its watchdog were killed) is found dead by the
# next instance that takes the lock, which removes what it left (cgroups, bridges) and its entry.
#
# $host_state/instances/<id>, one per instance with nodes:
#   dir DIR               the instance's folder
#   owner PID START       the cluster.sh process that is starting or stopping it (may be gone)
#   node NAME INDEX BRIDGE   one per node: subnet 10.213.INDEX.0/24 and the bridge's name
# $host_state/sysctl.saved   "name value" lines: the host's values before the first instance
# $host_state/created-dirs   mount points the harness created (removed by the last instance)

host_state=/run/tessera-harness
host_sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops
              kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.ip_forward)
# Bind-mount targets of every node's mount namespace (node.sh), in creation order. /var/run is
# a link to /run on Debian; the real paths are used so that the mount points are real folders.
host_mountpoints=(/var/lib/kubelet /var/lib/cni /var/log/containers /run/containerd /run/nri
                  /run/cdi /etc/cdi /run/tessera)
subnet_prefix=10.213   # node subnets are $subnet_prefix.INDEX.0/24, INDEX 1..254

sysctl_file() { echo "/proc/sys/${1//.//}"; }

# cgroup_mounts: the mount points of every cgroup hierarchy (v1 and the v2 "unified" one).
cgroup_mounts() {
  local _dev mnt type _rest
  while read -r _dev mnt type _rest; do
    [[ $type == cgroup || $type == cgroup2 ]] && echo "$mnt"
  done </proc/mounts
  return 0
}

# host_locked FUNCTION ARGS...: runs FUNCTION in a subshell holding the host lock.
host_locked() {
  mkdir -p "$host_state/instances"
  (
    flock 8
    "$@"
  ) 8>"$host_state/lock"
}

# instance_alive ID: some process of the instance runs: its starting or stopping cluster.sh, a
# recorded control-plane component or watchdog, or anything in its cgroups.
instance_alive() {
  local id=$1 f=$host_state/instances/$1 key a b dir="" name pid
  [[ -f $f ]] || return 1
  while read -r key a b; do
    case $key in
      dir) dir=$a ;;
      owner) alive "$a" && [[ $(start_time "$a") == "$b" ]] && return 0 ;;
    esac
  done <"$f"
  if [[ -n $dir && -f $dir/pids ]]; then
    while read -r name pid; do
      alive "$pid" && ours "$dir" "$pid" && return 0
    done <"$dir/pids"
  fi
  local m
  while read -r m; do
    [[ -d $m/tessera/$id ]] || continue
    [[ -n $(find "$m/tessera/$id" -name cgroup.procs -exec cat {} + 2>/dev/null | head -1) ]] &&
      return 0
  done < <(cgroup_mounts)
  return 1
}

# cgroup_kill PATH: kills every process in the cgroup PATH (relative to the hierarchies' roots)
# and below, and waits until they are gone. The freezer hierarchy stops them first, so that
# nothing forks between the listing and the kill. Returns 1 if some survive 10 s.
cgroup_kill() {
  local rel=$1 m procs pid i frozen=""
  local freezer
  freezer=$(awk '$3 == "cgroup" && $4 ~ /(^|,)freezer(,|$)/ { print $2; exit }' /proc/mounts)
  if [[ -n $freezer && -f $freezer/$rel/freezer.state ]]; then
    echo FROZEN >"$freezer/$rel/freezer.state" 2>/dev/null && frozen=$freezer/$rel
    for i in {1..50}; do
      [[ $(cat "$frozen/freezer.state" 2>/dev/null) != FREEZING ]] && break
      sleep 0.02
    done
  fi
  for i in {1..100}; do
    procs=()
    while read -r m; do
      [[ -d $m/$rel ]] || continue
      mapfile -t -O "${#procs[@]}" procs < <(find "$m/$rel" -name cgroup.procs -exec cat {} + 2>/dev/null)
    done < <(cgroup_mounts)
    if ((${#procs[@]} == 0)); then
      [[ -z $frozen ]] || echo THAWED >"$frozen/freezer.state" 2>/dev/null || true
      return 0
    fi
    for pid in "${procs[@]}"; do
      # Never ourselves: a cluster.sh run from inside a node must not kill itself half-way.
      [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
      kill -KILL "$pid" 2>/dev/null || true
    done
    # Killed tasks in a frozen cgroup die when thawed.
    [[ -z $frozen ]] || echo THAWED >"$frozen/freezer.state" 2>/dev/null || true
    sleep 0.1
  done
  log "processes in cgroup $rel survive SIGKILL: ${procs[*]}"
  return 1
}

# cgroup_remove PATH: removes the cgroup PATH and everything below it in every hierarchy (empty
# cgroups only; the kernel refuses others). Returns 1 if some folder remains.
cgroup_remove() {
  local rel=$1 m left=0 i
  while read -r m; do
    [[ -d $m/$rel ]] || continue
    for i in {1..20}; do
      find "$m/$rel" -depth -type d -exec rmdir {} + 2>/dev/null || true
      [[ -d $m/$rel ]] || break
      sleep 0.1
    done
    [[ -d $m/$rel ]] && { log "cannot remove cgroup $m/$rel"; left=1; }
  done < <(cgroup_mounts)
  return $left
}

# Removes what a dead instance left on the host: processes in its cgroups, the cgroups, bridges.
cleanup_instance_host() {
  local id=$1 f=$host_state/instances/$1 key name _idx bridge
  cgroup_kill "tessera/$id" || true
  cgroup_remove "tessera/$id" || true
  while read -r key name _idx bridge; do
    [[ $key == node && -n $bridge ]] || continue
    ip link del "$bridge" 2>/dev/null || true
  done <"$f"
}

# (locked) Drops the entries of dead instances, cleaning up after them.
_host_gc() {
  local f id
  for f in "$host_state"/instances/*; do
    [[ -f $f ]] || continue
    id=${f##*/}
    instance_alive "$id" && continue
    log "instance $id ($(sed -n 's/^dir //p' "$f")) is gone without stopping; removing what it left"
    cleanup_instance_host "$id"
    rm -f "$f"
  done
}

# (locked) After the last instance left: restore the sysctls, remove the mount points we made.
_host_release_if_last() {
  compgen -G "$host_state/instances/*" >/dev/null && return 0
  local name value d
  if [[ -f $host_state/sysctl.saved ]]; then
    while read -r name value; do
      [[ $(cat "$(sysctl_file "$name")" 2>/dev/null) == "$value" ]] && continue
      echo "$value" >"$(sysctl_file "$name")" || log "cannot restore $name to $value"
    done <"$host_state/sysctl.saved"
    rm -f "$host_state/sysctl.saved"
  fi
  if [[ -f $host_state/created-dirs ]]; then
    tac "$host_state/created-dirs" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
    rm -f "$host_state/created-dirs"
  fi
  local m
  while read -r m; do rmdir "$m/tessera" 2>/dev/null || true; done < <(cgroup_mounts)
}

# (locked) Registers instance ID (folder DIR) before it changes anything on the host.
_host_register() {
  local id=$1 dir=$2 owner=$3 name d p
  _host_gc
  _host_release_if_last   # a crash between the last entry's removal and the restore
  if ! compgen -G "$host_state/instances/*" >/dev/null; then
    if [[ ! -f $host_state/sysctl.saved ]]; then
      for name in "${host_sysctls[@]}"; do
        echo "$name $(cat "$(sysctl_file "$name")")"
      done >"$host_state/sysctl.saved.tmp"
      mv "$host_state/sysctl.saved.tmp" "$host_state/sysctl.saved"
    fi
  fi
  for d in "${host_mountpoints[@]}"; do
    [[ -d $d ]] && continue
    # Record each folder mkdir -p is about to create, outermost first.
    p=$d
    local new=()
    while [[ ! -e $p ]]; do new=("$p" "${new[@]}"); p=${p%/*}; done
    mkdir -p "$d" || return 1
    printf '%s\n' "${new[@]}" >>"$host_state/created-dirs"
  done
  printf 'dir %s\nowner %s %s\n' "$dir" "$owner" "$(start_time "$owner")" \
    >"$host_state/instances/$id"
}

# (locked) Marks PID as the process now acting for instance ID (a stop), so it counts as alive.
_host_set_owner() {
  local id=$1 owner=$2 f=$host_state/instances/$1
  [[ -f $f ]] || return 0
  sed -i "s/^owner .*/owner $owner $(start_time "$owner")/" "$f"
}

# The subnet indexes the host's routes overlap (other than the default route), one per line.
host_route_indexes() {
  local dst _rest a b c d len i lo hi
  while read -r dst _rest; do
    [[ $dst == default ]] && continue
    [[ $dst == */* ]] || dst=$dst/32
    IFS=./ read -r a b c d len <<<"$dst"
    # Overlap with $subnet_prefix.i.0/24: compare the first min(len, 24) bits.
    local p=$((($a << 24) | ($b << 16) | ($c << 8) | $d)) base
    IFS=. read -r a b <<<"$subnet_prefix"
    base=$((($a << 24) | ($b << 16)))
    ((len > 24)) && len=24
    for ((i = 1; i <= 254; i++)); do
      local q=$((base | (i << 8))) mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
      ((len == 0)) && mask=0
      (((p & mask) == (q & mask))) && echo "$i"
    done
  done < <(ip -4 route show table all 2>/dev/null | grep -v '^\(broadcast\|local\) ')
  return 0
}

# (locked) Takes a free subnet index for NODE of instance ID; prints "INDEX BRIDGE".
_host_take_subnet() {
  local id=$1 node=$2 bridge=$3 used i
  used=" $(cat "$host_state"/instances/* 2>/dev/null | awk '$1 == "node" { print $3 }' | tr '\n' ' ')"
  used+="$(host_route_indexes | tr '\n' ' ') "
  for ((i = 1; i <= 254; i++)); do
    [[ $used == *" $i "* ]] && continue
    echo "node $node $i $bridge" >>"$host_state/instances/$id"
    echo "$i $bridge"
    return 0
  done
  log "no free subnet in $subnet_prefix.0.0/16 (254 test nodes running on this host?)"
  return 1
}

# (locked) Unregisters instance ID after its nodes stopped; the last one restores the host.
_host_unregister() {
  local id=$1
  rm -f "$host_state/instances/$id"
  _host_gc
  _host_release_if_last
}

host_register() { host_locked _host_register "$@"; }
host_set_owner() { host_locked _host_set_owner "$@"; }
host_take_subnet() { host_locked _host_take_subnet "$@"; }
host_unregister() { host_locked _host_unregister "$@"; }
host_gc() { host_locked _host_gc; host_locked _host_release_if_last; }
