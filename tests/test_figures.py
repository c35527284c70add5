"""Figures (workflow_scripts.scoring.figures): files, formats, determinism, and that they follow the data."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from workflow_scripts.core.layout import figure_names
from workflow_scripts.scoring import figures as fg
from workflow_scripts.scoring import summary as sm
from workflow_scripts.scoring.context import parse_context

REPO = Path(__file__).resolve().parents[1]
# The figure names the workflow declares as outputs (core/layout.py): the figures module must draw exactly these.
STEMS = tuple(figure_names([1, 2]))
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def rows(shift: float = 0.0) -> pd.DataFrame:
    """Three models on 6 level-1 and 4 level-2 problems; ``shift`` changes model 'b''s speedups and outcome."""
    out: list[dict[str, Any]] = []
    for model, base in (("a", 0.8), ("b", 1.4 + shift), ("c", 2.2)):
        for level, count in ((1, 6), (2, 4)):
            for pid in range(1, count + 1):
                correct = (pid + len(model)) % 3 != 0 or (shift and model == "b")
                speed = base * (1 + 0.25 * pid) if correct else None
                out.append({
                    "model": model, "level": level, "problem_id": pid, "problem": f"P{pid}", "compiled": True,
                    "correct": bool(correct), "speedup_eager": speed,
                    "speedup_compile": None if speed is None else speed / 2, "keeps_torch_op": pid % 2 == 0,
                    "completion_tokens": 100 * pid,
                })
    return pd.DataFrame(out)


def draw(frame: pd.DataFrame, out_dir: Path) -> dict[str, bytes]:
    summary = sm.summarize(frame, reference="a", resamples=500)
    paths = fg.make_figures(frame, summary, out_dir)
    return {p.name: p.read_bytes() for p in paths}


def test_files_exist_and_are_valid(tmp_path: Path) -> None:
    files = draw(rows(), tmp_path)
    assert sorted(files) == sorted(f"{stem}.{ext}" for stem in STEMS for ext in ("png", "svg"))
    for name, data in files.items():
        assert len(data) > 1000, name
        if name.endswith(".png"):
            assert data.startswith(PNG_MAGIC)
            image = mpimg.imread(tmp_path / name)
            assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 200
            assert np.ptp(image) > 0  # not a blank canvas
        else:
            root = ET.fromstring(data)
            assert root.tag == "{http://www.w3.org/2000/svg}svg"
    # Titles, axis labels and legends are there (text stays text in the SVG).
    for level in (1, 2):
        fast_p = files[f"fast_p_level{level}.svg"].decode()
        for text in (f"fast_p against p, level {level}", "speedup threshold p", f"level {level}: vs eager PyTorch",
                     f"level {level}: vs torch.compile", "model"):
            assert text in fast_p
    forest = files["bootstrap_forest.svg"].decode()
    assert "Paired bootstrap against a" in forest and "difference to a (percentage points)" in forest
    strategy = files["level2_strategy.svg"].decode()
    assert "pure Triton" in strategy and "hybrid (keeps a PyTorch op)" in strategy
    assert "% of problems" in files["correct_compiled.svg"].decode()


def test_rerun_is_byte_identical(tmp_path: Path) -> None:
    assert draw(rows(), tmp_path / "one") == draw(rows(), tmp_path / "two")


def test_figures_follow_the_data(tmp_path: Path) -> None:
    before = draw(rows(), tmp_path / "before")
    after = draw(rows(shift=1.0), tmp_path / "after")
    for stem in STEMS:
        for ext in ("png", "svg"):
            name = f"{stem}.{ext}"
            assert before[name] != after[name], f"{name} did not change when the data changed"


