"""Does a cuDNN plan picked on a full card stay slow, and does a fresh thread pick again? (issue 35, L1/58)

For one problem (default: KernelBench level 1 problem 58, a ConvTranspose3d), each case in a fresh process:

* ``calm``: the reference's first call on an empty card, then its time (median of ``--calls`` CUDA-event timings);
* ``full:<MiB>``: the first call with all but ``<MiB>`` of the card held by a ballast tensor in the same process (as
  another job's memory would be), then the ballast freed and the time read in the same thread (the plan picked on the
  full card, cached per thread) and in a new thread (``reference_timer``: the plan picked again).

Each case records the caching allocator's out-of-memory events (``num_ooms``) over the first call. One JSON line per
case on stdout.

    python3 bench/cudnn_plan_probe.py --problem .kb/KernelBench/level1/58_*.py --free-mib 256 1024 4096
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from pathlib import Path


def _median_ms(torch, model, inputs, calls: int) -> float:
    times = []
    with torch.no_grad():
        for _ in range(3):
            model(*inputs)
        for _ in range(calls):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*inputs)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def run_case(problem: Path, free_mib: int | None, calls: int) -> dict:
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("problem", problem)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(42)
    model = module.Model(*module.get_init_inputs()).cuda()
    torch.manual_seed(42)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    torch.cuda.synchronize()
    ballast = None
    if free_mib is not None:
        free, _ = torch.cuda.mem_get_info()
        ballast = torch.empty(max(0, free - free_mib * 2**20), dtype=torch.uint8, device="cuda")
    ooms = torch.cuda.memory_stats().get("num_ooms", 0)
    with torch.no_grad():
        model(*inputs)  # the first call: the plan is picked here
    torch.cuda.synchronize()
    record = {"case": "calm" if free_mib is None else f"full:{free_mib}", "first_call_ooms":
              torch.cuda.memory_stats().get("num_ooms", 0) - ooms, "cudnn": torch.backends.cudnn.version(),
              "gpu": torch.cuda.get_device_name()}
    del ballast
    torch.cuda.empty_cache()
    record["same_thread_ms"] = _median_ms(torch, model, inputs, calls)
    holder: dict = {}
    thread = threading.Thread(target=lambda: holder.update(ms=_median_ms(torch, model, inputs, calls)))
    thread.start()
    thread.join()
    record["new_thread_ms"] = holder.get("ms")
    return record


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", type=Path, required=True)
    ap.add_argument("--free-mib", type=int, nargs="*", default=[256, 1024, 4096])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--case", help=argparse.SUPPRESS)  # one case, in a child process
    args = ap.parse_args()
    if args.case is not None:
        print(json.dumps(run_case(args.problem, None if args.case == "calm" else int(args.case), args.calls)))
        return
    for case in ["calm"] + [str(m) for m in args.free_mib]:
        out = subprocess.run([sys.executable, __file__, "--problem", str(args.problem), "--calls", str(args.calls),
                              "--case", case], capture_output=True, text=True, timeout=300)
        line = out.stdout.strip().splitlines()[-1:] if out.returncode == 0 else []
        print(line[0] if line else json.dumps({"case": case, "error": out.stderr[-600:]}), flush=True)


if __name__ == "__main__":
    main()
