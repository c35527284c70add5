"""Diagnostics for the two timing targets of the evaluator issue that are not met (done-when 2 and 3), on the H200.
One JSON line per measurement in $OUT/gpu_diagnose.jsonl, written as the run goes.

* ``trivial`` (done-when 3: a trivial Triton kernel within 2 us of a KernelBench-style measurement): where the
  difference comes from. Per repeat, interleaved: KernelBench's loop in this process; the same loop in a fresh
  process, first bare, then with the evaluator's Triton launch counter installed (``bare`` mode, as in timed
  calls), then with the audit-hook guard added (the answer process's state during timing); and the evaluator
  itself (paired blocks, one unpaired window, and one unpaired window without the OS sandbox). For each: the event
  times and the host time from ``start.record()`` to ``end.record()`` returning (where that exceeds the L2 flush's
  device time, the window holds host launch work), plus the host's load.
* ``placement`` (done-when 2: the reference as its own answer reads 1-6% off 1.0 on some convolutions and GEMMs,
  steady within a timing session, different between sessions): is the level a property of where the tensors lie?
  In one process, per problem, the reference is timed in blocks of 10 trials (the evaluator's own ``Clock``) in
  rounds over K placements: ``inputs`` (K copies of the same timing inputs at different addresses), ``models``
  (K copies of the model's parameters too), ``allocator`` (the same tensors, the caching allocator emptied and a
  random-size pad held before each block, so intermediates and the flush buffer land elsewhere). The spread
  between placements against the spread between rounds of one placement says whether placement sets the level; a
  second process repeats the ``inputs`` variant (same seeds, same values) for the between-process difference.

    python3 bench/archive/scripts/gpu_diagnose.py trivial --out $OUT --repeats 3
    python3 bench/archive/scripts/gpu_diagnose.py placement --suite .kb --problems L2_79 L2_6 --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # bench/archive/scripts/ -> the repository root
sys.path.insert(0, str(ROOT))

from bench.gpu_watchdog import append_record, problem_file  # noqa: E402

TRIVIAL = ROOT / "bench" / "trivial"
BLOCK = 10
DEVICE = os.environ.get("BENCH_DEVICE", "cuda")  # BENCH_DEVICE=cpu: a smoke run of ``placement``


def log(out: Path, record: dict) -> None:
    append_record(out / "gpu_diagnose.jsonl", record)


def host_load() -> dict:
    """Load average and the share of CPU time stolen by the hypervisor since boot (a VM's noisy neighbours)."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    steal = cpu[7] / max(1, sum(cpu)) if len(cpu) > 7 else None
    return {"loadavg_1m": os.getloadavg()[0], "steal_share_since_boot": steal}


def median_us(values: list[float]) -> float:
    return 1e3 * statistics.median(values) if values else float("nan")


def kernelbench_loop(fn, args, trials: int = 100, warmup: int = 3) -> tuple[list[float], list[float]]:
    """KernelBench's time_execution_with_cuda_event (pinned revision): (event ms, host ms from start.record() to
    end.record() returning) per trial; the first of 101 trials discarded."""
    import torch

    for _ in range(warmup):
        fn(*args)
        torch.cuda.synchronize()
    torch.cuda.empty_cache()
    times, host = [], []
    for trial in range(trials + 1):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device="cuda")
        dummy.fill_(42)
        del dummy
        h0 = time.perf_counter()
        start.record()
        fn(*args)
        end.record()
        h1 = time.perf_counter()
        torch.cuda.synchronize()
        if trial:
            times.append(start.elapsed_time(end))
            host.append((h1 - h0) * 1e3)
    return times, host


