"""Rule collect: one per-problem row per (model, problem) into <results>/evaluations.parquet, and the table of
flags and rejections per model (<results>/tables/flags.parquet). Every model x problem pair gets a row."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from workflow_scripts.core.io import write_parquet
from workflow_scripts.core.layout import ResultsLayout
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version, package_version
from workflow_scripts.scoring.inputs import RowInputs
from workflow_scripts.scoring.rows import collect_rows, flag_table

STAGE = "collect"


@dataclass(frozen=True)
class Params:
    models: list[str]  # in the config's order


def run(argv: list[str] | None, prog: str, doc: str | None) -> int:
    """The collect CLI, shared by the rules collect (every model) and model_rows (one model)."""
    parser = stage_parser(doc, prog, Params)
    parser.add_argument("--problems", type=Path, required=True)
    parser.add_argument("--device-rates", type=Path, required=True, help="<results>/environment/<device>_rates.json")
    parser.add_argument("--results", required=True, help="the results folder (its layout: core/layout.py)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--flags-out", type=Path, required=True)
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    inputs = RowInputs.find(args.problems, params.models, ResultsLayout(args.results), args.device_rates)
    store = Store(args.store)

    def compute(out: dict[str, Path]) -> None:
        rows = collect_rows(inputs.problems, params.models, *inputs.load(store), code_version=package_version(),
                            rates=inputs.rates())
        write_parquet(out["rows"], rows, "rows")
        write_parquet(out["flags"], flag_table(rows), "flags")

    store.build({"rows": args.out, "flags": args.flags_out}, STAGE, code_version(__spec__.name), vars(params),
                inputs.hashes(store), compute)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(argv, "workflow_scripts.stages.collect", __doc__)


if __name__ == "__main__":
    raise SystemExit(main())
