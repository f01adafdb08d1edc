#!/usr/bin/env bash
# Runs every benchmark script under bench/. Most rewrite their file in bench/results/;
# run_scheduler.sh (about 15 min) prints its JSON lines and table, which bench/results/scheduler.md
# quotes with the reading of them.
set -euo pipefail
cd "$(dirname "$0")"
for script in run_*.sh; do
  [[ "$script" == run_all.sh ]] && continue
  echo "== $script" >&2
  "./$script"
done
