"""Hostile answers (issue 33): answers see nothing but their own file, and no answer stops the evaluator or costs a
companion its verdict. What the sandbox covers (``evaluation.confinement``), through the real evaluator on the CPU at
both sandboxed levels; hostile answers judged beside honest ones in one call of ``evaluate_answers`` (the pipeline's
evaluate job makes the same call; tests/test_pipeline_e2e.py runs them through ``snakemake``); a process that took
over its channel (a stand-in child, tests/fixtures)."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from processes import computes

from workflow_scripts.core.statuses import Status
from workflow_scripts.evaluation import freezer, sandbox
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answers
from workflow_scripts.evaluation.confinement import covers, hidden_by, needed_paths, problem_sources
from workflow_scripts.evaluation.isolation import REPO_ROOT, probe_isolation
from workflow_scripts.evaluation.reference import ReferenceSide
from workflow_scripts.generation.replay import rename_reference_model

pytestmark = pytest.mark.integration

CHEATS = Path(__file__).resolve().parent / "cheats"
ADD = CHEATS / "problems" / "1_ElementwiseAdd.py"
HONEST = CHEATS / "answers" / "honest" / "add_triton.py"
OTHER_ANSWER = CHEATS / "answers" / "cheats" / "any_other_answer_on_disk.py"
HUGE_SHAPE = CHEATS / "answers" / "cheats" / "any_zero_element_huge_shape.py"

SANDBOXED = probe_isolation("auto", EvalConfig(device="cpu").limits(), "cpu").sandboxed
TOOLS = [pytest.param("bwrap", marks=pytest.mark.skipif(shutil.which("bwrap") is None,
                                                        reason="bubblewrap is not installed (make test installs it)")),
         "unshare"]


def _config(tool: str, tmp_path: Path, **kw) -> EvalConfig:
    settings = dict(device="cpu", timing_trials=3, run_static=False, isolation=tool, lock_dir=str(tmp_path / "locks"))
    return EvalConfig(**{**settings, **kw})


def test_covers_leave_the_child_only_what_it_needs(tmp_path: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="kbeval-"))
    try:
        workdir, sibling = base / "answer1", base / "answer2"
        for d in (workdir, sibling):
            d.mkdir()
        (sibling / "answer.py").write_text("class ModelNew: ...\n")
        record = [c.to_dict() for c in covers(workdir, problem_sources(ADD))]
        for hidden in (sibling / "answer.py", tmp_path, ADD, REPO_ROOT / "tests", REPO_ROOT / "results",
                       REPO_ROOT / "demo" / "completions", Path(tempfile.gettempdir()) / "answers-x" / "answer.py"):
            assert hidden_by(record, hidden), hidden
        for seen in [REPO_ROOT / "workflow_scripts" / "evaluation", workdir, Path(sys.prefix), Path(sys.executable),
                     Path("/usr/lib"), Path("/etc/passwd")]:
            assert not hidden_by(record, seen), seen
        assert all(len(c["kept"]) <= 6 for c in record)
    finally:
        shutil.rmtree(base)


def test_the_evaluating_process_s_own_pythonpath_is_not_opened_to_answers(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A run started with PYTHONPATH pointing at another checkout (its results, tests and answers) opened that whole
    folder to every answer (s21, found by the demo's hostile answer). The child's PYTHONPATH is the repository
    alone, so such an entry is no module folder of its own: covered, as any other folder."""
    other = tmp_path / "other_checkout"
    (other / "results").mkdir(parents=True)
    (other / "results" / "answer.py").write_text("class ModelNew: ...\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.syspath_prepend(str(other))
    assert other in needed_paths(workdir)  # on sys.path by other means (a .pth file): still a module folder
    monkeypatch.setenv("PYTHONPATH", str(other))
    assert other not in needed_paths(workdir)
    assert hidden_by([c.to_dict() for c in covers(workdir)], other / "results" / "answer.py")


def test_the_child_package_a_stand_in_runs_from_is_kept(tmp_path: Path) -> None:
    # A stand-in child (tests.fixtures.*, as the channel tests put in place) runs from the repository's tests/.
    assert REPO_ROOT / "tests" in needed_paths(tmp_path, package="tests")
    assert REPO_ROOT / "tests" not in needed_paths(tmp_path)


def test_problem_sources_are_the_suite_checkout_in_kernelbench_layout(tmp_path: Path) -> None:
    suite = tmp_path / "suite" / "KernelBench" / "level1"
    suite.mkdir(parents=True)
    problem = suite / "1_X.py"
    problem.write_text("")
    assert problem_sources(problem) == [tmp_path / "suite", suite]
    assert problem_sources(ADD) == [ADD.parent]


@pytest.mark.skipif(not SANDBOXED, reason="no OS sandbox on this host")
@pytest.mark.parametrize("tool", TOOLS)
def test_an_answer_finds_no_other_answer_on_disk(tool: str, tmp_path: Path) -> None:
    """The calibration model's answer (the reference renamed) is judged first; the hostile one then looks for any
    other ModelNew on disk. Before, it found the calibration's file (the host folder the evaluator copied it to, or
    where the caller wrote it) and was credited correct."""
    calibration = tmp_path / "calibration" / "answer.py"
    calibration.parent.mkdir()
    calibration.write_text(rename_reference_model(ADD.read_text()))
    calibrated, hostile = evaluate_answers(ADD, [calibration, OTHER_ANSWER], _config(tool, tmp_path),
                                           require_triton=[False, True])
    assert calibrated.status == Status.CORRECT.value, (calibrated.status, calibrated.error)
    assert hostile.status == Status.MISMATCH.value and not hostile.correct, (hostile.status, hostile.error)
    for path in (calibration, tmp_path, ADD):
        assert hidden_by(hostile.protocol["hidden_from_answer"], path), path


@pytest.mark.parametrize("tool", TOOLS)
def test_an_output_no_tensor_can_have_costs_no_companion_its_verdict(tool: str, tmp_path: Path) -> None:
    """Before, the trusted side built the (0, 2**40, 2**40) output from the area, its allocation overflowed and the
    call raised: no verdict for anyone judged with it."""
    hostile, honest = evaluate_answers(ADD, [HUGE_SHAPE, HONEST], _config(tool, tmp_path))
    assert hostile.status == Status.SHAPE_MISMATCH.value, (hostile.status, hostile.error)
    assert "(64, 128)" in hostile.error and str(2**40) in hostile.error
    assert honest.status == Status.CORRECT.value, (honest.status, honest.error)


@pytest.mark.parametrize("fixture, refusal", [
    # Its first report comes in the overhead probe's block, where no call is checked: the flood's answers to a
    # check are out of order.
    ("tests.fixtures.flooding_child", "unexpected bad_output while probing the timing loop"),
    # From the answer's own first call on, where every call is checked: only the count of reports is wrong.
    ("tests.fixtures.late_flooding_child", "more than the block's"),
])
def test_a_process_that_floods_its_reports_and_stops_reading_ends_in_its_own_verdict(
        fixture: str, refusal: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sandbox, "CHILD_MODULE", fixture)
    done: list = []
    worker = threading.Thread(target=lambda: done.extend(evaluate_answers(ADD, [HONEST], _config("auto", tmp_path))),
                              daemon=True)
    worker.start()
    worker.join(timeout=300)
    assert done, "the trusted side is still blocked on the flooding process"
    (result,) = done
    assert result.status == Status.REJECTED_RUNTIME.value and "result_channel_forged" in result.flags, (
        result.status, result.flags)
    assert refusal in result.error, result.error


def test_a_frozen_tree_runs_nothing_until_thawed() -> None:
    # A process with a busy child: both stopped (SIGSTOP cannot be caught), then both running again.
    spinner = "import os, time\nif os.fork() == 0:\n    while True: pass\nwhile True: time.sleep(0.01)\n"
    proc = subprocess.Popen([sys.executable, "-c", spinner])
    try:
        deadline = time.monotonic() + 10
        while len(psutil.Process(proc.pid).children()) < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        tree = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        assert len(tree) == 2
        with freezer.frozen(proc.pid) as frozen:
            assert frozen is not None and frozen.complete
            assert {p.status() for p in tree} == {psutil.STATUS_STOPPED}
            cpu = tree[1].cpu_times().user
            time.sleep(0.3)
            assert tree[1].cpu_times().user == cpu  # the busy child ran not at all
        assert tree[1].status() != psutil.STATUS_STOPPED and computes(tree[1].pid)
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.wait()


def test_the_freezer_lists_a_tree_as_psutil_does_from_the_tree_alone() -> None:
    """The freezer reads each thread's children file (a few reads per process of the tree, not every process of the
    host): the same processes as psutil's scan, a grandchild started by a thread included."""
    grandchild = "import subprocess, sys, threading, time\n" \
        "threading.Thread(target=lambda: subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])).start()\n" \
        "time.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', {grandchild!r}])\ntime.sleep(60)\n"])
    try:
        deadline = time.monotonic() + 20
        while len(psutil.Process(proc.pid).children(recursive=True)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        by_psutil = {proc.pid} | {p.pid for p in psutil.Process(proc.pid).children(recursive=True)}
        assert len(by_psutil) == 3
        assert set(freezer._tree_pids(proc.pid)) == by_psutil
        assert {p.pid for p in freezer._tree(proc.pid)} == by_psutil
        # A process that ended between the listing and its stop costs nothing of the rest of the tree.
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        listed = freezer._tree_pids
        try:
            freezer._tree_pids = lambda root: [*listed(root), gone.pid]
            assert {p.pid for p in freezer._tree(proc.pid)} == by_psutil
        finally:
            freezer._tree_pids = listed
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.wait()


def command_line(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""  # gone, or a zombie


def answer_processes() -> list[psutil.Process]:
    """This process's descendants, less the session's pipeline runs (conftest's demo run works in the background)."""
    found = []
    for child in psutil.Process().children():
        if "snakemake" not in command_line(child):
            with contextlib.suppress(psutil.Error):
                found += [child, *child.children(recursive=True)]
    return found


def test_the_answer_is_stopped_whenever_the_reference_is_timed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Paired timing: the trusted side times the reference between the answer's blocks. Nothing of the answer's
    process tree runs meanwhile (before, its threads could slow the reference and inflate its own speedup)."""
    seen: list[set[str]] = []
    time_block = ReferenceSide.time_block

    def recording(self, *args, **kwargs):
        answers = [p for p in answer_processes() if "workflow_scripts.evaluation.child" in command_line(p)]
        seen.append({p.status() for p in answers} if answers else {"no answer process"})
        return time_block(self, *args, **kwargs)

    monkeypatch.setattr(ReferenceSide, "time_block", recording)
    (result,) = evaluate_answers(ADD, [HONEST], _config("auto", tmp_path, timing_trials=4, paired_block=2))
    assert result.status == Status.CORRECT.value, (result.status, result.error)
    assert len(seen) == 2 and all(s == {psutil.STATUS_STOPPED} for s in seen), seen
    assert result.phases_s["answer_stopped_s"] > 0 and "answer_stop_incomplete" not in result.phases_s
