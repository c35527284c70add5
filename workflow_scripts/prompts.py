"""Stage 2, prompts: render every problem's prompt (KernelBench's one-shot Triton format) into one JSONL.

Each line: level, problem_id, system (the system message), prompt (the user turn, byte-exact as KernelBench
renders it) and prompt_sha256. Generation stages key their caches on prompt_sha256. The single-prompt CLI is
``python -m workflow_scripts.prompt``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from workflow_scripts.prompt import SYSTEM_MESSAGE, render_prompt
from workflow_scripts.records import write_jsonl
from workflow_scripts.store import Store, code_version, sha256_bytes, sha256_file

STAGE = "prompts"
CODE_MODULES = ["prompts", "prompt", "records"]


def render_suite_prompts(suite: Path, problems: pd.DataFrame, backend: str, option: str, precision: str) -> list[dict]:
    lines = []
    for row in problems.itertuples():
        source = (suite / row.path).read_text(encoding="utf-8")
        prompt = render_prompt(suite, source, backend, option, precision)
        lines.append({
            "level": int(row.level), "problem_id": int(row.problem_id), "system": SYSTEM_MESSAGE,
            "prompt": prompt, "prompt_sha256": sha256_bytes(prompt.encode("utf-8")),
        })
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.prompts", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--backend", default="triton")
    parser.add_argument("--option", default="one_shot")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    args = parser.parse_args(argv)
    prompt_dir = args.suite / "src" / "kernelbench" / "prompts"
    inputs = {"problems": sha256_file(args.problems)}
    inputs.update({f"prompts:{p.relative_to(prompt_dir)}": sha256_file(p) for p in sorted(prompt_dir.rglob("*")) if p.is_file()})
    params = {"backend": args.backend, "option": args.option, "precision": args.precision}

    def compute(out: dict[str, Path]) -> None:
        problems = pd.read_parquet(args.problems)
        write_jsonl(out["jsonl"], render_suite_prompts(args.suite, problems, args.backend, args.option, args.precision))

    Store(args.store).build({"jsonl": args.out}, STAGE, code_version(CODE_MODULES), params, inputs, compute)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
