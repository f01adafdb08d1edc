#!/usr/bin/env bash
# probe_image.sh OUT.tar FILE...: the image tessera.local/cuda-probe:1 for the agent's e2e
# tests, an OCI archive that `ctr images import` takes (as test/controlplane/build.sh writes its
# images: one uncompressed layer, reproducible).
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

# The archive (as oci_image in test/controlplane/build.sh).
name=tessera.local/cuda-probe:1
mkdir -p "$work/oci/blobs/sha256"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
layer_digest=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
layer_size=$(stat -c %s "$work/layer.tar")
mv "$work/layer.tar" "$work/oci/blobs/sha256/$layer_digest"
config=$(jq -cn --arg diff "sha256:$layer_digest" \
  '{architecture: "amd64", os: "linux", created: "1970-01-01T00:00:00Z",
    config: {Entrypoint: ["/bin/sh"], Env: ["PATH=/opt/probe:/usr/sbin:/usr/bin:/sbin:/bin"]},
    rootfs: {type: "layers", diff_ids: [$diff]}}')
config_digest=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
printf '%s' "$config" >"$work/oci/blobs/sha256/$config_digest"
manifest=$(jq -cn --arg c "sha256:$config_digest" --argjson cs "${#config}" \
  --arg l "sha256:$layer_digest" --argjson ls "$layer_size" \
  '{schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
    config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
    layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $l, size: $ls}]}')
manifest_digest=$(printf '%s' "$manifest" | sha256sum | cut -d' ' -f1)
printf '%s' "$manifest" >"$work/oci/blobs/sha256/$manifest_digest"
jq -cn --arg m "sha256:$manifest_digest" --argjson ms "${#manifest}" --arg name "$name" \
  '{schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m,
                 size: $ms, platform: {architecture: "amd64", os: "linux"},
                 annotations: {"io.containerd.image.name": $name,
                               "org.opencontainers.image.ref.name": ($name | sub(".*:"; ""))}}]}' \
  >"$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" \
  -cf "$out.tmp" oci-layout index.json blobs
mv "$out.tmp" "$out"
echo "$name"
