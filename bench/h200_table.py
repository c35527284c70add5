"""Per-problem table and calibration spread from whatever evaluations and baselines exist under a results folder.

Unlike the collect stage it does not need every job to have finished: a GPU lease can end mid-run, and what was
measured until then is still worth recording.

    python bench/h200_table.py --results results/h200 [--log snakemake.log] --out-dir OUT
writes rows.csv (one row per evaluated model x problem, with its baselines) and spread.json (the calibration
model's speedup against eager: its distribution is the harness's noise and bias, ideally centred on 1). The eager
time is the collect stage's (``scoring.metrics.eager_baseline``: the reference timed beside the answer); without a
baseline file (a run with ``--until evaluate``) it is the paired reference's mean all the same. With ``--log``
(Snakemake's output) it adds jobs.json: each finished job's rule and wall seconds, and the evaluate jobs' span.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from datetime import datetime
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from workflow_scripts.scoring.metrics import eager_baseline, speedup


def load_rows(results: Path) -> pd.DataFrame:
    baselines = {p.stem: json.loads(p.read_text()) for p in (results / "baselines").glob("*.json")}
    rows = []
    for path in sorted((results / "evaluations").glob("*/*.json")):
        evaluation = json.loads(path.read_text())
        key = path.stem
        baseline = baselines.get(key, {})
        # Without a baseline file the paired reference still gives the eager time (as if the baseline ran).
        eager, eager_source = eager_baseline(evaluation, baseline or {"eager_status": "ok"})
        compiled = baseline.get("compile_ms") if baseline.get("compile_status") == "ok" else None
        runtime = evaluation.get("runtime_ms") if evaluation.get("status") == "correct" else None
        stats = evaluation.get("runtime_stats") or {}
        rows.append({
            "model": path.parent.name, "problem": key, "status": evaluation.get("status"),
            "runtime_ms": runtime, "runtime_median_ms": stats.get("median"), "runtime_std_ms": stats.get("std"),
            "eager_ms": eager, "compile_ms": compiled, "compile_time_s": baseline.get("compile_time_s"),
            "eager_status": baseline.get("eager_status"), "compile_status": baseline.get("compile_status"),
            "eager_source": eager_source, "speedup_eager": speedup(eager, runtime),
            "speedup_compile": speedup(compiled, runtime),
            "flags": ",".join(evaluation.get("flags") or []), "error": (evaluation.get("error") or "")[:200],
            "sm_clock_mhz": (evaluation.get("fingerprint") or {}).get("sm_clock_mhz"),
        })
    return pd.DataFrame(rows)


_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")


def job_times(log: Path) -> dict:
    """Each finished job's rule and wall seconds from Snakemake's output (a job starts at the stamp before its
    ``rule <name>:`` block and ends at the stamp before ``Finished jobid: N``), the evaluate jobs' span, the jobs
    that failed (the stamp before ``Error in rule``: an error of their own, or the run's timeout killing them) and
    those still running when the log ends."""
    stamp: datetime | None = None
    started: dict[int, tuple[str, datetime, str]] = {}  # running jobs: rule, start, wildcards
    block: tuple[str, datetime] | None = None  # the rule and stamp of a job block whose jobid comes next
    failing = False  # that block is an ``Error in rule`` one
    jobid = -1
    jobs, failed = [], []
    for raw in log.read_text(errors="replace").splitlines():
        line = raw.strip()
        if m := _STAMP.match(line):
            stamp = datetime.strptime(" ".join(m.group(1).split()), "%a %b %d %H:%M:%S %Y")
        elif (m := re.match(r"^(Error in )?(?:local)?rule (\w+):$", line)) and stamp is not None:
            block, failing = (m.group(2), stamp), bool(m.group(1))
        elif (m := re.match(r"^jobid: (\d+)$", line)) and block is not None:
            jobid = int(m.group(1))
            if failing:
                name, start, wildcards = started.pop(jobid, (block[0], block[1], ""))
                failed.append({"jobid": jobid, "rule": name, "wildcards": wildcards, "start": start.isoformat(),
                               "failed_after_s": (block[1] - start).total_seconds()})
            else:
                started[jobid] = (*block, "")
            block = None
        elif (m := re.match(r"^wildcards: (.*)$", line)) and jobid in started:
            started[jobid] = (*started[jobid][:2], m.group(1))
        elif (m := re.match(r"^Finished jobid: (\d+) \(Rule: (\w+)\)", line)) and stamp is not None:
            name, start, wildcards = started.pop(int(m.group(1)), (m.group(2), stamp, ""))
            jobs.append({"jobid": int(m.group(1)), "rule": name, "wildcards": wildcards, "start": start.isoformat(),
                         "wall_s": (stamp - start).total_seconds()})
    evaluate = [j for j in jobs if j["rule"] == "evaluate"]
    running = [{"jobid": k, "rule": r, "wildcards": w, "start": t.isoformat()} for k, (r, t, w) in started.items()]
    span = None
    if evaluate:
        first = min(datetime.fromisoformat(j["start"]) for j in evaluate)
        last = max(datetime.fromisoformat(j["start"]).timestamp() + j["wall_s"] for j in evaluate)
        span = last - first.timestamp()
    return {"finished": len(jobs), "by_rule": pd.Series([j["rule"] for j in jobs]).value_counts().to_dict(),
            "evaluate_jobs": len(evaluate), "evaluate_span_s": span, "failed": failed, "running": running,
            "jobs": jobs}


def calibration_spread(rows: pd.DataFrame) -> dict:
    calibration = rows[(rows["model"] == "calibration") & rows["speedup_eager"].notna()]
    values = sorted(calibration["speedup_eager"])
    if not values:
        return {"n": 0}
    quartiles = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {
        "n": len(values), "median": statistics.median(values), "mean": statistics.fmean(values),
        "q1": quartiles[0], "q3": quartiles[2], "min": values[0], "max": values[-1],
        "within_5pct": sum(0.95 <= v <= 1.05 for v in values), "above_1": sum(v > 1 for v in values),
        "statuses": rows[rows["model"] == "calibration"]["status"].value_counts().to_dict(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path("results/h200"))  # config/h200.yaml's
    parser.add_argument("--log", type=Path, help="Snakemake's output of the run (for the jobs' wall times)")
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = load_rows(args.results)
    rows.to_csv(args.out_dir / "rows.csv", index=False)
    spread = calibration_spread(rows) if len(rows) else {"n": 0}
    (args.out_dir / "spread.json").write_text(json.dumps(spread, indent=1, sort_keys=True) + "\n")
    print(rows.drop(columns=["error"]).to_string() if len(rows) else "no rows")
    print(json.dumps(spread, indent=1))
    if args.log is not None and args.log.is_file():
        jobs = job_times(args.log)
        (args.out_dir / "jobs.json").write_text(json.dumps(jobs, indent=1) + "\n")
        print(json.dumps({k: v for k, v in jobs.items() if k != "jobs"}, indent=1))


if __name__ == "__main__":
    main()
