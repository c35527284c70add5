"""Can a timing job see another process's GPU work during its window? (issue 34: what would make yielding evaluations,
``evaluation.yield_gpu``, safe by default.) A probe for the device, not part of the pipeline.

A stopped process's queued kernels still run. This asks NVML, from a trusted process, what it reports while:
  1. ``alone``: this process times a matmul loop, nothing else on the GPU;
  2. ``beside_busy``: the same while a helper process runs kernels back to back;
  3. ``beside_stopped``: the helper queued one long kernel (torch.cuda._sleep) and was then SIGSTOPped.
For each phase: per-process utilization samples (``nvmlDeviceGetProcessUtilization``: pid, timestamp, SM %), the pids
NVML lists as running compute work, this side's pids as the host sees them, and the matmul's CUDA-event times (how
much the foreign work inflated them). Writes one JSON file.

    python3 bench/nvml_foreign_work_probe.py --out $OUT/nvml_probe.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time

HELPER = """
import sys, time, torch
mode = sys.argv[1]
x = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print("ready", flush=True)
if mode == "busy":
    end = time.time() + float(sys.argv[2])
    while time.time() < end:
        y = x @ x
    torch.cuda.synchronize()
else:  # one long kernel queued, then this process waits to be stopped
    torch.cuda._sleep(int(float(sys.argv[2]) * 1.7e9))  # ~cycles at the SM clock; the probe measures the real span
    print("queued", flush=True)
    time.sleep(60)
"""


def _samples(handle, since_us: int) -> list[dict]:
    import pynvml

    try:
        rows = pynvml.nvmlDeviceGetProcessUtilization(handle, since_us)
    except pynvml.NVMLError as e:
        return [{"error": str(e)}]
    return [{"pid": r.pid, "ts_us": r.timeStamp, "sm": r.smUtil, "mem": r.memUtil} for r in rows]


def _running(handle) -> list[int]:
    import pynvml

    try:
        return [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
    except pynvml.NVMLError as e:
        return [str(e)]


def _time_matmul(seconds: float) -> dict:
    import torch

    a = torch.randn(2048, 2048, device="cuda")
    times = []
    end = time.time() + seconds
    while time.time() < end:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ a
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return {"n": len(times), "median_ms": times[len(times) // 2], "max_ms": times[-1],
            "over_2x_median": sum(t > 2 * times[len(times) // 2] for t in times)}


def _phase(handle, name: str, helper_mode: str | None, seconds: float) -> dict:
    helper = None
    if helper_mode:
        helper = subprocess.Popen([sys.executable, "-c", HELPER, helper_mode, str(seconds + 1.0)],
                                  stdout=subprocess.PIPE, text=True)
        assert helper.stdout is not None and helper.stdout.readline().strip() == "ready"
        if helper_mode == "sleep":
            assert helper.stdout.readline().strip() == "queued"
            os.kill(helper.pid, signal.SIGSTOP)
    since = int(time.time() * 1e6)
    t0 = time.time()
    timing = _time_matmul(seconds)
    t1 = time.time()
    running = _running(handle)
    time.sleep(1.2)  # let the driver close its sample periods
    samples = _samples(handle, since)
    if helper is not None:
        os.kill(helper.pid, signal.SIGCONT)
        helper.kill()
        helper.wait()
    return {"phase": name, "window_us": [int(t0 * 1e6), int(t1 * 1e6)], "self_pid": os.getpid(),
            "helper_pid": helper.pid if helper else None, "running_pids": running, "samples": samples,
            "timing": timing}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    import pynvml
    import torch

    torch.cuda.init()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    result = {"driver": pynvml.nvmlSystemGetDriverVersion(), "phases": []}
    for name, mode in (("alone", None), ("beside_busy", "busy"), ("beside_stopped", "sleep")):
        result["phases"].append(_phase(handle, name, mode, args.seconds))
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print(name, json.dumps(result["phases"][-1]["timing"]),
              "pids with sm>0:", sorted({s.get("pid") for s in result["phases"][-1]["samples"] if s.get("sm")}),
              "self", os.getpid(), "helper", result["phases"][-1]["helper_pid"], flush=True)


if __name__ == "__main__":
    main()
