"""The explain tool's parts that need no pipeline run: the rows behind a summary number, recomputed; column
descriptions; the configuration lookup and its errors. The whole chain of one row is checked on the demo run in
tests/test_pipeline_e2e.py (test_explain_*)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from workflow_scripts.core.io import write_parquet
from workflow_scripts.scoring import summary as sm
from workflow_scripts.tools import explain


def row(model: str, level: int, pid: int, *, correct: bool = True, se: float | None = None,
        tokens: int | None = None, keeps: bool = False) -> dict[str, Any]:
    return {"model": model, "level": level, "problem_id": pid, "problem": f"P{level}_{pid}", "compiled": True,
            "correct": correct, "speedup_eager": se, "speedup_compile": se, "keeps_torch_op": keeps,
            "completion_tokens": tokens}


def results_folder(tmp_path: Path) -> Path:
    """The rows, summary.json and levels.parquet of two models, as the pipeline writes them."""
    rows = pd.DataFrame([
        row("m", 1, 1, se=2.0, tokens=10), row("m", 1, 2, se=0.5, tokens=30), row("m", 1, 3, correct=False),
        row("m", 2, 1, se=12.0, keeps=True, tokens=100), row("m", 2, 2, se=1.5, keeps=True),
        row("ref", 1, 1, se=1.1), row("ref", 1, 2, correct=False), row("ref", 1, 3, se=3.0),
        row("ref", 2, 1, correct=False), row("ref", 2, 2, se=1.2),
    ])
    results = tmp_path / "results"
    results.mkdir()
    rows.to_parquet(results / "evaluations.parquet")
    summary = sm.summarize(rows, reference="ref", resamples=50)
    sm.write_outputs(summary, results / "summary.json", rows)
    return results


def run(tmp_path: Path, capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = explain.main(["--results", str(tmp_path / "results"), "--store", str(tmp_path / "store"), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("metric", "level", "expected", "value"), [
    ("correct", "1", [(1, 1), (1, 2)], 2),
    ("eager_fast_1", "overall", [(1, 1), (2, 1), (2, 2)], 3),
    ("flags", "2", [(2, 1)], 1),  # speedup 12 > the flag limit
    ("flagged", "2", [(2, 1)], 1),  # levels.parquet's name for the same count
    ("fast_unflagged_hybrid", "2", [(2, 2)], 1),
    ("correct_rate", "1", [(1, 1), (1, 2)], 2 / 3),
    ("mean_completion_tokens", "overall", [(1, 1), (1, 2), (2, 1)], 140 / 3),
    ("mean_completion_tokens", "1", [(1, 1), (1, 2)], 20.0),
])
def test_summary_number_lists_its_rows_and_recomputes_it(tmp_path: Path, capsys: pytest.CaptureFixture,
                                                         metric: str, level: str, expected: list, value: float) -> None:
    results_folder(tmp_path)
    code, out, _ = run(tmp_path, capsys, "--summary", "m", metric, level, "--json")
    assert code == 0, out
    (section,) = json.loads(out)["sections"]
    assert [(r["level"], r["problem_id"]) for r in section["facts"]["rows"]] == expected
    assert section["facts"]["recomputed from the rows"] == pytest.approx(value)
    assert section["checks"][0]["ok"] is True
    first = section["facts"]["rows"][0]
    assert first["explain"] == f"python -m workflow_scripts explain m {expected[0][0]} {expected[0][1]}"


def test_a_summary_number_that_disagrees_with_its_rows_fails(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = results_folder(tmp_path)
    summary = json.loads((results / "summary.json").read_text())
    summary["models"]["m"]["levels"]["overall"]["correct"] = 5
    (results / "summary.json").write_text(json.dumps(summary))
    code, out, _ = run(tmp_path, capsys, "--summary", "m", "correct")
    assert code == 1
    assert "published 5, rows give 4: the summary is stale" in out and "[FAIL]" in out


def test_members_count_to_the_published_numbers(tmp_path: Path) -> None:
    """The membership explain lists is the summary's own definition: summed, it gives every published count."""
    rows = pd.read_parquet(results_folder(tmp_path) / "evaluations.parquet")
    summary = sm.summarize(rows, reference="ref", resamples=10)
    for model in ("m", "ref"):
        members = sm.count_members(rows, model)
        for level, counts in summary["models"][model]["levels"].items():
            chosen = members if level == "overall" else members[members["level"] == int(level)]
            assert {name: int(chosen[name].sum()) for name in sm.level_fields()} == counts
        for level, counts in summary["level2_strategy"][model].items():
            chosen = members[members["level"] == int(level)]
            assert {name: int(chosen[name].sum()) for name in sm.STRATEGY_FIELDS} == counts


