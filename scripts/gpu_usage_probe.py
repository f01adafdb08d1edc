#!/usr/bin/env python3
"""What a real GPU's NVML answers for per-process GPU time (issue 34), with the ground truth.

Worker processes (each a "pod") share the GPU, time-sliced as pods sharing a GPU without MPS
are. Each first measures, alone, how long one bf16 matmul kernel of its own takes (CUDA events);
then a scenario's workers run at once for --seconds, each launching enough kernels per 50 ms
period to keep the GPU busy for its duty (e.g. 0.60 and 0.25 of the time), and count them. The
ground truth of a process's GPU time is its kernel count times its kernel's time alone.

Meanwhile this process (no CUDA context of its own) calls nvmlDeviceGetProcessUtilization every
--interval-ms with lastSeen = the newest sample timestamp it has seen, as the node agent's sampler
(src/agent/procs/gpu_processes.cc) does, and records every sample raw. It reports, per worker:
  - truth_s: kernels x solo kernel time;
  - agent_s: what the agent's estimator makes of the same calls: per call, the mean smUtil of the
    process's samples times the time since the previous call;
  - samples_s: sum over samples of smUtil x the gap to the previous sample timestamp of the device;
and the raw samples, so that the driver's sampling cadence is on record; per scenario the GPU's
busy time from its rate (nvmlDeviceGetUtilizationRates at each call, device_busy_s) and from its
record (nvmlDeviceGetSamples, every sample period, device_record_busy_s, what the agent reads).
With --agent
(scripts/gpu_shim/agent_gpu_run.cc, built by CMake: the node agent's per-GPU loop), shim scenarios also run the agent beside
their pods, and each worker gets meter_s, the busy time the agent's usage meter charged to its pod
(src/agent/pods/usage_meter.h: the device's busy time, to the one pod running or split among
several by their shims' reports), and reported_s, what its pod's shims reported (its ledger's
gpu_busy_ns, src/shim/busy_meter.h), with the GPU's unattributed time and refused reports: the
agent's own attribution against the truth. JSON on stdout (and --out).
Changes nothing on the GPU.

Usage: scripts/gpu_usage_probe.py [--seconds 6] [--interval-ms 250] [--scenarios '0.6;0.6,0.25']
       [--shim-bins DIR [--agent PATH]] [--out F]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

node_gib = 1 << 30

WORKER = r"""
import json, sys, time, torch
duty, seconds, n = float(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
for _ in range(5):
    c = a @ b
torch.cuda.synchronize()
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for _ in range(40):
    c = a @ b
end.record()
torch.cuda.synchronize()
kernel_s = start.elapsed_time(end) / 1000.0 / 40
print(json.dumps({"ready": True, "kernel_s": kernel_s}), flush=True)
sys.stdin.readline()  # go
period = 0.05
per_period = max(1, round(duty * period / kernel_s))
count = 0
t0 = time.monotonic()
k = 0
while time.monotonic() - t0 < seconds:
    for _ in range(per_period):
        c = a @ b
    torch.cuda.synchronize()
    count += per_period
    k += 1
    wait = t0 + k * period - time.monotonic()
    if wait > 0:
        time.sleep(wait)
wall = time.monotonic() - t0
print(json.dumps({"kernels": count, "kernel_s": kernel_s, "wall_s": wall,
                  "truth_s": count * kernel_s, "per_period": per_period}), flush=True)
"""


def shim_node(bins):
    """The shim's layout (scripts/gpu_shim_check.py's Node) over the real driver."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "gpu_shim_check", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                       "gpu_shim_check.py"))
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)
    work = tempfile.mkdtemp(prefix="tessera-usage-probe-")
    node = g.Node(work, bins, g.find_real("libcuda.so.1"), g.find_real("libnvidia-ml.so.1"))
    out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"],
                         capture_output=True, text=True, env=node.env(None)).stdout
    node.uuid = out.strip().splitlines()[0].strip()
    return node, g.GIB


