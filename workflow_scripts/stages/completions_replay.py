"""Rule completions_replay: the completions JSONL of a model whose kind this rule serves (generation/kinds.py):
``cached`` (a folder of raw completions) or ``reference`` (the calibration model: each problem's own code renamed
ModelNew)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import pandas as pd

from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.io import read_jsonl
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.layout import problem_key
from workflow_scripts.core.store import Store, code_version
from workflow_scripts.generation.cache import write_completions_jsonl
from workflow_scripts.generation.kinds import KINDS, CompletionSource
from workflow_scripts.generation.replay import reference_completions, replay_cached

STAGE = "completions"
RULE = "completions_replay"


@dataclass(frozen=True)
class Params:
    model: str
    kind: str  # a kind whose rule is this one (generation/kinds.py)


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.completions_replay", Params)
    parser.add_argument("--source", default="", help="kind cached: the folder of level<L>_<id>.txt files")
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True, help="<results>/problems.parquet")
    parser.add_argument("--prompts", type=Path, required=True, help="<results>/prompts.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    kind = KINDS.get(params.kind)
    if kind is None or kind.rule != RULE:
        served = [name for name, k in KINDS.items() if k.rule == RULE]
        parser.error(f"model {params.model}: kind {params.kind!r} is not replayed here (kinds: {', '.join(served)})")
    from_folder = kind.source is CompletionSource.FOLDER

    store = Store(args.store)
    inputs = {"problems": store.check_result(args.problems), "prompts": store.check_result(args.prompts)}
    problems = pd.read_parquet(args.problems)
    prompt_hashes = {problem_key(p["level"], p["problem_id"]): p["prompt_sha256"] for p in read_jsonl(args.prompts)}
    source = Path(args.source)
    if from_folder:
        if not args.source or not source.is_dir():
            parser.error(f"model {params.model}: completions folder {args.source!r} does not exist")
        # The folder's content determines the output: hash every file in it.
        for path in sorted(source.iterdir()):
            if path.is_file():
                inputs[f"file:{path.name}"] = sha256_file(path)

    def compute(out: dict[str, Path]) -> None:
        if from_folder:
            records = replay_cached(params.model, source, problems, prompt_hashes)
        else:
            records = reference_completions(params.model, args.suite, problems)
        write_completions_jsonl(out["jsonl"], records)

    store.build({"jsonl": args.out}, STAGE, code_version(__spec__.name), vars(params), inputs, compute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
