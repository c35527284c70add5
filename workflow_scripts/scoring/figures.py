"""Figures of the summary, drawn from the per-problem rows and the summary JSON (never from typed-in numbers).

Each figure is written as PNG and SVG under the output folder:

* ``fast_p_level<L>`` (one per level in the rows): share of the level's problems that are correct and faster
  than p x the baseline, against p, one line per model, one panel per baseline. The p axis covers every correct
  answer's speedup and the thresholds (scoring/metrics.py); it is logarithmic when that range spans a decade or more (interpreter
  timings on the CPU are far below 1x, GPU answers range from 0.01x to over 10x), linear from 0 otherwise. Every
  observed speedup is a point of the p grid, so the step curves are exact. The summary's counts at each threshold
  are drawn as dots on the curves (a visible cross-check of rows vs JSON).
* ``bootstrap_forest``: the paired-bootstrap differences to the reference with their 95% intervals, one panel per
  metric (a figure saying so when the summary has no comparisons).
* ``level2_strategy``: per level, the eager-fast unflagged answers split into pure Triton and hybrid (keeps a
  PyTorch op), stacked bars per model, on an integer count axis.
* ``correct_compiled``: compiled and correct rates per model, one panel per level.

Every figure states what it counts and how it was measured (:class:`RunFacts`): n in its title (problems, models)
and a footnote with the correctness protocol (trials, tolerances) and the timing mode with its protocol: CUDA
events on a GPU; on the CPU, the wall-clock of Triton's interpreter, which says nothing about GPU speed. The timing
mode is what the evaluations recorded (the rows' ``timing_mode``), else the configured device; the protocol comes
from the summary's ``benchmark.settings`` (the summary stage copies it from the configuration). A summary without
them (drawn by hand from bare rows) says "not recorded" instead of guessing.

Re-runs give identical bytes: Agg backend, fixed ``svg.hashsalt``, no dates in the metadata, text kept as text
in the SVG (``svg.fonttype = none``), fixed DPI.

CLI: ``python -m workflow_scripts figures --rows ROWS.parquet --summary SUMMARY.json --out-dir DIR``.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless and deterministic; must precede pyplot

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, MaxNLocator  # noqa: E402

from workflow_scripts.core.layout import BOOTSTRAP_FIGURE, CORRECT_FIGURE, FAST_P_FIGURE, STRATEGY_FIGURE  # noqa: E402
from workflow_scripts.core import records  # noqa: E402
from workflow_scripts.core.records import TIMING_MODES  # noqa: E402
from workflow_scripts.scoring import metrics  # noqa: E402
from workflow_scripts.scoring.summary import (  # noqa: E402
    BOOTSTRAP_METRICS, Outcomes, bootstrap_reference, normalize_rows, outcomes_by_model,
)

BASELINE_NAMES = {"eager": "eager PyTorch", "compile": "torch.compile"}
BASELINES: tuple[tuple[str, str], ...] = tuple((b, BASELINE_NAMES[b]) for b in metrics.BASELINES)


def metric_title(metric: str) -> str:
    """A bootstrap metric as a panel title, e.g. "fast_1 vs eager (correct, > 1x)" (the headline threshold)."""
    key = metrics.HEADLINE_THRESHOLD[0]
    against = {"fast_eager": "eager", "fast_compile": "torch.compile"}
    return f"fast_{key} vs {against[metric]} (correct, > {key}x)" if metric in against else metric


RC = {
    "svg.hashsalt": "kernelbench-summary",  # stable ids in the SVG
    "svg.fonttype": "none",  # keep text as text: smaller, searchable, stable
    "font.size": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
DPI = 110
FOOTNOTE_SIZE = 7.5  # points
# What a timing mode (evaluation/timing.py, recorded per evaluation) means for the reader of a speedup.
TIMING_MEANINGS = {
    TIMING_MODES["cuda"]: ("CUDA events on the GPU (KernelBench's timing window, L2 flushed before each call, "
                           "with the configured launch headroom)"),
    TIMING_MODES["cpu"]: ("CPU wall-clock of Triton's interpreter (TRITON_INTERPRET=1): these speedups say nothing "
                          "about GPU speed"),
}
LINEAR_P_MAX = 3.0  # a linear p axis reaches at least this far (past the largest threshold)
LOG_SPAN = 10.0  # a p range at least this wide (max / min) gets a log axis
LOG_GRID_POINTS = 400


# ------------------------------------------------------------------------------------------- what was measured


@dataclass(frozen=True)
class RunFacts:
    """What every figure states: how many problems and models, how correctness and timing were measured."""

    problems: Mapping[str, int]  # level ("overall" and "1", "2", ...) -> n problems
    models: int
    timing_modes: tuple[str, ...]  # the distinct modes recorded (or configured); empty: unknown
    evaluation: Mapping[str, Any]  # the evaluation settings of the run (empty: not recorded)
    bootstrap: Mapping[str, Any]  # reference, resamples, seed (empty: not recorded)

    def n_text(self, level: str = "overall") -> str:
        """e.g. "n = 13 problems (level 1: 8, level 2: 5), 6 models"."""
        models = f"{self.models} model{'s' if self.models != 1 else ''}"
        if level != "overall":
            return f"n = {self.problems[level]} problems, {models}"
        levels = ", ".join(f"level {lv}: {n}" for lv, n in self.problems.items() if lv != "overall")
        return f"n = {self.problems['overall']} problems ({levels}), {models}"

    def correctness_text(self) -> str:
        ev = self.evaluation
        if not {"correctness_trials", "atol", "rtol"} <= set(ev):
            return "Correctness protocol: not recorded in the summary"
        return (f"Correct: output matches the reference on {ev['correctness_trials']} seeded inputs, "
                f"atol = {ev['atol']:g}, rtol = {ev['rtol']:g}")

    def timing_text(self) -> str:
        if not self.timing_modes:
            return "Timing mode: not recorded"
        if len(self.timing_modes) > 1:
            return f"Timing: MIXED modes {', '.join(self.timing_modes)}: speedups are not comparable"
        mode = self.timing_modes[0]
        text = f"Timing: {TIMING_MEANINGS.get(mode, mode)}"
        ev = self.evaluation
        if "timing_trials" in ev and "warmup" in ev:
            calls = "call" if ev["warmup"] == 1 else "calls"
            text += (f"; {records.HEADLINE_STATISTIC} of {ev['timing_trials']} timed calls after {ev['warmup']} "
                     f"warm-up {calls}")
        return text

    def footnote(self, *, timing: bool = True, bootstrap: bool = False) -> str:
        parts = [self.n_text(), self.correctness_text()]
        if timing:
            parts.append(self.timing_text())
        else:  # still say how the run was timed: a reader compares figures
            parts.append(f"({self.timing_text()})")
        if bootstrap and {"resamples", "seed"} <= set(self.bootstrap):
            parts.append(f"Bootstrap: {self.bootstrap['resamples']:,} paired resamples of the problems, "
                         f"seed {self.bootstrap['seed']}")
        return ". ".join(parts) + "."


def timing_modes(rows: pd.DataFrame, summary: Mapping[str, Any]) -> tuple[str, ...]:
    """The timing modes the evaluations recorded; without any, the mode of the configured (or fingerprinted)
    device."""
    if "timing_mode" in rows:
        recorded = tuple(sorted(str(m) for m in rows["timing_mode"].dropna().unique()))
        if recorded:
            return recorded
    benchmark = summary.get("benchmark") or {}
    device = ((benchmark.get("settings") or {}).get("evaluation") or {}).get("device")
    device = device or (benchmark.get("runtime") or {}).get("device")
    return (TIMING_MODES[device],) if device in TIMING_MODES else ()


def run_facts(rows: pd.DataFrame, summary: Mapping[str, Any]) -> RunFacts:
    first = next(iter(summary["models"].values()))
    settings = (summary.get("benchmark") or {}).get("settings") or {}
    return RunFacts(
        problems={level: int(counts["n"]) for level, counts in first["levels"].items()},
        models=len(summary["models"]),
        timing_modes=timing_modes(rows, summary),
        evaluation=settings.get("evaluation") or {},
        bootstrap=settings.get("bootstrap") or {},
    )


# ------------------------------------------------------------------------------------------------ fast_p curves


@dataclass(frozen=True)
class SpeedupAxis:
    """The p grid of the fast_p curves and how to draw it."""

    grid: np.ndarray  # ascending; holds every observed speedup and the thresholds
    scale: str  # "log" | "linear"

    @property
    def limits(self) -> tuple[float, float]:
        return float(self.grid[0]), float(self.grid[-1])


def _timed_speedups(outcomes: Mapping[str, Outcomes]) -> np.ndarray:
    """Every correct answer's known, positive speedup, over both baselines (what the fast_p curves step at)."""
    found = [o.speedups(b)[o.correct] for o in outcomes.values() for b, _ in BASELINES]
    values = np.concatenate(found) if found else np.array([])
    return np.unique(values[np.isfinite(values) & (values > 0)])


