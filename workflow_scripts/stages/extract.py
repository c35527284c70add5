"""Rule extract: the code of each completion (the first fenced block, as KernelBench takes it).

Writes <results>/answers/<model>.parquet, one row per problem (AnswerRecord): completion status and sha256, token
count, extract_status (ok | no_code | missing_completion), the code and its sha256. Every problem of the suite
gets a row, whether or not the model answered it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workflow_scripts.analysis.tables import extract_answers
from workflow_scripts.core.io import read_jsonl, write_parquet
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version

STAGE = "extract"


@dataclass(frozen=True)
class Params:
    model: str
    require_triton: bool = True  # the calibration model (kind reference) is exempt


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.extract", Params)
    parser.add_argument("--completions", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    store = Store(args.store)
    # Replayed completions are store results; vLLM and CLI models write theirs from the completion cache.
    inputs = {"completions": store.check_result(args.completions, required=False),
              "problems": store.check_result(args.problems)}

    def compute(out: dict[str, Path]) -> None:
        frame = extract_answers(read_jsonl(args.completions), pd.read_parquet(args.problems), params.require_triton)
        frame["model"] = params.model
        write_parquet(out["parquet"], frame, "answers")

    store.build({"parquet": args.out}, STAGE, code_version(__spec__.name), vars(params), inputs, compute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
