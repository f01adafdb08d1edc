#!/usr/bin/env bash
# fuzz/run.sh [SECONDS]: runs every libFuzzer target of the fuzz preset (build/fuzz) for SECONDS
# each (default 30; FUZZ_SECONDS) on a scratch copy of its seed corpus (fuzz/corpus/<dir>, never
# written), so `make fuzz` builds them and fuzzes each for a bounded time. A crash stops the run
# with the target's output; the input that crashed is left in build/fuzz/fuzz/crashes/.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build/fuzz/fuzz
seconds=${1:-${FUZZ_SECONDS:-30}}
list=$build/targets.txt
[[ -f $list ]] || { echo "$0: $list is missing: cmake --preset fuzz && cmake --build --preset fuzz" >&2; exit 1; }
# UBSan reports and carries on unless told to stop: undefined behaviour is a crash like any other.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
work=$(mktemp -d /tmp/tessera-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/crashes"
status=0
while read -r target corpus; do
  [[ -n $target ]] || continue
  mkdir -p "$work/$target"
  echo "== $target ($seconds s, seeds fuzz/corpus/$corpus)"
  if ! "$build/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/crashes/$target-" "$work/$target" "$here/corpus/$corpus" \
      >"$work/$target.log" 2>&1; then
    tail -40 "$work/$target.log"
    echo "$target: FAILED (artifacts in $build/crashes)"
    status=1
  else
    grep -E "^stat::number_of_executed_units|^Done" "$work/$target.log" | tr '\n' ' '
    echo
  fi
done <"$list"
exit $status
