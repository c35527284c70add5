"""Rule prompts: render every problem's prompt (KernelBench's one-shot Triton format) into one JSONL.

Each line: level, problem_id, system (the system message), prompt (the user turn, byte-exact as KernelBench
renders it) and prompt_sha256. Generation stages key their caches on prompt_sha256. One prompt by hand:
``python -m workflow_scripts prompt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.io import write_jsonl
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version
from workflow_scripts.suite.prompt import render_suite_prompts

STAGE = "prompts"


@dataclass(frozen=True)
class Params:
    """config["prompt"]."""

    backend: str = "triton"
    option: str = "one_shot"
    precision: str = "fp32"


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.prompts", Params)
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    prompt_dir = args.suite / "src" / "kernelbench" / "prompts"
    store = Store(args.store)
    inputs = {"problems": store.check_result(args.problems)}
    inputs.update({f"prompts:{p.relative_to(prompt_dir)}": sha256_file(p) for p in sorted(prompt_dir.rglob("*")) if p.is_file()})

    def compute(out: dict[str, Path]) -> None:
        problems = pd.read_parquet(args.problems)
        write_jsonl(out["jsonl"], render_suite_prompts(args.suite, problems, params.backend, params.option, params.precision))

    store.build({"jsonl": args.out}, STAGE, code_version(__spec__.name), vars(params), inputs, compute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
