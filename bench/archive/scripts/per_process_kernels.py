"""Why does a problem's eager forward run at one of two speeds depending on the process (L2/77: 0.765 or 1.0 of
itself across answer processes, `bench/archive/NOTES.md`, thirteenth session)? Each fresh process builds the problem as
KernelBench does (seed 42), times its forward with CUDA events (warm-up, then the median of 30 calls), lists the GPU
kernels one call launches (torch.profiler) and the free device memory; half the processes first take most of the
device's memory, to tell an algorithm choice that follows free memory (workspace limits) from one that does not, or
with ``--hold-mib 256`` exactly the 256 MiB the answer process's L2 flush buffer takes before the answer's model is
built (does that allocation alone put a plain process on the slow placement?).

With ``--in-evaluator`` the same facts come from inside the evaluator's own processes instead: the problem, with a
diagnostic appended to its ``Model.forward``, is judged with ``--processes`` copies of itself as answers (each in its
own sandboxed answer process, against one trusted side, as the calibration's ``--copies`` does). On its 3rd and 60th
call in each process the diagnostic lists the kernels one forward launches, times the forward (synchronized wall
time, median of 10) on the inputs it was given, on fresh copies of them, and with a fresh copy of the module, and
records the pointers' alignment, the strides, the stream, the threads, the cuDNN flags and the allocator's
segments: a slow process can then be told apart by algorithm (kernels), by data placement (fresh copies fast) or by
something process-wide (everything slow). The profiler slows every later call of its process: the verdicts' speedups
of such a run are not timings.

    python bench/archive/scripts/per_process_kernels.py --problem .kb/KernelBench/level2/77_*.py --processes 6 --out DIR
    python bench/archive/scripts/per_process_kernels.py --hold-mib 256 --problem .kb/KernelBench/level2/77_*.py --processes 16 --out DIR
With ``--placement`` one fresh process times the forward again after each of a series of padding allocations
(the cache emptied, a pad of N bytes taken, inputs and module copied anew): if the speed follows where the
buffers land in device memory, it changes between pads within one process. With ``--placement-blocks``, per
process, a candidate protocol: ``--blocks`` blocks of 10 trials, each after the cache is emptied and a pad of random
size taken, and the spread of the processes' means over blocks.

    python bench/archive/scripts/per_process_kernels.py --placement --problem .kb/KernelBench/level2/77_*.py --processes 2 --out DIR
    python bench/archive/scripts/per_process_kernels.py --in-evaluator --problem .kb/KernelBench/level2/77_*.py --processes 8 --out DIR

With ``--others N`` each plain process (forward times only) runs beside 0..N other processes, each holding a CUDA
context and ``--others-mib`` MiB taken before it started, as the evaluator's trusted side and pre-started answer
processes do: does another process's device memory move this one's placement?

    python bench/archive/scripts/per_process_kernels.py --others 3 --problem .kb/KernelBench/level2/77_*.py --processes 12 --out DIR
    python bench/archive/scripts/per_process_kernels.py --others 1 --flush kernelbench --problem .kb/KernelBench/level2/77_*.py --processes 8 --out DIR
    python bench/archive/scripts/per_process_kernels.py --others 1 --kb-src .kb/kbsrc --problem .kb/KernelBench/level2/77_*.py --processes 8 --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # bench/archive/scripts/ -> the repository root
from bench.gpu_watchdog import append_record  # noqa: E402
from bench.archive.scripts.spin_neighbour_check import BUILD_PROBLEM, run_script  # noqa: E402

HOLD_MEMORY = r'''
import sys, torch
held = None
if int(sys.argv[3]) > 0:  # exactly this many MiB first, as the answer process's L2 flush buffer (timing.Clock)
    held = torch.empty(int(sys.argv[3]) * (1 << 20) // 8, dtype=torch.int64, device="cuda")
elif float(sys.argv[2]) > 0:  # take this share of the free device memory before the problem runs
    free, _ = torch.cuda.mem_get_info()
    held = torch.empty(int(free * float(sys.argv[2])), dtype=torch.uint8, device="cuda")
'''

# After BUILD_PROBLEM: `event_times(n, warmup)`, the times (ms) of n calls of the global `model` on the global `inputs`,
# each between two CUDA events, after `warmup` untimed calls, under no_grad.
EVENT_TIMES = r'''
import statistics

def event_times(n, warmup=0):
    times = []
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        for _ in range(n):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(); model(*inputs); end.record(); end.synchronize()
            times.append(start.elapsed_time(end))
    return times
'''

ONE_PROCESS = HOLD_MEMORY + BUILD_PROBLEM + EVENT_TIMES + r'''
times = event_times(30, warmup=5)
with torch.no_grad():
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        model(*inputs); torch.cuda.synchronize()
kernels = [(e.key, round(e.device_time_total / 1e3, 4)) for e in prof.key_averages()]
free, total = torch.cuda.mem_get_info()
print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times), "kernels": kernels,
                  "free_gib": round(free / 2**30, 1),
                  "held_gib": round(held.numel() * held.element_size() / 2**30, 3) if held is not None else 0,
                  "cudnn": torch.backends.cudnn.version()}))
'''


# Appended to the problem's source (and, renamed with it, to every answer's): a JSON line "PER_PROCESS_DIAGNOSTIC {...}"
# on stderr, which reaches the trusted side's log (the bench's stderr) or the answer process's log.
DIAGNOSTIC = r'''

def _per_process_diagnostic(module, forward, args, call):
    import copy, json, os, statistics, sys, time, torch

    cuda = torch.cuda.is_available()  # False: a CPU smoke run of the bench (BENCH_DEVICE=cpu)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def timed(fn, n=10):
        times = []
        for _ in range(n):
            sync(); t = time.perf_counter(); fn(); sync()
            times.append((time.perf_counter() - t) * 1e3)
        return round(statistics.median(times), 4)

    def tensor_facts(t):
        return {"shape": list(t.shape), "stride": list(t.stride()), "dtype": str(t.dtype),
                "ptr_mod_2MiB": t.data_ptr() % (2 << 20), "ptr_mod_512": t.data_ptr() % 512,
                "storage_offset": t.storage_offset(), "contiguous": t.is_contiguous(),
                "channels_last_3d": t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d)}

    sync()
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    activity = torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU
    prof, kernels = torch.profiler.profile(activities=[activity]), None
    try:
        prof.__enter__()
    except Exception as e:  # the sandbox may refuse the profiler: the timings still tell
        prof, kernels = None, repr(e)
    out = forward(module, *args); sync()
    if prof is not None:
        prof.__exit__(None, None, None)
        kernels = [(e.key, round((e.device_time_total if cuda else e.cpu_time_total) / 1e3, 4))
                   for e in prof.key_averages()]
    fresh_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    fresh_module = copy.deepcopy(module)
    free, total = torch.cuda.mem_get_info() if cuda else (0, 0)
    record = {
        "role": type(module).__name__, "pid": os.getpid(), "call": call,
        "grad_enabled": torch.is_grad_enabled(), "training": module.training,
        "ms_given": timed(lambda: forward(module, *args)),
        "ms_fresh_inputs": timed(lambda: forward(module, *fresh_args)),
        "ms_fresh_module": timed(lambda: forward(fresh_module, *args)),
        "ms_given_again": timed(lambda: forward(module, *args)),
        "kernels": kernels,
        "inputs": [tensor_facts(t) for t in tensors],
        "params": {n: tensor_facts(p) for n, p in list(module.named_parameters())[:4]},
        "output": tensor_facts(out) if isinstance(out, torch.Tensor) else None,
        "stream": torch.cuda.current_stream().cuda_stream if cuda else None,
        "stream_priority": torch.cuda.current_stream().priority if cuda else None,
        "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
        "cudnn": {"enabled": torch.backends.cudnn.enabled, "benchmark": torch.backends.cudnn.benchmark,
                  "deterministic": torch.backends.cudnn.deterministic, "allow_tf32": torch.backends.cudnn.allow_tf32,
                  "version": torch.backends.cudnn.version()},
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "matmul_tf32": torch.backends.cuda.matmul.allow_tf32,
        "free_gib": round(free / 2**30, 1),
        "allocated_gib": round(torch.cuda.memory_allocated() / 2**30, 2) if cuda else None,
        "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 2) if cuda else None,
        # The process's device-memory layout: every segment of at least 2 MiB (virtual address, size, stream) in the
        # order the allocator holds them, to compare a fast process's layout with a slow one's.
        "segments": [(seg["address"], seg["total_size"], seg["stream"]) for seg in torch.cuda.memory_snapshot()
                     if seg["total_size"] >= 2 << 20] if cuda else None,
        "env": {k: v for k, v in os.environ.items() if k.startswith(("CUDA", "CUDNN", "TORCH", "PYTORCH", "OMP",
                                                                        "MKL", "NCCL", "LD_", "TRITON"))},
    }
    print("PER_PROCESS_DIAGNOSTIC " + json.dumps(record), file=sys.stderr, flush=True)


_per_process_original_forward = Model.forward
_per_process_calls = [0]


def _per_process_forward(self, *args):
    _per_process_calls[0] += 1
    if _per_process_calls[0] in (3, 60):
        _per_process_diagnostic(self, _per_process_original_forward, args, _per_process_calls[0])
    return _per_process_original_forward(self, *args)


Model.forward = _per_process_forward
'''

MARK = "PER_PROCESS_DIAGNOSTIC "


def in_evaluator(problem: Path, processes: int, out: Path) -> None:
    """The problem judged with ``processes`` copies of itself as answers, the diagnostic in every process; its
    records (trusted side's from this process's stderr, answers' from their kept logs) to per_process_kernels.jsonl."""
    import contextlib
    import io
    import shutil
    import tempfile

    from bench.gpu_problem_worker import config, reference_answer, summarise
    from workflow_scripts.evaluation.answer import evaluate_answers

    def write(record: dict) -> None:
        append_record(out / "per_process_kernels.jsonl", record, shown=(
            "role", "pid", "call", "ms_given", "ms_fresh_inputs", "ms_fresh_module", "status", "speedup"))

    with tempfile.TemporaryDirectory() as tmp:
        diagnosed = Path(tmp) / problem.name
        diagnosed.write_text(problem.read_text() + DIAGNOSTIC)
        answers = [reference_answer(diagnosed, Path(tmp), f"c{i}") for i in range(processes)]
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):  # the trusted side's diagnostics, and "kept evaluation directory"
            results = evaluate_answers(diagnosed, answers, config(require_triton=False, keep_workdir=True))
        lines = stderr.getvalue().splitlines()
        kept = [Path(line.split()[-1]) for line in lines if line.startswith("kept evaluation directory")]
        # The trusted side's lines, then each answer's log (logs/answerN/answer.log), named by the answer's folder.
        logs = [("trusted", lines)] + [(f.parent.name, f.read_text(errors="replace").splitlines()) for d in kept
                                       for f in sorted((d / "logs").rglob("*.log"))]
        for name, log_lines in logs:
            for line in log_lines:
                if line.startswith(MARK):
                    write(dict(json.loads(line[len(MARK):]), process=name))
        for copy, r in enumerate(results):
            write(dict(summarise(r), role="verdict", copy=copy,
                       answer_trials_ms=(r.runtime_stats or {}).get("trials")))
        for d in kept:
            shutil.rmtree(d, ignore_errors=True)


