#!/usr/bin/env bash
# Reclaiming k GPUs at once (issue 35): the simulated time from the first waiting pod to the last
# bound one when queue tb reclaims 8, 32 and 128 GPUs from queue ta on 1,000 nodes of 8 GPUs
# (bench/reclaim_bench.cc), before and after, side by side: for each k the two binaries run one
# after the other. Writes the section "Reclaiming many GPUs at once" of
# bench/results/preemption.md (run_preemption.sh keeps it).
#   bench/run_reclaim.sh BEFORE [nodes [grace_s]]
# BEFORE: reclaim_bench built from the commit before the change (the same bench source there).
set -euo pipefail
cd "$(dirname "$0")/.."
before=$1
nodes=${2:-1000}
grace=${3:-30}
[ -n "${NO_BUILD:-}" ] || cmake --build --preset dev --target reclaim_bench >/dev/null
after=build/dev/bench/reclaim_bench
out=bench/results/preemption.md
load=$(cut -d' ' -f1-3 /proc/loadavg)
rows=""
for k in 8 32 128; do
  b=$("$before" --nodes "$nodes" --grace "$grace" "$k" | tail -1)
  a=$("$after" --nodes "$nodes" --grace "$grace" "$k" | tail -1)
  # | k | seconds | evictions | cycles | cpu |
  rows+=$(paste -d'|' <(echo "$b" | awk -F'|' '{gsub(/ /,""); print $2"|"$3"|"$4"|"$6}') \
                      <(echo "$a" | awk -F'|' '{gsub(/ /,""); print $3"|"$4"|"$6}') |
          awk -F'|' '{printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $5, $3, $6, $4, $7}')
  rows+=$'\n'
  echo "$rows" | tail -2 >&2  # as it goes
done
end=$(cut -d' ' -f1-3 /proc/loadavg)
section=$(cat <<TXT
## Reclaiming many GPUs at once (issue 35)

Command: \`bench/run_reclaim.sh $before $nodes $grace\` (runs \`reclaim_bench --nodes $nodes --grace $grace K\`,
the "before" binary built from the commit before the change with the same bench source, then the
"after" one, for each K in turn).

Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average at start: $load, at the end: $end.
$nodes nodes x 8 GPUs, every GPU held by a one-GPU pod of queue ta; queues ta and tb each deserve
half; K one-GPU pods of tb arrive at once. SchedulerCore with preemption on (the live scheduler's
code; a fake writer records nominations and evictions); the clock is simulated: a bind lands at
once, an evicted pod terminates at once and is deleted $grace s (its grace period) later, 1 s per
step. Time: from the first waiting pod to the last bound pod, simulated. CPU: the scheduler's
cycles, this thread's CPU time, summed (on a shared machine).

| GPUs reclaimed | before: first waiting to last bound (s) | after (s) | evictions before | after | scheduler CPU before (s) | after (s) |
|---:|---:|---:|---:|---:|---:|---:|
$rows
TXT
)
if grep -q '^## Reclaiming many GPUs at once' "$out"; then
  sed -i '/^## Reclaiming many GPUs at once/,$d' "$out"
fi
printf '\n%s\n' "$section" >> "$out"
echo "$section"
