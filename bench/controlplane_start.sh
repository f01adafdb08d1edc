#!/usr/bin/env bash
# Start-to-healthy and stop times of the test control plane (test/controlplane/cluster.sh),
# after its build is cached: N starts and stops (default 5), then the medians. With nodes
# (--nodes 2; needs root) "healthy" means every node Ready, and the control plane's own share is
# shown beside it. The load average before each run is printed: on 2 shared cores it moves the
# times a lot.
#
# Usage: bench/controlplane_start.sh [N] [cluster.sh start options, e.g. --with-scheduler]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster=$root/test/controlplane/cluster.sh
n=${1:-5}
shift || true

median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

starts=() stops=() cps=()
for i in $(seq "$n"); do
  d=$(mktemp -d /tmp/tessera-cp-bench-XXXXXX)
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$cluster" start "$d" "$@" >/dev/null
  s=$(sed -n 's/^start_seconds=//p' "$d/cluster.env")
  cp=$(sed -n 's/^control_plane_seconds=//p' "$d/cluster.env")
  t0=$EPOCHREALTIME
  "$cluster" stop "$d" >/dev/null
  t=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  rm -rf "$d"
  starts+=("$s") stops+=("$t")
  [[ -z $cp ]] || cps+=("$cp")
  echo "run $i (load $load): start to healthy ${s}s${cp:+ (control plane ${cp}s)}, stop ${t}s"
done
echo "start to healthy: median $(printf '%s\n' "${starts[@]}" | median)s of $n (${starts[*]})"
if ((${#cps[@]})); then
  echo "of which the control plane: median $(printf '%s\n' "${cps[@]}" | median)s (${cps[*]})"
fi
echo "stop: median $(printf '%s\n' "${stops[@]}" | median)s of $n (${stops[*]})"
