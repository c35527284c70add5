"""The evaluate stage's answer locks (stages/evaluate.py ``_answer_locks``): a job waits for its own answers only, and
judges along the companions no other job is judging. Real ``flock`` locks, held through handles of their own, as
another job's process holds them (flock locks belong to the open file, so two handles in one process conflict)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
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


def _is_free(path: Path) -> bool:
    with locked_file(path, wait=False) as taken:
        return taken


def _locks(lock_dir: Path, own: list[Answer], companions: list[Answer],
           is_stored: Callable[[Answer], bool] = lambda answer: False):
    return evaluate._answer_locks(lock_dir, PARAMS, own, lambda: companions, is_stored)


class OtherJob:
    """Another job holding ``path`` until ``release`` is called (or ``seconds`` have passed)."""

    def __init__(self, path: Path, seconds: float = 10.0) -> None:
        self.holding, self.releasing, self.released_at = threading.Event(), threading.Event(), None
        self.thread = threading.Thread(target=self._hold, args=(path, seconds), daemon=True)
        self.thread.start()
        assert self.holding.wait(5)

    def _hold(self, path: Path, seconds: float) -> None:
        with locked_file(path):
            self.holding.set()
            self.releasing.wait(seconds)
            self.released_at = time.monotonic()

    def release_after(self, seconds: float) -> None:
        threading.Timer(seconds, self.releasing.set).start()


def test_a_job_waits_for_its_own_answer_held_by_another_job(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    own = _answer("a", "sha-a")
    other = OtherJob(_lock_of(tmp_path, own))
    other.release_after(0.3)
    with _locks(tmp_path, [own], []) as companions:
        got_it_at = time.monotonic()
    other.thread.join(5)
    assert companions == [] and other.released_at is not None and got_it_at >= other.released_at
    assert len(logged_lock_waits(capsys.readouterr().out)) == 1


def test_companions_are_looked_for_after_the_job_s_own_wait(tmp_path: Path) -> None:
    # A table written (or a result stored by the holder) while the job waited counts.
    own, looked_at = _answer("a", "sha-a"), []
    other = OtherJob(_lock_of(tmp_path, own))
    other.release_after(0.3)
    with evaluate._answer_locks(tmp_path, PARAMS, [own], lambda: looked_at.append(time.monotonic()) or [],
                                lambda answer: False):
        pass
    assert other.released_at is not None and looked_at and looked_at[0] >= other.released_at


def test_a_companion_another_job_is_judging_is_left_to_it_without_waiting(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # s34: a model's table came after the problem's first job began; its own job waited 206 s in all for that job.
    own, busy, free = _answer("calibration", "sha-c"), _answer("a", "sha-a"), _answer("b", "sha-b")
    other = OtherJob(_lock_of(tmp_path, busy))
    with _locks(tmp_path, [own], [busy, free]) as companions:
        assert [answer.model for answer in companions] == ["b"]
        assert not _is_free(_lock_of(tmp_path, free)) and not _is_free(_lock_of(tmp_path, own))
    other.releasing.set()
    out = capsys.readouterr().out
    assert "a's answer is being judged by another job" in out
    assert _is_free(_lock_of(tmp_path, free)) and _is_free(_lock_of(tmp_path, own))  # let go with the job


def test_companions_equal_to_an_answer_the_job_holds_are_judged_along(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    # Equal answers share one lock (and one store key): the job holds it already, for its own or a first companion.
    own, same_as_own = _answer("a", "sha-x"), _answer("b", "sha-x")
    first, same_as_first = _answer("c", "sha-y"), _answer("d", "sha-y")
    assert _lock_of(tmp_path, own) == _lock_of(tmp_path, same_as_own)
    with _locks(tmp_path, [own], [same_as_own, first, same_as_first]) as companions:
        assert companions == [same_as_own, first, same_as_first]
    assert "being judged by another job" not in capsys.readouterr().out


def test_a_companion_stored_before_its_lock_was_taken_is_let_go_at_once(tmp_path: Path) -> None:
    # Its holder stored it and let go just before: its own job, waiting for that lock, must not wait for this job.
    own, stored = _answer("a", "sha-a"), _answer("b", "sha-b")
    with _locks(tmp_path, [own], [stored], is_stored=lambda answer: answer is stored) as companions:
        assert companions == [] and _is_free(_lock_of(tmp_path, stored))


def test_two_jobs_whose_answers_cross_never_wait_on_each_other(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Each job's companion is the other's own answer; both hold their own before looking at companions, and neither
    # lets go before both have looked (two barriers): each judges its own, neither waits for the other.
    a, b = _answer("a", "sha-a"), _answer("b", "sha-b")
    both_own_held, both_looked, judged = threading.Barrier(2, timeout=5), threading.Barrier(2, timeout=5), {}
    def after_both_own_held(path: Path, wait: bool = True):
        if not wait:  # a companion's lock: tried only once both jobs hold their own
            both_own_held.wait()
        return locked_file(path, wait)

    monkeypatch.setattr(evaluate, "locked_file", after_both_own_held)

    def job(own: Answer, companion: Answer) -> None:
        with _locks(tmp_path, [own], [companion]) as companions:
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
