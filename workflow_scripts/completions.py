"""Stage 3, completions: one record per problem for a model whose answers are replayed, never generated here.

Kinds handled here:
- ``cached``: raw completions (prose and code fences, exactly as the model or CLI returned them) read from a
  folder of ``level<L>_<id>.txt`` files; an optional ``meta.json`` gives token counts. A missing file is a
  record with status ``missing`` (the row fails later as ``missing_completion``), never a missing row.
- ``reference``: the calibration model. Its answer to every problem is the problem's own reference code with
  the class renamed to ``ModelNew``; timing it against eager measures the harness's noise and bias.

vLLM and CLI generation live in generate_vllm.py / generate_cli.py and write the same JSONL.
"""

from __future__ import annotations

import argparse
import io
import json
import tokenize
from pathlib import Path

import pandas as pd

from workflow_scripts.completion_cache import CompletionRecord, write_completions_jsonl
from workflow_scripts.records import problem_key, read_jsonl
from workflow_scripts.store import Store, code_version, sha256_file

STAGE = "completions"
CODE_MODULES = ["completions", "completion_cache", "records"]


def rename_reference_model(source: str) -> str:
    """Rename the name token ``Model`` to ``ModelNew`` (class and ``super(Model, self)``), nothing else."""
    tokens = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string == "Model":
            token = token._replace(string="ModelNew")
        tokens.append(token)
    return tokenize.untokenize(tokens)


def replay_cached(
    model: str, folder: Path, problems: pd.DataFrame, prompt_hashes: dict[str, str]
) -> list[CompletionRecord]:
    meta_file = folder / "meta.json"
    meta = json.loads(meta_file.read_text()) if meta_file.exists() else {}
    records = []
    for row in problems.itertuples():
        key = problem_key(row.level, row.problem_id)
        path = folder / f"{key}.txt"
        if not path.exists():
            records.append(
                CompletionRecord(
                    model, row.level, row.problem_id, "missing", None, None, prompt_hashes.get(key),
                    None, f"no cached completion {path.name} in {folder}", {"generation_provider": "cached"},
                )
            )
            continue
        text = path.read_text(encoding="utf-8")
        tokens = meta.get(key, {}).get("completion_tokens")
        records.append(
            CompletionRecord(
                model, row.level, row.problem_id, "ok" if text.strip() else "failed",
                text if text.strip() else None, tokens, prompt_hashes.get(key), sha256_file(path),
                None if text.strip() else "empty completion file", {"generation_provider": "cached"},
            )
        )
    return records


def reference_completions(model: str, suite_dir: Path, problems: pd.DataFrame) -> list[CompletionRecord]:
    records = []
    for row in problems.itertuples():
        source = (suite_dir / row.path).read_text(encoding="utf-8")
        text = "```python\n" + rename_reference_model(source).rstrip("\n") + "\n```\n"
        records.append(
            CompletionRecord(
                model, row.level, row.problem_id, "ok", text, None, None, row.sha256, None,
                {"generation_provider": "reference (calibration: the problem's own code renamed ModelNew)"},
            )
        )
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.completions", description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--kind", choices=["cached", "reference"], required=True)
    parser.add_argument("--source", type=Path, help="kind cached: the folder of level<L>_<id>.txt files")
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--problems", type=Path, required=True, help="results/problems.parquet")
    parser.add_argument("--prompts", type=Path, required=True, help="results/prompts.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    args = parser.parse_args(argv)

    problems = pd.read_parquet(args.problems)
    prompt_hashes = {problem_key(p["level"], p["problem_id"]): p["prompt_sha256"] for p in read_jsonl(args.prompts)}
    inputs = {"problems": sha256_file(args.problems), "prompts": sha256_file(args.prompts)}
    if args.kind == "cached":
        if not args.source or not args.source.is_dir():
            parser.error(f"model {args.model}: completions folder {args.source} does not exist")
        # The folder's content determines the output: hash every file in it.
        for path in sorted(args.source.iterdir()):
            if path.is_file():
                inputs[f"file:{path.name}"] = sha256_file(path)

    def compute(out: dict[str, Path]) -> None:
        if args.kind == "cached":
            records = replay_cached(args.model, args.source, problems, prompt_hashes)
        else:
            records = reference_completions(args.model, args.suite, problems)
        write_completions_jsonl(out["jsonl"], records)

    Store(args.store).build(
        {"jsonl": args.out}, STAGE, code_version(CODE_MODULES), {"model": args.model, "kind": args.kind}, inputs, compute
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
