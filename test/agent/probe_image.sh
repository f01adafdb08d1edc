#!/usr/bin/env bash
# probe_image.sh OUT.tar FILE...: the image tessera.local/cuda-probe:1 for the agent's e2e
# tests, an OCI archive that `ctr images import` takes (scripts/oci_archive.sh: one uncompressed
# layer, reproducible).
#
# What is in it: Debian's static busybox (/bin/sh and its applets), each PROGRAM in /opt/probe/,
# and the shared libraries they need (ldd) with the dynamic loader, copied from this host, so a
# glibc program runs in it. Nothing of the NVIDIA driver: the agent mounts the driver's
# libcuda.so.1 and libnvidia-ml.so.1 (here the fake ones of test/fake_cuda, or the CUDA shim in
# front of them) into /usr/lib/x86_64-linux-gnu, where the image's loader finds them.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 OUT.tar FILE..." >&2; exit 2; }
out=$1
shift
busybox=/bin/busybox  # Debian's busybox-static (scripts/setup.sh)
[[ -x $busybox ]] || { echo "$0: $busybox (busybox-static) is missing; run ./scripts/setup.sh" >&2; exit 1; }
for p in "$@"; do [[ -f $p ]] || { echo "$0: $p is not a file" >&2; exit 1; }; done

work=$(mktemp -d "${out}.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/proc" "$root/sys" "$root/dev" "$root/root" \
  "$root/opt/probe" "$root/usr/lib/x86_64-linux-gnu" "$root/lib64" "$root/usr/local/lib/tessera"
chmod 1777 "$root/tmp"
ln -s usr/lib "$root/lib"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [[ $applet == busybox ]] || ln -s busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
for p in "$@"; do
  case $(basename "$p") in
    *.so | *.so.*) ;;
    *) cp "$p" "$root/opt/probe/" ;;
  esac
  # Every library the program needs, from this host, into the image's library folder; the
  # loader at its ABI path.
  while read -r lib; do
    case $lib in
      */ld-linux-x86-64.so.2) cp -L "$lib" "$root/lib64/ld-linux-x86-64.so.2" ;;
      /*) cp -L "$lib" "$root/usr/lib/x86_64-linux-gnu/$(basename "$lib")" ;;
    esac
  done < <(ldd "$p" | awk '/=> \//{print $3} /^\t\/.*ld-linux/{print $1}')
done

# The archive (scripts/oci_archive.sh, as test/controlplane/build.sh writes its images).
name=tessera.local/cuda-probe:1
"$(dirname "${BASH_SOURCE[0]}")/../../scripts/oci_archive.sh" "$root" "$name" \
  '{"Entrypoint": ["/bin/sh"], "Env": ["PATH=/opt/probe:/usr/sbin:/usr/bin:/sbin:/bin"]}' "$out"
echo "$name"