def speedup_axis(outcomes: Mapping[str, Outcomes]) -> SpeedupAxis:
    """A grid over the observed speedups and the thresholds: log-spaced when they span a decade or more."""
    observed = _timed_speedups(outcomes)
    thresholds = np.array([p for _, p in metrics.THRESHOLDS])
    low = float(min(observed.min(initial=np.inf), thresholds.min()))
    high = float(max(observed.max(initial=-np.inf), thresholds.max()))
    if high / low >= LOG_SPAN:
        # Whole decades, the lower edge strictly below the smallest speedup (the curve starts at its maximum).
        start = 10.0 ** math.floor(math.log10(low) - 1e-9)
        stop = 10.0 ** math.ceil(math.log10(high))
        base = np.geomspace(start, stop, LOG_GRID_POINTS)
        scale = "log"
    else:
        stop = max(LINEAR_P_MAX, math.ceil(high * 1.05 * 2) / 2)  # the next half past the largest speedup
        base = np.linspace(0.0, stop, int(round(stop * 100)) + 1)
        scale = "linear"
    grid = np.unique(np.concatenate([np.round(base, 12), thresholds, observed]))
    return SpeedupAxis(grid, scale)


@dataclass(frozen=True)
class FastPCurve:
    model: str
    level: str  # "overall" or the level number as text
    baseline: str  # "eager" | "compile"
    p: np.ndarray
    fraction: np.ndarray  # share of the level's problems that are correct and have speedup > p