def test_fast_p_curves_from_rows() -> None:
    frame = pd.DataFrame([
        {"model": "m", "level": 1, "problem_id": i, "problem": "x", "compiled": True, "correct": c,
         "speedup_eager": s, "speedup_compile": None, "keeps_torch_op": False, "completion_tokens": None}
        for i, (c, s) in enumerate([(True, 1.0), (True, 1.5), (True, None), (False, 9.0)], start=1)
    ])
    curves = {(c.level, c.baseline): c for c in fg.fast_p_curves(frame, grid=np.array([0.0, 0.99, 1.0, 1.5, 2.0]))}
    # correct with a known speedup: 1.0 and 1.5; strictly greater than p; out of all 4 problems.
    assert curves[("1", "eager")].fraction.tolist() == [0.5, 0.5, 0.25, 0.0, 0.0]
    assert curves[("overall", "compile")].fraction.tolist() == [0.0] * 5
    # At p = 1, 1.5, 2 the curves equal the summary's counts.
    summary = sm.summarize(frame, resamples=10)
    counts = summary["models"]["m"]["levels"]["1"]
    assert curves[("1", "eager")].fraction[[2, 3, 4]].tolist() == [
        counts["eager_fast_1"] / 4, counts["eager_fast_1.5"] / 4, counts["eager_fast_2"] / 4]


def test_single_model_still_writes_every_figure(tmp_path: Path) -> None:
    frame = rows()
    frame = frame[frame.model == "a"]
    paths = fg.make_figures(frame, sm.summarize(frame, resamples=10), tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"{s}.{e}" for s in STEMS for e in ("png", "svg"))
    assert "No model compared with a" in (tmp_path / "bootstrap_forest.svg").read_text()


def test_levels_decide_fast_p_files(tmp_path: Path) -> None:
    frame = rows()
    frame = frame[frame.level == 2]
    paths = fg.make_figures(frame, sm.summarize(frame, resamples=10), tmp_path)
    assert sorted(p.stem for p in paths if p.stem.startswith("fast_p")) == ["fast_p_level2", "fast_p_level2"]


@pytest.mark.parametrize("via", ["figures", "summarize"])
@pytest.mark.integration
def test_cli(tmp_path: Path, via: str) -> None:
    frame = rows()
    rows_path = tmp_path / "rows.parquet"
    frame.to_parquet(rows_path, index=False)
    out_dir = tmp_path / "figs"
    if via == "figures":
        summary_path = tmp_path / "summary.json"
        summary_path.write_text(sm.dumps_summary(sm.summarize(frame, reference="a", resamples=500)))
        cmd = ["-m", "workflow_scripts", "figures", "--rows", str(rows_path), "--summary", str(summary_path),
               "--out-dir", str(out_dir)]
    else:
        cmd = ["-m", "workflow_scripts", "summarize", "--rows", str(rows_path), "--out", str(tmp_path / "s.json"),
               "--reference", "a", "--resamples", "500", "--figures-dir", str(out_dir)]
    subprocess.run([sys.executable, *cmd], cwd=REPO, check=True, capture_output=True, text=True)
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(f"{s}.{e}" for s in STEMS for e in ("png", "svg"))
    # Same bytes as drawing in-process: the CLI adds nothing of its own.
    direct = draw(frame, tmp_path / "direct")
    assert all((out_dir / name).read_bytes() == data for name, data in direct.items())
    if via == "summarize":
        assert json.loads((tmp_path / "s.json").read_text())["models"]["b"]["levels"]["overall"]["n"] == 10


# ------------------------------------------------------------------------ what a reader needs to trust a figure

CPU_SETTINGS = {"device": "cpu", "correctness_trials": 5, "atol": 1e-4, "rtol": 1e-4, "timing_trials": 6, "warmup": 1}
CUDA_SETTINGS = {**CPU_SETTINGS, "device": "cuda", "timing_trials": 100, "warmup": 3}


def summary_with_settings(frame: pd.DataFrame, evaluation: dict[str, Any] | None) -> dict[str, Any]:
    """The summary as the workflow's summary stage writes it: the run's settings in benchmark.settings."""
    reference = str(frame["model"].iloc[0])
    settings = {"evaluation": evaluation, "bootstrap": {"reference": reference, "resamples": 200, "seed": 42}}
    context = parse_context({"benchmark": {"settings": settings}} if evaluation is not None else None)
    return sm.summarize(frame, reference=reference, resamples=200, context=context)


