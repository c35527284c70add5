"""`python -m workflow_scripts figures`: the by-hand command line of scoring/figures."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
from workflow_scripts.scoring.figures import make_figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_scripts figures",
        description="Draw the summary figures (PNG and SVG) from the rows and the summary JSON.",
    )
    parser.add_argument("--rows", type=Path, required=True, help="per-problem rows (parquet)")
    parser.add_argument("--summary", type=Path, required=True,
                        help="summary JSON written by workflow_scripts.scoring.summary")
    parser.add_argument("--out-dir", type=Path, required=True, help="folder for the figures")
    args = parser.parse_args(argv)
    paths = make_figures(pd.read_parquet(args.rows), json.loads(args.summary.read_text()), args.out_dir)
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
