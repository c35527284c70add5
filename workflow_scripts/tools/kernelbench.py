"""`python -m workflow_scripts kernelbench`: the by-hand command line of suite/kernelbench."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from workflow_scripts.core.io import write_parquet
from workflow_scripts.generation.kernelbench_runs import export_run, import_run
from workflow_scripts.suite.kernelbench import DEFAULT_LEVELS, KernelBenchError, PINNED_REVISION, fetch_checkout, list_problems, problems_dataframe, validate_checkout


def _parse_counts(items: Sequence[str] | None) -> dict[int, int] | None:
    if not items:
        return None
    counts: dict[int, int] = {}
    for item in items:
        for piece in item.split(","):
            if not piece:
                continue
            lv, sep, n = piece.partition("=")
            if not sep:
                raise argparse.ArgumentTypeError(f"--expect-counts wants LEVEL=N, got {piece!r}")
            counts[int(lv)] = int(n)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m workflow_scripts kernelbench", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    p_list = sub.add_parser("list", help="write the problem table (parquet)")
    p_list.add_argument("--suite", "--kernelbench", dest="suite", required=True, type=Path)
    p_list.add_argument("--levels", type=int, nargs="+", default=list(DEFAULT_LEVELS))
    p_list.add_argument("--out", required=True, type=Path, help="parquet: level, problem_id, problem, path, sha256")

    p_val = sub.add_parser("validate", help="check a checkout; prints its info as json")
    p_val.add_argument("--suite", "--kernelbench", dest="suite", required=True, type=Path)
    p_val.add_argument("--revision", default=None, help="required revision (default: not required)")
    p_val.add_argument("--expect-counts", nargs="+", default=None, metavar="LEVEL=N")
    p_val.add_argument("--levels", type=int, nargs="+", default=None)
    p_val.add_argument("--out", type=Path, default=None, help="also write the info json here")

    p_fetch = sub.add_parser("fetch", help="download and extract a pinned checkout")
    p_fetch.add_argument("--dest", required=True, type=Path)
    p_fetch.add_argument("--revision", default=PINNED_REVISION)
    p_fetch.add_argument("--url", default=None, help="archive URL (default: the GitHub tarball of the revision)")
    p_fetch.add_argument("--sha256", default=None, help="expected archive sha256")
    p_fetch.add_argument("--expect-counts", nargs="+", default=None, metavar="LEVEL=N")
    p_fetch.add_argument("--timeout", type=float, default=120.0)

    p_import = sub.add_parser("import-run", help="a KernelBench run folder (runs/<run>/level_<L>_problem_<id>_sample_<s>"
                              "_kernel.py, bare code) as one cached completions folder per sample, <out>/<name>_s<s>")
    p_import.add_argument("--run", required=True, type=Path)
    p_import.add_argument("--out", required=True, type=Path, help="where the sample folders go")
    p_import.add_argument("--name", required=True, help="the run's name: its samples become models <name>_s<s>")

    p_export = sub.add_parser("export-run", help="a model's answers (<results>/answers/<model>.parquet) as sample S of a "
                              "KernelBench run folder, for KernelBench's own harness")
    p_export.add_argument("--answers", required=True, type=Path)
    p_export.add_argument("--run", required=True, type=Path)
    p_export.add_argument("--sample", type=int, default=0)

    args = ap.parse_args(argv)
    if args.cmd in ("import-run", "export-run"):
        return _run_folder(args)
    try:
        if args.cmd == "list":
            problems = list_problems(args.suite, args.levels)
            write_parquet(args.out, problems_dataframe(problems), "problems")
            print(f"{len(problems)} problems -> {args.out}", file=sys.stderr)
        elif args.cmd == "validate":
            info = validate_checkout(args.suite, args.revision, _parse_counts(args.expect_counts), args.levels)
            text = json.dumps(info.to_dict(), indent=2, sort_keys=True) + "\n"
            if args.out:
                args.out.parent.mkdir(parents=True, exist_ok=True)
                args.out.write_text(text, encoding="utf-8")
            sys.stdout.write(text)
        elif args.cmd == "fetch":
            info = fetch_checkout(args.dest, args.revision, args.url, args.sha256,
                                  _parse_counts(args.expect_counts), args.timeout)
            sys.stdout.write(json.dumps(info.to_dict(), indent=2, sort_keys=True) + "\n")
    except KernelBenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def _run_folder(args: argparse.Namespace) -> int:
    """import-run and export-run (generation/kernelbench_runs.py); prints what to add to the configuration."""
    try:
        if args.cmd == "export-run":
            written = export_run(args.answers, args.run, args.sample)
            print(f"{len(written)} answers -> {args.run} (sample {args.sample})", file=sys.stderr)
            return 0
        report = import_run(args.run, args.out, args.name)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if report.skipped:
        print(f"not a generation, left out: {', '.join(report.skipped)}", file=sys.stderr)
    models = {folder.name: {"kind": "cached", "completions": str(folder)} for folder in report.folders.values()}
    print(json.dumps({"models": models, "summary": {"samples": {args.name: list(models)}}}, indent=2))
    for sample, problems in report.problems.items():
        print(f"sample {sample}: {len(problems)} problems -> {report.folders[sample]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