def drawn(frame: pd.DataFrame, summary: dict[str, Any]) -> dict[str, Any]:
    with matplotlib.rc_context(fg.RC):
        return fg.draw_figures(frame, summary)


def all_text(fig: Any) -> str:
    """Every piece of text a reader sees: suptitle, figure texts (the footnote), panel titles and axis labels."""
    parts = [fig.get_suptitle(), *(t.get_text() for t in fig.texts)]
    for ax in fig.axes:
        parts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
    return "\n".join(parts).replace("\n", " ")


def spread_rows(low: float, high: float) -> pd.DataFrame:
    """rows() with the correct answers' eager speedups spread geometrically from ``low`` to ``high``."""
    frame = rows()
    correct = frame["correct"].to_numpy()
    speeds = np.geomspace(low, high, int(correct.sum()))
    frame.loc[correct, "speedup_eager"] = speeds
    frame.loc[correct, "speedup_compile"] = speeds / 2
    return frame


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_fast_p_axis_is_logarithmic_when_speedups_span_decades() -> None:
    # Interpreter timings on the CPU: answers 1000x slower than eager, up to a few times faster.
    frame = spread_rows(0.001, 4.0)
    figures = drawn(frame, summary_with_settings(frame, CPU_SETTINGS))
    for level in (1, 2):
        for ax in figures[f"fast_p_level{level}"].axes:
            assert ax.get_xscale() == "log"
            low, high = ax.get_xlim()
            assert low <= 0.001 < 4.0 < high  # every speedup is on the axis
            assert "log scale" in ax.get_xlabel()
    # On the log axis the curves still start at the share of correct, timed answers (nothing hides left of it).
    level1 = frame[(frame.level == 1) & (frame.model == "b")]
    start = 100 * level1["correct"].sum() / len(level1)
    eager_panel = figures["fast_p_level1"].axes[0]
    line = next(ln for ln in eager_panel.get_lines() if ln.get_label() == "b")
    assert line.get_ydata()[0] == pytest.approx(start)


def test_fast_p_axis_stays_linear_within_a_decade_and_reaches_the_fastest() -> None:
    frame = spread_rows(1.0, 4.6)  # with the compile speedups (half) less than a decade: linear from 0, past 4.6
    figures = drawn(frame, summary_with_settings(frame, CUDA_SETTINGS))
    for ax in figures["fast_p_level1"].axes:
        assert ax.get_xscale() == "linear"
        low, high = ax.get_xlim()
        assert low == 0.0 and high > 4.6


def test_speedup_axis_grid_holds_every_speedup_and_threshold() -> None:
    frame = spread_rows(0.001, 40.0)
    outcomes = sm.outcomes_by_model(sm.normalize_rows(frame))
    axis = fg.speedup_axis(outcomes)
    observed = pd.concat([frame.loc[frame.correct, "speedup_eager"], frame.loc[frame.correct, "speedup_compile"]])
    assert axis.scale == "log"
    assert set(observed.round(12)) <= set(np.round(axis.grid, 12))  # exact steps: each speedup is a grid point
    assert {1.0, 1.5, 2.0} <= set(axis.grid)
    assert axis.limits == (0.0001, 100.0)  # whole decades around 0.0005 .. 40


def test_strategy_counts_have_integer_ticks() -> None:
    frame = rows()  # at most 4 fast answers per model and level: matplotlib's default ticks would be 0.5 apart
    figures = drawn(frame, summary_with_settings(frame, CPU_SETTINGS))
    for ax in figures["level2_strategy"].axes:
        low, high = ax.get_ylim()
        ticks = [t for t in ax.get_yticks() if low <= t <= high]
        assert len(ticks) >= 2
        assert all(float(t).is_integer() for t in ticks), ticks


