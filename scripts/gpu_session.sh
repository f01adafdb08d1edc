#!/usr/bin/env bash
# Every GPU check in one run, for a session lent a GPU for minutes (run it from the repository's
# root on the GPU machine, with the archive scripts/gpu_carry.sh made on a build machine):
#   1. scripts/gpu_check.sh: the agent's inventory against nvidia-smi;
#   2. scripts/gpu_shim_check.py --prebuilt: the shim's stages $SHIM_STAGES (default
#      compute,compute_controlled: the compute caps with and without the agent's controller);
#   3. scripts/gpu_usage_probe.py --agent: NVML's per-process figures, the device's rate and record,
#      and what the agent's usage meter charged each pod, against the truth.
#
#   scripts/gpu_session.sh CARRY.tar.xz OUT_DIR
#
# Writes every result under OUT_DIR (commit them under bench/results/gpu/<machine>-<date>/) and
# prints a summary. Changes nothing on the GPU (no compute mode, MIG, clocks or accounting).
set -uo pipefail
if [[ $# -ne 2 ]]; then
  sed -n '2,12p' "$0" >&2
  exit 2
fi
carry="$1"
out="$2"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
mkdir -p "$out"
unpacked="$(mktemp -d)"
trap 'rm -rf "$unpacked"' EXIT
tar -C "$unpacked" -xJf "$carry" || { echo "gpu_session: cannot unpack $carry" >&2; exit 2; }
bins="$unpacked/carry"
status=0
step() { echo "== $1 ($(date -u +%T))"; }

step "gpu_check"
TESSERA="$bins/bin/tessera" timeout 120 scripts/gpu_check.sh "$out/gpu_check" \
  > "$out/gpu_check.log" 2>&1 || status=1
tail -n 15 "$out/gpu_check.log"

step "gpu_shim_check ${SHIM_STAGES:=compute,compute_controlled}"
timeout 600 python3 scripts/gpu_shim_check.py --prebuilt "$bins/shim" --only "$SHIM_STAGES" \
  --budget-s "${SHIM_BUDGET:-300}" --out "$out/shim-gpu.json" > "$out/shim-gpu.log" 2>&1 || status=1
tail -n 3 "$out/shim-gpu.log"
[[ -f "$out/shim-gpu.json" ]] && python3 - "$out/shim-gpu.json" <<'PY' 
import json, sys
d = json.load(open(sys.argv[1]))
for k, v in sorted(d.items()):
    if isinstance(v, dict) and "pass" in v:
        print(k, json.dumps({a: b for a, b in v.items() if not a.endswith("_controller")})[:900])
    elif k.endswith("_error"):
        print(k, v)
PY

step "gpu_usage_probe"
timeout 300 python3 scripts/gpu_usage_probe.py --seconds "${PROBE_SECONDS:-8}" \
  --shim-bins "$bins/shim" --agent "$bins/shim/agent_gpu_run" \
  --scenarios "${PROBE_SCENARIOS:-0.6,0.25;shim:0.6;shim:0.3,0.7}" \
  --out "$out/usage-probe.json" > "$out/usage-probe.log" 2>&1 || status=1
[[ -f "$out/usage-probe.json" ]] || tail -n 20 "$out/usage-probe.log"
[[ -f "$out/usage-probe.json" ]] && python3 - "$out/usage-probe.json" <<'PY' 
import json, sys
for s in json.load(open(sys.argv[1]))["scenarios"]:
    s.pop("raw", None)
    print(json.dumps(s)[:1500])
PY
step "end, status $status"
exit "$status"
