"""The per-problem rows: one row per (model, problem) for <results>/evaluations.parquet.

Joins the problem index, each model's extraction and static-analysis tables, the per-answer evaluation objects
and the shared per-problem baselines. Every model x problem pair gets a row, whatever happened to it. Also
writes the table of detected hacks and review flags (one row per model x flag with its count), since rejected
answers stay in every denominator and reviewers need to see how many there were.

Columns of evaluations.parquet: their order, meaning and unit are the table "rows" of core/columns.py.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from workflow_scripts.core.columns import column_names
from workflow_scripts.core.statuses import Status, is_compiled
from workflow_scripts.core.records import DeviceRates
from workflow_scripts.scoring.metrics import SUSPICIOUS_SPEEDUP_FLAG, eager_baseline, exceeds_flag_limit, speedup
from workflow_scripts.scoring.significance import SpeedupInterval, speedup_interval
from workflow_scripts.scoring.speed_of_light import (FASTER_THAN_FLOOR_FLAG, ProblemWork, below_floor, floor_fraction,
                                                     floor_ms)

COLUMNS = column_names("rows")
FLAG_SEPARATOR = ","


def split_flags(flag_list: str | None) -> list[str]:
    """The flags of a row's flag_list (comma-separated; empty or null: none)."""
    return [f for f in (flag_list or "").split(FLAG_SEPARATOR) if f]


def build_row(
    model: str,
    problem: dict[str, Any],
    answer: dict[str, Any],
    static: dict[str, Any],
    evaluation: dict[str, Any],
    baseline: dict[str, Any],
    code_version: str,
    rates: DeviceRates | None = None,
) -> dict[str, Any]:
    """One row; ``code_version`` is the pipeline code building it (core/store.py package_version), ``rates`` the
    device's measured rates (its floor; None: no floor)."""
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
    floor = floor_ms(ProblemWork.of(problem), rates)
    fraction = floor_fraction(floor, runtime_ms)
    if below_floor(fraction):
        flags.append(FASTER_THAN_FLOOR_FLAG)
    keeps = static.get("keeps_torch_op")
    interval = paired_interval(evaluation) if speedup_eager is not None and eager_source == "paired" else None
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
        "speedup_eager_low": interval.low if interval else None,
        "speedup_eager_high": interval.high if interval else None,
        "floor_ms": floor,
        "floor_fraction": fraction,
        "keeps_torch_op": None if keeps is None or pd.isna(keeps) else bool(keeps),
        "completion_tokens": None if pd.isna(answer.get("completion_tokens")) else int(answer["completion_tokens"]),
        "completion_sha256": answer.get("completion_sha256"),
        "code_sha256": answer.get("code_sha256"),
        "problem_sha256": problem["sha256"],
        "flag_list": FLAG_SEPARATOR.join(sorted(set(flags))),
        "error": evaluation.get("error"),
        "device": evaluation.get("device"),
        "timing_mode": evaluation.get("timing_mode"),
        "degenerate": (evaluation.get("problem_audit") or {}).get("degenerate"),
        "tf32_sensitive": (evaluation.get("problem_audit") or {}).get("tf32_sensitive"),
        "placement_spread": (evaluation.get("problem_audit") or {}).get("placement_spread"),
        "eager_status": baseline.get("eager_status"),
        "compile_status": baseline.get("compile_status"),
        "require_triton": bool(answer.get("require_triton", True)),
        "evaluation_key": evaluation.get("evaluation_key"),
        "code_version": code_version,
    }


def paired_interval(evaluation: dict[str, Any]) -> SpeedupInterval | None:
    """The interval of a correct answer's speedup over the eager reference timed beside it (scoring/significance.py)
    from the two sides' timed calls in the evaluation; None where either is missing, or where the reference's blocks
    met a full card (``device_ooms``: its plan may be a slower fallback, evaluation/reference_timer.py)."""
    paired = evaluation.get("paired_reference") or {}
    if paired.get("device_ooms"):
        return None
    answer = (evaluation.get("runtime_stats") or {}).get("trials")
    reference = (paired.get("raw") or {}).get("trials_ms")
    if not answer or not reference:
        return None
    block = int(paired.get("block_trials") or 0) or len(answer)
    # The reference's blocks are at most the answer's (timing.reference_block), whatever the setting says.
    return speedup_interval(answer, reference, block, min(block, int(paired.get("reference_block_trials") or block)))


def collect_rows(
    problems: pd.DataFrame,
    models: list[str],
    answers: dict[str, pd.DataFrame],
    static: dict[str, pd.DataFrame],
    evaluations: dict[tuple[str, int, int], dict[str, Any]],
    baselines: dict[tuple[int, int], dict[str, Any]],
    *,
    code_version: str,
    rates: DeviceRates | None = None,
) -> pd.DataFrame:
    rows = []
    for model in models:
        answer_rows = {(r["level"], r["problem_id"]): r for r in answers[model].to_dict("records")}
        static_rows = {(r["level"], r["problem_id"]): r for r in static[model].to_dict("records")}
        for problem in problems.to_dict("records"):
            at = (int(problem["level"]), int(problem["problem_id"]))
            rows.append(
                build_row(model, problem, answer_rows[at], static_rows.get(at, {}),
                          evaluations[(model, *at)], baselines.get(at, {}), code_version, rates)
            )
    frame = pd.DataFrame(rows, columns=COLUMNS)
    return frame.astype({"completion_tokens": "Int64", "keeps_torch_op": "boolean", "degenerate": "boolean",
                         "tf32_sensitive": "boolean"})


def flag_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Counts of each status that is not plain success/failure and of each flag, per model."""
    records = []
    for model, group in rows.groupby("model", sort=False):
        flag_sets = [set(split_flags(value)) for value in group["flag_list"]]
        for flag in sorted(set().union(*flag_sets)):
            count = sum(flag in flags for flags in flag_sets)
            records.append({"model": model, "kind": "flag", "name": flag, "count": count})
        for status in (Status.REJECTED_STATIC.value, Status.REJECTED_RUNTIME.value, Status.NO_TRITON_LAUNCH.value):
            records.append({"model": model, "kind": "status", "name": status, "count": int((group["status"] == status).sum())})
    return pd.DataFrame(records, columns=column_names("flags"))
