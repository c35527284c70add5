"""Done-when 2's statistics from a calibration run's records (gpu_problem_worker.py calibration: the reference as
its own answer, so every true speedup is 1): correct share, |speedup-1| median and p90 (nearest rank: index
round(p x (n-1)) of the sorted values), the signed bias per size bucket of the paired eager time, the outliers.

    python bench/calibration_summary.py bench/archive/h200/2026-12-04-session14/call2_gpu_problem_worker.jsonl

With --copies (the copies bench: one problem, several answer processes against one trusted side), one line per file:
each answer's speedup, and with --slow-above-ms how many answers and paired references ran on the slow side of a
two-speed kernel (median trial above the threshold; L2/77: 5.8 ms, between its 4.9-5.1 and 6.3-6.6 ms):

    python bench/calibration_summary.py --copies --slow-above-ms 5.8 bench/archive/h200/2026-12-04-session16/call2_copies_*.jsonl

With --verdicts (issue 35), the speed verdicts (scoring/significance.py) of the calibration answers and of the
verdicts bench's answers of known speedup: under the timing mode's default band, and under a band measured by the
calibration itself, split in two halves by problem (each half judged by the band the other half measured, so no
answer judges itself); and the zeros answers' verdicts and flags. With --rates (the rates bench's
device_rates.json) and --suite, every correct answer's speed-of-light floor (scoring/speed_of_light.py):

    python bench/calibration_summary.py --verdicts --rates .../device_rates.json --suite .kb .../gpu_problem_worker.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workflow_scripts.core.records import DeviceRates  # noqa: E402
from workflow_scripts.scoring.rows import paired_interval  # noqa: E402
from workflow_scripts.scoring.significance import (DEFAULT_BAND, SpeedupInterval, noise_band, problem_band,  # noqa: E402
                                                   verdict)
from workflow_scripts.scoring.speed_of_light import ProblemWork, below_floor, floor_ms  # noqa: E402

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


def interval(record: dict) -> SpeedupInterval | None:
    """The answer's speedup interval: where the record keeps its timed calls (gpu_problem_worker.timed_calls, since
    s24), by the rows' own rule from them (scoring.rows.paired_interval: none where the reference met a full card);
    else as the bench recorded it."""
    if record.get("answer_trials_ms") and record.get("reference_trials_ms"):
        return paired_interval({"runtime_stats": {"trials": record["answer_trials_ms"]},
                                "paired_reference": {"raw": {"trials_ms": record["reference_trials_ms"]},
                                                     "block_trials": record.get("block_trials"),
                                                     "reference_block_trials": record.get("reference_block_trials"),
                                                     "device_ooms": record.get("reference_device_ooms")}})
    if record.get("reference_device_ooms"):
        return None
    low, high = record.get("speedup_low"), record.get("speedup_high")
    return SpeedupInterval(low, high) if low and high else None


def spread(record: dict) -> float:
    """The problem's placement spread (evaluation/placement_audit.py), NaN where not measured."""
    value = (record.get("problem_audit") or {}).get("placement_spread")
    return float(value) if value else float("nan")


