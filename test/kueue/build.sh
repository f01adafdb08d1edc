#!/usr/bin/env bash
# Builds Kueue's controller manager (sigs.k8s.io/kueue/cmd/kueue, pinned in go.mod/go.sum beside
# this script) from its Go module, for kueue_e2e_test, into a cache outside the source tree:
#
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/kueue/<key>/bin/kueue
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/kueue/<key>/crds/*.yaml
#
# The same discipline as bench/peers/koordinator/build.sh: <key> hashes go.mod, go.sum, this
# script (less its comments), the Go version and GOOS/GOARCH, so a second run with nothing changed
# returns at once; the module and build caches live beside it (kueue/gomod, kueue/gocache); one
# build at a time per cache (a lock); `current` links the newest build and the two newest are
# kept. Kueue's CRDs (config/components/crd/bases in the module zip) are copied out beside the
# binary. The last line printed is the build folder (bin/ and crds/ inside).
#
# Kueue v0.17.0 pins the Kubernetes libraries at v0.35.3 (client-go, controller-runtime v0.23.3);
# those talk to the harness's v1.37.2 API server. The first build compiles ~1,600 packages: about
# 11 minutes on the 2-core machine at load 5-6, 2.7 GB of cache; the binary is 87 MB.
#
# Usage: build.sh [--print-dir] [-h|--help]
#   --print-dir  print the build folder for this tree and exit (builds nothing; fails if absent)
# Environment:
#   TESSERA_CACHE_DIR    cache root (default $HOME/.cache/tessera)
#   TESSERA_BUILD_JOBS   parallel Go compile jobs (default 2)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${TESSERA_CACHE_DIR:-${HOME:-/tmp}/.cache/tessera}
kueue_root=$cache_root/kueue
jobs=${TESSERA_BUILD_JOBS:-2}
module=sigs.k8s.io/kueue

die() { echo "kueue/build.sh: $*" >&2; exit 1; }

print_only=0
case "${1:-}" in
  --print-dir) print_only=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

command -v go >/dev/null || die "Go is not installed; run ./scripts/setup.sh"
export GOTOOLCHAIN=local
go_version=$(go env GOVERSION)
key=$( { cat "$here/go.mod" "$here/go.sum"; grep -v '^[[:space:]]*#' "$here/build.sh";
         echo "$go_version"; go env GOOS GOARCH; } | sha256sum | cut -c1-16)
out=$kueue_root/$key

complete() { [[ -f $out/.complete && -x $out/bin/kueue && -d $out/crds ]]; }

if ((print_only)); then
  complete || die "Kueue is not built for this tree at $out; run $0"
  echo "$out"
  exit 0
fi

mkdir -p "$kueue_root"
if complete; then
  ln -sfn "$key" "$kueue_root/current"
  echo "kueue: up to date ($(head -1 "$out/VERSION" 2>/dev/null))"
  echo "$out"
  exit 0
fi
exec 9>"$kueue_root/.build.lock"
if ! flock -n 9; then
  echo "kueue: waiting for another build in $kueue_root"
  flock 9
fi
if complete; then
  ln -sfn "$key" "$kueue_root/current"
  echo "$out"
  exit 0
fi

export GOMODCACHE=$kueue_root/gomod
export GOCACHE=$kueue_root/gocache
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOMAXPROCS=$jobs
export CGO_ENABLED=0
export GOWORK=off
cd "$here"

t_start=$SECONDS
echo "kueue: building Kueue's manager into $out (Go $go_version, $jobs jobs)"
echo "kueue: [1/3] downloading the modules it imports"
nice -n 10 go list -deps tool >/dev/null
version=$(go list -m -f '{{.Version}}' "$module")
k8s_version=$(go list -m -f '{{.Version}}' k8s.io/client-go)
src=$(go list -m -f '{{.Dir}}' "$module")
echo "kueue: modules ready after $((SECONDS - t_start))s (Kueue $version, client-go $k8s_version)"

rm -rf "$out/tmp"
mkdir -p "$out/tmp/bin" "$out/tmp/crds"
echo "kueue: [2/3] compiling cmd/kueue"
t=$SECONDS
# Kueue's Makefile stamps its version the same way (pkg/version).
nice -n 10 go build -p "$jobs" -trimpath \
  -ldflags "-s -w -X $module/pkg/version.GitVersion=$version" \
  -o "$out/tmp/bin/kueue" "$module/cmd/kueue"
echo "kueue: compiled in $((SECONDS - t))s"
echo "kueue: [3/3] copying the CRDs from $src/config/components/crd/bases"
cp "$src"/config/components/crd/bases/*.yaml "$out/tmp/crds/"
chmod u+w "$out/tmp/crds"/*.yaml

rm -rf "$out/bin" "$out/crds"
mv "$out/tmp/bin" "$out/bin"
mv "$out/tmp/crds" "$out/crds"
rmdir "$out/tmp"
{
  echo "Kueue $version (cmd/kueue), client-go $k8s_version, $go_version"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t_start))s"
} >"$out/VERSION"
touch "$out/.complete"
ln -sfn "$key" "$kueue_root/current"
find "$kueue_root" -mindepth 2 -maxdepth 2 -name .complete -printf '%T@ %h\n' | sort -rn |
  tail -n +3 | while read -r _ old; do
    echo "kueue: removing an older build, $old"
    rm -rf "$old"
  done
echo "kueue: built in $((SECONDS - t_start))s; cache $(du -sh "$kueue_root" | cut -f1)"
echo "$out"
