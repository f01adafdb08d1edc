#!/usr/bin/env bash
# Packs what the GPU checks need onto a GPU machine that has no build tools for tessera (a lent
# device: CUDA, PyTorch and a compiler, no abseil): one archive, built here, that
# scripts/gpu_session.sh unpacks and runs there.
#
#   scripts/gpu_carry.sh [OUT]        default OUT: .devcarry/gpu-carry.tar.xz
#
# In it: bin/tessera (gpu_check.sh's binary) and bin/agent_gpu_run (the agent's per-GPU loop,
# stage compute_controlled and gpu_usage_probe.py --agent), stripped (bin/*.bin), with every
# library they need beyond glibc and libstdc++ in lib/; bin/tessera and bin/agent_gpu_run are
# wrappers that set LD_LIBRARY_PATH for those two alone, so PyTorch in the same run keeps its own
# libraries; shim/: the CUDA shim and the check programs as
# gpu_shim_check.py builds them (its --prebuilt directory). Builds the dev preset's tessera and
# agent_gpu_run first. .devcarry/ is ignored by git; carry the archive with the working tree.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-$root/.devcarry/gpu-carry.tar.xz}"
cd "$root"
cmake --preset dev >/dev/null
cmake --build --preset dev --target tessera agent_gpu_run >/dev/null
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/carry/bin" "$stage/carry/lib" "$stage/carry/shim"
for b in build/dev/tessera build/dev/test/shim/agent_gpu_run; do
  name="$(basename "$b")"
  strip -o "$stage/carry/bin/$name.bin" "$b"
  ldd "$b" | awk '/=>/ {print $3}' |
    grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libgcc_s|libstdc\+\+)\.so' |
    xargs -r -I{} cp -L {} "$stage/carry/lib/"
  printf '#!/bin/sh\nd="$(cd "$(dirname "$0")" && pwd)"\nLD_LIBRARY_PATH="$d/../lib" exec "$d/%s.bin" "$@"\n' \
    "$name" > "$stage/carry/bin/$name"
  chmod +x "$stage/carry/bin/$name"
done
python3 - "$stage/carry/shim" <<'PY'
import importlib.util, os, shutil, sys, tempfile
spec = importlib.util.spec_from_file_location("g", os.path.join("scripts", "gpu_shim_check.py"))
g = importlib.util.module_from_spec(spec)
spec.loader.exec_module(g)
work = tempfile.mkdtemp()
built = g.build(work)
for f in os.listdir(built):
    shutil.copy2(os.path.join(built, f), sys.argv[1])
shutil.rmtree(work)
PY
printf '#!/bin/sh\nd="$(cd "$(dirname "$0")" && pwd)"\nLD_LIBRARY_PATH="$d/../lib" exec "$d/../bin/agent_gpu_run.bin" "$@"\n' \
  > "$stage/carry/shim/agent_gpu_run"
chmod +x "$stage/carry/shim/agent_gpu_run"
mkdir -p "$(dirname "$out")"
tar -C "$stage" -cJf "$out" carry
echo "gpu_carry: $out ($(du -h "$out" | cut -f1)), from $(git describe --always --dirty)"
