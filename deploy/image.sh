#!/usr/bin/env bash
# image.sh [--build-dir DIR] [--name NAME] OUT.tar: the tessera image (the one recipe; why:
# docs/install.md, "The image"), without Docker or a registry, from binaries built on this
# machine: an OCI archive that `ctr -n k8s.io images import` (containerd, on each node), `docker
# load` and `skopeo copy oci-archive:OUT.tar docker://REGISTRY/tessera:TAG` take. Nodes that pull
# from no registry: install the chart with image.pullPolicy=Never or IfNotPresent.
# test/scripts/image_test.sh checks that every library the binary loads is in the image and that
# the image runs it from its own files alone.
#
#   cmake --preset release && cmake --build --preset release --target tessera tessera-cuda tessera-nvml
#   deploy/image.sh tessera.tar                     # docker.io/library/tessera:<chart appVersion>
#   ctr -n k8s.io images import tessera.tar          # on every node
#
# Options:
#   --build-dir DIR   where the binaries are (default: build/release): DIR/tessera,
#                     DIR/src/shim/libtessera-cuda.so, DIR/src/shim/libtessera-nvml.so
#   --name NAME       the image name (default: docker.io/library/tessera:<appVersion of
#                     deploy/helm/tessera/Chart.yaml>, which is what the chart's default
#                     image.repository "tessera" and tag resolve to in containerd)
#
# What is in it: /usr/local/bin/tessera (debug information stripped) and
# its link kubectl-tessera, the CUDA shim in /usr/local/lib/tessera (where `tessera agent` finds
# it), the shared libraries tessera needs (ldd) with the dynamic loader, copied from this host,
# the host's CA bundle, /etc/passwd with root and the nonroot user 65532 that the image runs as.
# Prints the image name.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "image.sh: $*" >&2; exit 2; }

build=$repo/build/release
name=
out=
while (($#)); do
  case $1 in
    --build-dir) build=${2:?--build-dir needs a folder}; shift ;;
    --build-dir=*) build=${1#*=} ;;
    --name) name=${2:?--name needs an image name}; shift ;;
    --name=*) name=${1#*=} ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (try --help)" ;;
    *) [[ -z $out ]] || die "one OUT.tar only (try --help)"; out=$1 ;;
  esac
  shift
done
[[ -n $out ]] || die "no OUT.tar (try --help)"
if [[ -z $name ]]; then
  version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$here/helm/tessera/Chart.yaml")
  [[ -n $version ]] || die "no appVersion in $here/helm/tessera/Chart.yaml"
  name=docker.io/library/tessera:$version
fi
binary=$build/tessera
shims=("$build/src/shim/libtessera-cuda.so" "$build/src/shim/libtessera-nvml.so")
for f in "$binary" "${shims[@]}"; do
  [[ -f $f ]] || die "$f is missing: build it first (cmake --build --preset release --target" \
    "tessera tessera-cuda tessera-nvml), or name the build with --build-dir"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{etc/ssl/certs,tmp,usr/local/bin,usr/local/lib/tessera,usr/lib/x86_64-linux-gnu,lib64}
chmod 1777 "$root/tmp"
ln -s usr/lib "$root/lib"
objcopy --strip-debug "$binary" "$root/usr/local/bin/tessera"
ln -s tessera "$root/usr/local/bin/kubectl-tessera"
for s in "${shims[@]}"; do objcopy --strip-debug "$s" "$root/usr/local/lib/tessera/$(basename "$s")"; done
# The libraries tessera loads, from this host; the loader at its ABI path.
while read -r lib; do
  case $lib in
    */ld-linux-x86-64.so.2) cp -L "$lib" "$root/lib64/ld-linux-x86-64.so.2" ;;
    /*) cp -L "$lib" "$root/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ;;
  esac
done < <(ldd "$binary" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}')
[[ -e $root/lib64/ld-linux-x86-64.so.2 ]] || die "ldd named no dynamic loader for $binary"
[[ ! -f /etc/ssl/certs/ca-certificates.crt ]] ||
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  >"$root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$root/etc/group"

"$repo/scripts/oci_archive.sh" "$root" "$name" \
  '{"Entrypoint": ["/usr/local/bin/tessera"], "User": "65532:65532",
    "Env": ["PATH=/usr/local/bin:/usr/bin:/bin"]}' "$out"
echo "$name"
