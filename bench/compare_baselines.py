"""Two runs' baselines side by side (issue 34, done-when 3): per problem, the second run's compiled and eager times over
the first's, for the problems both finished with status ok. Each run is a results folder or a `dag_results.tgz` from
bench/dag_bench_run.sh (its `results/<name>/baselines/*.json`).

    python3 bench/compare_baselines.py RUN_A RUN_B [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tarfile
from pathlib import Path

TIMES = ("compile_ms", "eager_ms")


def baselines(run: Path) -> dict[str, dict]:
    """Baseline records by file name (``level2_40.json``), from a results folder or a results archive."""
    if run.is_dir():
        return {path.name: json.loads(path.read_text()) for path in run.glob("baselines/*.json")}
    with tarfile.open(run) as archive:
        return {Path(member.name).name: json.load(archive.extractfile(member))
                for member in archive.getmembers()
                if member.isfile() and Path(member.name).parent.name == "baselines" and member.name.endswith(".json")}


def ratios(first: dict[str, dict], second: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Per problem both runs timed with status ok: second / first for each of ``TIMES``."""
    rows: dict[str, dict[str, float]] = {}
    for name in sorted(first.keys() & second.keys()):
        a, b = first[name], second[name]
        row = {time: b[time] / a[time] for time in TIMES
               if a.get(time.replace("_ms", "_status")) == b.get(time.replace("_ms", "_status")) == "ok"
               and a.get(time) and b.get(time)}
        if row:
            rows[name.removesuffix(".json")] = row
    return rows


def summary(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    out = {}
    for time in TIMES:
        values = [row[time] for row in rows.values() if time in row]
        if values:
            out[time] = {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values),
                         "max_abs_change": max(abs(value - 1) for value in values)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = ratios(baselines(args.first), baselines(args.second))
    report = {"first": str(args.first), "second": str(args.second), "summary": summary(rows), "per_problem": rows}
    for name, row in rows.items():
        print(name, " ".join(f"{time} {value:.4f}" for time, value in row.items()))
    print(json.dumps(report["summary"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