PLACEMENT = BUILD_PROBLEM + EVENT_TIMES + r'''
import copy

def timed():
    return round(statistics.median(event_times(20, warmup=3)), 4)

rows = [{"pad_bytes": None, "ms": timed()}]
pads = []
for pad in [0, 512, 1 << 20, (1 << 20) + 512, 2 << 20, 3 << 20, 5 << 20, 17 << 20, 64 << 20, 100 << 20,
            (256 << 20) + 512, 300 << 20, 1 << 30, (1 << 30) + (7 << 20), 3 << 30]:
    torch.cuda.synchronize(); torch.cuda.empty_cache()
    if pad:
        pads.append(torch.empty(pad, dtype=torch.uint8, device="cuda"))
    inputs = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    model = copy.deepcopy(model)
    rows.append({"pad_bytes": pad, "ms": timed(), "input_ptr_mod_2MiB": inputs[0].data_ptr() % (2 << 20),
                 "reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 2)})
print(json.dumps({"placements": rows}))
'''


# A candidate protocol against it: before each block of trials, the device cache emptied, a pad of random size taken
# and one untimed call (where the block's buffers land moves from block to block); the process's mean over blocks.
PLACEMENT_BLOCKS = BUILD_PROBLEM + EVENT_TIMES + r'''
import random
rng = random.Random(int(sys.argv[2]))
blocks, pad = [], None
for block in range(int(sys.argv[3])):
    pad = None
    torch.cuda.synchronize(); torch.cuda.empty_cache()
    pad = torch.empty(rng.randrange(0, 64 << 20, 512), dtype=torch.uint8, device="cuda")
    blocks.append(round(statistics.mean(event_times(10, warmup=1)), 4))
print(json.dumps({"block_means_ms": blocks, "mean_ms": statistics.mean(blocks)}))
'''