def fast_p_curves(rows: pd.DataFrame, grid: np.ndarray | None = None) -> list[FastPCurve]:
    """fast_p(p) for every model x level (and overall) x baseline, straight from the rows (on ``grid``, by default
    the :func:`speedup_axis` grid of the rows)."""
    outcomes = outcomes_by_model(normalize_rows(rows))
    grid = speedup_axis(outcomes).grid if grid is None else grid
    curves = []
    for model, o in outcomes.items():
        levels = [("overall", np.ones_like(o.correct))]
        levels += [(str(int(level)), o.levels == level) for level in np.unique(o.levels)]
        for level, mask in levels:
            n = int(np.count_nonzero(mask))
            for baseline, _ in BASELINES:
                counts = metrics.fast_counts(o.correct & mask, o.speedups(baseline), grid)
                curves.append(FastPCurve(model, level, baseline, grid, counts / n))
    return curves


# ------------------------------------------------------------------------------------------------------ drawing


def _colors(n: int) -> list[Any]:
    cmap = plt.get_cmap("tab20" if n > 10 else "tab10")
    return [cmap(i % cmap.N) for i in range(n)]


def _linestyle(i: int) -> str:
    return ("-", "--", "-.", ":")[(i // 10) % 4]


def _speedup_tick(value: float, _position: float) -> str:
    """Log-axis labels: plain numbers near 1x, where the thresholds are; powers of ten beyond."""
    if 0.01 <= value <= 100:
        return f"{value:g}"
    return f"$10^{{{round(math.log10(value))}}}$"


def _level_title(level: str) -> str:
    return "all levels" if level == "overall" else f"level {level}"


def _finish(fig: plt.Figure, title: str, note: str, right: float = 1.0) -> None:
    """Title, the footnote (n, protocol, timing mode) along the bottom, and a layout that leaves room for both:
    the figure grows by the footnote's height so the panels keep theirs."""
    width = fig.get_figwidth()
    wrapped = textwrap.fill(note, width=max(60, int(width * 72 / (FOOTNOTE_SIZE * 0.52))))
    note_height = (wrapped.count("\n") + 1) * FOOTNOTE_SIZE * 1.35 / 72 + 0.12  # inches
    fig.set_figheight(fig.get_figheight() + note_height)
    height = fig.get_figheight()
    fig.text(0.06 / width, 0.06 / height, wrapped, ha="left", va="bottom", fontsize=FOOTNOTE_SIZE, color="0.25")
    fig.suptitle(title)
    fig.tight_layout(rect=(0, note_height / height, right, 1))


def fast_p_figures(rows: pd.DataFrame, summary: Mapping[str, Any], facts: RunFacts) -> dict[str, plt.Figure]:
    """One figure per level (``fast_p_level<L>``): a panel per baseline, a line per model."""
    outcomes = outcomes_by_model(normalize_rows(rows))
    axis = speedup_axis(outcomes)
    curves = fast_p_curves(rows, axis.grid)
    models = list(summary["models"])
    levels = [lv for lv in next(iter(summary["models"].values()))["levels"] if lv != "overall"]
    colors = dict(zip(models, _colors(len(models))))
    by_key = {(c.model, c.level, c.baseline): c for c in curves}
    figures: dict[str, plt.Figure] = {}
    for level in levels:
        top = max(float(by_key[(m, level, b)].fraction.max()) for m in models for b, _ in BASELINES)
        fig, axes = plt.subplots(1, len(BASELINES), figsize=(4.6 * len(BASELINES) + 2.4, 4.6), squeeze=False,
                                 sharey=True)
        for col, (baseline, baseline_name) in enumerate(BASELINES):
            ax = axes[0][col]
            for i, model in enumerate(models):
                curve = by_key[(model, level, baseline)]
                ax.step(curve.p, 100 * curve.fraction, where="post", color=colors[model], linestyle=_linestyle(i),
                        linewidth=1.4, label=model)
                counts = summary["models"][model]["levels"][level]
                ps = [p for _, p in metrics.THRESHOLDS]
                ys = [100 * counts[metrics.fast_field(baseline, k)] / counts["n"] for k, _ in metrics.THRESHOLDS]
                ax.plot(ps, ys, "o", color=colors[model], markersize=3.5)  # the JSON's counts, on the curve
            for _, p in metrics.THRESHOLDS:
                ax.axvline(p, color="grey", linewidth=0.7, linestyle=":")
            ax.set_xscale(axis.scale)
            ax.set_xlim(*axis.limits)
            if axis.scale == "log":
                ax.xaxis.set_major_formatter(FuncFormatter(_speedup_tick))
            ax.set_title(f"{_level_title(level)}: vs {baseline_name}")
            scale_note = ", log scale" if axis.scale == "log" else ""
            ax.set_xlabel(f"speedup threshold p (x {baseline_name}{scale_note})")
            if col == 0:
                ax.set_ylabel("fast_p: correct and speedup > p\n(% of the level's problems)")
            ax.set_ylim(0, max(5.0, 100 * top * 1.05))
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="center right", title="model", frameon=False)
        _finish(fig, f"fast_p against p, {_level_title(level)} ({facts.n_text(level)}): share of problems solved "
                     f"correctly and faster than p x the baseline\n(dots: the summary's counts at p = {metrics.thresholds_text()})",
                facts.footnote(), right=1 - 2.2 / fig.get_figwidth())
        figures[FAST_P_FIGURE.format(level=level)] = fig
    return figures


def bootstrap_forest_figure(summary: Mapping[str, Any], facts: RunFacts) -> plt.Figure:
    reference = bootstrap_reference(summary)
    block = summary[f"paired_bootstrap_vs_{reference}"]
    if not block:  # still write the file (the workflow expects it), saying why it is empty
        fig, ax = plt.subplots(figsize=(6.0, 2.0))
        ax.axis("off")
        ax.text(0.5, 0.5, f"No model compared with {reference}: nothing to plot", ha="center", va="center")
        _finish(fig, f"Paired bootstrap against {reference}", facts.footnote(bootstrap=True))
        return fig
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
        ax.set_title(metric_title(metric))
        ax.set_xlabel(f"difference to {reference} (percentage points)")
        ax.margins(x=0.25)
        if float(highs.max() - lows.min()) < 1.0:  # no difference anywhere: a readable axis, not 1e-17 noise
            ax.set_xlim(-5.0, 5.0)
    axes[0][0].set_yticks(y, models)
    axes[0][0].set_ylabel("model")
    _finish(fig, f"Paired bootstrap against {reference}: difference in percentage points "
                 f"({facts.n_text()})\n(dot: difference; bar: 95% percentile interval; +g/-l: problems gained / "
                 "lost)", facts.footnote(bootstrap=True))
    return fig


def level_strategy_figure(summary: Mapping[str, Any], facts: RunFacts) -> plt.Figure:
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
        ax.set_title(f"level {level} (n = {facts.problems[level]} problems)")
        ax.set_xlabel("model")
        ax.set_ylabel("answers correct, > 1x eager, unflagged")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts of answers
        ax.set_ylim(0, max(1.0, float((pure + hybrid).max()) * 1.15))
        if not (pure + hybrid).any():
            ax.text(0.5, 0.5, "no answer is correct, faster than eager\nand unflagged at this level",
                    transform=ax.transAxes, ha="center", va="center", color="dimgrey")
    axes[0][0].legend(loc="upper left")
    _finish(fig, "Strategy split of the eager-fast unflagged answers\n"
                 f"({facts.n_text()}; static check: forward() keeps a PyTorch op)", facts.footnote())
    return fig


def correct_compiled_figure(summary: Mapping[str, Any], facts: RunFacts) -> plt.Figure:
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
        ax.set_title(f"{_level_title(level)} (n = {facts.problems[level]})")
        ax.set_xlabel("model")
        ax.set_ylabel("% of problems")
        ax.set_ylim(0, 115)  # headroom for the legend above 100%
        ax.set_yticks(np.arange(0, 101, 20))
    axes[0][0].legend(loc="upper left", ncol=2)
    _finish(fig, f"Compiled and correct answers per model (share of all problems; {facts.n_text()})",
            facts.footnote(timing=False))
    return fig


def draw_figures(rows_df: pd.DataFrame, summary_dict: Mapping[str, Any]) -> dict[str, plt.Figure]:
    """Every figure, by file stem (call inside ``matplotlib.rc_context(RC)``, as :func:`make_figures` does)."""
    facts = run_facts(rows_df, summary_dict)
    figures = fast_p_figures(rows_df, summary_dict, facts)
    figures[BOOTSTRAP_FIGURE] = bootstrap_forest_figure(summary_dict, facts)
    figures[STRATEGY_FIGURE] = level_strategy_figure(summary_dict, facts)
    figures[CORRECT_FIGURE] = correct_compiled_figure(summary_dict, facts)
    return figures


def _save(fig: plt.Figure, out_dir: Path, stem: str) -> list[Path]:
    paths = [out_dir / f"{stem}.png", out_dir / f"{stem}.svg"]
    fig.savefig(paths[0], dpi=DPI, metadata={"Software": None})
    fig.savefig(paths[1], metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return paths


def make_figures(rows_df: pd.DataFrame, summary_dict: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Draw every figure (PNG + SVG) into ``out_dir``; returns the written paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with matplotlib.rc_context(RC):
        for stem, fig in draw_figures(rows_df, summary_dict).items():
            written += _save(fig, out_dir, stem)
    return written
