"""An evaluation job's shared GPU lease steps aside for another job's timing between the job's own GPU steps (issue
34): on a fake GPU (the locks are files), the CPU evaluator judging answers while a timing job asks for the GPU."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpu_timers import start_timer

from workflow_scripts.core.statuses import Status
from workflow_scripts.evaluation import answer as answer_module
from workflow_scripts.evaluation.answer import EvalConfig
from workflow_scripts.evaluation.gpu_lock import YieldingLease, acquire_gpu
from workflow_scripts.evaluation.verdict import static_verdict

CHEATS = Path(__file__).parent / "cheats"
ADD = CHEATS / "problems" / "1_ElementwiseAdd.py"
HONEST = CHEATS / "answers" / "honest" / "add_triton.py"


def _timeline(lock_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (lock_dir / "timeline.jsonl").read_text().splitlines()]


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


@pytest.mark.integration
def test_an_evaluation_steps_aside_for_another_job_s_timing_between_its_gpu_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns: list[tuple[float, float]] = []  # the job's GPU steps (YieldingLease.held blocks), epoch seconds
    held = YieldingLease.held

    @contextlib.contextmanager
    def recorded(self: YieldingLease) -> Iterator[None]:
        with held(self):
            start = time.time()
            try:
                yield
            finally:
                turns.append((start, time.time()))

    monkeypatch.setattr(YieldingLease, "held", recorded)
    cfg = EvalConfig(device="cpu", run_static=False, lock_dir=str(tmp_path), timing_trials=5, prestart=1)
    timers = []

    def another_job_times(k: int, result: object) -> None:  # once the first answer is judged, for 1.5 s
        if k == 0:
            timers.append(start_timer(tmp_path, 1.5))

    answers = [HONEST] * 3
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease, \
            YieldingLease(lease) as yielding_lease:
        evaluator = answer_module.ProblemEvaluator(ADD, cfg, yielding_lease)
        try:
            evaluator.prepare(len(answers))
            results = evaluator.evaluate([(a, static_verdict(a, cfg), cfg) for a in answers], another_job_times)
        finally:
            evaluator.close()
    job_end = time.time()
    (timer,) = timers
    assert timer.stdout is not None
    waited = float(timer.stdout.readline())
    timer.wait(10)

    assert [r.status for r in results] == [Status.CORRECT.value] * 3
    lines = _timeline(tmp_path)
    (hold,) = [(e["start"], e["end"]) for e in lines if e["pid"] == timer.pid and e["activity"] == "lease_exclusive"]
    # The timer had the GPU while the job still ran (it did not wait for the job to end) ...
    assert waited < 10.0 and hold[1] < job_end
    # ... the job's lease stood aside for it ...
    assert any(e["activity"] == "lease_yielded" and e["pid"] != timer.pid for e in lines)
    # ... and none of the job's own GPU steps, nor its own timing windows, ran during the timer's hold.
    own_windows = [(e["start"], e["end"]) for e in lines if e["pid"] != timer.pid and e["activity"] == "lease_exclusive"]
    assert turns and own_windows
    assert max(_overlap(hold, step) for step in turns + own_windows) < 0.005
    # The waits for the step-aside moved the answers' deadlines, never counted against them.
    assert sum(r.phases_s.get("gpu_turn_wait_s", 0.0) for r in results) > 0.0