def verdict_summary(records: list[dict]) -> dict:
    """The calibration's verdicts under the default band and under split-half measured bands, each problem's band
    widened by its placement spread (scoring/significance.py problem_band; the default band alone beside it); the
    known-speedup answers' under the band the whole calibration measured; the zeros answers' verdicts and flags."""
    calibration = sorted(((r["problem"], interval(r), spread(r)) for r in records
                          if r.get("bench") == "calibration" and r.get("copy") in (None, 0) and interval(r)))
    halves = [calibration[0::2], calibration[1::2]]
    measured = [noise_band([i for _, i, _ in half], "cuda_events", [s for _, _, s in half]) for half in halves]
    whole = noise_band([i for _, i, _ in calibration], "cuda_events", [s for _, _, s in calibration])
    default = DEFAULT_BAND["cuda_events"]

    def judged(band: float, entries: list) -> list[str | None]:
        return [verdict(i, float(problem_band(band, np.array([s]))[0])) for _, i, s in entries]

    split = Counter(v for h, half in enumerate(halves) for v in judged(measured[1 - h].band, half))
    out: dict = {
        "calibration_answers": len(calibration),
        "default_band": default,
        "placement_spreads_measured": int(sum(np.isfinite(s) for _, _, s in calibration)),
        "placement_spreads_above_band": {k: round(s, 4) for k, _, s in calibration if s > 1 + default},
        "calibration_under_default_band": dict(Counter(judged(default, calibration))),
        "calibration_under_default_band_without_placement": dict(Counter(verdict(i, default)
                                                                         for _, i, _ in calibration)),
        "split_half_bands": [round(b.band, 5) for b in measured],
        "calibration_under_split_half_bands": dict(split),
        "whole_calibration_band": round(whole.band, 5),
        "not_same_under_default": {k: [round(i.low, 4), round(i.high, 4), round(s, 4) if np.isfinite(s) else None]
                                   for (k, i, s), v
                                   in zip(calibration, judged(default, calibration)) if v != "same"},
    }
    known = [r for r in records if r.get("bench") == "verdicts" and r.get("true_speedup")]
    out["known_speedups"] = {r["answer"]: {
        "true": round(r["true_speedup"], 4), "status": r["status"], "speedup": r.get("speedup"),
        "interval": [interval(r).low, interval(r).high] if interval(r) else None,
        "verdict_default_band": verdict(interval(r), default),
        "verdict_calibration_band": verdict(interval(r), whole.band)} for r in known}
    out["degenerate_problems"] = {f"{r['problem']}:{r['answer']}": {
        "status": r["status"], "flags": r.get("flags"), "degenerate": (r.get("problem_audit") or {}).get("degenerate"),
        "zeros_pass": (r.get("problem_audit") or {}).get("zeros_pass")}
        for r in records if r.get("bench") == "verdicts" and not r.get("true_speedup")}
    return out


def floor_summary(records: list[dict], rates_file: Path, suite: Path) -> dict:
    """Every correct answer's floor_fraction (floor / runtime) on the device the rates were measured on."""
    from bench.gpu_watchdog import problem_file
    from workflow_scripts.suite.sizes import problem_sizes

    rates = DeviceRates.from_dict({**json.loads(rates_file.read_text()), "fingerprint": {}})
    fractions = {}
    for r in records:
        if r.get("status") != "correct" or not r.get("runtime_ms") or r.get("problem", "").startswith("chain"):
            continue
        floor = floor_ms(ProblemWork.of(vars(problem_sizes(problem_file(suite, r["problem"])))), rates)
        if floor is not None:
            fractions[f"{r['problem']}:{r.get('answer', 'reference')}"] = floor / r["runtime_ms"]
    ordered = sorted(fractions.items(), key=lambda kv: -kv[1])
    values = [v for _, v in ordered]
    return {"answers": len(values), "above_floor": sum(v <= 1 for v in values),
            "faster_than_floor": [k for k, v in ordered if below_floor(v)],
            "fraction_median": round(nearest_rank(values, 0.5), 4) if values else None,
            "fraction_max": round(values[0], 4) if values else None,
            "closest_to_floor": {k: round(v, 4) for k, v in ordered[:8]},
            "peak_gb_s": round(rates.peak_bytes_per_s / 1e9, 1),
            "matmul_tflop_s": {k: round(v / 1e12, 1) for k, v in rates.matmul_flops_per_s.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", type=Path, nargs="+", help="gpu_problem_worker.jsonl files")
    parser.add_argument("--copies", action="store_true", help="copies-bench files: one summary line per file")
    parser.add_argument("--slow-above-ms", type=float, help="with --copies: a median trial above this is slow")
    parser.add_argument("--verdicts", action="store_true", help="the speed verdicts and the zeros answers' flags")
    parser.add_argument("--rates", type=Path, help="device_rates.json of the same device: the floors")
    parser.add_argument("--suite", type=Path, default=Path(".kb"), help="with --rates: the problems' suite")
    args = parser.parse_args()
    if not args.copies and len(args.records) > 1:
        parser.error("one calibration file at a time (or --copies)")
    for path in args.records:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if args.copies:
            print(path.name, json.dumps(copies_summary(records, args.slow_above_ms)))
        else:
            print(json.dumps(summary(records), indent=1))
        if args.verdicts:
            print(json.dumps(verdict_summary(records), indent=1))
        if args.rates:
            print(json.dumps(floor_summary(records, args.rates, args.suite), indent=1))


if __name__ == "__main__":
    main()
