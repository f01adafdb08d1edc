#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager,
# kubectl) from the Go modules pinned in go.mod/go.sum, into a cache outside the source tree:
#
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/controlplane/<key>/bin
#
# <key> hashes go.mod, go.sum, this script (less its comments) and the Go version, so a
# second run with nothing changed finds the binaries and returns at once. The Go module and build caches live beside it
# (controlplane/gomod, controlplane/gocache), so the cache folder is self-contained. The folder
# controlplane/current is a symlink to the newest build; the three newest builds are kept. The
# last line printed is the bin folder.
#
# Usage: build.sh [--print-bin-dir] [-h|--help]
#   --print-bin-dir  print the bin folder this tree's sources map to and exit (builds nothing,
#                    fails if it has not been built)
# Environment:
#   TESSERA_CACHE_DIR    cache root (default $HOME/.cache/tessera)
#   TESSERA_BUILD_JOBS   parallel Go compile jobs (default 2; the machines have 2 cores)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${TESSERA_CACHE_DIR:-${HOME:-/tmp}/.cache/tessera}
cp_root=$cache_root/controlplane
jobs=${TESSERA_BUILD_JOBS:-2}
components=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl)

die() { echo "build.sh: $*" >&2; exit 1; }

print_only=0
case "${1:-}" in
  --print-bin-dir) print_only=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

command -v go >/dev/null || die "Go is not installed; run ./scripts/setup.sh"
# The machines' own Go builds this; never let go.mod switch toolchains behind our back.
export GOTOOLCHAIN=local
go_version=$(go env GOVERSION)
key=$( { cat "$here/go.mod" "$here/go.sum"; grep -v '^[[:space:]]*#' "$here/build.sh";
         echo "$go_version";
         go env GOOS GOARCH; } | sha256sum | cut -c1-16)
out=$cp_root/$key
bin=$out/bin

complete() {
  [[ -f $out/.complete ]] || return 1
  local c
  for c in "${components[@]}"; do [[ -x $bin/$c ]] || return 1; done
}

if ((print_only)); then
  complete || die "no control plane built for this tree at $bin; run test/controlplane/build.sh"
  echo "$bin"
  exit 0
fi

mkdir -p "$cp_root"
if complete; then
  ln -sfn "$key" "$cp_root/current"
  echo "controlplane: up to date ($(cat "$out/VERSION" 2>/dev/null | head -1))"
  echo "$bin"
  exit 0
fi

# One build at a time per cache (several worktrees may share it).
exec 9>"$cp_root/.build.lock"
if ! flock -n 9; then
  echo "controlplane: waiting for another build in $cp_root"
  flock 9
fi
if complete; then
  ln -sfn "$key" "$cp_root/current"
  echo "$bin"
  exit 0
fi

export GOMODCACHE=$cp_root/gomod
export GOCACHE=$cp_root/gocache
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOMAXPROCS=$jobs
export CGO_ENABLED=0   # static binaries, as Kubernetes ships its control plane
export GOWORK=off
cd "$here"

t_start=$SECONDS
echo "controlplane: building into $out (Go $go_version, $jobs jobs)"
echo "controlplane: the first build on a machine downloads ~600 MB of modules and compiles ~2700"
echo "controlplane: packages (~16 minutes on 2 cores, ~5 GB of cache); later runs take a second"
echo "controlplane: [0/5] downloading the modules the five programs import"
nice -n 10 go list -deps tool >/dev/null
k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
echo "controlplane: modules ready after $((SECONDS - t_start))s (Kubernetes $k8s_version, etcd $etcd_version)"

# Version stamps as Kubernetes' hack/lib/version.sh sets them, so /version and kubectl version
# report the real release instead of v0.0.0-master.
minor=${k8s_version#v*.}; minor=${minor%%.*}
major=${k8s_version#v}; major=${major%%.*}
xflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  xflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  xflags+=" -X $pkg.gitTreeState=clean"
done
ldflags="-s -w$xflags"

rm -rf "$out/bin.tmp"
mkdir -p "$out/bin.tmp"
declare -A pkgs=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
)
i=0
for c in "${components[@]}"; do
  i=$((i + 1))
  t=$SECONDS
  echo "controlplane: [$i/5] $c (${pkgs[$c]})"
  nice -n 10 go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/$c" "${pkgs[$c]}"
  echo "controlplane: [$i/5] $c done in $((SECONDS - t))s"
done

rm -rf "$bin"
mv "$out/bin.tmp" "$bin"
{
  echo "Kubernetes $k8s_version, etcd $etcd_version, $go_version"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $((SECONDS - t_start))s"
} >"$out/VERSION"
touch "$out/.complete"
ln -sfn "$key" "$cp_root/current"
# Keep the three newest builds (other worktrees may pin other keys); Go trims its own caches.
find "$cp_root" -mindepth 2 -maxdepth 2 -name .complete -printf '%T@ %h\n' | sort -rn |
  tail -n +4 | while read -r _ old; do
    echo "controlplane: removing an older build, $old"
    rm -rf "$old"
  done
echo "controlplane: built in $((SECONDS - t_start))s; cache $(du -sh "$cp_root" | cut -f1) in $cp_root"
echo "$bin"
