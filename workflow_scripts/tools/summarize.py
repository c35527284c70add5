"""`python -m workflow_scripts summarize`: the by-hand command line of scoring/summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from workflow_scripts.scoring.context import load_context
from workflow_scripts.scoring.summary import DEFAULT_RESAMPLES, DEFAULT_SEED, markdown_table, summarize, write_outputs


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m workflow_scripts summarize",
        description="Summarize per-problem rows into the published results JSON, per-level tables, a markdown "
                    "table and (optionally) figures.",
    )
    parser.add_argument("--rows", type=Path, required=True,
                        help="per-problem rows (parquet, one row per model x problem)")
    parser.add_argument("--out", type=Path, required=True, help="summary JSON to write")
    parser.add_argument("--reference", help="model the paired bootstrap compares against (default: first model)")
    parser.add_argument("--compare", nargs="+", metavar="NAME",
                        help="models to compare with the reference (default: every other model)")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES, help="bootstrap resamples (default 100000)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed (default 42)")
    parser.add_argument("--tables-dir", type=Path,
                        help="where levels.parquet / bootstrap.parquet go (default: OUT's folder/tables)")
    parser.add_argument("--figures-dir", type=Path, help="also draw the figures (PNG + SVG) here")
    parser.add_argument("--markdown", type=Path, help="write the headline markdown table here too")
    parser.add_argument("--context", type=Path,
                        help="JSON with benchmark / runtime / models (label, generation) / notes; see the module doc")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rows = pd.read_parquet(args.rows)
    summary = summarize(
        rows, reference=args.reference, compare=args.compare, resamples=args.resamples, seed=args.seed,
        context=load_context(args.context),
    )
    write_outputs(summary, args.out, rows, tables_dir=args.tables_dir, markdown=args.markdown)
    if args.figures_dir is not None:
        from workflow_scripts.scoring.figures import make_figures  # matplotlib only when figures are asked for

        make_figures(rows, summary, args.figures_dir)
    sys.stdout.write(markdown_table(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
