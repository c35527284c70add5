"""`python -m workflow_scripts generate_vllm`: the by-hand command line of generation/vllm."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from workflow_scripts.generation.cache import CompletionCache, Decoding, MissingCompletionsError, PromptItem, publish_completions, read_prompts_jsonl
from workflow_scripts.generation.vllm import DEFAULT_BATCH, generate_with_vllm


def _parse_pair(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    if not k:
        raise argparse.ArgumentTypeError(f"empty name in {text!r}")
    return k, v


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m workflow_scripts generate-vllm",
        description="Generate completions with one vLLM engine per base model (LoRA adapters via LoRARequest).",
    )
    ap.add_argument("--base", required=True, help="base model folder (config.json, weights, tokenizer)")
    ap.add_argument("--model", action="append", default=[], metavar="NAME", help="output name for the base model without adapter (repeatable)")
    ap.add_argument("--adapter", action="append", default=[], type=_parse_pair, metavar="NAME=DIR", help="a PEFT LoRA adapter folder and its output name (repeatable)")
    ap.add_argument("--prompts", required=True, help="prompts JSONL (level, problem_id, prompt[, system])")
    ap.add_argument("--out-dir", required=True, help="writes <out-dir>/<NAME>.jsonl")
    ap.add_argument("--cache", required=True, help="completion cache folder, e.g. results/.store/completions")
    ap.add_argument("--answers-root", default=None, help="also write <answers-root>/<NAME>/level<L>_<id>.txt + meta.json")
    ap.add_argument("--system-file", default=None, help="system message for prompts that have none")
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chat-template-kwargs", default='{"enable_thinking": false}', help="JSON object")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--max-model-len", type=int, default=None)
    ap.add_argument("--enforce-eager", action="store_true")
    ap.add_argument("--gpu-memory-utilization", type=float, default=None)
    ap.add_argument("--tensor-parallel-size", type=int, default=None)
    ap.add_argument("--engine-arg", action="append", default=[], type=_parse_pair, metavar="KEY=JSON", help="any other vllm.LLM argument (value parsed as JSON, else a string)")
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help="requests per llm.generate call (progress is cached after each)")
    ap.add_argument("--offline", action="store_true", help="never start vLLM: a missing cached answer is an error")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    adapters: dict[str, Path | None] = {n: None for n in args.model}
    for name, path in args.adapter:
        if name in adapters:
            print(f"error: name {name!r} given twice", file=sys.stderr)
            return 2
        adapters[name] = Path(path)
    if not adapters:
        print("error: give --model NAME and/or --adapter NAME=DIR", file=sys.stderr)
        return 2
    prompts = read_prompts_jsonl(args.prompts)
    if args.system_file:
        system = Path(args.system_file).read_text(encoding="utf-8")
        prompts = [p if p.system is not None else PromptItem(p.level, p.problem_id, p.prompt, system) for p in prompts]
    decoding = Decoding(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        max_tokens=args.max_tokens,
        seed=args.seed,
        chat_template_kwargs=json.loads(args.chat_template_kwargs),
    )
    engine_kwargs: dict[str, Any] = {"dtype": args.dtype}
    if args.max_model_len is not None:
        engine_kwargs["max_model_len"] = args.max_model_len
    if args.enforce_eager:
        engine_kwargs["enforce_eager"] = True
    if args.gpu_memory_utilization is not None:
        engine_kwargs["gpu_memory_utilization"] = args.gpu_memory_utilization
    if args.tensor_parallel_size is not None:
        engine_kwargs["tensor_parallel_size"] = args.tensor_parallel_size
    for k, v in args.engine_arg:
        try:
            engine_kwargs[k] = json.loads(v)
        except json.JSONDecodeError:
            engine_kwargs[k] = v
    try:
        results = generate_with_vllm(
            args.base,
            adapters,
            prompts,
            decoding,
            CompletionCache(args.cache),
            engine_kwargs,
            offline=args.offline,
            batch_size=args.batch_size,
        )
    except (MissingCompletionsError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for name, records in results.items():
        publish_completions(name, records, Path(args.out_dir), args.answers_root)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
