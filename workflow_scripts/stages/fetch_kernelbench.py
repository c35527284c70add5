"""Rule fetch_kernelbench: download and extract KernelBench at the pinned revision into the suite folder."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.suite.kernelbench import KernelBenchError, fetch_checkout


@dataclass(frozen=True)
class Params:
    revision: str
    archive_url: str | None = None  # None: GitHub's archive of the revision


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.fetch_kernelbench", Params)
    parser.add_argument("--dest", type=Path, required=True, help="the suite folder to create")
    args, params = parse_stage_args(parser, Params, argv)
    try:
        info = fetch_checkout(args.dest, params.revision, url=params.archive_url)
    except KernelBenchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(f"KernelBench {info.revision} at {args.dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
