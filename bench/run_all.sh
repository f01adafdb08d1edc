#!/usr/bin/env bash
# Runs every benchmark script under bench/ and rewrites bench/results/.
set -euo pipefail
cd "$(dirname "$0")"
for script in run_*.sh; do
  [[ "$script" == run_all.sh ]] && continue
  echo "== $script" >&2
  "./$script"
done
