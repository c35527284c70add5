"""End-to-end: the Snakemake CLI in a subprocess on a temporary copy of the workflow and the demo suite.

One full demo run is shared by the tests of this module (it is the expensive part); the rerun, change and kill
tests then work on that copy or on a small copy of their own.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from workflow_scripts.devtools.workspace import copy_workflow

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow



def snakemake(cwd: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def store_events(work: Path) -> list[dict]:
    path = work / "results" / ".store" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def evaluate_computations(work: Path) -> int:
    return sum(1 for e in store_events(work) if e["stage"] == "evaluate" and e["event"] == "computed")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = copy_workflow(tmp_path_factory.mktemp("demo"))
    done = snakemake(work, "--cores", "2")
    assert done.returncode == 0, done.stderr[-5000:]
    return work


@pytest.fixture(scope="module")
def rows(demo: Path) -> pd.DataFrame:
    return pd.read_parquet(demo / "results" / "evaluations.parquet")


def demo_config() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def test_a_row_for_every_model_and_problem(rows: pd.DataFrame) -> None:
    config = demo_config()
    problems = sorted((ROOT / "demo/suite/KernelBench").glob("level*/*.py"))
    assert len(rows) == len(config["models"]) * len(problems)
    assert set(rows["model"]) == set(config["models"])
    assert not rows.duplicated(["model", "level", "problem_id"]).any()
    assert rows["status"].notna().all()
    for column in ["completion_sha256", "problem_sha256"]:
        assert column in rows


def test_expert_and_calibration_are_correct(rows: pd.DataFrame) -> None:
    expert = rows[rows["model"] == "expert"]
    assert expert["correct"].all(), expert[["problem", "status", "error"]].to_string()
    assert (expert["keeps_torch_op"] == False).all()  # noqa: E712 - pandas nullable boolean
    calibration = rows[rows["model"] == "calibration"]
    assert calibration["correct"].all(), calibration[["problem", "status", "error"]].to_string()
    assert calibration["speedup_eager"].notna().all()


def test_weak_model_fails_in_every_way(rows: pd.DataFrame) -> None:
    weak = rows[rows["model"] == "weak"]
    expected = {
        "missing_completion", "no_code", "load_error", "no_model_new", "init_error", "runtime_error", "timeout",
        "crash", "shape_mismatch", "mismatch", "no_triton_launch",
    }
    assert expected <= set(weak["status"]), sorted(set(weak["status"]))
    assert not weak["correct"].any()
    assert (weak.loc[weak["status"].isin(["load_error", "no_model_new", "no_code", "missing_completion"]), "compiled"] == False).all()  # noqa: E712
    assert (weak.loc[weak["status"].isin(["runtime_error", "mismatch", "timeout", "crash"]), "compiled"] == True).all()  # noqa: E712


def test_hybrid_keeps_torch_ops_and_is_correct(rows: pd.DataFrame) -> None:
    hybrid = rows[rows["model"] == "hybrid"]
    assert hybrid["keeps_torch_op"].all()
    assert hybrid["correct"].all(), hybrid[["problem", "status", "error"]].to_string()


def test_summary_and_figures(demo: Path) -> None:
    summary = json.loads((demo / "results/summary.json").read_text())
    assert set(summary["models"]) == set(demo_config()["models"])
    assert "paired_bootstrap_vs_sft_like" in summary
    assert summary["benchmark"]["runtime"]["device"] == "cpu"
    for name in ["fast_p_level1", "bootstrap_forest", "correct_compiled"]:
        assert (demo / f"results/figures/{name}.png").stat().st_size > 1000
    assert "expert" in (demo / "results/summary.md").read_text()


def test_identical_answers_are_evaluated_once(demo: Path, rows: pd.DataFrame) -> None:
    # What determines an evaluation: the problem, the code (or, without code, why there is none) and the flags.
    answer_key = rows.assign(code=rows["code_sha256"].fillna(rows["status"]))
    unique_answers = answer_key.drop_duplicates(["problem_sha256", "code", "require_triton"])
    assert len(unique_answers) < len(rows)  # the twin shares answers with the expert
    assert evaluate_computations(demo) == len(unique_answers)


def test_a_job_judges_the_other_models_answers_along(demo: Path) -> None:
    # One job per (model, problem), but a job evaluates every model's answer whose table is already written against
    # one reference side; the other models' jobs then find their results in the store.
    results = [json.loads(p.read_text()) for p in (demo / "results/evaluations").glob("*/*.json")]
    together = [r["phases_s"].get("answers_judged_together", 0) for r in results if r.get("phases_s")]
    assert max(together) >= 2
    reused = [e for e in store_events(demo) if e["stage"] == "evaluate" and e["event"] == "reused"]
    assert reused  # the jobs whose answers were judged along


def test_second_run_does_no_work_and_store_verifies(demo: Path) -> None:
    dry = snakemake(demo, "-n")
    assert dry.returncode == 0
    assert "Nothing to be done" in dry.stdout + dry.stderr
    verify = snakemake(demo, "--cores", "1", "verify_store")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert json.loads((demo / "results/store_verify.json").read_text())["ok"] is True


def test_changing_one_completion_reevaluates_only_that_answer(demo: Path) -> None:
    before = evaluate_computations(demo)
    completion = demo / "demo/completions/sft_like/level1_1.txt"
    text = completion.read_text()
    fence = text.index("```python\n") + len("```python\n")
    completion.write_text(text[:fence] + "# revised answer\n" + text[fence:])
    done = snakemake(demo, "--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert evaluate_computations(demo) == before + 1
    summary_runs = [e for e in store_events(demo) if e["stage"] == "summary"]
    assert summary_runs[-1]["event"] in {"computed", "reused"}


def test_changing_only_the_bootstrap_reruns_only_the_summary(demo: Path) -> None:
    config = demo_config()
    config["summary"]["resamples"] = 2000
    (demo / "bootstrap.yaml").write_text(yaml.safe_dump(config, sort_keys=False))  # keep the model order
    dry = snakemake(demo, "-n", "--configfile", "bootstrap.yaml", "--quiet", "rules")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "summary" in dry.stdout
    # The job table of `--quiet rules`: one "<rule> <count>" line per rule that would run, then "total".
    planned = {m.group(1) for m in re.finditer(r"^(\w+)\s+(\d+)$", dry.stdout, re.MULTILINE)} - {"total"}
    assert planned == {"summary", "all"}, dry.stdout


def test_killed_run_completes_on_rerun_with_clean_store(tmp_path: Path) -> None:
    work = copy_workflow(tmp_path / "killed")
    config = demo_config()
    config["suite"]["only"] = {"1": [1, 2, 3], "2": [1]}
    config["models"] = {k: config["models"][k] for k in ("expert", "sft_like", "weak")}
    (work / "small.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    process = subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--configfile", "small.yaml"],
        cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.time() + 600
    evaluations = work / "results" / "evaluations"
    while time.time() < deadline and not (evaluations.exists() and any(evaluations.rglob("*.json"))):
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)  # the whole group: Snakemake and the jobs it started
    process.wait()
    # A killed Snakemake leaves its lock behind; --unlock is the documented first step after a crash.
    assert snakemake(work, "--unlock", "--configfile", "small.yaml").returncode == 0
    done = snakemake(work, "--cores", "2", "--configfile", "small.yaml")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(work / "results/evaluations.parquet")
    assert len(rows) == 3 * 4
    verify = snakemake(work, "verify_store", "--cores", "1", "--configfile", "small.yaml")  # --configfile takes several values
    assert verify.returncode == 0, verify.stdout + verify.stderr


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: c.update(colour="blue"), "colour"),
        (lambda c: c["evaluation"].update(timeout_s="soon"), "timeout_s"),
        (lambda c: c["models"]["expert"].update(kind="magic"), "magic"),
        (lambda c: c["models"]["expert"].pop("completions"), "completions"),
        (lambda c: c["suite"].update(path="no/such/suite"), "no/such/suite"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, mutate, message: str) -> None:
    work = copy_workflow(tmp_path / "bad")
    config = demo_config()
    mutate(config)
    (work / "bad.yaml").write_text(yaml.safe_dump(config))
    done = snakemake(work, "-n", "--configfile", "bad.yaml", timeout=120)
    assert done.returncode != 0
    assert message in done.stdout + done.stderr


def test_misnamed_cached_completion_stops_the_run_naming_the_file(tmp_path: Path) -> None:
    work = copy_workflow(tmp_path / "misnamed")
    folder = tmp_path / "answers"
    folder.mkdir()
    (folder / "level1_1.txt").write_text("```python\nx = 1\n```\n")
    (folder / "1_2.txt").write_text("```python\nx = 2\n```\n")  # KernelBench's file stem, not level1_2.txt
    config = demo_config()
    config["models"]["expert"]["completions"] = str(folder)
    (work / "bad.yaml").write_text(yaml.safe_dump(config))
    done = snakemake(work, "-n", "--configfile", "bad.yaml", timeout=120)
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "model expert" in output and "1_2.txt is not named level<L>_<id>.txt" in output


def test_targeting_one_model_plans_only_its_branch(tmp_path: Path) -> None:
    work = copy_workflow(tmp_path / "one")
    dry = snakemake(work, "results/models/weak.parquet", "-n", "--quiet", "rules", timeout=120)
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", dry.stdout, re.MULTILINE)}
    problems = len(list((ROOT / "demo/suite/KernelBench").glob("level*/*.py")))
    assert planned["completions_replay"] == 1 and planned["extract"] == 1 and planned["static_analysis"] == 1
    assert planned["evaluate"] == problems and planned["baseline"] == problems
    assert "collect" not in planned and "summary" not in planned


def test_study_config_plans_the_fetch_on_a_fresh_clone(tmp_path: Path) -> None:
    # No KernelBench checkout yet and fetch: true: the first run fetches it at the pinned revision.
    work = copy_workflow(tmp_path / "study")
    dry = snakemake(work, "-n", "--configfile", "config/study.yaml", timeout=120)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "fetch_kernelbench" in dry.stdout + dry.stderr
