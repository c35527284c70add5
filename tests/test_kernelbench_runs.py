"""KernelBench run folders (generation/kernelbench_runs.py) and several samples per problem (scoring/samples.py):
imported as one cached model per sample, judged through ``snakemake``, pass@k in the summary; our answers exported in
KernelBench's layout."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from cli import snakemake

from workflow_scripts.analysis.extract import extract_code
from workflow_scripts.devtools.workspace import copy_workflow
from workflow_scripts.generation.kernelbench_runs import export_run, import_run, run_file_name
from workflow_scripts.scoring.samples import pass_at_k

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "demo" / "completions"
PROBLEMS = [1, 2]  # level 1 of the demo suite
SAMPLES = ["sft_like", "expert"]  # sample 0 is correct on problem 1 only (mismatch on 2); sample 1 on both
EXPECTED = json.loads((ROOT / "demo" / "expected_statuses.json").read_text())["cpu"]


def kernelbench_run(folder: Path) -> Path:
    """A run folder as KernelBench writes it: bare code, its file names, two samples per problem."""
    folder.mkdir(parents=True)
    for sample, model in enumerate(SAMPLES):
        for problem_id in PROBLEMS:
            code = extract_code((DEMO / model / f"level1_{problem_id}.txt").read_text())
            assert code is not None
            (folder / run_file_name(1, problem_id, sample)).write_text(code)
    return folder


def test_pass_at_k_is_the_unbiased_estimator() -> None:
    assert pass_at_k(2, 1, 1) == 0.5 and pass_at_k(2, 1, 2) == 1.0 and pass_at_k(3, 0, 2) == 0.0
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - (7 * 6 * 5 * 4 * 3) / (10 * 9 * 8 * 7 * 6))
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def test_a_run_folder_becomes_one_fenced_completions_folder_per_sample(tmp_path: Path) -> None:
    run = kernelbench_run(tmp_path / "runs" / "r1")
    (run / "notes.txt").write_text("not a generation")
    report = import_run(run, tmp_path / "imported", "r1")
    assert sorted(report.folders) == [0, 1] and report.skipped == ["notes.txt"]
    assert report.folders[1] == tmp_path / "imported" / "r1_s1"
    for sample in range(len(SAMPLES)):
        text = (report.folders[sample] / "level1_2.txt").read_text()
        assert extract_code(text) == (run / run_file_name(1, 2, sample)).read_text().rstrip()
    with pytest.raises(FileExistsError):
        import_run(run, tmp_path / "imported", "r1")  # never mixed with an earlier import


def test_answers_are_exported_in_kernelbench_layout(tmp_path: Path) -> None:
    answers = tmp_path / "answers.parquet"
    pd.DataFrame({"level": [1, 1], "problem_id": [1, 2], "code": ["class ModelNew: ...\n", None]}).to_parquet(answers)
    written = export_run(answers, tmp_path / "run", sample=3)
    assert written == [tmp_path / "run" / "level_1_problem_1_sample_3_kernel.py"]  # no file for an answer without code
    assert written[0].read_text() == "class ModelNew: ...\n"


@pytest.mark.integration
def test_a_kernelbench_run_goes_through_the_pipeline_with_its_verdicts_and_pass_at_k(tmp_path: Path) -> None:
    work = copy_workflow(tmp_path / "work")
    run = kernelbench_run(tmp_path / "runs" / "r1")
    imported = subprocess.run([sys.executable, "-m", "workflow_scripts", "kernelbench", "import-run", "--run", str(run),
                               "--out", str(work / "imported"), "--name", "r1"], cwd=ROOT, capture_output=True,
                              text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    settings = json.loads(imported.stdout)  # what to add to the configuration, as the tool prints it
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["suite"].update(levels=[1], only={"1": PROBLEMS})
    config["models"] = settings["models"]
    config["summary"].update(reference="r1_s0", resamples=1000, **settings["summary"])
    config["baselines"]["compile_mode"] = "no-compile-in-tests"  # eager numbers are enough here (conftest small_run)
    (work / "run.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    done = snakemake(work, "--cores", "2", "--configfile", "run.yaml", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    results = work / config["results_dir"]
    rows = pd.read_parquet(results / "evaluations.parquet").set_index(["model", "problem_id"])
    for sample, model in enumerate(SAMPLES):  # each sample judged as the demo's own completions are
        for problem_id in PROBLEMS:
            assert rows.loc[(f"r1_s{sample}", problem_id), "status"] == EXPECTED[model][f"level1_{problem_id}"]
    block = json.loads((results / "summary.json").read_text())["samples"]["r1"]
    correct = [int(rows.loc[(m, p), "correct"]) for p in PROBLEMS for m in ("r1_s0", "r1_s1")]
    counts = [correct[2 * i] + correct[2 * i + 1] for i in range(len(PROBLEMS))]
    assert counts == [2, 1]
    assert block["models"] == ["r1_s0", "r1_s1"] and block["n"] == 2 and block["problems"] == 2
    assert block["pass_at_k"] == {"1": 0.75, "2": 1.0}
    def fast(model: str, problem_id: int) -> bool:
        row = rows.loc[(model, problem_id)]
        return bool(row["correct"]) and float(row["speedup_eager"]) > 1.0

    assert block["best_of_k_eager_fast_1"] == {
        "1": sum(fast("r1_s0", p) for p in PROBLEMS), "2": sum(fast("r1_s0", p) or fast("r1_s1", p) for p in PROBLEMS)}
    assert block["best_of_k_compile_fast_1"] == {"1": 0, "2": 0}  # no compiled baseline in this run
    assert "Run r1, 2 samples per problem (r1_s0, r1_s1): pass@1 75.0%, pass@2 100.0%." in (
        results / "summary.md").read_text()
