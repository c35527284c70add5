"""Stage 5, static analysis: the AST report of every extracted answer of a model.

Writes results/static/<model>.parquet, one row per problem: parses, has_model_new, defines/launches Triton
kernels, keeps_torch_op (the published definition) with the ops kept, and the findings (JSON) with the worst
severity. Rows without code have nulls.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from workflow_scripts.records import write_parquet
from workflow_scripts.static_analysis import analyze_source
from workflow_scripts.store import Store, code_version, sha256_file

STAGE = "static_analysis"
CODE_MODULES = ["analyze", "static_analysis", "records"]


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.analyze", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    args = parser.parse_args(argv)

    def compute(out: dict[str, Path]) -> None:
        write_parquet(out["parquet"], analyze_answers(pd.read_parquet(args.answers)))

    Store(args.store).build(
        {"parquet": args.out}, STAGE, code_version(CODE_MODULES), {"model": args.model},
        {"answers": sha256_file(args.answers)}, compute,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
