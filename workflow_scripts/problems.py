"""Stage 1, problems: validate the suite and index it (level, problem id, name, path, sha256) into parquet.

The suite is a KernelBench checkout (or the bundled demo suite, laid out the same way). A missing checkout, a
missing level, a wrong revision or wrong problem counts stop the run here with a message naming the problem.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from workflow_scripts.kernelbench import KernelBenchError, list_problems, problems_dataframe, validate_checkout
from workflow_scripts.records import write_parquet
from workflow_scripts.store import Store, code_version, sha256_bytes

STAGE = "problems"
CODE_MODULES = ["problems", "kernelbench", "records"]


def index_suite(
    suite: Path,
    levels: list[int],
    revision: str | None = None,
    expected_counts: dict[int, int] | None = None,
    only: dict[int, list[int]] | None = None,
):
    """The problem table of the suite, restricted to ``only`` (level -> ids) when given."""
    validate_checkout(suite, expected_revision=revision, expected_counts=expected_counts, levels=levels)
    problems = list_problems(suite, levels)
    if only:
        wanted = {(int(level), int(pid)) for level, ids in only.items() for pid in ids}
        missing = wanted - {(p.level, p.problem_id) for p in problems}
        if missing:
            raise KernelBenchError(f"suite.only names problems the suite lacks: {sorted(missing)}")
        problems = [p for p in problems if (p.level, p.problem_id) in wanted]
    return problems_dataframe(problems)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.problems", description=__doc__.splitlines()[0])
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--revision", default=None)
    parser.add_argument("--expected-counts", default=None, help='JSON, e.g. {"1": 100, "2": 100}')
    parser.add_argument("--only", default=None, help='JSON, e.g. {"1": [19, 95]}')
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    args = parser.parse_args(argv)
    args.revision = args.revision or None  # the rule passes "" for "not checked"
    counts = {int(k): v for k, v in json.loads(args.expected_counts).items()} if args.expected_counts else None
    only = {int(k): v for k, v in json.loads(args.only).items()} if args.only else None
    try:
        table = index_suite(args.suite, args.levels, args.revision, counts, only)
    except KernelBenchError as error:
        parser.exit(2, f"error: {error}\n")
    # The table itself (file hashes included) is what determines the output; index first, then store it.
    params = {"levels": args.levels, "revision": args.revision, "counts": args.expected_counts, "only": args.only}
    inputs = {"table": sha256_bytes(json.dumps(table.astype(str).values.tolist()).encode())}
    Store(args.store).build(
        {"parquet": args.out}, STAGE, code_version(CODE_MODULES), params, inputs,
        lambda out: write_parquet(out["parquet"], table),
    )
    print(f"{len(table)} problems indexed from {args.suite}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
