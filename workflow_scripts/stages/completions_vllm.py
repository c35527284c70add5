"""Rules completions_vllm_<n>: the completions JSONL of every ``kind: vllm`` model sharing one base model, from
one vLLM engine (LoRA adapters through LoRARequest), reusing the completion cache (docs/generation.md)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable
from typing import Any

from workflow_scripts.core.io import atomic_write_text
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.evaluation.gpu_lock import hold_gpus, host_locks, visible_gpus
from workflow_scripts.generation.cache import CompletionCache, MissingCompletionsError, publish_completions, read_prompts_jsonl
from workflow_scripts.generation.self_parity import SelfParity, use_batch_invariance
from workflow_scripts.generation.vllm import generate_with_vllm, plan_engine


@dataclass(frozen=True)
class Params:
    models: dict[str, dict[str, Any]]  # name -> config entry, every one on the same base model


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.completions_vllm", Params)
    parser.add_argument("--prompts", type=Path, required=True)
    parser.add_argument("--cache", type=Path, required=True, help="completion cache folder")
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--lock-dir", type=Path, default=None,
                        help="the GPU locks' folder: the engine's GPUs are held exclusively while it runs")
    args, params = parse_stage_args(parser, Params, argv)
    try:
        plan = plan_engine(params.models)
    except ValueError as error:
        parser.error(str(error))
    if plan.batch_invariant:
        refused = use_batch_invariance(plan.base)  # before vLLM is imported (generate_with_vllm imports it)
        if refused:
            print(f"WARNING: batch-invariant mode asked for, but off: {refused}; greedy answers may then depend on "
                  "the batch (self_parity measures it)", file=sys.stderr)
    reports: dict[str, SelfParity] = {}
    try:
        results = generate_with_vllm(plan.base, plan.adapters, read_prompts_jsonl(args.prompts), plan.decoding,
                                     CompletionCache(args.cache), plan.engine_kwargs, offline=plan.offline,
                                     batch_size=plan.batch_size, hold=engine_gpus(plan.engine_kwargs, args.lock_dir),
                                     self_parity=plan.self_parity, parity_reports=reports)
    except (MissingCompletionsError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, records in results.items():
        publish_completions(name, records, args.out_dir, None)
    for name in [name for name, n in plan.self_parity.items() if n > 0]:
        # Beside the model's completions (<results>/completions/<model>.self_parity.json), and in its log.
        report = reports.get(name)
        record = report.to_dict() if report else {"model": name, "prompts": 0, "skipped": "offline: vLLM never starts"}
        atomic_write_text(args.out_dir / f"{name}.self_parity.json", json.dumps(record, indent=2) + "\n")
        if report:
            print(f"self-parity {name}: {report.identical} of {report.prompts} sampled prompts identical token for "
                  f"token (token agreement {report.token_agreement:.3f}; batch-invariant mode "
                  f"{'on' if report.settings['batch_invariant'] else 'off'})", file=sys.stderr)
    return 0


def engine_gpus(engine_kwargs: dict[str, Any], lock_dir: Path | None) -> Callable[[], Any] | None:
    """What holds the engine's GPUs (the first ``tensor_parallel_size`` visible ones, which vLLM takes) exclusively
    while it runs: no evaluation or baseline is timed, or judged, on them meanwhile (gpu_lock). None where no GPU is
    visible or no lock folder is given."""
    gpus = visible_gpus()[:int(engine_kwargs.get("tensor_parallel_size", 1) or 1)] if lock_dir is not None else []
    if not gpus:
        return None
    return lambda: hold_gpus(gpus, host_locks(lock_dir))


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
