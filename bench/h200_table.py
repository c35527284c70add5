"""Per-problem table and calibration spread from whatever evaluations and baselines exist under a results folder.

Unlike the collect stage it does not need every job to have finished: a GPU lease can end mid-run, and what was
measured until then is still worth recording.

    python bench/h200_table.py --results results/h200 --out-dir bench/h200
writes rows.csv (one row per evaluated model x problem, with its baselines) and spread.json (the calibration
model's speedup against eager: its distribution is the harness's noise and bias, ideally centred on 1).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import pandas as pd


def load_rows(results: Path) -> pd.DataFrame:
    baselines = {p.stem: json.loads(p.read_text()) for p in (results / "baselines").glob("*.json")}
    rows = []
    for path in sorted((results / "evaluations").glob("*/*.json")):
        evaluation = json.loads(path.read_text())
        key = path.stem
        baseline = baselines.get(key, {})
        eager = baseline.get("eager_ms") if baseline.get("eager_status") == "ok" else None
        compiled = baseline.get("compile_ms") if baseline.get("compile_status") == "ok" else None
        runtime = evaluation.get("runtime_ms") if evaluation.get("status") == "correct" else None
        stats = evaluation.get("runtime_stats") or {}
        rows.append({
            "model": path.parent.name, "problem": key, "status": evaluation.get("status"),
            "runtime_ms": runtime, "runtime_median_ms": stats.get("median"), "runtime_std_ms": stats.get("std"),
            "eager_ms": eager, "compile_ms": compiled, "compile_time_s": baseline.get("compile_time_s"),
            "eager_status": baseline.get("eager_status"), "compile_status": baseline.get("compile_status"),
            "speedup_eager": eager / runtime if eager and runtime else None,
            "speedup_compile": compiled / runtime if compiled and runtime else None,
            "flags": ",".join(evaluation.get("flags") or []), "error": (evaluation.get("error") or "")[:200],
            "sm_clock_mhz": (evaluation.get("fingerprint") or {}).get("sm_clock_mhz"),
        })
    return pd.DataFrame(rows)


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
    parser.add_argument("--out-dir", type=Path, required=True)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    rows = load_rows(args.results)
    rows.to_csv(args.out_dir / "rows.csv", index=False)
    spread = calibration_spread(rows) if len(rows) else {"n": 0}
    (args.out_dir / "spread.json").write_text(json.dumps(spread, indent=1, sort_keys=True) + "\n")
    print(rows.drop(columns=["error"]).to_string() if len(rows) else "no rows")
    print(json.dumps(spread, indent=1))


if __name__ == "__main__":
    main()
