"""Stage 8, collect: one per-problem row per (model, problem) into results/evaluations.parquet.

Joins the problem index, each model's extraction and static-analysis tables, the per-answer evaluation objects
and the shared per-problem baselines. Every model x problem pair gets a row, whatever happened to it. Also
writes the table of detected hacks and review flags (one row per model x flag with its count), since rejected
answers stay in every denominator and reviewers need to see how many there were.

Columns of evaluations.parquet: see COLUMNS below and docs/design.md.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.records import problem_key, write_parquet
from workflow_scripts.statuses import Status, is_compiled
from workflow_scripts.store import Store, code_version, sha256_file

STAGE = "collect"
CODE_MODULES = ["collect", "records", "statuses"]
SUSPICIOUS_SPEEDUP = 10.0

COLUMNS = [
    "model", "level", "problem_id", "problem", "status", "compiled", "correct", "runtime_ms", "eager_ms",
    "compile_ms", "speedup_eager", "speedup_compile", "keeps_torch_op", "completion_tokens", "completion_sha256",
    "code_sha256", "problem_sha256", "flags", "error", "device", "timing_mode", "eager_status", "compile_status",
    "require_triton", "evaluation_key",
]


def _speedup(baseline_ms: float | None, runtime_ms: float | None) -> float | None:
    if baseline_ms is None or runtime_ms is None or runtime_ms <= 0 or not math.isfinite(baseline_ms):
        return None
    return baseline_ms / runtime_ms


def build_row(
    model: str,
    problem: dict[str, Any],
    answer: dict[str, Any],
    static: dict[str, Any],
    evaluation: dict[str, Any],
    baseline: dict[str, Any],
) -> dict[str, Any]:
    status = evaluation["status"]
    correct = status == Status.CORRECT.value
    runtime_ms = evaluation.get("runtime_ms") if correct else None
    eager_ms = baseline.get("eager_ms") if baseline.get("eager_status") == "ok" else None
    compile_ms = baseline.get("compile_ms") if baseline.get("compile_status") == "ok" else None
    speedup_eager = _speedup(eager_ms, runtime_ms)
    speedup_compile = _speedup(compile_ms, runtime_ms)
    flags = list(evaluation.get("flags") or [])
    if any(s is not None and s > SUSPICIOUS_SPEEDUP for s in (speedup_eager, speedup_compile)):
        flags.append("suspicious_speedup")
    keeps = static.get("keeps_torch_op")
    return {
        "model": model,
        "level": int(problem["level"]),
        "problem_id": int(problem["problem_id"]),
        "problem": problem["problem"],
        "status": status,
        "compiled": is_compiled(status),
        "correct": correct,
        "runtime_ms": runtime_ms,
        "eager_ms": eager_ms,
        "compile_ms": compile_ms,
        "speedup_eager": speedup_eager,
        "speedup_compile": speedup_compile,
        "keeps_torch_op": None if keeps is None or pd.isna(keeps) else bool(keeps),
        "completion_tokens": None if pd.isna(answer.get("completion_tokens")) else int(answer["completion_tokens"]),
        "completion_sha256": answer.get("completion_sha256"),
        "code_sha256": answer.get("code_sha256"),
        "problem_sha256": problem["sha256"],
        "flags": ",".join(sorted(set(flags))),
        "error": evaluation.get("error"),
        "device": evaluation.get("device"),
        "timing_mode": evaluation.get("timing_mode"),
        "eager_status": baseline.get("eager_status"),
        "compile_status": baseline.get("compile_status"),
        "require_triton": bool(answer.get("require_triton", True)),
        "evaluation_key": evaluation.get("evaluation_key"),
    }


def collect_rows(
    problems: pd.DataFrame,
    models: list[str],
    answers: dict[str, pd.DataFrame],
    static: dict[str, pd.DataFrame],
    evaluations: dict[tuple[str, int, int], dict[str, Any]],
    baselines: dict[tuple[int, int], dict[str, Any]],
) -> pd.DataFrame:
    rows = []
    for model in models:
        answer_rows = {(r["level"], r["problem_id"]): r for r in answers[model].to_dict("records")}
        static_rows = {(r["level"], r["problem_id"]): r for r in static[model].to_dict("records")}
        for problem in problems.to_dict("records"):
            at = (int(problem["level"]), int(problem["problem_id"]))
            rows.append(
                build_row(model, problem, answer_rows[at], static_rows.get(at, {}),
                          evaluations[(model, *at)], baselines.get(at, {}))
            )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"completion_tokens": "Int64", "keeps_torch_op": "boolean"})


def flag_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Counts of each status that is not plain success/failure and of each flag, per model."""
    records = []
    for model, group in rows.groupby("model", sort=False):
        for flag in sorted({f for flags in group["flags"] for f in flags.split(",") if f}):
            count = int(group["flags"].str.split(",").apply(lambda fs, f=flag: f in fs).sum())
            records.append({"model": model, "kind": "flag", "name": flag, "count": count})
        for status in (Status.REJECTED_STATIC.value, Status.REJECTED_RUNTIME.value, Status.NO_TRITON_LAUNCH.value):
            records.append({"model": model, "kind": "status", "name": status, "count": int((group["status"] == status).sum())})
    return pd.DataFrame(records, columns=["model", "kind", "name", "count"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.collect", description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--models", nargs="+", required=True)
    parser.add_argument("--results", type=Path, default=Path("results"), help="the results folder (layout in docs)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--flags-out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    args = parser.parse_args(argv)

    problems = pd.read_parquet(args.problems)
    results = args.results
    files: dict[str, Path] = {"problems": args.problems}
    for model in args.models:
        files[f"answers:{model}"] = results / "answers" / f"{model}.parquet"
        files[f"static:{model}"] = results / "static" / f"{model}.parquet"
        for p in problems.itertuples():
            files[f"evaluation:{model}:{problem_key(p.level, p.problem_id)}"] = (
                results / "evaluations" / model / f"{problem_key(p.level, p.problem_id)}.json"
            )
    for p in problems.itertuples():
        files[f"baseline:{problem_key(p.level, p.problem_id)}"] = results / "baselines" / f"{problem_key(p.level, p.problem_id)}.json"
    inputs = {role: sha256_file(path) for role, path in files.items()}
    store = Store(args.store)

    def compute(out: dict[str, Path]) -> None:
        answers = {m: pd.read_parquet(files[f"answers:{m}"]) for m in args.models}
        static = {m: pd.read_parquet(files[f"static:{m}"]) for m in args.models}
        evaluations = {}
        baselines = {}
        for p in problems.itertuples():
            key = problem_key(p.level, p.problem_id)
            baselines[(p.level, p.problem_id)] = json.loads(files[f"baseline:{key}"].read_text())
            for m in args.models:
                path = files[f"evaluation:{m}:{key}"]
                evaluation = json.loads(path.read_text())
                # The store key the evaluation was reused or computed under: reviewers find the object by it.
                entry = store.manifest_path(path)
                evaluation["evaluation_key"] = json.loads(entry.read_text())["key"] if entry.exists() else None
                evaluations[(m, p.level, p.problem_id)] = evaluation
        rows = collect_rows(problems, args.models, answers, static, evaluations, baselines)
        write_parquet(out["rows"], rows)
        write_parquet(out["flags"], flag_table(rows))

    store.build(
        {"rows": args.out, "flags": args.flags_out}, STAGE, code_version(CODE_MODULES),
        {"models": args.models}, inputs, compute,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
