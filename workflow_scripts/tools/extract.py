"""`python -m workflow_scripts extract`: the by-hand command line of analysis/extract."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from workflow_scripts.analysis.extract import EXIT_NO_CODE, extract_code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_scripts extract", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--completion", type=Path, required=True, help="text file with the raw completion")
    parser.add_argument("--out", type=Path, help="write the code here (default: print it)")
    args = parser.parse_args(argv)

    # Text mode with universal newlines, as KernelBench's read_file does.
    code = extract_code(args.completion.read_text(encoding="utf-8"))
    if code is None:
        print(f"no fenced code block in {args.completion}", file=sys.stderr)
        return EXIT_NO_CODE
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(code, encoding="utf-8")
    else:
        sys.stdout.write(code)
        if code and not code.endswith("\n"):
            sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
