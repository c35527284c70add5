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
from typing import Any

TIMES = ("compile_ms", "eager_ms")


def records(run: Path, folder: str) -> dict[str, dict]:
    """The JSON records under ``folder`` of a run (``baselines``: by file name; ``evaluations``: by
    ``<model>/<file name>``), from a results folder or a results archive."""
    if run.is_dir():
        return {str(path.relative_to(run / folder)): json.loads(path.read_text())
                for path in (run / folder).rglob("*.json")}
    with tarfile.open(run) as archive:
        found = {}
        for member in archive.getmembers():
            parts = Path(member.name).parts
            if member.isfile() and member.name.endswith(".json") and folder in parts:
                found["/".join(parts[parts.index(folder) + 1:])] = json.load(archive.extractfile(member))
        return found


def required_records(run: Path, folder: str, pattern: str) -> dict[str, dict]:
    """``records``, or a stop that names the run and what it lacks: a wrong folder must not read as an empty run."""
    found = records(run, folder)
    if not found:
        raise SystemExit(f"{run}: no {pattern} (a results folder such as results/dag_bench, or a dag_results.tgz)")
    return found


def ratios(first: dict[str, dict], second: dict[str, dict]) -> dict[str, dict[str, float | None]]:
    """Per problem either run has: second / first for each of ``TIMES``, None where either run lacks the problem or
    did not time it with status ok (so what was left out is in the report too)."""
    rows: dict[str, dict[str, float | None]] = {}
    for name in sorted(first.keys() | second.keys()):
        a, b = first.get(name, {}), second.get(name, {})
        rows[name.removesuffix(".json")] = {
            time: (b[time] / a[time] if a.get(time.replace("_ms", "_status")) == b.get(time.replace("_ms", "_status"))
                   == "ok" and a.get(time) and b.get(time) else None)
            for time in TIMES}
    return rows


def summary(rows: dict[str, dict[str, float | None]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for time in TIMES:
        values = [value for row in rows.values() if (value := row[time]) is not None]
        left_out = sorted(name for name, row in rows.items() if row[time] is None)
        out[time] = {"n": len(values), "left_out": left_out}
        if values:
            out[time].update(median=statistics.median(values), min=min(values), max=max(values),
                             max_abs_change=max(abs(value - 1) for value in values))
    return out


def two_runs(description: str, first: str = "first", second: str = "second") -> argparse.Namespace:
    """The command line of a script that sets two runs side by side: the two, and ``--out`` for its report."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(first, type=Path)
    parser.add_argument(second, type=Path)
    parser.add_argument("--out", type=Path)
    return parser.parse_args()


def main() -> None:
    args = two_runs(__doc__.splitlines()[0])
    runs = {run: required_records(run, "baselines", "baselines/*.json") for run in (args.first, args.second)}
    rows = ratios(runs[args.first], runs[args.second])
    report = {"first": str(args.first), "second": str(args.second), "summary": summary(rows), "per_problem": rows}
    for name, row in rows.items():
        print(name, " ".join(f"{time} {'-' if value is None else f'{value:.4f}'}" for time, value in row.items()))
    print(json.dumps(report["summary"], indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
