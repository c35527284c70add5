"""Figures of the summary, drawn from the per-problem rows and the summary JSON (never from typed-in numbers).

Each figure is written as PNG and SVG under the output folder:

* ``fast_p_level<L>`` (one per level in the rows): share of the level's problems that are correct and faster
  than p x the baseline, against p on a grid (0..3, computed from the rows), one line per model, one panel per
  baseline; the summary's counts at p = 1, 1.5, 2 are drawn as dots on the curves (a visible cross-check of rows
  vs JSON).
* ``bootstrap_forest``: the paired-bootstrap differences to the reference with their 95% intervals, one panel per
  metric (a figure saying so when the summary has no comparisons).
* ``level2_strategy``: per level, the eager-fast unflagged answers split into pure Triton and hybrid (keeps a
  PyTorch op), stacked bars per model.
* ``correct_compiled``: compiled and correct rates per model, one panel per level.

Re-runs give identical bytes: Agg backend, fixed ``svg.hashsalt``, no dates in the metadata, text kept as text
in the SVG (``svg.fonttype = none``), fixed DPI.

CLI: ``python -m workflow_scripts figures --rows ROWS.parquet --summary SUMMARY.json --out-dir DIR``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless and deterministic; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from workflow_scripts.core.layout import BOOTSTRAP_FIGURE, CORRECT_FIGURE, FAST_P_FIGURE, STRATEGY_FIGURE  # noqa: E402
from workflow_scripts.scoring.metrics import THRESHOLDS, fast_counts  # noqa: E402
from workflow_scripts.scoring.summary import (  # noqa: E402
    BOOTSTRAP_METRICS, bootstrap_reference, normalize_rows, outcomes_by_model,
)

P_GRID = np.round(np.linspace(0.0, 3.0, 301), 10)  # 0.00, 0.01, ..., 3.00
BASELINES: tuple[tuple[str, str], ...] = (("eager", "eager PyTorch"), ("compile", "torch.compile"))
METRIC_TITLES = {
    "correct": "correct",
    "fast_eager": "fast_1 vs eager (correct, > 1x)",
    "fast_compile": "fast_1 vs torch.compile (correct, > 1x)",
}
RC = {
    "svg.hashsalt": "kernelbench-summary",  # stable ids in the SVG
    "svg.fonttype": "none",  # keep text as text: smaller, searchable, stable
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
DPI = 110


@dataclass(frozen=True)
class FastPCurve:
    model: str
    level: str  # "overall" or the level number as text
    baseline: str  # "eager" | "compile"
    p: np.ndarray
    fraction: np.ndarray  # share of the level's problems that are correct and have speedup > p


def fast_p_curves(rows: pd.DataFrame, grid: np.ndarray = P_GRID) -> list[FastPCurve]:
    """fast_p(p) for every model x level (and overall) x baseline, straight from the rows."""
    outcomes = outcomes_by_model(normalize_rows(rows))
    curves = []
    for model, o in outcomes.items():
        levels = [("overall", np.ones_like(o.correct))]
        levels += [(str(int(level)), o.levels == level) for level in np.unique(o.levels)]
        for level, mask in levels:
            n = int(np.count_nonzero(mask))
            for baseline, _ in BASELINES:
                counts = fast_counts(o.correct & mask, o.speedups(baseline), grid)
                curves.append(FastPCurve(model, level, baseline, grid, counts / n))
    return curves


def _colors(n: int) -> list[Any]:
    cmap = plt.get_cmap("tab20" if n > 10 else "tab10")
    return [cmap(i % cmap.N) for i in range(n)]


def _linestyle(i: int) -> str:
    return ("-", "--", "-.", ":")[(i // 10) % 4]


def _save(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=DPI, metadata={"Software": None})
    fig.savefig(paths[1], metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return paths


def _level_title(level: str) -> str:
    return "all levels" if level == "overall" else f"level {level}"


def plot_fast_p(curves: Sequence[FastPCurve], summary: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """One figure per level (``fast_p_level<L>``): a panel per baseline, a line per model."""
    models = list(summary["models"])
    levels = [lv for lv in next(iter(summary["models"].values()))["levels"] if lv != "overall"]
    colors = dict(zip(models, _colors(len(models))))
    by_key = {(c.model, c.level, c.baseline): c for c in curves}
    written: list[Path] = []
    for level in levels:
        top = max(float(by_key[(m, level, b)].fraction.max()) for m in models for b, _ in BASELINES)
        fig, axes = plt.subplots(1, len(BASELINES), figsize=(4.6 * len(BASELINES) + 2.4, 4.6), squeeze=False,
                                 sharey=True)
        for col, (baseline, baseline_name) in enumerate(BASELINES):
            ax = axes[0][col]
            for i, model in enumerate(models):
                curve = by_key[(model, level, baseline)]
                ax.plot(curve.p, 100 * curve.fraction, color=colors[model], linestyle=_linestyle(i), linewidth=1.4,
                        label=model)
                counts = summary["models"][model]["levels"][level]
                ps = [p for _, p in THRESHOLDS]
                ys = [100 * counts[f"{baseline}_fast_{k}"] / counts["n"] for k, _ in THRESHOLDS]
                ax.plot(ps, ys, "o", color=colors[model], markersize=3.5)  # the JSON's counts, on the curve
            for _, p in THRESHOLDS:
                ax.axvline(p, color="grey", linewidth=0.7, linestyle=":")
            ax.set_title(f"{_level_title(level)}: vs {baseline_name}")
            ax.set_xlabel(f"speedup threshold p (x {baseline_name})")
            if col == 0:
                ax.set_ylabel("fast_p: correct and speedup > p\n(% of the level's problems)")
            ax.set_xlim(P_GRID[0], P_GRID[-1])
            ax.set_ylim(0, max(5.0, 100 * top * 1.05))
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center right", title="model", frameon=False)
        fig.suptitle(f"fast_p against p, {_level_title(level)}: share of problems solved correctly and faster than "
                     "p x the baseline\n(dots: the summary's counts at p = 1, 1.5, 2)")
        fig.tight_layout(rect=(0, 0, 1 - 2.2 / fig.get_figwidth(), 1))
        written += _save(fig, out_dir, FAST_P_FIGURE.format(level=level))
    return written


def plot_bootstrap_forest(summary: Mapping[str, Any], out_dir: Path) -> list[Path]:
    reference = bootstrap_reference(summary)
    block = summary[f"paired_bootstrap_vs_{reference}"]
    if not block:  # still write the file (the workflow expects it), saying why it is empty
        fig, ax = plt.subplots(figsize=(6.0, 2.0))
        ax.axis("off")
        ax.text(0.5, 0.5, f"No model compared with {reference}: nothing to plot", ha="center", va="center")
        fig.suptitle(f"Paired bootstrap against {reference}")
        return _save(fig, out_dir, BOOTSTRAP_FIGURE)
    models = list(block)
    y = np.arange(len(models))[::-1]  # first model on top
    fig, axes = plt.subplots(1, len(BOOTSTRAP_METRICS), figsize=(4.0 * len(BOOTSTRAP_METRICS) + 1.5,
                                                                 1.8 + 0.42 * len(models)),
                             sharey=True, squeeze=False)
    for ax, metric in zip(axes[0], BOOTSTRAP_METRICS):
        deltas = np.array([block[m][metric]["delta_pp"] for m in models])
        lows = np.array([block[m][metric]["ci95_pp"][0] for m in models])
        highs = np.array([block[m][metric]["ci95_pp"][1] for m in models])
        ax.errorbar(deltas, y, xerr=[deltas - lows, highs - deltas], fmt="o", color="tab:blue", ecolor="tab:blue",
                    capsize=3)
        ax.axvline(0.0, color="black", linewidth=0.8)
        for yi, m, high in zip(y, models, highs):
            r = block[m][metric]
            ax.annotate(f"+{r['gained']}/-{r['lost']}", (high, yi), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=7, color="dimgrey")
        ax.set_title(METRIC_TITLES.get(metric, metric))
        ax.set_xlabel(f"difference to {reference} (percentage points)")
        ax.margins(x=0.25)
    axes[0][0].set_yticks(y, models)
    axes[0][0].set_ylabel("model")
    fig.suptitle(f"Paired bootstrap against {reference}: difference in percentage points\n"
                 "(dot: difference; bar: 95% percentile interval; +g/-l: problems gained / lost)")
    fig.tight_layout()
    return _save(fig, out_dir, BOOTSTRAP_FIGURE)


def plot_level_strategy(summary: Mapping[str, Any], out_dir: Path) -> list[Path]:
    strategy = summary["level2_strategy"]
    models = list(strategy)
    levels = sorted({level for entry in strategy.values() for level in entry}, key=int)
    x = np.arange(len(models))
    fig, axes = plt.subplots(1, len(levels), figsize=(max(6.0, 0.55 * len(models) + 2.0) * len(levels) / 1.4, 4.8),
                             squeeze=False, sharey=True)
    for ax, level in zip(axes[0], levels):
        pure = np.array([strategy[m][level]["fast_unflagged_pure_triton"] for m in models])
        hybrid = np.array([strategy[m][level]["fast_unflagged_hybrid"] for m in models])
        ax.bar(x, pure, color="tab:green", label="pure Triton (no PyTorch op kept)")
        ax.bar(x, hybrid, bottom=pure, color="tab:orange", label="hybrid (keeps a PyTorch op)")
        ax.set_xticks(x, models, rotation=60, ha="right")
        ax.set_title(f"level {level}: how the fast answers are built")
        ax.set_xlabel("model")
        ax.set_ylabel("answers correct, > 1x eager, unflagged")
    axes[0][0].legend(loc="upper left")
    fig.suptitle("Strategy split of the eager-fast unflagged answers (static check: forward() keeps a PyTorch op)")
    fig.tight_layout()
    return _save(fig, out_dir, STRATEGY_FIGURE)


def plot_correct_compiled(summary: Mapping[str, Any], out_dir: Path) -> list[Path]:
    models = list(summary["models"])
    levels = list(next(iter(summary["models"].values()))["levels"])
    x = np.arange(len(models))
    width = 0.4
    fig, axes = plt.subplots(1, len(levels), figsize=(max(6.0, 0.5 * len(models) + 2.0) * len(levels) / 1.4, 4.8),
                             squeeze=False, sharey=True)
    for ax, level in zip(axes[0], levels):
        counts = [summary["models"][m]["levels"][level] for m in models]
        rates = {key: np.array([100 * c[key] / c["n"] for c in counts]) for key in ("compiled", "correct")}
        ax.bar(x - width / 2, rates["compiled"], width, color="tab:grey", label="compiled")
        ax.bar(x + width / 2, rates["correct"], width, color="tab:blue", label="correct")
        ax.set_xticks(x, models, rotation=60, ha="right")
        ax.set_title(_level_title(level))
        ax.set_xlabel("model")
        ax.set_ylabel("% of problems")
        ax.set_ylim(0, 115)  # headroom for the legend above 100%
        ax.set_yticks(np.arange(0, 101, 20))
    axes[0][0].legend(loc="upper left", ncol=2)
    fig.suptitle("Compiled and correct answers per model (share of all problems)")
    fig.tight_layout()
    return _save(fig, out_dir, CORRECT_FIGURE)


def make_figures(rows_df: pd.DataFrame, summary_dict: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Draw every figure (PNG + SVG) into ``out_dir``; returns the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with matplotlib.rc_context(RC):
        written += plot_fast_p(fast_p_curves(rows_df), summary_dict, out_dir)
        written += plot_bootstrap_forest(summary_dict, out_dir)
        written += plot_level_strategy(summary_dict, out_dir)
        written += plot_correct_compiled(summary_dict, out_dir)
    return written
