#!/usr/bin/env bash
# The tessera image as docs/install.md makes it (deploy/image.sh, from a build's binaries): every
# shared library the binary loads is in the image (the list `ldd` gives on the build machine),
# the image alone runs it (chroot into the image's root: nothing of the host's /usr), the CUDA
# shim is where `tessera agent` looks for it, and the image runs as the nonroot user with the
# chart's appVersion as its tag and `tessera --version`'s release.
#
#   image_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=${1:?BUILD_DIR}
src=${2:?SOURCE_DIR}
fail() { echo "image_test: $*" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/tessera-image-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
name=$("$src/deploy/image.sh" --build-dir "$build" "$work/tessera.tar" | tail -1)
version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$src/deploy/helm/tessera/Chart.yaml")
[[ $name == "docker.io/library/tessera:$version" ]] || fail "image name $name, not tessera:$version"

# The archive's one layer, unpacked.
mkdir -p "$work/oci" "$work/root"
tar -xf "$work/tessera.tar" -C "$work/oci"
manifest=$(jq -r '.manifests[0].digest' "$work/oci/index.json" | sed 's/^sha256://')
layer=$(jq -r '.layers[0].digest' "$work/oci/blobs/sha256/$manifest" | sed 's/^sha256://')
config=$(jq -r '.config.digest' "$work/oci/blobs/sha256/$manifest" | sed 's/^sha256://')
tar -xf "$work/oci/blobs/sha256/$layer" -C "$work/root"
[[ $(jq -r '.config.User' "$work/oci/blobs/sha256/$config") == "65532:65532" ]] ||
  fail "the image does not run as 65532:65532"

# Every library ldd resolves for the binary, in the image.
missing=()
count=0
while read -r lib; do
  count=$((count + 1))
  case $lib in
    */ld-linux-x86-64.so.2) [[ -e $work/root/lib64/ld-linux-x86-64.so.2 ]] || missing+=("$lib") ;;
    *) [[ -e $work/root/usr/lib/x86_64-linux-gnu/$(basename "$lib") ]] || missing+=("$lib") ;;
  esac
done < <(ldd "$build/tessera" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}')
((count > 5)) || fail "ldd listed only $count libraries for $build/tessera"
((${#missing[@]} == 0)) || fail "not in the image: ${missing[*]}"
for shim in libtessera-cuda.so libtessera-nvml.so; do
  [[ -f $work/root/usr/local/lib/tessera/$shim ]] || fail "no /usr/local/lib/tessera/$shim"
done
[[ -L $work/root/usr/local/bin/kubectl-tessera ]] || fail "no kubectl-tessera link"

# The image's files alone run it.
run_in_image() {
  if [[ $(id -u) -eq 0 ]]; then
    chroot "$work/root" "$@"
  else
    unshare --user --map-root-user chroot "$work/root" "$@"
  fi
}
out=$(run_in_image /usr/local/bin/tessera --version) || fail "tessera --version in the image: $out"
[[ $out == "tessera $version ("*")" ]] || fail "tessera --version says '$out', not tessera $version (...)"
run_in_image /usr/local/bin/tessera agent --help >/dev/null || fail "tessera agent --help in the image"
echo "image_test: $name: $count libraries, all in the image; '$out' runs from the image alone"
