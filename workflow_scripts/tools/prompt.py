"""`python -m workflow_scripts prompt`: the by-hand command line of suite/prompt."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from workflow_scripts.core.io import atomic_write_bytes
from workflow_scripts.suite.kernelbench import DEFAULT_LEVELS, KernelBenchError
from workflow_scripts.suite.prompt import DEFAULT_BACKEND, DEFAULT_OPTION, DEFAULT_PRECISION, PromptError, render_all, render_problem_prompt


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workflow_scripts prompt", description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", "--suite", dest="suite", required=True, type=Path, help="suite / checkout root")
    ap.add_argument("--backend", default=DEFAULT_BACKEND)
    ap.add_argument("--option", default=DEFAULT_OPTION)
    ap.add_argument("--precision", default=DEFAULT_PRECISION)
    ap.add_argument("--level", type=int)
    ap.add_argument("--problem", type=int, help="problem id within the level")
    ap.add_argument("--out", type=Path, default=None, help="write the prompt here instead of stdout")
    ap.add_argument("--all", action="store_true", help="render every problem of --levels into --out-dir")
    ap.add_argument("--out-dir", type=Path, default=None)
    ap.add_argument("--levels", type=int, nargs="+", default=list(DEFAULT_LEVELS))
    args = ap.parse_args(argv)

    try:
        if args.all:
            if args.out_dir is None:
                ap.error("--all needs --out-dir")
            index = render_all(args.suite, args.out_dir, args.levels, args.backend, args.option, args.precision)
            print(f"{len(index['prompts'])} prompts -> {args.out_dir}", file=sys.stderr)
            return 0
        if args.level is None or args.problem is None:
            ap.error("give --level and --problem (or --all --out-dir DIR)")
        prompt = render_problem_prompt(args.suite, args.level, args.problem, args.backend, args.option, args.precision)
        data = prompt.encode("utf-8")
        if args.out:
            atomic_write_bytes(args.out, data)
        else:
            # Exact bytes: the prompt already ends in one "\n"; print() would add another.
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
    except (PromptError, KernelBenchError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
