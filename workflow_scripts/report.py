"""Stage 9, summary: the published-schema JSON, per-level and bootstrap tables, markdown table and figures.

Wraps workflow_scripts.summarize / workflow_scripts.figures for the pipeline: it builds the summary context from
the run's configuration (benchmark block, evaluation protocol, model labels and generation provenance) and the
environment fingerprint (the runtime block), and stores every output in the content-addressed store. Changing
only the bootstrap settings changes only this stage's key.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pandas as pd

from workflow_scripts.figures import make_figures
from workflow_scripts.records import write_parquet
from workflow_scripts.store import Store, code_version, sha256_file
from workflow_scripts.summarize import (
    bootstrap_table,
    dumps_summary,
    levels_table,
    markdown_table,
    parse_context,
    summarize,
)

STAGE = "summary"
CODE_MODULES = ["report", "summarize", "figures", "records"]


def runtime_block(environment: dict[str, Any]) -> dict[str, Any]:
    """What the published runtime block holds (torch, triton, cuda, python, gpu), then the full fingerprint."""
    runtime = {key: environment.get(key) for key in ("device", "torch", "triton", "cuda", "python", "gpu")}
    runtime.update({k: v for k, v in environment.items() if k not in runtime})
    return runtime


def build_context(settings: dict[str, Any], environment: dict[str, Any]) -> dict[str, Any]:
    benchmark = dict(settings["summary"].get("benchmark") or {})
    benchmark["settings"] = {
        "suite": settings["suite"], "prompt": settings["prompt"], "evaluation": settings["evaluation"],
        "baselines": settings["baselines"],
        "bootstrap": {k: settings["summary"][k] for k in ("reference", "resamples", "seed")},
    }
    models = {}
    # The settings travel as sorted JSON; the config's order of models is kept separately.
    for name in settings.get("model_order") or list(settings["models"]):
        model = settings["models"][name]
        entry: dict[str, Any] = {}
        if "label" in model:
            entry["label"] = model["label"]
        if "generation" in model:
            entry["generation"] = model["generation"]
        models[name] = entry
    return {"benchmark": benchmark, "runtime": runtime_block(environment), "models": models}


def figure_outputs(figures_dir: Path, levels: list[int]) -> dict[str, Path]:
    names = [f"fast_p_level{level}" for level in levels] + ["bootstrap_forest", "level2_strategy", "correct_compiled"]
    return {f"{name}.{ext}": figures_dir / f"{name}.{ext}" for name in names for ext in ("png", "svg")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workflow_scripts.report", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=Path, required=True, help="results/evaluations.parquet")
    parser.add_argument("--environment", type=Path, required=True, help="results/environment/<device>.json")
    parser.add_argument("--settings", required=True, help="JSON: models, summary, evaluation, suite, prompt, baselines")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--markdown", type=Path, required=True)
    parser.add_argument("--levels", type=Path, required=True, help="the per-level table (parquet)")
    parser.add_argument("--bootstrap", type=Path, help="the bootstrap table (default: beside --levels)")
    parser.add_argument("--figures-dir", type=Path, required=True)
    parser.add_argument("--store", type=Path, default=Path("results/.store"))
    args = parser.parse_args(argv)
    settings = json.loads(args.settings)
    environment = json.loads(args.environment.read_text())
    bootstrap_path = args.bootstrap or args.levels.with_name("bootstrap.parquet")
    rows = pd.read_parquet(args.rows)
    summary_settings = settings["summary"]
    outputs = {"json": args.out, "markdown": args.markdown, "levels": args.levels, "bootstrap": bootstrap_path}
    figures = figure_outputs(args.figures_dir, sorted(int(level) for level in rows["level"].unique()))
    outputs.update(figures)

    def compute(out: dict[str, Path]) -> None:
        summary = summarize(
            rows, reference=summary_settings["reference"], compare=summary_settings.get("compare"),
            resamples=summary_settings["resamples"], seed=summary_settings["seed"],
            context=parse_context(build_context(settings, environment)),
        )
        out["json"].write_text(dumps_summary(summary))
        out["markdown"].write_text(markdown_table(summary))
        write_parquet(out["levels"], levels_table(summary))
        write_parquet(out["bootstrap"], bootstrap_table(summary))
        figure_dir = out["json"].parent / "figures"
        made = {path.name: path for path in make_figures(rows, summary, figure_dir)}
        for name in figures:
            if name not in made:
                raise RuntimeError(f"figures did not produce {name} (made: {sorted(made)})")
            made[name].replace(out[name])

    inputs = {"rows": sha256_file(args.rows), "environment": sha256_file(args.environment)}
    Store(args.store).build(outputs, STAGE, code_version(CODE_MODULES), settings, inputs, compute)
    print(args.markdown.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
