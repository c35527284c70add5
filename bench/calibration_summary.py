"""Done-when 2's statistics from a calibration run's records (gpu_problem_worker.py calibration: the reference as
its own answer, so every true speedup is 1): correct share, |speedup-1| median and p90 (nearest rank: index
round(p x (n-1)) of the sorted values), the signed bias per size bucket of the paired eager time, the outliers.

    python bench/calibration_summary.py bench/archive/h200/2026-12-04-session14/call2_gpu_problem_worker.jsonl

With --copies (the copies bench: one problem, several answer processes against one trusted side), one line per file:
each answer's speedup, and with --slow-above-ms how many answers and paired references ran on the slow side of a
two-speed kernel (median trial above the threshold; L2/77: 5.8 ms, between its 4.9-5.1 and 6.3-6.6 ms):

    python bench/calibration_summary.py --copies --slow-above-ms 5.8 bench/archive/h200/2026-12-04-session16/call2_copies_*.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

# Size buckets by the paired eager reference's mean time (ms): the "no size bucket biased by more than 0.5%".
BUCKETS = [(0.0, 0.1, "under 0.1 ms"), (0.1, 1.0, "0.1-1 ms"), (1.0, 10.0, "1-10 ms"),
           (10.0, float("inf"), "above 10 ms")]


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[round(p * (len(ordered) - 1))]


def summary(records: list[dict]) -> dict:
    rows = {r["problem"]: r for r in records if r.get("bench") == "calibration" and r.get("copy") in (None, 0)}
    correct = [r for r in rows.values() if r["status"] == "correct" and r.get("speedup")]
    out: dict = {"problems": len(rows), "levels": {lvl: sum(k.startswith(f"L{lvl}_") for k in rows) for lvl in (1, 2)},
                 "correct": len(correct),
                 "not_correct": {k: r["status"] for k, r in rows.items() if r["status"] != "correct"}}
    for name, key in (("mean_based", "speedup"), ("median_based", "median_speedup")):
        errors = [100 * abs(r[key] - 1) for r in correct]
        out[name] = {"median_pct": nearest_rank(errors, 0.5), "p90_pct": nearest_rank(errors, 0.9),
                     "max_pct": max(errors)}
    out["buckets"] = {}
    for low, high, label in BUCKETS:
        inside = [r for r in correct if low <= r["paired_eager_ms"] < high]
        if inside:
            out["buckets"][label] = {
                "problems": len(inside),
                "signed_mean_pct": 100 * statistics.fmean(r["speedup"] - 1 for r in inside),
                "signed_median_pct": 100 * statistics.median(r["speedup"] - 1 for r in inside),
                "median_based_signed_mean_pct": 100 * statistics.fmean(r["median_speedup"] - 1 for r in inside)}
    out["timed_intervals"] = interval_summary(list(rows.values()))
    worst = sorted(correct, key=lambda r: -abs(r["speedup"] - 1))[:5]
    out["outliers"] = {r["problem"]: {"speedup": round(r["speedup"], 4),
                                      "median_speedup": round(r["median_speedup"], 4),
                                      "paired_eager_ms": round(r["paired_eager_ms"], 4)} for r in worst}
    return out


def interval_summary(rows: list[dict]) -> dict:
    """The timed calls' observed-minus-reported excess (median per answer), the overhead probe's, what is left of
    the excess beyond the probe's (the relative bound's margin must hold it) and the share of each limit used."""
    checks = [r.get("timed_checks") or {} for r in rows]
    timed = [c for c in checks if c.get("excess_ms_median") is not None]
    probed = [c for c in timed if c.get("probe_excess_ms") is not None]
    out: dict = {"answers": len(timed), "probed": len(probed), "unconfirmed": sum(bool(c.get("unconfirmed"))
                                                                                   for c in timed)}
    for name, values in (("excess_ms", [c["excess_ms_median"] for c in timed]),
                         ("probe_excess_ms", [c["probe_excess_ms"] for c in probed]),
                         ("beyond_probe_ms", [c["excess_ms_median"] - c["probe_excess_ms"] for c in probed]),
                         ("share_of_limit", [c["excess_ms_median"] / c["excess_limit_ms"] for c in timed
                                             if c.get("excess_limit_ms")])):
        if values:
            out[name] = {"median": round(nearest_rank(values, 0.5), 3), "p90": round(nearest_rank(values, 0.9), 3),
                         "max": round(max(values), 3), "min": round(min(values), 3)}
    return out


def copies_summary(records: list[dict], slow_above_ms: float | None) -> dict:
    """One copies bench: every answer's status and speedup in order, and the slow answers and references."""
    rows = sorted((r for r in records if r.get("bench") == "calibration"), key=lambda r: r.get("copy") or 0)
    out: dict = {"answers": len(rows), "statuses": sorted({r["status"] for r in rows}),
                 "flags": sorted({f for r in rows for f in r.get("flags") or []}),
                 "speedups": [round(r["speedup"], 3) if r.get("speedup") else None for r in rows]}
    if slow_above_ms is not None:
        timed = [r for r in rows if r.get("answer_trials_ms") and r.get("reference_trials_ms")]
        out["slow_answers"] = sum(statistics.median(r["answer_trials_ms"]) > slow_above_ms for r in timed)
        out["slow_references"] = sum(statistics.median(r["reference_trials_ms"]) > slow_above_ms for r in timed)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path, nargs="+", help="gpu_problem_worker.jsonl files")
    parser.add_argument("--copies", action="store_true", help="copies-bench files: one summary line per file")
    parser.add_argument("--slow-above-ms", type=float, help="with --copies: a median trial above this is slow")
    args = parser.parse_args()
    if not args.copies and len(args.records) > 1:
        parser.error("one calibration file at a time (or --copies)")
    for path in args.records:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if args.copies:
            print(path.name, json.dumps(copies_summary(records, args.slow_above_ms)))
        else:
            print(json.dumps(summary(records), indent=1))


if __name__ == "__main__":
    main()
