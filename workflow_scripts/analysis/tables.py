"""The per-model tables of the extraction and static-analysis stages, one row per problem of the suite."""

from __future__ import annotations

import json
from dataclasses import asdict

import pandas as pd

from workflow_scripts.analysis.extract import extract_code
from workflow_scripts.analysis.static import analyze_source
from workflow_scripts.core.hashing import sha256_optional_text
from workflow_scripts.core.records import AnswerRecord


def extract_answers(completions: list[dict], problems: pd.DataFrame, require_triton: bool) -> pd.DataFrame:
    by_problem = {(c["level"], c["problem_id"]): c for c in completions}
    rows = []
    for problem in problems.itertuples():
        completion = by_problem.get((problem.level, problem.problem_id))
        model = completion["model"] if completion else None
        if completion is None or completion["status"] != "ok" or completion.get("text") is None:
            status = completion["status"] if completion else "missing"
            rows.append(
                AnswerRecord(model, problem.level, problem.problem_id, status, None,
                             completion.get("completion_tokens") if completion else None,
                             "missing_completion", None, None, require_triton,
                             completion.get("error") if completion else None)
            )
            continue
        code = extract_code(completion["text"])
        rows.append(
            AnswerRecord(
                model, problem.level, problem.problem_id, "ok", sha256_optional_text(completion["text"]),
                completion.get("completion_tokens"), "ok" if code is not None else "no_code", code,
                sha256_optional_text(code), require_triton,
            )
        )
    frame = pd.DataFrame([asdict(r) for r in rows])
    return frame.astype({"completion_tokens": "Int64"})


def analyze_answers(answers: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for answer in answers.itertuples():
        row: dict = {"model": answer.model, "level": answer.level, "problem_id": answer.problem_id}
        if answer.code is None or pd.isna(answer.code):
            row.update(parses=None, has_model_new=None, defines_triton_kernel=None, launches_triton_kernel=None,
                       keeps_torch_op=None, torch_ops_kept="[]", findings="[]", worst_finding=None)
        else:
            report = analyze_source(answer.code).to_dict()
            severities = {f["severity"] for f in report["findings"]}
            row.update(
                parses=report["parses"],
                has_model_new=report["has_model_new"],
                defines_triton_kernel=report["defines_triton_kernel"],
                launches_triton_kernel=report["launches_triton_kernel"],
                keeps_torch_op=report["keeps_torch_op"],
                torch_ops_kept=json.dumps(report["torch_ops_kept"]),
                findings=json.dumps(report["findings"], sort_keys=True),
                worst_finding="reject" if "reject" in severities else ("flag" if severities else None),
            )
        rows.append(row)
    return pd.DataFrame(rows).astype(
        {c: "boolean" for c in ["parses", "has_model_new", "defines_triton_kernel", "launches_triton_kernel", "keeps_torch_op"]}
    )
