"""Rule verify_store: re-hash every stored object and readable name; exit non-zero on any mismatch."""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from workflow_scripts.core.io import write_json
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store


@dataclass(frozen=True)
class Params:
    repair: bool = False  # rewrite what an intact copy allows, drop the rest so that the next run rebuilds it


def run(argv: list[str] | None, prog: str, doc: str | None) -> int:
    parser = stage_parser(doc, prog, Params)
    parser.add_argument("--store", type=Path, required=True)
    parser.add_argument("--report", type=Path, help="write the findings as JSON here")
    args, params = parse_stage_args(parser, Params, argv)
    problems = Store(args.store).verify(repair=params.repair)
    if args.report:
        write_json(args.report, {"ok": not problems, "problems": [asdict(p) for p in problems],
                                 "repaired": params.repair})
    for problem in problems:
        print(f"{problem.kind}: {problem.path}: {problem.detail}", file=sys.stderr)
    print(f"verify: {len(problems)} problem(s)" + (" (repaired)" if params.repair and problems else ""))
    return 1 if problems and not params.repair else 0


def main(argv: list[str] | None = None) -> int:
    return run(argv, "workflow_scripts.stages.verify_store", __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