def trivial_model():
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("trivial_answer", TRIVIAL / "answer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(42)
    return module.ModelNew().cuda(), [torch.rand(4096).cuda()]


def warm_gpu(seconds: float = 3.0) -> None:
    """The GPU idles at a low clock: bring it up before measuring."""
    import torch

    a = torch.rand(4096, 4096, device="cuda")
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()


def fresh_loop_main() -> None:
    """In a fresh process: the KernelBench loop bare, with the launch counter (bare mode), with the guard too."""
    from workflow_scripts.evaluation.integrity import Guard, LaunchCounter

    model, args = trivial_model()
    warm_gpu(1.0)
    record = {}
    ms, host = kernelbench_loop(model, args)
    record["bare"] = {"median_us": median_us(ms), "host_median_us": median_us(host)}
    counter = LaunchCounter()
    counter.bare = True
    ms, host = kernelbench_loop(model, args)
    record["launch_counter"] = {"median_us": median_us(ms), "host_median_us": median_us(host),
                                "launches_counted": counter.take()}
    workdir = tempfile.mkdtemp()
    guard = Guard(None, workdir, str(TRIVIAL / "answer.py"), allowed_spawn_pkgs=("triton",))
    sys.addaudithook(guard.hook)
    guard.enforcing = True
    ms, host = kernelbench_loop(model, args)
    record["counter_and_guard"] = {"median_us": median_us(ms), "host_median_us": median_us(host),
                                   "guard_violations": list(guard.seen)}
    print(json.dumps(record))


def run_trivial(args) -> None:
    from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answer

    model, inputs = trivial_model()
    warm_gpu()
    variants = {"ours_paired": {}, "ours_unpaired": {"paired_block": 0},
                "ours_unpaired_no_headroom": {"paired_block": 0, "launch_headroom_us": 0.0},
                "ours_unpaired_no_sandbox": {"paired_block": 0, "isolation": "none"}}
    for repeat in range(args.repeats):
        load = host_load()
        ms, host = kernelbench_loop(model, inputs)
        log(args.out, {"bench": "trivial", "repeat": repeat, "what": "kernelbench_loop_this_process",
                       "median_us": median_us(ms), "mean_us": 1e3 * statistics.fmean(ms),
                       "host_median_us": median_us(host), **load})
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, __file__, "fresh-loop"], capture_output=True, text=True, timeout=300)
        try:
            fresh = json.loads(done.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            fresh = {"error": (done.stderr or done.stdout)[-800:]}
        log(args.out, {"bench": "trivial", "repeat": repeat, "what": "kernelbench_loop_fresh_process",
                       "wall_s": round(time.monotonic() - t0, 1), **fresh})
        for name, overrides in variants.items():
            cfg = EvalConfig(device="cuda", lock_dir="/tmp/diag-locks", run_static=False, **overrides)
            result = evaluate_answer(TRIVIAL / "problem.py", TRIVIAL / "answer.py", cfg)
            stats = result.runtime_stats or {}
            raw = result.timing_raw or {}
            log(args.out, {"bench": "trivial", "repeat": repeat, "what": name, "status": result.status,
                           "median_us": 1e3 * stats.get("median", float("nan")),
                           "mean_us": 1e3 * stats.get("mean", float("nan")),
                           "host_median_us": median_us(raw.get("host_ms") or []),
                           "trials_us": [round(1e3 * t, 2) for t in stats.get("trials") or []],
                           "host_us": [round(1e3 * t, 1) for t in raw.get("host_ms") or []],
                           "isolation": (result.protocol.get("isolation") or {}).get("level"),
                           "flags": result.flags, **host_load()})


def placements_main(args) -> None:
    """One process's measurements for one problem (see the module docstring)."""
    import copy
    import random

    import torch

    from workflow_scripts.evaluation import timing
    from workflow_scripts.evaluation.reference import as_input, load_problem

    problem = load_problem(problem_file(args.suite, args.problem))
    torch.manual_seed(42)
    init = [as_input(x, DEVICE) for x in problem.get_init_inputs()]
    torch.manual_seed(42)
    model = problem.Model(*init).to(device=DEVICE, dtype=torch.float32)
    torch.manual_seed(1234)
    with torch.device(DEVICE):
        inputs = [as_input(x, DEVICE) for x in problem.get_inputs()]
    clock = timing.Clock(DEVICE, 256)
    first = timing.TimingProtocol(warmup=3, trials=BLOCK)
    later = timing.TimingProtocol(warmup=0, trials=BLOCK, discard_first=0)
    rng = random.Random(7)
    copies = max(2, args.copies)

    def clone_inputs():
        pad = torch.empty(rng.randrange(1, 64) << 20, dtype=torch.uint8, device=DEVICE)
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs], pad

    clock.time_callable(model, inputs, first)  # warm-up and cuDNN/cuBLAS handles
    record = {"problem": args.problem, "process": args.process}
    variants = ["inputs"] if args.process else ["inputs", "models", "allocator", "clocks"]
    clocks = [clock]
    for variant in variants:
        held = []
        if variant == "inputs":
            places = [(model, clone_inputs()) for _ in range(copies)]
        elif variant == "models":
            places = [(copy.deepcopy(model), clone_inputs()) for _ in range(copies)]
        else:
            places = [(model, (inputs, None))] * copies
        if variant == "clocks":  # each place its own L2-flush buffer (a new Clock), at its own address
            clocks = [timing.Clock(DEVICE, 256) for _ in range(copies)]
        means = [[] for _ in range(copies)]
        for _round in range(args.rounds):
            for k, (m, (xs, _pad)) in enumerate(places):
                if variant == "allocator":
                    # Intermediates elsewhere: the cache emptied, a random pad held, and one untimed call so the
                    # block's first timed call does not pay for the new allocations.
                    held.clear()
                    torch.cuda.empty_cache()
                    held.append(torch.empty(rng.randrange(1, 256) << 20, dtype=torch.uint8, device=DEVICE))
                    with torch.no_grad():
                        m(*xs)
                    if DEVICE == "cuda":
                        torch.cuda.synchronize()
                timer = clocks[k] if variant == "clocks" else clock
                means[k].append(statistics.fmean(timer.time_callable(m, xs, later).trials_ms))
        per_place = [statistics.fmean(m) for m in means]
        grand = statistics.fmean(per_place)
        within = statistics.fmean(statistics.pstdev(m) / statistics.fmean(m) for m in means)
        record[variant] = {"block_means_ms": [[round(x, 5) for x in m] for m in means],
                           "place_means_ms": [round(x, 5) for x in per_place], "grand_mean_ms": grand,
                           "between_places_spread_pct": 100 * (max(per_place) - min(per_place)) / grand,
                           "between_places_cv_pct": 100 * statistics.pstdev(per_place) / grand,
                           "within_place_cv_pct": 100 * within}
        del places, held
        clocks = [clock]
        torch.cuda.empty_cache()
    print(json.dumps(record))


