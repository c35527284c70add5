"""Rule completions_cli: the completions JSONL of a ``kind: cli`` model, from the completion cache, running the
command-line tool for missing answers only when the entry is online (docs/generation.md)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.generation.cache import CompletionCache, MissingCompletionsError, publish_completions, read_prompts_jsonl
from workflow_scripts.generation.cli_tool import CliModel, generate_with_cli


@dataclass(frozen=True)
class Params:
    name: str  # the pipeline's model name (output <out-dir>/<name>.jsonl)
    entry: dict[str, Any] = field(default_factory=dict)  # the model's config entry


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.completions_cli", Params)
    parser.add_argument("--prompts", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="completion cache folder")
    parser.add_argument("--out-dir", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    try:
        entry = CliModel.from_model_entry(params.entry)
    except (ValueError, TypeError) as error:
        print(f"error: model {params.name}: bad model entry: {error}", file=sys.stderr)
        return 2
    try:
        records = generate_with_cli(entry, params.name, read_prompts_jsonl(args.prompts), CompletionCache(args.cache))
    except MissingCompletionsError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    publish_completions(params.name, records, args.out_dir, None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