def test_what_does_not_exist_is_named(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results_folder(tmp_path)
    assert run(tmp_path, capsys, "--summary", "nobody", "correct")[2].startswith("error: ")
    code, _, err = run(tmp_path, capsys, "--summary", "m", "speed")
    assert code == 2 and "unknown metric 'speed'" in err
    code, _, err = run(tmp_path, capsys, "--summary", "m", "correct", "7")
    assert code == 2 and "no level '7'" in err
    code, _, err = run(tmp_path, capsys, "m", "1", "99")
    assert code == 2 and "no row for m level 1 problem 99" in err
    empty = tmp_path / "empty"
    code = explain.main(["--results", str(empty), "--store", str(empty / ".store"), "m", "1", "1"])
    assert code == 2 and f"{empty}/evaluations.parquet does not exist" in capsys.readouterr().err
    code = explain.main(["--configfile", str(tmp_path / "no.yaml"), "m", "1", "1"])
    assert code == 2 and "no.yaml does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: a usage error
        explain.main(["--results", str(empty), "m", "1"])


def test_configuration_files_merge_like_snakemakes(tmp_path: Path) -> None:
    base, overlay = tmp_path / "base.yaml", tmp_path / "overlay.yaml"
    base.write_text("results_dir: results/study\nstore: results/study/.store\nevaluation: {device: cuda, seed: 1}\n")
    overlay.write_text("results_dir: results/exact\nevaluation: {seed: 2}\n")
    workflow = explain.load_workflow([base, overlay], None, None)
    assert workflow.layout.root == "results/exact" and str(workflow.store.root) == "results/study/.store"
    assert workflow.config["evaluation"] == {"device": "cuda", "seed": 2}
    assert explain.load_workflow([base], tmp_path / "r", None).layout.root == str(tmp_path / "r")


def test_columns_of_a_parquet_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    described, plain = tmp_path / "flags.parquet", tmp_path / "plain.parquet"
    frame = pd.DataFrame({"model": ["m"], "kind": ["flag"], "name": ["inputs_mutated"], "count": [1]})
    write_parquet(described, frame, "flags")
    assert explain.main(["--columns", str(described)]) == 0
    out = capsys.readouterr().out
    assert "count: rows of the model carrying that flag or status [count]" in out
    frame.to_parquet(plain)  # written without the definitions
    assert explain.main(["--columns", str(plain)]) == 1
    assert "model: (no description)" in capsys.readouterr().out


def test_the_row_says_what_its_status_means(tmp_path: Path) -> None:
    """core/statuses.py describes every status once; explain's row section shows the row's."""
    from workflow_scripts.core.layout import ResultsLayout
    from workflow_scripts.core.statuses import DESCRIPTIONS, Status
    from workflow_scripts.core.store import Store

    workflow = explain.Workflow(ResultsLayout(str(tmp_path / "results")), Store(tmp_path / "store"), {})
    assert set(DESCRIPTIONS) == set(Status)
    section = explain.row_section(workflow, {"model": "m", "level": 1, "problem_id": 1, "status": "mismatch"})
    assert section.facts["what the status means"] == DESCRIPTIONS[Status.MISMATCH]
    assert "beyond atol/rtol" in section.facts["what the status means"]