def run_placement(args) -> None:
    for key in args.problems:
        per_process = []
        for process in (0, 1):
            t0 = time.monotonic()
            cmd = [sys.executable, __file__, "placements-one", "--suite", str(args.suite), "--problem", key,
                   "--process", str(process), "--copies", str(args.copies), "--rounds", str(args.rounds),
                   "--out", str(args.out)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            try:
                rec = json.loads(done.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                rec = {"problem": key, "process": process, "error": (done.stderr or done.stdout)[-800:]}
            rec["wall_s"] = round(time.monotonic() - t0, 1)
            per_process.append(rec)
            log(args.out, {"bench": "placement", **rec})
        try:
            a, b = (r["inputs"]["grand_mean_ms"] for r in per_process)
            log(args.out, {"bench": "placement", "problem": key, "between_processes_pct": 100 * (b - a) / a})
        except (KeyError, TypeError):
            pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bench", choices=["trivial", "placement", "fresh-loop", "placements-one"])
    parser.add_argument("--suite", type=Path, default=ROOT / ".kb")
    parser.add_argument("--problems", nargs="*", default=[])
    parser.add_argument("--problem")
    parser.add_argument("--process", type=int, default=0)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/diag")))
    args = parser.parse_args()
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "0")
    if args.bench == "fresh-loop":
        return fresh_loop_main()
    if args.bench == "placements-one":
        return placements_main(args)
    args.out.mkdir(parents=True, exist_ok=True)
    {"trivial": run_trivial, "placement": run_placement}[args.bench](args)


if __name__ == "__main__":
    main()
