"""`python -m workflow_scripts generate_cli`: the by-hand command line of generation/cli_tool."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from workflow_scripts.generation.cache import CompletionCache, MissingCompletionsError, publish_completions, read_prompts_jsonl
from workflow_scripts.generation.cli_tool import CliModel, generate_with_cli, import_answers


def _load_entry(args: argparse.Namespace) -> CliModel:
    data: dict[str, Any] = {}
    if args.entry:
        text = Path(args.entry).read_text(encoding="utf-8")
        if args.entry.endswith((".yaml", ".yml")):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
    if args.entry_json:
        data.update(json.loads(args.entry_json))
    overrides = {
        "command": args.command,
        "provider": args.provider,
        "model": args.tool_model,
        "reasoning_effort": args.reasoning_effort,
        "output_token_cap": args.output_token_cap,
        "output_format": args.output_format,
        "attempts": args.attempts,
        "backoff_s": args.backoff_s,
        "timeout_s": args.timeout_s,
        "tool_version": args.tool_version,
    }
    data.update({k: v for k, v in overrides.items() if v is not None})
    if args.env:
        env = dict(data.get("env") or {})
        for kv in args.env:
            k, _, v = kv.partition("=")
            env[k] = v
        data["env"] = env
    return CliModel.from_mapping(data)


def _add_entry_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model entry (a YAML/JSON file and/or JSON text; single flags override keys)")
    g.add_argument("--entry", help="file with the model entry (.yaml/.yml or .json)")
    g.add_argument("--entry-json", help="the model entry as JSON text")
    g.add_argument("--command", help="command template, e.g. 'claude -p --model {model} --output-format json'")
    g.add_argument("--provider")
    g.add_argument("--tool-model", help="the model name the tool is given ({model})")
    g.add_argument("--reasoning-effort")
    g.add_argument("--output-token-cap", type=int)
    g.add_argument("--output-format", choices=["text", "json"])
    g.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    g.add_argument("--attempts", type=int)
    g.add_argument("--backoff-s", type=float)
    g.add_argument("--timeout-s", type=float)
    g.add_argument("--tool-version")
    p.add_argument("--name", required=True, help="the pipeline's model name (output file <name>.jsonl)")
    p.add_argument("--prompts", required=True, help="prompts JSONL (level, problem_id, prompt[, system])")
    p.add_argument("--cache", required=True, help="completion cache folder: <store>/completions, the study's results/study/.store/completions")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m workflow_scripts generate-cli", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write <out-dir>/<name>.jsonl from the cache, running the tool when online")
    _add_entry_args(g)
    g.add_argument("--out-dir", required=True)
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--online", dest="offline", action="store_false", default=None, help="run the tool for missing answers")
    mode.add_argument("--offline", dest="offline", action="store_true", help="never run the tool (the default unless the entry says offline: false)")
    g.add_argument("--allow-missing", action="store_true", help="offline: write status 'missing' records instead of failing")
    g.add_argument("--jobs", type=int, default=None, help="tool calls in parallel (default: the entry's parallel, 1)")
    g.add_argument("--answers-root", help="also write <answers-root>/<name>/level<L>_<id>.txt + meta.json")
    i = sub.add_parser("import", help="ingest existing answers (a folder of level<L>_<id>.txt|.md, or JSONL)")
    _add_entry_args(i)
    i.add_argument("--source", required=True, help="folder or JSONL file with the answers")
    i.add_argument("--provenance", default="{}", help="JSON object recorded with every imported answer")
    i.add_argument("--replace", action="store_true", help="replace different good answers already cached")
    i.add_argument("--allow-unknown", action="store_true", help="ignore answers for problems not in the prompts")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        entry = _load_entry(args)
    except (ValueError, TypeError, OSError) as e:
        print(f"error: bad model entry: {e}", file=sys.stderr)
        return 2
    prompts = read_prompts_jsonl(args.prompts)
    cache = CompletionCache(args.cache)
    if args.cmd == "import":
        try:
            report = import_answers(
                entry, args.name, prompts, cache, args.source, json.loads(args.provenance),
                replace=args.replace, allow_unknown=args.allow_unknown,
            )
        except (ValueError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(json.dumps({k: len(v) for k, v in report.to_dict().items()}))
        if report.conflicts:
            listed = ", ".join(f"level{lv}_{pid}" for lv, pid in report.conflicts)
            print(f"error: a different answer is already cached for: {listed} (use --replace)", file=sys.stderr)
            return 1
        return 0
    try:
        records = generate_with_cli(
            entry, args.name, prompts, cache, offline=args.offline, allow_missing=args.allow_missing, jobs=args.jobs
        )
    except MissingCompletionsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    publish_completions(args.name, records, Path(args.out_dir), args.answers_root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
