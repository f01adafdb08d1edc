#!/usr/bin/env bash
# oci_archive.sh ROOTFS NAME CONFIG OUT.tar: writes the folder ROOTFS as a one-layer OCI image
# archive named NAME (e.g. tessera.local/cuda-probe:1, or docker.io/library/tessera:0.1.0), that
# `ctr images import` and `docker load` take. CONFIG is the image configuration's "config" object
# as JSON ({"Entrypoint": [...], "Env": [...], "User": "..."}).
#
# Reproducible: one uncompressed layer with sorted names, mtime 0 and numeric owner 0, a config
# with created 1970-01-01, so the same files give the same digests (as test/controlplane/build.sh
# writes the harness's images). No Docker, no registry.
set -euo pipefail
[[ $# -eq 4 ]] || { echo "usage: $0 ROOTFS NAME CONFIG-JSON OUT.tar" >&2; exit 2; }
root=$1 name=$2 image_config=$3 out=$4
[[ -d $root ]] || { echo "$0: $root is not a folder" >&2; exit 2; }
jq -e 'type == "object"' <<<"$image_config" >/dev/null 2>&1 ||
  { echo "$0: CONFIG is not a JSON object: $image_config" >&2; exit 2; }

work=$(mktemp -d "${out}.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/oci/blobs/sha256"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
layer_digest=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
layer_size=$(stat -c %s "$work/layer.tar")
mv "$work/layer.tar" "$work/oci/blobs/sha256/$layer_digest"
config=$(jq -cn --arg diff "sha256:$layer_digest" --argjson c "$image_config" \
  '{architecture: "amd64", os: "linux", created: "1970-01-01T00:00:00Z", config: $c,
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