def test_every_figure_states_n_protocol_and_cpu_interpreter_timing() -> None:
    frame = rows().assign(timing_mode="cpu_wall_interpreter")
    figures = drawn(frame, summary_with_settings(frame, CPU_SETTINGS))
    assert sorted(figures) == sorted(STEMS)
    for stem, fig in figures.items():
        text = all_text(fig)
        assert "n = 10 problems (level 1: 6, level 2: 4), 3 models" in text, stem
        assert "5 seeded inputs, atol = 0.0001, rtol = 0.0001" in text, stem
        assert "Triton's interpreter" in text and "say nothing about GPU speed" in text, stem
        assert "mean of 6 timed calls after 1 warm-up" in text, stem
    assert "n = 6 problems, 3 models" in all_text(figures["fast_p_level1"])
    assert "n = 4 problems, 3 models" in all_text(figures["fast_p_level2"])
    assert "200 paired resamples of the problems, seed 42" in all_text(figures["bootstrap_forest"])


def test_figures_state_cuda_event_timing() -> None:
    frame = rows().assign(timing_mode="cuda_events")
    figures = drawn(frame, summary_with_settings(frame, CUDA_SETTINGS))
    for stem, fig in figures.items():
        text = all_text(fig)
        assert "CUDA events on the GPU" in text and "mean of 100 timed calls after 3 warm-up" in text, stem
        assert "interpreter" not in text, stem


def test_timing_mode_is_what_the_rows_recorded() -> None:
    frame = rows()
    summary = summary_with_settings(frame, CPU_SETTINGS)
    # No timing_mode column (rows from elsewhere): the configured device decides.
    assert fg.run_facts(frame, summary).timing_modes == ("cpu_wall_interpreter",)
    # The evaluations' own record wins over the configuration.
    assert fg.run_facts(frame.assign(timing_mode="cuda_events"), summary).timing_modes == ("cuda_events",)
    mixed = frame.assign(timing_mode=["cuda_events", "cpu_wall_interpreter"] * (len(frame) // 2))
    assert "MIXED modes" in fg.run_facts(mixed, summary).timing_text()
    # Neither rows nor settings say: the figure says so rather than guess.
    bare = fg.run_facts(frame, sm.summarize(frame, reference="a", resamples=10))
    assert bare.timing_text() == "Timing mode: not recorded"
    assert bare.correctness_text() == "Correctness protocol: not recorded in the summary"


def study_rows(seed: int = 0) -> pd.DataFrame:
    """Study-sized synthetic rows: 15 models x 200 problems (2 levels), speedups log-normal over decades."""
    rng = np.random.default_rng(seed)
    out = []
    for m in range(15):
        for level in (1, 2):
            for pid in range(1, 101):
                correct = bool(rng.random() < 0.2 + 0.04 * m)
                speed = float(np.exp(rng.normal(-0.7, 1.3))) if correct else None
                out.append({
                    "model": f"model_{m:02d}", "level": level, "problem_id": pid, "problem": f"P{pid}",
                    "compiled": correct or bool(rng.random() < 0.8), "correct": correct, "speedup_eager": speed,
                    "speedup_compile": None if speed is None else speed * float(np.exp(rng.normal(-0.3, 0.8))),
                    "keeps_torch_op": bool(rng.random() < 0.4), "completion_tokens": None,
                    "timing_mode": "cuda_events",
                })
    return pd.DataFrame(out)


def test_study_sized_figures(tmp_path: Path) -> None:
    frame = study_rows()
    summary = summary_with_settings(frame, CUDA_SETTINGS)
    figures = drawn(frame, summary)
    fast_p = figures["fast_p_level1"]
    assert all(ax.get_xscale() == "log" for ax in fast_p.axes)
    assert len(fast_p.legends[0].get_texts()) == 15
    assert "n = 100 problems, 15 models" in all_text(fast_p)
    assert "n = 200 problems (level 1: 100, level 2: 100), 15 models" in all_text(figures["correct_compiled"])
    for ax in figures["level2_strategy"].axes:
        assert all(float(t).is_integer() for t in ax.get_yticks())
    # They save, and the layout fits the 15-model legend and the footnote (tight_layout warns when it cannot).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(fg.make_figures(frame, summary, tmp_path)) == 2 * len(STEMS)