# A process that takes a CUDA context and N MiB of device memory, says so, and holds them until its stdin closes:
# the evaluator's other processes (trusted side, pre-started answer processes) as a plain process sees them.
HOLDER = r'''
import sys, torch
torch.cuda.init(); held = torch.empty(int(sys.argv[1]) << 20, dtype=torch.uint8, device="cuda"); held.zero_()
torch.cuda.synchronize(); print("ready", flush=True); sys.stdin.read()
'''

# The flush buffer as the evaluator's answer process holds it ("held": 256 MiB before the model, written before every
# trial; timing.Clock), as KernelBench allocates it ("kernelbench": the cache emptied after the warm-up, 256 MiB
# allocated, written and freed before every trial), or none.
FLUSH_FIRST = r'''
import sys, torch
flush_mode = sys.argv[2] if len(sys.argv) > 2 else "none"
held_flush = torch.empty(32 << 20, dtype=torch.int64, device="cuda") if flush_mode == "held" else None
'''

TIMES_ONLY = FLUSH_FIRST + BUILD_PROBLEM + EVENT_TIMES + r'''
if flush_mode == "none":
    times = event_times(30, warmup=5)
else:
    times = []
    with torch.no_grad():
        for _ in range(5):
            model(*inputs); torch.cuda.synchronize()
        if flush_mode == "kernelbench":
            torch.cuda.empty_cache()
        for _ in range(31):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if flush_mode == "held":
                held_flush.zero_()
            else:
                dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda"); dummy.fill_(42); del dummy
            start.record(); model(*inputs); end.record(); torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    times = times[1:]  # the first trial discarded, as both harnesses do
print(json.dumps({"median_ms": statistics.median(times), "min_ms": min(times), "flush": flush_mode}))
'''


