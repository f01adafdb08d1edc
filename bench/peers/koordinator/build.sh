#!/usr/bin/env bash
# Builds Koordinator's koord-scheduler v1.8.0 from its Go module (pinned in go.mod/go.sum beside
# this script) for the side-by-side scheduler benchmark, into a cache outside the source tree:
#
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/peers/koordinator/<key>/bin/koord-scheduler
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/peers/koordinator/<key>/crds/*.yaml
#
# The same discipline as test/controlplane/build.sh: <key> hashes go.mod, go.sum, this script
# (less its comments) and the Go version, so a second run with nothing changed returns at once;
# the module and build caches live beside it (peers/koordinator/gomod, gocache); one build at a
# time per cache (a lock); `current` links the newest build and the two newest are kept. The CRDs
# koord-scheduler's informers wait for are copied out of the module zip (config/crd/bases). The
# last line printed is the build folder (bin/ and crds/ inside).
#
# The first build compiles ~1,550 packages: ~8-10 minutes on 2 idle cores, 20-25 on a busy
# machine, ~3 GB of cache.
#
# Usage: build.sh [--print-dir] [-h|--help]
#   --print-dir  print the build folder for this tree and exit (builds nothing; fails if absent)
# Environment:
#   TESSERA_CACHE_DIR    cache root (default $HOME/.cache/tessera)
#   TESSERA_BUILD_JOBS   parallel Go compile jobs (default 2)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${TESSERA_CACHE_DIR:-${HOME:-/tmp}/.cache/tessera}
peer_root=$cache_root/peers/koordinator
jobs=${TESSERA_BUILD_JOBS:-2}
module=github.com/koordinator-sh/koordinator

die() { echo "koordinator/build.sh: $*" >&2; exit 1; }

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
out=$peer_root/$key

complete() { [[ -f $out/.complete && -x $out/bin/koord-scheduler && -d $out/crds ]]; }

if ((print_only)); then
  complete || die "koord-scheduler is not built for this tree at $out; run $0"
  echo "$out"
  exit 0
fi

mkdir -p "$peer_root"
if complete; then
  ln -sfn "$key" "$peer_root/current"
  echo "koordinator: up to date ($(head -1 "$out/VERSION" 2>/dev/null))"
  echo "$out"
  exit 0
fi
exec 9>"$peer_root/.build.lock"
if ! flock -n 9; then
  echo "koordinator: waiting for another build in $peer_root"
  flock 9
fi
if complete; then
  ln -sfn "$key" "$peer_root/current"
  echo "$out"
  exit 0
fi

export GOMODCACHE=$peer_root/gomod
export GOCACHE=$peer_root/gocache
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOMAXPROCS=$jobs
export CGO_ENABLED=0
export GOWORK=off
cd "$here"

t_start=$SECONDS
echo "koordinator: building koord-scheduler into $out (Go $go_version, $jobs jobs)"
echo "koordinator: [1/3] downloading the modules it imports"
nice -n 10 go list -deps tool >/dev/null
version=$(go list -m -f '{{.Version}}' "$module")
k8s_version=$(go list -m -f '{{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' k8s.io/kubernetes)
src=$(go list -m -f '{{.Dir}}' "$module")
echo "koordinator: modules ready after $((SECONDS - t_start))s (Koordinator $version, Kubernetes $k8s_version)"

rm -rf "$out/tmp"
mkdir -p "$out/tmp/bin" "$out/tmp/crds"
echo "koordinator: [2/3] compiling cmd/koord-scheduler"
t=$SECONDS
nice -n 10 go build -p "$jobs" -trimpath -ldflags "-s -w" -o "$out/tmp/bin/koord-scheduler" \
  "$module/cmd/koord-scheduler"
echo "koordinator: compiled in $((SECONDS - t))s"
echo "koordinator: [3/3] copying the CRDs from $src/config/crd/bases"
cp "$src"/config/crd/bases/*.yaml "$out/tmp/crds/"
chmod u+w "$out/tmp/crds"/*.yaml

rm -rf "$out/bin" "$out/crds"
mv "$out/tmp/bin" "$out/bin"
mv "$out/tmp/crds" "$out/crds"
rmdir "$out/tmp"
{
  echo "Koordinator $version (koord-scheduler), Kubernetes libraries $k8s_version, $go_version"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t_start))s"
} >"$out/VERSION"
touch "$out/.complete"
ln -sfn "$key" "$peer_root/current"
find "$peer_root" -mindepth 2 -maxdepth 2 -name .complete -printf '%T@ %h\n' | sort -rn |
  tail -n +3 | while read -r _ old; do
    echo "koordinator: removing an older build, $old"
    rm -rf "$old"
  done
echo "koordinator: built in $((SECONDS - t_start))s; cache $(du -sh "$peer_root" | cut -f1)"
echo "$out"
