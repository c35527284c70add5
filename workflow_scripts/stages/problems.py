"""Rule problems: validate the suite and index it (level, problem id, name, path, sha256, and the bytes of each
problem's inputs, parameters and outputs, sized on the meta device: suite/sizes.py) into parquet.

The suite is a KernelBench checkout (or the bundled demo suite, laid out the same way). A missing checkout, a
missing level, a wrong revision or wrong problem counts stop the run here with a message naming the problem.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.core.hashing import sha256_bytes
from workflow_scripts.core.io import write_parquet
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version
from workflow_scripts.suite.kernelbench import KernelBenchError, index_suite
from workflow_scripts.suite.sizes import with_sizes

STAGE = "problems"


@dataclass(frozen=True)
class Params:
    """config["suite"] less the keys the workflow itself uses (path, fetch)."""

    levels: list[int]
    revision: str | None = None
    expected_problems: dict[str, int] | None = None
    only: dict[str, list[int]] | None = None


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.problems", Params)
    parser.add_argument("--suite", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    counts = {int(k): v for k, v in params.expected_problems.items()} if params.expected_problems else None
    only = {int(k): v for k, v in params.only.items()} if params.only else None
    try:
        table = index_suite(args.suite, params.levels, params.revision or None, counts, only)
    except KernelBenchError as error:
        parser.exit(2, f"error: {error}\n")
    # Sizes for the scheduler (evaluation/resources.py): a problem the meta device cannot build gets none and its
    # reason, and the stage goes on (the evaluation itself decides whether the problem runs).
    table = with_sizes(table, args.suite)
    # The table itself (file hashes included) is what determines the output; index first, then store it.
    inputs = {"table": sha256_bytes(json.dumps(table.astype(str).values.tolist()).encode())}
    Store(args.store).build(
        {"parquet": args.out}, STAGE, code_version(__spec__.name), vars(params), inputs,
        lambda out: write_parquet(out["parquet"], table, "problems"),
    )
    unsized = table[table["size_error"].notna()]
    for row in unsized.itertuples():
        print(f"level {row.level} problem {row.problem_id}: no sizes ({row.size_error})")
    print(f"{len(table)} problems indexed from {args.suite} ({len(table) - len(unsized)} sized)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
