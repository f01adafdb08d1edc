#!/usr/bin/env bash
# Builds the test cluster into a cache outside the source tree:
#
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/controlplane/<key>/bin     the programs
#   ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/controlplane/<key>/images  two OCI image archives
#
# - the control plane: etcd, kube-apiserver, kube-scheduler, kube-controller-manager, kubectl,
#   and the node agent kubelet, from the Go modules pinned in go.mod/go.sum;
# - the container runtime: containerd, containerd-shim-runc-v2 and ctr, from the separate
#   module in containerd/ (its requirements must not move the Kubernetes pins);
# - the test device plugin and DRA kubelet plugin in plugins/ (Go, against the same pins), and
#   the test NRI plugin in containerd/nriplugin (against containerd's);
# - pause, compiled static from Kubernetes' build/pause/linux/pause.c with the system's gcc;
# - images/pause.tar (tessera.local/pause:3.10.2) and images/busybox.tar
#   (tessera.local/busybox:1, Debian's static busybox), written as OCI archives by hand: nodes
#   import them with ctr and never pull anything.
# runc and the CNI plugins are Debian's (scripts/setup.sh installs them).
#
# <key> hashes go.mod, go.sum, containerd/go.{mod,sum}, the plugins' sources, this script (less
# its comments), the Go and gcc versions and the busybox package's version, so a second run with
# nothing changed finds the binaries and returns at once. The Go module and build caches live
# beside it (controlplane/gomod, controlplane/gocache), so the cache folder is self-contained. The
# folder controlplane/current is a symlink to the newest build; the three newest builds are kept.
# The last line printed is the bin folder.
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
components=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet
            containerd containerd-shim-runc-v2 ctr tessera-test-device-plugin
            tessera-test-dra-plugin tessera-test-nri-plugin pause)
images=(pause busybox)
busybox=/bin/busybox   # Debian's busybox-static

die() { echo "build.sh: $*" >&2; exit 1; }

print_only=0
case "${1:-}" in
  --print-bin-dir) print_only=1 ;;
  -h | --help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) die "unknown argument '$1' (try --help)" ;;
esac

command -v go >/dev/null || die "Go is not installed; run ./scripts/setup.sh"
command -v gcc >/dev/null || die "gcc is not installed; run ./scripts/setup.sh"
command -v jq >/dev/null || die "jq is not installed; run ./scripts/setup.sh"
busybox_version=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null) && [[ -x $busybox ]] ||
  die "Debian's busybox-static is not installed (the test image needs it); run ./scripts/setup.sh"
# The machines' own Go builds this; never let go.mod switch toolchains behind our back.
export GOTOOLCHAIN=local
go_version=$(go env GOVERSION)
key=$( { cat "$here/go.mod" "$here/go.sum" "$here/containerd/go.mod" "$here/containerd/go.sum";
         find "$here/plugins" "$here/containerd" -type f -name '*.go' | LC_ALL=C sort | xargs cat;
         grep -v '^[[:space:]]*#' "$here/build.sh" "$here/../../scripts/oci_archive.sh";
         echo "$go_version"; go env GOOS GOARCH; gcc -dumpfullversion; echo "$busybox_version";
       } | sha256sum | cut -c1-16)
out=$cp_root/$key
bin=$out/bin

complete() {
  [[ -f $out/.complete ]] || return 1
  local c
  for c in "${components[@]}"; do [[ -x $bin/$c ]] || return 1; done
  for c in "${images[@]}"; do [[ -f $out/images/$c.tar ]] || return 1; done
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
echo "controlplane: the first build on a machine downloads ~1.2 GB of modules and compiles ~3800"
echo "controlplane: packages (~20 minutes on 2 cores, ~6 GB of cache); later runs take a second"
echo "controlplane: [0/9] downloading the modules the programs import"
nice -n 10 go list -deps tool ./plugins/... >/dev/null
(cd containerd && nice -n 10 go list -deps tool ./nriplugin >/dev/null)
k8s_version=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
containerd_version=$(cd containerd && go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)
echo "controlplane: modules ready after $((SECONDS - t_start))s (Kubernetes $k8s_version," \
  "etcd $etcd_version, containerd $containerd_version)"

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
# step N TEXT: a numbered progress line; steps time themselves with $SECONDS.
step() { echo "controlplane: [$1/9] $2"; }
declare -A pkgs=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
  [kubectl]=k8s.io/kubernetes/cmd/kubectl
  [kubelet]=k8s.io/kubernetes/cmd/kubelet
)
i=0
for c in etcd kube-apiserver kube-scheduler kube-controller-manager kubectl kubelet; do
  i=$((i + 1))
  t=$SECONDS
  step $i "$c (${pkgs[$c]})"
  nice -n 10 go build -p "$jobs" -trimpath -ldflags "$ldflags" -o "$out/bin.tmp/$c" "${pkgs[$c]}"
  step $i "$c done in $((SECONDS - t))s"