def scenario(nv, dev, duties, args, node=None):
    """Runs one worker per duty at once; returns the estimators against the truth. With `node`
    (the shim), each worker is a pod with a hard compute cap of its duty, the windows tiled as
    the agent's controller tiles them (phases in order), and the worker itself saturates: its
    window, not its loop, sets its share. Its truth uses the kernel time of a worker measured
    without the shim (a gate wait inside the calibration would inflate its own)."""
    workers = []
    solo_kernel_s = None
    if node is not None:
        cal = subprocess.Popen([sys.executable, "-c", WORKER, "1.0", "0", str(args.size)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        solo_kernel_s = json.loads(cal.stdout.readline())["kernel_s"]
        cal.communicate("go\n", timeout=60)
    phase = 0
    for d in duties:  # each measures its kernel alone before the next starts
        env, loop_duty = None, d
        if node is not None:
            permille = int(round(d * 1000))
            pod = node.pod(8 * node_gib, permille, duty=permille, phase=phase)
            phase += permille
            env, loop_duty = node.env(pod), 1.0
        p = subprocess.Popen([sys.executable, "-c", WORKER, str(loop_duty), str(args.seconds),
                              str(args.size)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env=env)
        ready = json.loads(p.stdout.readline())
        workers.append({"proc": p, "duty": d, "ready": ready, "pod": pod if node else None})
    agent_doc, stop_agent = None, None
    if node is not None and args.agent:
        import signal
        pods = [w["pod"] for w in workers]
        agent = subprocess.Popen([args.agent, "--gpu", node.uuid, "--nvml", node.real_nvml] + pods,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        agent.stdout.readline()  # ready

        def stop_agent():
            agent.send_signal(signal.SIGTERM)
            out, err = agent.communicate(timeout=30)
            lines = out.strip().splitlines()
            return json.loads(lines[-1]) if lines else {"error": err[-1500:]}
    raw = []  # every sample: (call index, pid, timeStamp, smUtil, memUtil)
    calls = []  # per call: seconds since the previous call, smUtil samples by pid, device util
    last_seen = int(time.time() * 1e6)
    record_last, record_busy_s = 0, 0.0  # the device's record (nvmlDeviceGetSamples), as the agent
    for w in workers:
        w["proc"].stdin.write("go\n")
        w["proc"].stdin.flush()
    t_start = t_prev = time.monotonic()
    errors = {}
    while time.monotonic() - t_start < args.seconds + 1.0:
        time.sleep(args.interval_ms / 1000.0)
        now = time.monotonic()
        try:
            samples = nv.nvmlDeviceGetProcessUtilization(dev, last_seen)
        except nv.NVMLError as e:
            errors[str(e)] = errors.get(str(e), 0) + 1
            samples = []
        by_pid = {}
        for s in samples:
            raw.append([len(calls), s.pid, s.timeStamp, s.smUtil, s.memUtil])
            by_pid.setdefault(s.pid, []).append(s.smUtil)
            last_seen = max(last_seen, s.timeStamp)
        try:  # every sample period since the newest seen, each weighted by the time it covers
            _, record = nv.nvmlDeviceGetSamples(dev, nv.NVML_GPU_UTILIZATION_SAMPLES, record_last)
            for r in sorted(record, key=lambda r: r.timeStamp):
                if r.timeStamp <= record_last:
                    continue
                if record_last:
                    record_busy_s += r.sampleValue.uiVal / 100.0 * (r.timeStamp - record_last) / 1e6
                record_last = r.timeStamp
        except nv.NVMLError as e:
            errors["record: " + str(e)] = errors.get("record: " + str(e), 0) + 1
        calls.append({"dt": now - t_prev, "by_pid": by_pid,
                      "device": nv.nvmlDeviceGetUtilizationRates(dev).gpu})
        t_prev = now
    for w in workers:
        out, _ = w["proc"].communicate(timeout=60)
        w["out"] = out
    if stop_agent is not None:
        agent_doc = stop_agent()
    for w in workers:
        out = w["out"]
        w["result"] = json.loads(out.strip().splitlines()[-1])
        if solo_kernel_s is not None:
            w["result"]["kernel_s"] = solo_kernel_s
            w["result"]["truth_s"] = w["result"]["kernels"] * solo_kernel_s
    ts = sorted({r[2] for r in raw})
    gap = {t: (t - p) / 1e6 for p, t in zip(ts, ts[1:])}
    results = []
    for w in workers:
        pid = w["proc"].pid
        agent = sum(c["dt"] * (sum(c["by_pid"][pid]) / len(c["by_pid"][pid]) / 100.0)
                    for c in calls if pid in c["by_pid"])
        samples_s = sum(r[3] / 100.0 * gap.get(r[2], 0.0) for r in raw if r[1] == pid)
        truth = w["result"]["truth_s"]
        results.append({"pid": pid, "duty": w["duty"], "kernel_s": w["result"]["kernel_s"],
                        "kernels": w["result"]["kernels"], "truth_s": round(truth, 4),
                        "agent_s": round(agent, 4), "samples_s": round(samples_s, 4),
                        "agent_error": round(agent / truth - 1, 4) if truth else None,
                        "samples_error": round(samples_s / truth - 1, 4) if truth else None})
        if agent_doc is not None:
            meter = agent_doc.get("pods", {}).get(w["pod"], {}).get("busy_s")
            results[-1]["meter_s"] = meter
            results[-1]["meter_error"] = (round(meter / truth - 1, 4)
                                          if meter is not None and truth else None)
            reported = agent_doc.get("pods", {}).get(w["pod"], {}).get("reported_s")
            results[-1]["reported_s"] = reported
            results[-1]["reported_error"] = (round(reported / truth - 1, 4)
                                             if reported is not None and truth else None)
            results[-1]["last_duty_permille"] = agent_doc.get("pods", {}).get(
                w["pod"], {}).get("last_duty_permille")
    device_s = sum(c["dt"] * c["device"] / 100.0 for c in calls)
    cadence = sorted((b - a) / 1e3 for a, b in zip(ts, ts[1:]))
    return {"duties": duties, "shim": node is not None, "workers": results, "device_busy_s": round(device_s, 4),
            "device_record_busy_s": round(record_busy_s, 4),
            "truth_sum_s": round(sum(r["truth_s"] for r in results), 4),
            "calls": len(calls), "samples": len(raw), "errors": errors,
            "agent_gpu": agent_doc.get("gpu") if agent_doc else None,
            "agent_untrusted_steps": agent_doc.get("untrusted_steps") if agent_doc else None,
            "agent_run_error": agent_doc.get("error") if agent_doc else None,
            "sample_gap_ms_median": cadence[len(cadence) // 2] if cadence else None,
            "raw": raw}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--interval-ms", type=float, default=250.0)
    ap.add_argument("--scenarios", default="0.60,0.25",
                    help="semicolon-separated runs, each a comma-separated list of duties (one "
                         "worker each), e.g. '0.6;0.25;0.6,0.25'")
    ap.add_argument("--size", type=int, default=8192, help="matmul size (n x n, bf16)")
    ap.add_argument("--shim-bins", default="",
                    help="the shim's build (scripts/gpu_shim_check.py --prebuilt): scenarios "
                         "written 'shim:0.3,0.7' run as pods capped at those shares")
    ap.add_argument("--agent", default="",
                    help="agent_gpu_run (build/dev/test/shim): run the node agent's per-GPU loop beside the pods "
                         "of shim scenarios and report what its usage meter charged each")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import pynvml as nv

    nv.nvmlInit()
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    global node_gib
    node = None
    if args.shim_bins:
        node, node_gib = shim_node(args.shim_bins)
    runs = []
    for sc in args.scenarios.split(";"):
        shim = sc.startswith("shim:")
        if shim and node is None:
            raise SystemExit("scenario %s needs --shim-bins" % sc)
        runs.append(scenario(nv, dev, [float(x) for x in sc.removeprefix("shim:").split(",")],
                             args, node if shim else None))
    doc = {"gpu": nv.nvmlDeviceGetName(dev), "driver": nv.nvmlSystemGetDriverVersion(),
           "seconds": args.seconds, "interval_ms": args.interval_ms, "scenarios": runs}
    if args.out:
        with open(args.out, "w") as f:
            f.write(json.dumps(doc))
    for r in runs:
        r.pop("raw")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
