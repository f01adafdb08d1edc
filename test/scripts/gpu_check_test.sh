#!/usr/bin/env bash
# scripts/gpu_check.sh end to end without a GPU: nvidia-smi is a stand-in that replays real saved
# outputs (an 8 x H100 SXM server's `nvidia-smi -q`, an HGX H100's `nvidia-smi topo -m`), and NVML
# is the test fake libnvidia-ml.so.1 describing the same eight GPUs. The check must pass, then
# fail (status 1, the mismatch named) when the driver reports one GPU's memory differently.
#   gpu_check_test.sh TESSERA_BINARY FAKE_NVML_DIR SOURCE_DIR
set -euo pipefail
tessera="$1" fake_nvml_dir="$2" src="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/bin"
cat > "$work/bin/nvidia-smi" <<STUB
#!/usr/bin/env bash
case "\$*" in
  "-q") grep -v '^#' "$src/src/agent/discovery/testdata/h100_sxm_x8_nvidia_smi_q.txt" ;;
  "topo -m") grep -v '^#' "$src/src/core/topology/testdata/hgx_h100.txt" ;;
  *driver_version*) echo 565.57.01 ;;
  *name*) for i in 0 1 2 3 4 5 6 7; do echo "NVIDIA H100 80GB HBM3"; done ;;
  *) exit 1 ;;
esac
STUB
chmod +x "$work/bin/nvidia-smi"

# The fake driver's view of the same machine: UUIDs and bus ids from the -q text, NUMA nodes and
# CPUs from the topo text, 18 NVLinks per GPU to NVSwitches.
nvml_config() {  # $1: memory of GPU 5 in MiB
  local uuids=(b42dd28e-ffdd-8720-1df0-98bd8cdc05b1 7c3cadbd-17e5-0913-f69b-c618122ea0cd
    2d50cdf6-dd67-9f2e-855e-0d4d6d395a2f d1838e76-90e6-4408-711d-aeeaa2e1fd14
    72be6e5d-3c1b-0d37-98ac-d3ef159f2589 52378fbc-3124-3895-13b6-1dd179563e0f
    83a5aebb-b71c-c570-aa83-185e1233fe97 33135771-a848-ece1-b61e-489e221d663c)
  local buses=(18 2A 3A 5D 9A AB BA DB)
  local gpus="[]" i mib
  for i in 0 1 2 3 4 5 6 7; do
    mib=81559
    [[ $i == 5 ]] && mib="$1"
    gpus=$(jq -c --arg u "GPU-${uuids[$i]}" --arg b "00000000:${buses[$i]}:00.0" --argjson i "$i" \
      --argjson mib "$mib" '. + [{uuid: $u, name: "NVIDIA H100 80GB HBM3",
        memory_bytes: ($mib * 1048576), pci_bus_id: $b, minor: $i, numa_node: (($i / 4) | floor),
        cpus: (if $i < 4 then [range(0;48)] + [range(96;144)] else [range(48;96)] + [range(144;192)] end),
        nvlinks: [range(18) | "switch"], mig: {current: 0}}]' <<< "$gpus")
  done
  jq -n --argjson gpus "$gpus" '{driver_version: "565.57.01", cuda_version: 12070, gpus: $gpus,
    pcie: [range(8) as $i | [range(8) as $k | if $i == $k then 0 elif (($i/4)|floor) == (($k/4)|floor) then 40 else 50 end]]}'
}

run() {
  PATH="$work/bin:$PATH" LD_LIBRARY_PATH="$fake_nvml_dir" TESSERA_FAKE_NVML="$work/nvml.json" \
    TESSERA="$tessera" "$src/scripts/gpu_check.sh" "$work/out"
}

nvml_config 81559 > "$work/nvml.json"
run > "$work/pass.txt"
grep -q '^94 checks, 0 mismatches.$' "$work/pass.txt"
for f in nvidia-smi-q.txt nvidia-smi-topo-m.txt inventory.json report.md; do test -s "$work/out/$f"; done
grep -q '^- driver: 565.57.01$' "$work/out/report.md"

nvml_config 80000 > "$work/nvml.json"
status=0
run > "$work/fail.txt" || status=$?
test "$status" = 1
grep -q '| GPU 5 (00000000:AB:00.0) memory (MiB) | 81559 | 80000 | \*\*MISMATCH\*\* |' "$work/fail.txt"
echo "gpu_check_test: ok"
