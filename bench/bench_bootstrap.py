"""Time the paired bootstrap of workflow_scripts.scoring.summary at study size, and (optionally) how the published
intervals depend on where the discordant problems sit.

    .venv/bin/python bench/bench_bootstrap.py [--models 15] [--problems 200] [--resamples 100000] [--repeats 5]
    .venv/bin/python bench/bench_bootstrap.py --placement 200     # the interval-sensitivity study

Target: 15 models x 3 metrics x 200 problems x 100,000 resamples under 5 s on 2 cores. Results go in
bench/NOTES_bootstrap.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from workflow_scripts import summarize as sm  # noqa: E402


def synthetic_rows(models: int, problems: int, seed: int = 0) -> pd.DataFrame:
    gen = np.random.default_rng(seed)
    records = []
    for m in range(models):
        skill = 0.2 + 0.6 * m / max(1, models - 1)
        for i in range(problems):
            level = 1 if i < problems // 2 else 2
            correct = bool(gen.random() < skill)
            records.append({
                "model": f"model{m:02d}", "level": level, "problem_id": i + 1, "problem": f"p{i}",
                "compiled": correct or bool(gen.random() < 0.8), "correct": correct,
                "speedup_eager": float(gen.lognormal(0, 0.6)) if correct else None,
                "speedup_compile": float(gen.lognormal(-0.3, 0.6)) if correct else None,
                "keeps_torch_op": bool(gen.random() < 0.3), "completion_tokens": int(gen.integers(200, 4000)),
            })
    return pd.DataFrame(records)


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def stages(n: int, k: int, resamples: int) -> dict[str, float]:
    """Where the time goes, one pass, same block size as the real code."""
    gen = np.random.default_rng(1)
    diff = (gen.integers(-1, 2, size=(n, k))).astype(np.float32)
    rng = np.random.default_rng(42)
    out = {"draw": 0.0, "bincount": 0.0, "matmul": 0.0}
    sums = np.empty((resamples, k), np.float32)
    done = 0
    while done < resamples:
        rows = min(sm.BOOTSTRAP_CHUNK, resamples - done)
        t0 = time.perf_counter()
        idx = rng.integers(0, n, size=(rows, n))
        t1 = time.perf_counter()
        flat = idx + (np.arange(rows, dtype=np.int64) * n)[:, None]
        counts = np.bincount(flat.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float32)
        t2 = time.perf_counter()
        sums[done:done + rows] = counts @ diff
        t3 = time.perf_counter()
        out["draw"] += t1 - t0
        out["bincount"] += t2 - t1
        out["matmul"] += t3 - t2
        done += rows
    t0 = time.perf_counter()
    np.percentile(sums.astype(np.float64) / n, [2.5, 97.5], axis=0)
    out["percentile"] = time.perf_counter() - t0
    return out


def placement_study(trials: int) -> None:
    """For each published (gained, lost) pattern: how many random placements of the discordant problems among
    200 give which interval (seed 42, 100,000 resamples)."""
    patterns = sorted({(8, 1), (4, 1), (2, 0), (8, 2), (3, 0), (2, 2), (4, 2), (2, 1), (8, 5), (1, 3)})
    gen = np.random.default_rng(0)
    for gained, lost in patterns:
        model = np.zeros((trials, 200), bool)
        ref = np.zeros((trials, 200), bool)
        for t in range(trials):
            order = gen.permutation(200)
            model[t, order[:gained]] = True
            ref[t, order[gained:gained + lost]] = True
        tally: dict[tuple[float, float], int] = {}
        for r in sm.paired_bootstrap(model, ref, resamples=100_000, seed=42):
            tally[r.ci95_pp] = tally.get(r.ci95_pp, 0) + 1
        print(f"gained {gained} lost {lost}: " + ", ".join(f"{list(ci)} x{c}" for ci, c in sorted(tally.items())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=15)
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--resamples", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--placement", type=int, default=0, help="run the placement study with this many trials")
    args = parser.parse_args()

    if args.placement:
        placement_study(args.placement)
        return 0

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {cores} cores usable, "
          f"{platform.processor() or platform.machine()}")
    rows = synthetic_rows(args.models, args.problems)
    compared = args.models - 1  # every model but the reference, as without --compare
    k = compared * len(sm.BOOTSTRAP_METRICS)

    outcomes = sm.outcomes_by_model(sm.normalize_rows(rows))
    names = list(outcomes)
    boot = timed(lambda: sm.bootstrap_block(outcomes, names[0], names[1:], resamples=args.resamples, seed=42),
                 args.repeats)
    # The spec's size is 15 x 3 comparisons: also time that many rows directly.
    gen = np.random.default_rng(3)
    m45 = gen.random((args.models * 3, args.problems)) < 0.5
    r45 = gen.random((args.models * 3, args.problems)) < 0.5
    core = timed(lambda: sm.paired_bootstrap(m45, r45, resamples=args.resamples, seed=42), args.repeats)
    full = timed(lambda: sm.summarize(rows, reference=names[0], resamples=args.resamples, seed=42), args.repeats)
    parts = stages(args.problems, args.models * 3, args.resamples)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def fmt(ts: list[float]) -> str:
        return f"median {statistics.median(ts):.3f} s, min {min(ts):.3f} s, max {max(ts):.3f} s ({len(ts)} runs)"

    print(f"paired_bootstrap, {args.models * 3} comparisons x {args.problems} problems x {args.resamples:,} "
          f"resamples: {fmt(core)}")
    print(f"bootstrap_block ({compared} models x 3 metrics = {k}): {fmt(boot)}")
    print(f"summarize() end to end ({args.models} models, {args.models * args.problems} rows): {fmt(full)}")
    print("one pass by stage: " + ", ".join(f"{name} {t:.3f} s" for name, t in parts.items()))
    print(f"peak RSS {peak_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
