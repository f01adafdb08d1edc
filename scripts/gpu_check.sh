#!/usr/bin/env bash
# The GPU check: on a machine with NVIDIA GPUs, compares what `tessera agent` discovers through
# NVML with what nvidia-smi prints (nvidia-smi -q and nvidia-smi topo -m): GPU count, and per GPU
# UUID, index, PCI bus id, memory, model, MIG mode, NUMA node, CPU affinity, and every pair's
# link. Writes the three raw outputs and a Markdown report, and exits 1 on any mismatch.
#
#   scripts/gpu_check.sh [OUT_DIR]      default OUT_DIR: bench/results/gpu_check/<hostname>
#
# TESSERA (default: build/release/tessera, else build/dev/tessera) is the binary to check.
# Commit OUT_DIR/report.md under bench/results/ (the raw outputs name the machine's GPUs; keep
# them beside it). Needs nothing but nvidia-smi and the tessera binary; changes nothing on the
# machine.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tessera="${TESSERA:-}"
if [[ -z "$tessera" ]]; then
  for candidate in "$root/build/release/tessera" "$root/build/dev/tessera"; do
    if [[ -x "$candidate" ]]; then tessera="$candidate"; break; fi
  done
fi
if [[ -z "$tessera" || ! -x "$tessera" ]]; then
  echo "gpu_check: no tessera binary: build it (make build) or set TESSERA" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  echo "gpu_check: nvidia-smi is not on PATH: run this on a machine with an NVIDIA driver" >&2
  exit 2
fi

out="${1:-$root/bench/results/gpu_check/$(hostname -s)}"
mkdir -p "$out"
nvidia-smi -q > "$out/nvidia-smi-q.txt"
nvidia-smi topo -m > "$out/nvidia-smi-topo-m.txt"
"$tessera" agent --print-inventory > "$out/inventory.json"

status=0
{
  echo "# GPU check: tessera agent against nvidia-smi"
  echo
  echo "- machine: $(hostname -s), $(uname -r)"
  echo "- driver: $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)"
  echo "- GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | sed 's/^ *//' | paste -sd ';' -)"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- command: scripts/gpu_check.sh $*"
  echo "- tessera: $("$tessera" --version)"
  echo
  "$tessera" agent compare --inventory "$out/inventory.json" \
    --nvidia-smi-q "$out/nvidia-smi-q.txt" --nvidia-smi-topo "$out/nvidia-smi-topo-m.txt" ||
    status=$?
} > "$out/report.md"
cat "$out/report.md"
exit "$status"
