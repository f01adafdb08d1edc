# Sourced by the benchmark scripts that start a control plane: gives the scheduler under test
# and the control plane the same CPU priority.
#
# The kernel groups processes by session (sched_autogroup) and weighs the groups, not the
# processes, against each other; nice only orders processes within a group. The control plane's
# daemons run in sessions of their own (setsid), so `nice -n -10 bench/run_X.sh` alone would not
# reach them. When the sourcing script runs with a negative nice, `prioritize PID...` gives the
# same nice to the session groups of the processes named (kube-apiserver, etcd and the script's
# own: the caller's session, where the scheduler under test runs); `restore_priority` puts the
# caller's session group back as it was (call it on exit).

# The script's nice (field 19 of /proc/PID/stat) and its session group's nice before it began.
own_nice=$(awk '{ print $19 }' /proc/$$/stat)
own_group_nice=$(awk '{ print $3 }' /proc/$$/autogroup 2>/dev/null || echo 0)
prioritize() {
  ((own_nice < 0)) || return 0
  local p
  for p in "$@"; do
    echo "$own_nice" >"/proc/$p/autogroup" 2>/dev/null ||
      echo "could not set the session group's nice of process $p" >&2
  done
}
restore_priority() {
  ((own_nice < 0)) && echo "$own_group_nice" >"/proc/$$/autogroup" 2>/dev/null
  return 0
}
