#!/usr/bin/env bash
# Runs every benchmark script under bench/. Most rewrite their file in bench/results/;
# run_scheduler.sh prints its JSON lines and tables, which bench/results/scheduler.md quotes with
# the reading of them (with its defaults, 10,000 nodes and the issue's 80,000 pods per phase, it
# runs for hours on 2 cores; scheduler.md gives the smaller command it was measured with).
set -euo pipefail
cd "$(dirname "$0")"
for script in run_*.sh; do
  [[ "$script" == run_all.sh ]] && continue
  echo "== $script" >&2
  "./$script"
done
