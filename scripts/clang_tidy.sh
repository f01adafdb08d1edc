#!/usr/bin/env bash
# clang_tidy.sh BUILD_DIR [FILE...]: clang-tidy with the project's .clang-tidy over the production
# sources under src/ (not tests, test helpers or fuzz targets: they follow gtest's and libFuzzer's
# shapes), using BUILD_DIR/compile_commands.json. With FILEs, only those. Runs one clang-tidy per
# core; prints each finding as file:line: message [check]; exits 1 if there is any, 2 when it
# cannot run.
#
#   scripts/clang_tidy.sh build/dev                      # everything (about 20 CPU-minutes)
#   scripts/clang_tidy.sh build/dev src/core/engine.cc   # one file
#
# The checks are those the code already passes (.clang-tidy says which are left out and why);
# a new finding is a defect to fix, or a check to leave out with its reason written there.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ $# -ge 1 ]] || { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }
build=$(cd "$1" && pwd) || exit 2
shift
[[ -f $build/compile_commands.json ]] ||
  { echo "clang_tidy.sh: no $build/compile_commands.json (configure with cmake --preset dev)" >&2; exit 2; }
tidy=$(command -v clang-tidy || command -v clang-tidy-14 || true)
[[ -n $tidy ]] || { echo "clang_tidy.sh: clang-tidy is not installed; run ./scripts/setup.sh" >&2; exit 2; }

cd "$root"
if [[ $# -gt 0 ]]; then
  files=("$@")
else
  mapfile -t files < <(find src -name '*.cc' ! -name '*_test.cc' ! -path '*/testing/*' \
    ! -path '*/fuzz/*' | LC_ALL=C sort)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
jobs=$(nproc)
echo "clang_tidy.sh: ${#files[@]} files, $jobs at a time ($("$tidy" --version | grep -m1 -o 'version [0-9.]*'))" >&2
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} sh -c \
  'f=$1; "$2" -p "$3" --quiet "$f" >"$4/$(echo "$f" | tr / _).log" 2>&1 || echo "$f" >>"$4/failed"' \
  _ {} "$tidy" "$build" "$out"
# Findings, each once (a header's finding repeats in every file that includes it).
findings=$(cat "$out"/*.log 2>/dev/null | grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error):' |
  sed "s|^$root/||" | LC_ALL=C sort -u || true)
if [[ -n $findings || -s $out/failed ]]; then
  [[ -n $findings ]] && echo "$findings"
  failed=0
  [[ -s $out/failed ]] && failed=$(wc -l <"$out/failed")
  echo "clang_tidy.sh: $(grep -c . <<<"$findings") findings; clang-tidy failed on $failed files" >&2
  exit 1
fi
echo "clang_tidy.sh: no findings" >&2
