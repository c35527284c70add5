"""Rule completions_replay: the completions JSONL of a model of kind ``cached`` (a folder of raw completions) or
``reference`` (the calibration model: each problem's own code renamed ModelNew)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.io import read_jsonl
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.layout import problem_key
from workflow_scripts.core.store import Store, code_version
from workflow_scripts.generation.cache import write_completions_jsonl
from workflow_scripts.generation.replay import reference_completions, replay_cached

STAGE = "completions"


@dataclass(frozen=True)
class Params:
    model: str
    kind: Literal["cached", "reference"]


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.completions_replay", Params)
    parser.add_argument("--source", default="", help="kind cached: the folder of level<L>_<id>.txt files")
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True, help="<results>/problems.parquet")
    parser.add_argument("--prompts", type=Path, required=True, help="<results>/prompts.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)

    store = Store(args.store)
    inputs = {"problems": store.check_result(args.problems), "prompts": store.check_result(args.prompts)}
    problems = pd.read_parquet(args.problems)
    prompt_hashes = {problem_key(p["level"], p["problem_id"]): p["prompt_sha256"] for p in read_jsonl(args.prompts)}
    source = Path(args.source)
    if params.kind == "cached":
        if not args.source or not source.is_dir():
            parser.error(f"model {params.model}: completions folder {args.source!r} does not exist")
        # The folder's content determines the output: hash every file in it.
        for path in sorted(source.iterdir()):
            if path.is_file():
                inputs[f"file:{path.name}"] = sha256_file(path)

    def compute(out: dict[str, Path]) -> None:
        if params.kind == "cached":
            records = replay_cached(params.model, source, problems, prompt_hashes)
        else:
            records = reference_completions(params.model, args.suite, problems)
        write_completions_jsonl(out["jsonl"], records)

    store.build({"jsonl": args.out}, STAGE, code_version(__spec__.name), vars(params), inputs, compute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