def beside_holders(problem: Path, holders: int, mib: int, kb_src: Path | None = None, flush: str = "none") -> dict:
    """One plain process's forward time (or, with ``kb_src``, KernelBench's eager baseline of the problem) while
    ``holders`` other processes each hold a CUDA context and ``mib`` MiB taken before it started: does another
    process's device memory move this one's placement?"""
    import subprocess

    from bench import kernelbench_harness

    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(mib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True) for _ in range(holders)]
    try:
        for proc in procs:
            if proc.stdout is None or proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a holder process failed to start")
        if kb_src is None:
            return run_script(TIMES_ONLY, str(problem), flush)
        proc = subprocess.run([sys.executable, kernelbench_harness.__file__, "--kb-src", str(kb_src), "--problem",
                               str(problem), "--baseline"], capture_output=True, text=True, timeout=300)
        if proc.returncode:
            return {"error": proc.stderr[-2000:]}
        stats = json.loads(proc.stdout.strip().splitlines()[-1])
        return dict(stats, mean_ms=stats.get("mean"), harness="kernelbench_baseline")  # KernelBench reports no median
    finally:
        for proc in procs:
            proc.communicate(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, required=True)
    parser.add_argument("--processes", type=int, default=6)
    parser.add_argument("--hold-share", type=float, default=0.9, help="share of free memory the odd processes take")
    parser.add_argument("--hold-mib", type=int, default=0,
                        help="instead, the odd processes take exactly this many MiB first (256: the answer process's "
                             "L2 flush buffer, which it allocates before the answer's model is built)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--in-evaluator", action="store_true",
                        help="the facts from inside the evaluator's trusted side and answer processes")
    parser.add_argument("--placement", action="store_true",
                        help="the forward's speed after a series of padding allocations, within one process")
    parser.add_argument("--placement-blocks", action="store_true",
                        help="each process's mean over --blocks blocks of 10 trials, each block at a new placement")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--others", type=int, default=0,
                        help="process i runs beside i %% (N+1) other processes that each hold --others-mib MiB")
    parser.add_argument("--others-mib", type=int, default=256)
    parser.add_argument("--flush", choices=("none", "held", "kernelbench"), default="none",
                        help="with --others: the L2 flush buffer held from the start or allocated per trial")
    parser.add_argument("--kb-src", type=Path, default=None,
                        help="with --others: time KernelBench's eager baseline (bench/kernelbench_harness.py "
                             "--baseline) instead of the plain loop")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.in_evaluator:
        in_evaluator(args.problem, args.processes, args.out)
        return
    if args.others:
        for i in range(args.processes):
            holders = i % (args.others + 1)
            append_record(args.out / "beside_holders.jsonl", dict(
                beside_holders(args.problem, holders, args.others_mib, args.kb_src, args.flush),
                problem=args.problem.name, process=i, holders=holders, holder_mib=args.others_mib, flush=args.flush))
        return
    if args.placement or args.placement_blocks:
        for i in range(args.processes):  # the process's index seeds its random pads
            if args.placement:
                record = dict(run_script(PLACEMENT, str(args.problem)), protocol="placement")
            else:
                record = dict(run_script(PLACEMENT_BLOCKS, str(args.problem), str(i), str(args.blocks)),
                              protocol="placement_blocks")
            append_record(args.out / "placement.jsonl", dict(record, problem=args.problem.name, process=i))
        return
    for i in range(args.processes):
        hold, hold_mib = (args.hold_share, args.hold_mib) if i % 2 else (0.0, 0)
        record = dict(run_script(ONE_PROCESS, str(args.problem), str(hold), str(hold_mib)), problem=args.problem.name,
                      process=i, hold_share=hold, hold_mib=hold_mib)
        append_record(args.out / "per_process_kernels.jsonl", record,
                      shown=("process", "hold_share", "hold_mib", "median_ms", "free_gib", "error"))


if __name__ == "__main__":
    main()
