"""`python -m workflow_scripts analyze`: the by-hand command line of analysis/static."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workflow_scripts.analysis.static import analyze_source


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_scripts analyze", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--code", type=Path, required=True, help="the answer's Python source")
    parser.add_argument("--out", type=Path, help="also write the JSON report here")
    args = parser.parse_args(argv)
    source = args.code.read_bytes().decode("utf-8", errors="replace")
    text = json.dumps(analyze_source(source).to_dict(), indent=2, sort_keys=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
