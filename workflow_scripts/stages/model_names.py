"""Rule model_names: the configured models' names, one JSON list in <results>/models.json.

Every evaluate job reads it to find the other models whose answers to its problem it judges along. A file, not a
parameter of the evaluate rule, and not one of its inputs either: adding, removing or relabelling a model rewrites
this file, and no other model's evaluation runs again (a parameter listing the models changed every evaluate job's
parameters, and Snakemake ran them all again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.core.io import write_json
from workflow_scripts.core.params import parse_stage_args, stage_parser


@dataclass(frozen=True)
class Params:
    models: list[str]


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.model_names", Params)
    parser.add_argument("--out", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    write_json(args.out, list(params.models))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
