#!/usr/bin/env bash
# Builds test/nri/runtime, the runtime side of NRI from containerd's own NRI module (what
# containerd v2.4.2 embeds: github.com/containerd/nri v0.12.3, ttrpc v1.2.9), for the agent's NRI
# interop test. Go is used here only: nothing tessera runs needs it.
#
#   test/nri/build.sh     prints the binary's path, building it first if needed
#
# The binary goes to ${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/nri-runtime/<key>/nri-runtime, the
# key hashing go.mod, go.sum, main.go, this script and the Go version; Go's module and build caches
# sit beside it. A second run with nothing changed returns at once; concurrent runs wait on a lock.
# The first build downloads the modules (about 30 MB) and takes 1-2 minutes on 2 cores.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${TESSERA_CACHE_DIR:-$HOME/.cache/tessera}/nri-runtime"
command -v go >/dev/null 2>&1 || { echo "test/nri/build.sh: Go is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
key="$( { cat "$here/runtime/go.mod" "$here/runtime/go.sum" "$here/runtime/main.go";
          grep -v '^#' "${BASH_SOURCE[0]}"; go env GOVERSION; } | sha256sum | cut -c1-16)"
out="$cache/$key/nri-runtime"
mkdir -p "$cache"
exec 9>"$cache/.build.lock"
flock 9
if [[ ! -x "$out" ]]; then
  mkdir -p "$cache/$key"
  (cd "$here/runtime" &&
    GOMODCACHE="$cache/gomod" GOCACHE="$cache/gocache" GOFLAGS=-mod=readonly GOTOOLCHAIN=local \
      CGO_ENABLED=0 nice -n 10 go build -p 2 -tags nri_no_wasm -trimpath -o "$out.tmp" .) >&2
  mv "$out.tmp" "$out"
fi
echo "$out"
