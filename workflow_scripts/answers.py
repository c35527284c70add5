"""Stage 4, extraction: the code of each completion (the first fenced block, as KernelBench takes it).

Writes results/answers/<model>.parquet, one row per problem (AnswerRecord): completion status and sha256, token
count, extract_status (ok | no_code | missing_completion), the code and its sha256. Every problem of the suite
gets a row, whether or not the model answered it.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

import pandas as pd

from workflow_scripts.extract import extract_code
from workflow_scripts.records import AnswerRecord, read_jsonl, text_sha256, write_parquet
from workflow_scripts.store import Store, code_version, sha256_file

STAGE = "extract"
CODE_MODULES = ["answers", "extract", "records"]


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
                             "missing_completion", None, None, require_triton)
            )
            continue
        code = extract_code(completion["text"])
        rows.append(
            AnswerRecord(
                model, problem.level, problem.problem_id, "ok", text_sha256(completion["text"]),
                completion.get("completion_tokens"), "ok" if code is not None else "no_code", code,
                text_sha256(code), require_triton,
            )
        )
    frame = pd.DataFrame([asdict(r) for r in rows])
    return frame.astype({"completion_tokens": "Int64"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.answers", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--completions", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-require-triton", action="store_true", help="calibration models are exempt")
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    args = parser.parse_args(argv)
    inputs = {"completions": sha256_file(args.completions), "problems": sha256_file(args.problems)}

    def compute(out: dict[str, Path]) -> None:
        frame = extract_answers(read_jsonl(args.completions), pd.read_parquet(args.problems), not args.no_require_triton)
        frame["model"] = args.model
        write_parquet(out["parquet"], frame)

    Store(args.store).build(
        {"parquet": args.out}, STAGE, code_version(CODE_MODULES),
        {"model": args.model, "require_triton": not args.no_require_triton}, inputs, compute,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
