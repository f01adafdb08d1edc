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
  clang-tidy                            # the lint test (.clang-tidy, scripts/clang_tidy.sh)
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

# promtool (`promtool check metrics` on every /metrics the tests scrape, `promtool check rules` and
# `test rules` on the chart's alerts) and the Prometheus server (the helm install test asks it the
# dashboard's queries) from Debian's `prometheus` package, extracted rather than installed: the
# package would also install and, under systemd, start a Prometheus server as a service (96 MB, a
# service, a user). Into ${TESSERA_CACHE_DIR:-~/.cache/tessera}/promtool/<version>/, linked as
# promtool/current, where CMake looks for them (TESSERA_PROMTOOL, TESSERA_PROMETHEUS).
as_root() {
  if [[ $(id -u) -eq 0 ]]; then
    "$@"
  elif command -v sudo >/dev/null; then
    sudo "$@"
  else
    echo "setup: need root or sudo for: $*" >&2
    return 1
  fi
}

install_promtool() {
  local cache=${TESSERA_CACHE_DIR:-${HOME:-/tmp}/.cache/tessera}/promtool
  local version
  version=$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p')
  if [[ -z $version || $version == "(none)" ]]; then
    # A fresh machine whose packages were all present may have no package lists yet.
    echo "setup: refreshing apt's package lists to find Debian's prometheus package"
    as_root apt-get update -q >/dev/null || true
    version=$(apt-cache policy prometheus 2>/dev/null | sed -n 's/^ *Candidate: *//p')
  fi
  if [[ -z $version || $version == "(none)" ]]; then
    echo "setup: no Debian package 'prometheus' known to apt (apt-get update?); promtool checks will fail" >&2
    return 0
  fi
  local dir=$cache/${version//[^A-Za-z0-9.+~-]/_}
  if [[ -x $dir/promtool && -x $dir/prometheus ]]; then
    ln -sfn "$(basename "$dir")" "$cache/current"
    return 0
  fi
  echo "setup: promtool and prometheus from Debian's prometheus $version (extracted into $dir)"
  local work
  work=$(mktemp -d)
  (cd "$work" && apt-get download -q "prometheus=$version" >/dev/null 2>&1) ||
    { as_root apt-get update -q >/dev/null && (cd "$work" && apt-get download -q "prometheus=$version" >/dev/null); }
  dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
  mkdir -p "$dir"
  install -m 0755 "$work/x/usr/bin/promtool" "$dir/promtool"
  install -m 0755 "$work/x/usr/bin/prometheus" "$dir/prometheus"
  rm -rf "$work"
  ln -sfn "$(basename "$dir")" "$cache/current"
}

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} build dependencies present"
  install_promtool
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
install_promtool
echo "setup: done"
