"""The per-problem rows: one row per (model, problem) for results/evaluations.parquet.

Joins the problem index, each model's extraction and static-analysis tables, the per-answer evaluation objects
and the shared per-problem baselines. Every model x problem pair gets a row, whatever happened to it. Also
writes the table of detected hacks and review flags (one row per model x flag with its count), since rejected
answers stay in every denominator and reviewers need to see how many there were.

Columns of evaluations.parquet: see COLUMNS below and docs/design.md.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


from workflow_scripts.core.statuses import Status, is_compiled
from workflow_scripts.scoring.metrics import SUSPICIOUS_SPEEDUP_FLAG, eager_baseline, exceeds_flag_limit, speedup


COLUMNS = [
    "model", "level", "problem_id", "problem", "status", "compiled", "correct", "runtime_ms", "eager_ms",
    "eager_source", "compile_ms", "speedup_eager", "speedup_compile", "keeps_torch_op", "completion_tokens",
    "completion_sha256", "code_sha256", "problem_sha256", "flags", "error", "device", "timing_mode", "eager_status",
    "compile_status", "require_triton", "evaluation_key",
]


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
    eager_ms, eager_source = eager_baseline(evaluation, baseline)
    compile_ms = baseline.get("compile_ms") if baseline.get("compile_status") == "ok" else None
    speedup_eager = speedup(eager_ms, runtime_ms)
    speedup_compile = speedup(compile_ms, runtime_ms)
    flags = list(evaluation.get("flags") or [])
    if exceeds_flag_limit(speedup_eager, speedup_compile):
        flags.append(SUSPICIOUS_SPEEDUP_FLAG)
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
        "eager_source": eager_source,
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
