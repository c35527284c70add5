"""The evaluate stage's answer locks (stages/evaluate.py ``_answer_locks``): a job waits for its own answers only, and
judges along the companions nobody else is judging. Real ``flock`` locks, held by other handles (another job)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from workflow_scripts.core.io import locked_file
from workflow_scripts.evaluation.config import EvalConfig
from workflow_scripts.stages import evaluate
from workflow_scripts.stages.evaluate import ANSWER_LOCK_WAIT, Answer, Params, logged_lock_waits

PARAMS = Params(level=2, problem_id=7, evaluation={})


def _answer(model: str, code: str) -> Answer:
    return Answer(model, {}, Path(f"{model}.json"), EvalConfig(), {"problem": "p", "code": code, "environment": "e"})


def _lock_of(lock_dir: Path, answer: Answer) -> Path:
    return evaluate._answer_lock_path(lock_dir, PARAMS, answer)


def _hold_for(path: Path, seconds: float, holding: threading.Event) -> threading.Thread:
    """Another job holding ``path`` for ``seconds`` (a handle of its own: flock locks are per open file)."""
    def hold() -> None:
        with locked_file(path):
            holding.set()
            time.sleep(seconds)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert holding.wait(5)
    return thread


def test_a_job_waits_for_its_own_answer_held_by_another_job(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    own = _answer("a", "sha-a")
    holder = _hold_for(_lock_of(tmp_path, own), 0.5, threading.Event())
    started = time.monotonic()
    with evaluate._answer_locks(tmp_path, PARAMS, [own], []) as companions:
        waited = time.monotonic() - started
    holder.join()
    assert companions == [] and waited >= 0.4
    assert logged_lock_waits(capsys.readouterr().out) == [pytest.approx(waited, abs=0.05)]


def test_a_companion_another_job_is_judging_is_left_to_it_without_waiting(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # s34: a model's table came after the problem's first job began; its own job waited 206 s in all for that job.
    own, busy, free = _answer("calibration", "sha-c"), _answer("a", "sha-a"), _answer("b", "sha-b")
    holder = _hold_for(_lock_of(tmp_path, busy), 2.0, threading.Event())
    started = time.monotonic()
    with evaluate._answer_locks(tmp_path, PARAMS, [own], [busy, free]) as companions:
        assert time.monotonic() - started < 1.0
        assert [answer.model for answer in companions] == ["b"]
        # While held, the free companion's lock is this job's: a third job cannot take it.
        with locked_file(_lock_of(tmp_path, free), wait=False) as taken:
            assert not taken
    holder.join()
    out = capsys.readouterr().out
    assert "a's answer is being judged by another job" in out and logged_lock_waits(out)[0] < 1.0
    with locked_file(_lock_of(tmp_path, free), wait=False) as taken:
        assert taken  # released with the job


def test_a_companion_equal_to_the_job_s_own_answer_is_judged_along(tmp_path: Path) -> None:
    # Two models with the same answer share its lock (and its store key): the job holds it already.
    own, same = _answer("a", "sha-x"), _answer("b", "sha-x")
    assert _lock_of(tmp_path, own) == _lock_of(tmp_path, same)
    with evaluate._answer_locks(tmp_path, PARAMS, [own], [same]) as companions:
        assert companions == [same]


def test_two_jobs_whose_answers_cross_never_wait_on_each_other(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Each job's companion is the other's own answer; both hold their own before looking at companions, and neither
    # lets go before both have looked (two barriers): each judges its own, neither waits for the other.
    a, b = _answer("a", "sha-a"), _answer("b", "sha-b")
    both_own_held, both_looked, judged = threading.Barrier(2, timeout=5), threading.Barrier(2, timeout=5), {}

    def lock(path: Path, wait: bool = True):
        if not wait:
            both_own_held.wait()
        return locked_file(path, wait)

    monkeypatch.setattr(evaluate, "locked_file", lock)

    def job(own: Answer, companion: Answer) -> None:
        with evaluate._answer_locks(tmp_path, PARAMS, [own], [companion]) as companions:
            judged[own.model] = [answer.model for answer in companions]
            both_looked.wait()

    # Daemons: a job that waited for the other's lock (a deadlock) must not keep the test process alive.
    jobs = [threading.Thread(target=job, args=pair, daemon=True) for pair in ((a, b), (b, a))]
    for thread in jobs:
        thread.start()
    for thread in jobs:
        thread.join(10)
    assert not both_own_held.broken and not both_looked.broken and judged == {"a": [], "b": []}


def test_the_wait_line_is_the_one_the_bench_reads() -> None:
    assert logged_lock_waits(f"x\n{ANSWER_LOCK_WAIT}: 3.25\n") == [3.25]