done

t=$SECONDS
step 7 "containerd $containerd_version, containerd-shim-runc-v2, ctr, test NRI plugin (containerd/go.mod)"
# Stamped as containerd's Makefile does; without it the binaries report 2.4.x+unknown.
cldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd_version"
cldflags+=" -X github.com/containerd/containerd/v2/version.Revision=tessera-test"
for c in containerd containerd-shim-runc-v2 ctr; do
  (cd containerd && nice -n 10 go build -p "$jobs" -trimpath -ldflags "$cldflags" \
    -o "$out/bin.tmp/$c" "github.com/containerd/containerd/v2/cmd/$c")
done
(cd containerd && nice -n 10 go build -p "$jobs" -trimpath -ldflags "-s -w" \
  -o "$out/bin.tmp/tessera-test-nri-plugin" ./nriplugin)
step 7 "containerd done in $((SECONDS - t))s"

t=$SECONDS
step 8 "test plugins (plugins/deviceplugin, plugins/draplugin)"
nice -n 10 go build -p "$jobs" -trimpath -ldflags "-s -w" \
  -o "$out/bin.tmp/tessera-test-device-plugin" ./plugins/deviceplugin
nice -n 10 go build -p "$jobs" -trimpath -ldflags "-s -w" \
  -o "$out/bin.tmp/tessera-test-dra-plugin" ./plugins/draplugin
step 8 "test plugins done in $((SECONDS - t))s"

# The images: one-layer OCI archives, byte-for-byte reproducible (scripts/oci_archive.sh, which
# the agent's probe image and the release image use too).
oci_archive=$here/../../scripts/oci_archive.sh
image_env='"Env": ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]'

t=$SECONDS
step 9 "pause (static) and the images tessera.local/pause:3.10.2, tessera.local/busybox:1"
pause_c=$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
gcc -Os -static -Wall -DVERSION=v3.10.2-tessera -o "$out/bin.tmp/pause" "$pause_c"
rm -rf "$out/images.tmp" "$out/rootfs.tmp"
mkdir -p "$out/images.tmp" "$out/rootfs.tmp/pause" "$out/rootfs.tmp/busybox"
cp "$out/bin.tmp/pause" "$out/rootfs.tmp/pause/pause"
"$oci_archive" "$out/rootfs.tmp/pause" tessera.local/pause:3.10.2 \
  "{\"Entrypoint\": [\"/pause\"], $image_env, \"User\": \"65535:65535\"}" "$out/images.tmp/pause.tar"
bb=$out/rootfs.tmp/busybox
mkdir -p "$bb/bin" "$bb/etc" "$bb/tmp" "$bb/proc" "$bb/sys" "$bb/dev" "$bb/root"
chmod 1777 "$bb/tmp"
cp "$busybox" "$bb/bin/busybox"
for applet in $("$busybox" --list); do
  [[ $applet == busybox ]] || ln -s busybox "$bb/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$bb/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$bb/etc/group"
"$oci_archive" "$bb" tessera.local/busybox:1 "{\"Entrypoint\": [\"/bin/sh\"], $image_env}" \
  "$out/images.tmp/busybox.tar"
rm -rf "$out/rootfs.tmp"
step 9 "pause and images done in $((SECONDS - t))s"

rm -rf "$bin" "$out/images"
mv "$out/bin.tmp" "$bin"
mv "$out/images.tmp" "$out/images"
{
  echo "Kubernetes $k8s_version, etcd $etcd_version, containerd $containerd_version, $go_version"
  echo "runc $(runc --version 2>/dev/null | sed -n '1s/^runc version //p'), busybox $busybox_version, gcc $(gcc -dumpfullversion)"
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
