"""Rule static_analysis: the AST report of every extracted answer of a model.

Writes <results>/static/<model>.parquet, one row per problem: parses, has_model_new, defines/launches Triton
kernels, keeps_torch_op (the published definition) with the ops kept, and the findings (JSON) with the worst
severity. Rows without code have nulls. Static findings label mistakes; they stop nothing (docs/evaluation.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workflow_scripts.analysis.tables import analyze_answers
from workflow_scripts.core.io import write_parquet
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version

STAGE = "static_analysis"


@dataclass(frozen=True)
class Params:
    model: str


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.static_analysis", Params)
    parser.add_argument("--answers", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)

    def compute(out: dict[str, Path]) -> None:
        write_parquet(out["parquet"], analyze_answers(pd.read_parquet(args.answers)), "static")

    store = Store(args.store)
    store.build({"parquet": args.out}, STAGE, code_version(__spec__.name), vars(params),
                {"answers": store.check_result(args.answers)}, compute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
