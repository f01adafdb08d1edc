#!/usr/bin/env bash
# Installs what tessera builds with, from Debian's packages only. Idempotent: installs only
# what is missing, so a second run takes a second. Needs root (or sudo) the first time.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev            # Status/StatusOr, flat_hash_map, strings
  nlohmann-json3-dev     # JSON at the edges (records, --json, API objects)
  libyaml-cpp-dev        # cluster and workload files, with line numbers for errors
  libcli11-dev           # subcommands and --help
  libfmt-dev libspdlog-dev  # formatting, logging (outside core)
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev       # Google Benchmark
  libcurl4-openssl-dev   # HTTPS to the Kubernetes API server
  libcpp-httplib-dev     # /metrics and /healthz of the scheduler (HTTP server)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc  # the DRA kubelet plugin (gRPC)
  gnuplot-nox            # charts in simulation reports
  openssl                # certificates for the test control plane
  procps util-linux      # pgrep (e2e checks), setsid and flock (test/controlplane scripts)
  jq curl                # scripts
  clang libclang-rt-14-dev clang-format  # libFuzzer targets (fuzz preset), formatting
  golang-go              # only if no Go is on the machine; builds the test control plane
  # The test nodes (test/controlplane): runc under containerd, the CNI bridge and host-local
  # plugins, a static busybox for the test image, iproute2 to remove bridges on stop.
  runc containernetworking-plugins busybox-static iproute2
)

missing=()
for p in "${packages[@]}"; do
  if [[ "$p" == golang-go ]] && command -v go >/dev/null 2>&1; then
    continue
  fi
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} build dependencies present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install packages" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
if ! "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"; then
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "setup: done"
