"""Rule summary: the published-schema JSON, per-level and bootstrap tables, the markdown table and the figures.

The summary context comes from the run's configuration (benchmark block, evaluation protocol, model labels and
generation provenance) and the environment fingerprint (the runtime block). Changing only the bootstrap settings
changes only this stage's key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.core.hashing import sha256_file
from workflow_scripts.core.io import atomic_write_text, write_parquet
from workflow_scripts.core.layout import ResultsLayout
from workflow_scripts.core.params import parse_stage_args, stage_parser
from workflow_scripts.core.store import Store, code_version
from workflow_scripts.scoring.context import build_context, parse_context
from workflow_scripts.scoring.figures import make_figures
from workflow_scripts.scoring.summary import (
    bootstrap_table, dumps_summary, levels_table, markdown_table, summarize,
)

STAGE = "summary"


@dataclass(frozen=True)
class Params:
    """The config blocks the summary reports (models: name -> entry; only label and generation are read)."""

    models: dict[str, dict[str, Any]]
    model_order: list[str]
    summary: dict[str, Any]
    evaluation: dict[str, Any] = field(default_factory=dict)
    suite: dict[str, Any] = field(default_factory=dict)
    prompt: dict[str, Any] = field(default_factory=dict)
    baselines: dict[str, Any] = field(default_factory=dict)
    # The calibration models (generation/kinds.py ModelKind.calibration), named by the rule: this stage's key does
    # not follow the generation package.
    calibration: list[str] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__, "workflow_scripts.stages.summary", Params)
    parser.add_argument("--rows", type=Path, required=True, help="<results>/evaluations.parquet")
    parser.add_argument("--self-parity", type=Path, nargs="*", default=[],
                        help="the vLLM models' self-parity reports (<results>/completions/<model>.self_parity.json)")
    parser.add_argument("--environment", type=Path, required=True, help="<results>/environment/<device>.json")
    parser.add_argument("--results", required=True, help="the results folder (its layout: core/layout.py)")
    parser.add_argument("--store", type=Path, required=True)
    args, params = parse_stage_args(parser, Params, argv)
    layout = ResultsLayout(args.results)
    store = Store(args.store)
    inputs = {"rows": store.check_result(args.rows), "environment": sha256_file(args.environment)}
    inputs.update({f"self_parity:{path.name}": sha256_file(path) for path in args.self_parity})
    parity = {report["model"]: report for report in (json.loads(path.read_text()) for path in args.self_parity)}
    rows = pd.read_parquet(args.rows)
    in_rows = list(dict.fromkeys(rows["model"]))
    if sorted(in_rows) != sorted(params.model_order):
        parser.exit(2, f"error: {args.rows} holds models {in_rows}, the configuration names {params.model_order}; "
                       f"rebuild the rows (snakemake {args.rows}) before the summary\n")
    settings = vars(params)
    environment = json.loads(args.environment.read_text())
    outputs = {"json": Path(layout.summary_json()), "markdown": Path(layout.summary_markdown()),
               "levels": Path(layout.table("levels")), "bootstrap": Path(layout.table("bootstrap"))}
    figures = {name: Path(path) for name, path in layout.figures(rows["level"].unique()).items()}
    outputs.update(figures)

    def compute(out: dict[str, Path]) -> None:
        summary = summarize(
            rows, reference=params.summary["reference"], compare=params.summary.get("compare"),
            resamples=params.summary["resamples"], seed=params.summary["seed"],
            context=parse_context(build_context(settings, environment)), samples=params.summary.get("samples"),
            self_parity=parity,
            calibration=params.calibration,
        )
        atomic_write_text(out["json"], dumps_summary(summary))
        atomic_write_text(out["markdown"], markdown_table(summary))
        write_parquet(out["levels"], levels_table(summary, rows), "levels")
        write_parquet(out["bootstrap"], bootstrap_table(summary), "bootstrap")
        made = {path.name: path for path in make_figures(rows, summary, out["json"].parent / "figures")}
        for name in figures:
            if name not in made:
                raise RuntimeError(f"figures did not produce {name} (made: {sorted(made)})")
            made[name].replace(out[name])

    store.build(outputs, STAGE, code_version(__spec__.name), settings, inputs, compute)
    print(outputs["markdown"].read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
