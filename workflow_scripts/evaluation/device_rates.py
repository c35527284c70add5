"""What the device can do at best, measured once per environment: how fast it moves memory (a device-to-device copy
at a ladder of sizes; reading and writing alone at the largest), and the matrix-multiply rate in each floating
precision an answer might use. They bound how fast any answer can be (scoring/speed_of_light.py turns them into each
problem's floor, at the best of every rate measured here, so that no honest answer can beat it).

Each is the best of ``REPEATS`` calls after a warm-up, the same buffers again and again (small buffers stay in the
L2 cache, which the timed calls flush before each call: the floor is then generous to small problems), with CUDA
events on the GPU and the wall clock on the CPU. A read is a sum (bytes read; its one-element result is nothing), a
write a fill. On the GPU the measurement is timed work: it holds the GPU's exclusive lease and runs in a child
process pinned to that GPU, so this process stays free of CUDA state like every evaluation parent.

CLI: ``python -m workflow_scripts.evaluation.device_rates --device cpu|cuda [--tf32 MODE]`` prints the measurement
as JSON (the child's side; ``measure_device_rates`` is the job's).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from workflow_scripts.core.records import CopyPoint, DeviceRates
from workflow_scripts.evaluation import environment, gpu_lock, timeline

# Bytes copied (read once and written once: twice as many move) per ladder step, by device. Four-fold steps from
# a size a launch dominates to one far beyond any L2 cache; the CPU's ladder stops lower (the tests run it).
COPY_BYTES: dict[str, tuple[int, ...]] = {
    "cuda": tuple(4**k for k in range(8, 16)),  # 64 KiB .. 1 GiB
    "cpu": tuple(4**k for k in range(8, 13)),  # 64 KiB .. 16 MiB
}
# Square matrix side per device: large enough for the GPU's tensor cores to reach their rate.
MATMUL_SIDE: dict[str, int] = {"cuda": 8192, "cpu": 512}
# Precisions an answer may compute a float32 problem's products in and still pass a loose tolerance; float32
# itself runs as the run's TF32 mode sets it.
MATMUL_DTYPES = ("float32", "bfloat16", "float16")
REPEATS = 10  # timed calls per measurement, after one warm-up; the best counts
CHILD_TIMEOUT_S = 300.0


def _best_seconds(run: Callable[[], Any], device: str) -> float:
    """The fastest of REPEATS calls of ``run`` after one warm-up: CUDA events on the GPU, the wall clock on the
    CPU."""
    import torch

    run()
    times = []
    for _ in range(REPEATS):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
    return min(times)


def measure_copies(device: str) -> list[CopyPoint]:
    import torch

    points = []
    for size in COPY_BYTES[device]:
        source = torch.ones(size, dtype=torch.uint8, device=device)
        target = torch.empty_like(source)
        points.append(CopyPoint(2 * size, _best_seconds(functools.partial(target.copy_, source), device)))
        del source, target
    return points


def measure_streams(device: str) -> dict[str, float]:
    """Bytes per second reading alone (a sum) and writing alone (a fill) at the ladder's largest size: a kernel that
    mostly reads (a reduction) or mostly writes may stream faster than a copy, which does both."""
    import torch

    size = COPY_BYTES[device][-1]
    data = torch.ones(size // 4, dtype=torch.float32, device=device)
    rates = {"read": size / _best_seconds(functools.partial(torch.sum, data), device),
             "write": size / _best_seconds(functools.partial(data.fill_, 0.5), device)}
    del data
    return rates


def measure_matmuls(device: str) -> dict[str, float]:
    import torch

    side = MATMUL_SIDE[device]
    rates = {}
    for name in MATMUL_DTYPES:
        dtype = getattr(torch, name)
        if device == "cpu" and dtype == torch.float16:
            continue  # no fast half-precision product on a CPU: it would only set no bound at all
        a = torch.randn(side, side, device=device).to(dtype)
        b = torch.randn(side, side, device=device).to(dtype)
        out = torch.empty(side, side, device=device, dtype=dtype)
        rates[name] = 2 * side**3 / _best_seconds(functools.partial(torch.mm, a, b, out=out), device)
        del a, b, out
    return rates


def measure_here(device: str, tf32_mode: str) -> dict[str, Any]:
    """The measurement in this process (the child's side), as JSON-ready data without the fingerprint."""
    flags = environment.configure_tf32(tf32_mode)
    return {"device": device, "copies": [asdict(p) for p in measure_copies(device)],
            "stream_bytes_per_s": measure_streams(device), "matmul_flops_per_s": measure_matmuls(device),
            "tf32": flags}


def _measure_in_child(device: str, gpu: str | None, tf32_mode: str) -> dict[str, Any]:
    env = dict(os.environ)
    if gpu is not None:
        env.update(CUDA_VISIBLE_DEVICES=gpu, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    command = [sys.executable, "-m", __spec__.name, "--device", device, "--tf32", tf32_mode]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=CHILD_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"measuring the device's rates failed (exit {done.returncode}): {done.stderr[-1500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_device_rates(device: str, tf32_mode: str = "pytorch_default", gpus: list[str] | None = None,
                         lock_dir: str | os.PathLike[str] = gpu_lock.DEFAULT_LOCK_DIR) -> DeviceRates:
    """The job's side: on CUDA the exclusive lease of one GPU (timed work), the measurement in a child pinned to
    it, and the fingerprint of where it ran."""
    with gpu_lock.lease_for_job(device, None, gpus, lock_dir, exclusive=True, purpose="device_rates") as lease:
        gpu = lease.gpu if lease else None
        with timeline.span(lock_dir, "device_rates", gpu if gpu is not None else device):
            measured = _measure_in_child(device, gpu, tf32_mode)
    fingerprint = environment.fingerprint(device, gpu, tf32_mode, measured["tf32"])
    fingerprint["key"] = environment.fingerprint_key(fingerprint)
    return DeviceRates.from_dict({**measured, "fingerprint": fingerprint})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--tf32", choices=environment.TF32_MODES, default="pytorch_default")
    args = parser.parse_args(argv)
    print(json.dumps(measure_here(args.device, args.tf32)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
