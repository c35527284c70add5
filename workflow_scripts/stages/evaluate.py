"""Rule evaluate: one model's answer to one problem, judged and timed in an isolated child (docs/evaluation.md).

The store key holds the problem's and the code's sha256 but not the model's name, so two models with the same
answer are evaluated once. Answers without code (no completion, no code block) get their failed verdict without
running anything. GPU jobs lock one specific GPU themselves; Snakemake only bounds how many run at once.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.params import parse_params, parse_stage_args, stage_parser
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answer
from workflow_scripts.evaluation.jobs import (
    environment_key, failed_without_running, load_answer, run_settings, store_measurement,
)

STAGE = "evaluate"


@dataclass(frozen=True)
class Params:
    level: int
    problem_id: int
    evaluation: dict[str, Any]  # config["evaluation"]


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.evaluate", Params)
    parser.add_argument("--answers", type=Path, required=True, help="results/answers/<model>.parquet")
    parser.add_argument("--problem", type=Path, required=True, help="the problem's source file")
    parser.add_argument("--environment", type=Path, required=True, help="results/environment/<device>.json")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--lock-dir", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    config = parse_params(EvalConfig, run_settings(params.evaluation, args.lock_dir), source="--params evaluation")
    answer = load_answer(args.answers, params.level, params.problem_id)
    if not answer["require_triton"]:
        config = replace(config, require_triton=False)
    inputs = {
        "problem": sha256_file(args.problem),
        # Without code, why there is none determines the verdict (and its message).
        "code": answer["code_sha256"] or f"none:{answer['extract_status']}:{answer['completion_status']}",
        "environment": environment_key(args.environment),
    }

    def measure() -> dict[str, Any]:
        if answer["extract_status"] != "ok":
            return failed_without_running(answer, config.device)
        # The answer file lives outside the child's working directory; the child copies what it loads.
        with tempfile.TemporaryDirectory(prefix="answer-") as tmp:
            answer_file = Path(tmp) / "answer.py"
            answer_file.write_text(answer["code"], encoding="utf-8")
            return evaluate_answer(args.problem, answer_file, config).to_dict()

    computed = store_measurement(args.store, args.out, STAGE, __spec__.name, config, inputs, args.environment, measure)
    print(f"evaluation {'computed' if computed else 'reused from the store'}: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
