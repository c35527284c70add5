"""Rules completions_vllm_<n>: the completions JSONL of every ``kind: vllm`` model sharing one base model, from
one vLLM engine (LoRA adapters through LoRARequest), reusing the completion cache (docs/generation.md)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.generation.cache import CompletionCache, MissingCompletionsError, publish_completions, read_prompts_jsonl
from workflow_scripts.generation.vllm import generate_with_vllm, plan_engine


@dataclass(frozen=True)
class Params:
    models: dict[str, dict[str, Any]]  # name -> config entry, every one on the same base model


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.completions_vllm", Params)
    parser.add_argument("--prompts", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="completion cache folder")
    parser.add_argument("--out-dir", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    try:
        plan = plan_engine(params.models)
    except ValueError as error:
        parser.error(str(error))
    try:
        results = generate_with_vllm(plan.base, plan.adapters, read_prompts_jsonl(args.prompts), plan.decoding,
                                     CompletionCache(args.cache), plan.engine_kwargs, offline=plan.offline,
                                     batch_size=plan.batch_size)
    except (MissingCompletionsError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, records in results.items():
        publish_completions(name, records, args.out_dir, None)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
