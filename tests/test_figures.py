"""Figures (workflow_scripts.scoring.figures): files, formats, determinism, and that they follow the data."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from workflow_scripts.core.layout import figure_names
from workflow_scripts.scoring import figures as fg
from workflow_scripts.scoring import summary as sm
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
