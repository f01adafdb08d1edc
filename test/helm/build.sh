#!/usr/bin/env bash
# Builds Helm from its Go module (helm.sh/helm/v4, pinned in go.mod/go.sum beside this script) into
# a cache outside the source tree, for the chart's tests (deploy/helm/tessera):
#
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/helm/<key>/bin/helm
#
# <key> hashes go.mod, go.sum, this script (less its comments), the Go version and GOOS/GOARCH,
# so a second run with nothing changed returns at once. helm v4.3 requires the same Kubernetes
# modules as the test control plane (k8s.io/* v0.37.2), so the Go module and build caches are the
# control plane's (controlplane/gomod, controlplane/gocache): a machine that built the control
# plane compiles little more. helm/current links to the newest build; the three newest are kept.
# The last line printed is the bin folder.
#
# Usage: build.sh [--print-bin-dir] [-h|--help]
#   --print-bin-dir  print the bin folder this tree's sources map to and exit (builds nothing,
#                    fails if it has not been built)
# Environment:
#   TESSERA_CACHE_DIR    cache root (default $HOME/.cache/tessera)
#   TESSERA_BUILD_JOBS   parallel Go compile jobs (default 2)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${TESSERA_CACHE_DIR:-${HOME:-/tmp}/.cache/tessera}
helm_root=$cache_root/helm
jobs=${TESSERA_BUILD_JOBS:-2}

die() { echo "build.sh: $*" >&2; exit 1; }

print_only=0
case "${1:-}" in
  --print-bin-dir) print_only=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

command -v go >/dev/null || die "Go is not installed; run ./scripts/setup.sh"
export GOTOOLCHAIN=local
go_version=$(go env GOVERSION)
key=$( { cat "$here/go.mod" "$here/go.sum";
         grep -v '^[[:space:]]*#' "$here/build.sh";
         echo "$go_version"; go env GOOS GOARCH;
       } | sha256sum | cut -c1-16)
out=$helm_root/$key
bin=$out/bin

complete() { [[ -f $out/.complete && -x $bin/helm ]]; }

if ((print_only)); then
  complete || die "no helm built for this tree at $bin; run test/helm/build.sh"
  echo "$bin"
  exit 0
fi

mkdir -p "$helm_root"
if complete; then
  ln -sfn "$key" "$helm_root/current"
  echo "helm: up to date ($(head -1 "$out/VERSION" 2>/dev/null))"
  echo "$bin"
  exit 0
fi

exec 9>"$helm_root/.build.lock"
if ! flock -n 9; then
  echo "helm: waiting for another build in $helm_root"
  flock 9
fi
if complete; then
  ln -sfn "$key" "$helm_root/current"
  echo "$bin"
  exit 0
fi

export GOMODCACHE=$cache_root/controlplane/gomod
export GOCACHE=$cache_root/controlplane/gocache
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOMAXPROCS=$jobs
export CGO_ENABLED=0
export GOWORK=off
cd "$here"

t_start=$SECONDS
echo "helm: building into $out (Go $go_version, $jobs jobs)"
nice -n 10 go list -deps tool >/dev/null
helm_version=$(go list -m -f '{{.Version}}' helm.sh/helm/v4)
# Stamped as Helm's Makefile does, so `helm version` reports the release.
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version"
ldflags+=" -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
rm -rf "$out/bin.tmp"
mkdir -p "$out/bin.tmp"
nice -n 10 go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/helm" \
  helm.sh/helm/v4/cmd/helm
rm -rf "$bin"
mv "$out/bin.tmp" "$bin"
{
  echo "helm $helm_version, $go_version"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t_start))s"
} >"$out/VERSION"
touch "$out/.complete"
ln -sfn "$key" "$helm_root/current"
find "$helm_root" -mindepth 2 -maxdepth 2 -name .complete -printf '%T@ %h\n' | sort -rn |
  tail -n +4 | while read -r _ old; do
    echo "helm: removing an older build, $old"
    rm -rf "$old"
  done
echo "helm: built in $((SECONDS - t_start))s"
echo "$bin"
