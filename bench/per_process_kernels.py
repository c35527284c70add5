"""Why does a problem's eager forward run at one of two speeds depending on the process (L2/77: 0.765 or 1.0 of
itself across answer processes, `bench/NOTES.md`, thirteenth session)? Each fresh process builds the problem as
KernelBench does (seed 42), times its forward with CUDA events (warm-up, then the median of 30 calls), lists the GPU
kernels one call launches (torch.profiler) and the free device memory; half the processes first take most of the
device's memory, to tell an algorithm choice that follows free memory (workspace limits) from one that does not.

    python bench/per_process_kernels.py --problem .kb/KernelBench/level2/77_*.py --processes 6 --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.spin_neighbour_check import BUILD_PROBLEM, run_script  # noqa: E402

HOLD_MEMORY = r'''
import sys, torch
held = None
if float(sys.argv[2]) > 0:  # take this share of the free device memory before the problem runs
    free, _ = torch.cuda.mem_get_info()
    held = torch.empty(int(free * float(sys.argv[2])), dtype=torch.uint8, device="cuda")
'''

ONE_PROCESS = HOLD_MEMORY + BUILD_PROBLEM + r'''
import statistics
times = []
with torch.no_grad():
    for _ in range(5):
        model(*inputs)
    for _ in range(30):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); model(*inputs); end.record(); end.synchronize()
        times.append(start.elapsed_time(end))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        model(*inputs); torch.cuda.synchronize()
kernels = [(e.key, round(e.device_time_total / 1e3, 4)) for e in prof.key_averages()]
free, total = torch.cuda.mem_get_info()
print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times), "kernels": kernels,
                  "free_gib": round(free / 2**30, 1),
                  "held_gib": round(held.numel() / 2**30, 1) if held is not None else 0,
                  "cudnn": torch.backends.cudnn.version()}))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--hold-share", type=float, default=0.9, help="share of free memory the odd processes take")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for i in range(args.processes):
        hold = args.hold_share if i % 2 else 0.0
        record = dict(run_script(ONE_PROCESS, str(args.problem), str(hold)), problem=args.problem.name, process=i,
                      hold_share=hold)
        with (args.out / "per_process_kernels.jsonl").open("a") as f:
            f.write(json.dumps(record) + "\n")
        print(json.dumps({k: record.get(k) for k in ("process", "hold_share", "median_ms", "free_gib", "error")}),
              flush=True)


if __name__ == "__main__":
    main()
