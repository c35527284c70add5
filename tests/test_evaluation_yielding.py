"""An evaluation job's shared GPU lease steps aside for another job's timing between the job's own GPU steps where
``evaluation.yield_gpu`` resolves true (by default where the driver's checkpoint lock holds a stopped answer's GPU
work), and lasts the whole job otherwise (issue 34): on a fake GPU (the locks are files), the CPU evaluator judging
answers while a timing job asks for the GPU."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cuda_driver import Driver, use_driver
from gpu_timers import start_timer

from workflow_scripts.core.statuses import Status, is_integrity_flag
from workflow_scripts.evaluation import answer as answer_module
from workflow_scripts.evaluation import freezer, gpu_lock
from workflow_scripts.evaluation.answer import EvalConfig
from workflow_scripts.evaluation.gpu_lock import YieldingLease, acquire_gpu
from workflow_scripts.evaluation.session import AnswerSession
from workflow_scripts.evaluation.verdict import static_verdict

CHEATS = Path(__file__).parent / "cheats"
ADD = CHEATS / "problems" / "1_ElementwiseAdd.py"
HONEST = CHEATS / "answers" / "honest" / "add_triton.py"


def _timeline(lock_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (lock_dir / "timeline.jsonl").read_text().splitlines()]


def _overlap(a: tuple[float, float], b: tuple[float, float]) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _recorded_turns(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, float]]:
    """The job's GPU steps (``YieldingLease.held`` blocks) from now on, each (start, end) in epoch seconds."""
    turns: list[tuple[float, float]] = []
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
    return turns


def _three_honest_answers_judged(lock_dir: Path, steps_aside: bool,
                                 on_result: Callable[[int, object], None] | None = None,
                                 hold: freezer.Hold = freezer.Hold.STOPPED) -> list:
    """Three honest answers judged on the CPU under a shared lease of GPU 0 of ``lock_dir`` (one answer process
    started at a time), held as ``hold`` says while it steps aside; their results."""
    cfg = EvalConfig(device="cpu", run_static=False, lock_dir=str(lock_dir), timing_trials=5, prestart=1)
    answers = [HONEST] * 3
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=lock_dir, purpose="evaluate") as lease, \
            YieldingLease(lease, steps_aside=steps_aside, hold=hold) as yielding_lease:
        evaluator = answer_module.ProblemEvaluator(ADD, cfg, yielding_lease)
        try:
            evaluator.prepare(len(answers))
            return evaluator.evaluate([(a, static_verdict(a, cfg), cfg) for a in answers], on_result)
        finally:
            evaluator.close()


def _judged_beside_a_timer(lock_dir: Path, steps_aside: bool, hold: freezer.Hold = freezer.Hold.STOPPED
                           ) -> tuple[list, subprocess.Popen, float]:
    """Three honest answers judged under a shared lease of GPU 0, a timing job (1.5 s) asking for the GPU once the
    first is judged: (the results, the timer, when the job ended)."""
    timers = []

    def another_job_times(k: int, result: object) -> None:
        if k == 0:
            timers.append(start_timer(lock_dir, 1.5, give_up_s=120.0))  # the default lease may keep it out long

    results = _three_honest_answers_judged(lock_dir, steps_aside, another_job_times, hold)
    job_end = time.time()
    (timer,) = timers
    return results, timer, job_end


@pytest.mark.integration
def test_by_default_no_other_job_times_while_an_evaluation_holds_its_gpu(tmp_path: Path) -> None:
    results, timer, job_end = _judged_beside_a_timer(tmp_path, steps_aside=False)
    assert timer.stdout is not None
    float(timer.stdout.readline())
    timer.wait(10)
    assert [r.status for r in results] == [Status.CORRECT.value] * 3
    lines = _timeline(tmp_path)
    (hold,) = [(e["start"], e["end"]) for e in lines if e["pid"] == timer.pid and e["activity"] == "lease_exclusive"]
    own_windows = [e["end"] for e in lines if e["pid"] != timer.pid and e["activity"] == "lease_exclusive"]
    # It got the GPU only where the job let go of its shared lease: as one of the job's own timing windows ended (its
    # downgrade lets a waiting timer go first) or at the job's end; the job never stood aside.
    assert any(0.0 <= hold[0] - end < 0.5 for end in own_windows) or abs(hold[0] - job_end) < 1.0
    assert not any(e["activity"] == "lease_yielded" for e in lines)


@pytest.mark.integration
def test_answers_whose_compiling_goes_on_beside_a_timing_keep_their_verdicts_and_record_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """evaluation.compile_beside_timing, with a driver stand-in that finds CUDA state in every process: a timer comes
    once the second answer's process is followed; the lease steps aside with that process locked and running on
    (the step-aside's locks, no stop), its held and CPU seconds go into its record, and the verdicts are those of a
    tree stopped whole."""
    driver = Driver(set(), every_pid=True)
    use_driver(monkeypatch, driver)
    followed: list[int] = []
    timers: list[subprocess.Popen] = []
    follow = YieldingLease.follow

    def timer_once_the_second_is_followed(self: YieldingLease, pid: int | None) -> None:
        follow(self, pid)
        if pid is None:
            return
        followed.append(pid)
        if len(followed) == 2:
            timers.append(start_timer(tmp_path, 1.5, give_up_s=120.0))
            deadline = time.monotonic() + 30
            while not self.lease.timer_waiting() and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(0.2)  # the watcher's next polls step aside, the answer's process followed

    monkeypatch.setattr(YieldingLease, "follow", timer_once_the_second_is_followed)
    results = _three_honest_answers_judged(tmp_path, True, None, freezer.Hold.LOCKED_RUNNING)
    (timer,) = timers
    timer.wait(10)
    assert [r.status for r in results] == [Status.CORRECT.value] * 3
    # Held running through the timer's 1.5 s (only a hold that left it running counts these seconds); the first
    # answer, never followed while a timer waited, has none.
    second = results[1].phases_s
    assert second["answer_gpu_held_s"] >= 1.0 and second["answer_late_stops"] == 0.0
    assert "answer_gpu_held_s" not in results[0].phases_s
    assert not any(r.flags for r in results)


class _Lease:
    """What ``AnswerSession._lease_phases`` reads of a yielding lease."""

    def __init__(self, counts: gpu_lock.HoldCounts) -> None:
        self.hold, self.steps_aside, self.pinned, self._counts = freezer.Hold.LOCKED_RUNNING, True, False, counts

    def counts(self) -> gpu_lock.HoldCounts:
        return self._counts


@pytest.mark.parametrize(("met", "flags"), [
    (gpu_lock.HoldCounts(gpu_held_s=2.0, cpu_beside_timing_s=1.5), []),
    (gpu_lock.HoldCounts(gpu_held_s=2.0, cpu_beside_timing_s=4.5), ["cpu_beside_timing"]),
    (gpu_lock.HoldCounts(gpu_held_s=2.0, cpu_beside_timing_s=1.0, broken_holds=1), ["hold_broken"]),
])
def test_what_an_answer_did_while_held_running_goes_into_its_record(met: gpu_lock.HoldCounts,
                                                                     flags: list[str]) -> None:
    session = types.SimpleNamespace(lease=_Lease(met), lease_counts_from=gpu_lock.HoldCounts(), phases={}, flags=[])
    session.flag = session.flags.append
    AnswerSession._lease_phases(session)  # type: ignore[arg-type]
    assert session.flags == flags
    assert session.phases == {"answer_gpu_held_s": 2.0, "cpu_beside_timing_s": met.cpu_beside_timing_s,
                              "answer_late_stops": 0.0}
    # A broken hold rejects the answer (its work may have run into another job's timing); CPU load is for review.
    assert [is_integrity_flag(f) for f in flags] == [f == "hold_broken" for f in flags]


@pytest.mark.integration
def test_an_evaluation_steps_aside_for_another_job_s_timing_between_its_gpu_steps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = _recorded_turns(monkeypatch)
    results, timer, job_end = _judged_beside_a_timer(tmp_path, steps_aside=True)
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


@pytest.mark.integration
def test_a_timer_goes_first_while_the_trusted_side_draws_its_inputs_on_the_host(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The preparation's GPU work runs in turns of its own, its inputs drawn on the host between them: a timer that
    asks for the GPU while the trusted side draws (0.4 s a draw here, as a level-2 problem's on a GPU host) gets it
    within about a poll, not once the whole preparation is done (s39: a timer waited 11.3 s behind one job's start),
    and none of the job's turns runs during the timer's hold."""
    problem = tmp_path / "1_SlowInputs.py"
    problem.write_text(ADD.read_text().replace("import torch\n", "import time\nimport torch\n", 1).replace(
        "    a = torch.rand(rows, cols)\n", "    time.sleep(0.4)  # a large draw on the host\n    a = torch.rand(rows, cols)\n"))
    lock_dir = tmp_path / "locks"
    lock_dir.mkdir()
    turns = _recorded_turns(monkeypatch)
    cfg = EvalConfig(device="cpu", run_static=False, lock_dir=str(lock_dir), timing_trials=5, prestart=0)
    timers: list[subprocess.Popen] = []
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=lock_dir, purpose="evaluate") as lease, \
            YieldingLease(lease) as yielding_lease:
        evaluator = answer_module.ProblemEvaluator(problem, cfg, yielding_lease)
        asks = threading.Timer(1.0, lambda: timers.append(start_timer(lock_dir, 0.3, give_up_s=60.0)))
        try:
            started = time.time()
            asks.start()
            evaluator.prepare(1)
            prepared = time.time()
        finally:
            asks.join()
            evaluator.close()
    (timer,) = timers
    assert timer.stdout is not None
    waited = float(timer.stdout.readline())
    timer.wait(10)
    assert evaluator.reference is not None and prepared - started > 2.0  # seven draws of 0.4 s, and more
    (hold,) = [(e["start"], e["end"]) for e in _timeline(lock_dir)
               if e["pid"] == timer.pid and e["activity"] == "lease_exclusive"]
    assert waited < 1.0 and hold[1] < prepared  # the timer went first, well before the preparation ended
    assert len(turns) >= 5 and max(_overlap(hold, turn) for turn in turns) < 0.005


@pytest.mark.integration
def test_no_answer_process_starts_on_the_device_while_the_job_lets_a_timer_go_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default, a timer that waits while an answer is timed gets the GPU as the job downgrades, with the job's
    lease holding nothing meanwhile: the next answer process's device part (its CUDA context on a GPU) must not begin
    then, only once the job holds its shared lease again. Each device part is slowed to 0.6 s here, so one begun as
    the timing ended (before the downgrade) would run into the timer's hold."""
    from workflow_scripts.evaluation.session import AnswerSession
    from workflow_scripts.evaluation.start_gate import StartGate

    device_parts: list[tuple[float, float]] = []
    original_part, original_timing = StartGate._device_part, AnswerSession._time_paired
    timers: list[subprocess.Popen] = []

    def slow_part(self: StartGate, entry: object) -> bool:
        start = time.time()
        time.sleep(0.6)
        try:
            return original_part(self, entry)
        finally:
            device_parts.append((start, time.time()))

    def timing_with_a_timer_waiting(self: AnswerSession, ans: object) -> object:
        if not timers and self.lease is not None and self.lease.lease.mode == "exclusive":
            timers.append(start_timer(tmp_path, 1.0, give_up_s=120.0))  # waits on the gate from now on
        return original_timing(self, ans)

    monkeypatch.setattr(StartGate, "_device_part", slow_part)
    monkeypatch.setattr(AnswerSession, "_time_paired", timing_with_a_timer_waiting)
    results = _three_honest_answers_judged(tmp_path, steps_aside=False)
    (timer,) = timers
    timer.wait(10)
    assert [r.status for r in results] == [Status.CORRECT.value] * 3
    (hold,) = [(e["start"], e["end"]) for e in _timeline(tmp_path)
               if e["pid"] == timer.pid and e["activity"] == "lease_exclusive"]
    assert len(device_parts) >= 2  # the later answers' processes started on the device during the job
    assert max(_overlap(hold, part) for part in device_parts) == 0.0


SLOW_FIRST_CALL = """
import time

from add_triton import ModelNew as Fast


class ModelNew(Fast):
    # Its first call takes seconds, as a real answer's first call compiles its kernels on a GPU.
    def forward(self, a, b):
        if not getattr(self, "warm", False):
            self.warm = True
            time.sleep(4.0)
        return super().forward(a, b)
"""


@pytest.mark.integration
def test_a_stepping_aside_evaluation_lets_a_timer_in_during_its_answer_s_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the lease steps aside, the answer's own calls run outside the job's turns: a timer that comes while the
    answer's first correctness call runs (seconds: it compiles its kernels on a GPU) gets the GPU during that call,
    with the answer's tree stopped, instead of after it; the seconds it stood stopped move its deadlines."""
    from workflow_scripts.evaluation.session import AnswerSession

    answer = tmp_path / "answer" / "slow_first_call.py"
    answer.parent.mkdir()
    answer.write_text(HONEST.read_text().replace("class ModelNew", "class _Fast") + SLOW_FIRST_CALL.replace(
        "from add_triton import ModelNew as Fast\n", "Fast = _Fast\n"))
    lock_dir = tmp_path / "locks"
    calls: list[tuple[float, float]] = []  # the answer's correctness calls, from the trial sent to its reply
    timers: list[subprocess.Popen] = []
    original = AnswerSession._trial_output

    def watched_call(self: AnswerSession, ans: object, rt: object) -> object:
        start = time.time()
        if not timers:
            time.sleep(0.5)  # the answer is inside its slow first call
            timers.append(start_timer(lock_dir, 1.0, give_up_s=60.0))
        try:
            return original(self, ans, rt)
        finally:
            calls.append((start, time.time()))

    monkeypatch.setattr(AnswerSession, "_trial_output", watched_call)
    cfg = EvalConfig(device="cpu", run_static=False, lock_dir=str(lock_dir), timing_trials=5, prestart=1)
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=lock_dir, purpose="evaluate") as lease, \
            YieldingLease(lease, steps_aside=True) as yielding_lease:
        evaluator = answer_module.ProblemEvaluator(ADD, cfg, yielding_lease)
        try:
            evaluator.prepare(1)
            (result,) = evaluator.evaluate([(answer, static_verdict(answer, cfg), cfg)])
        finally:
            evaluator.close()
        stops = list(yielding_lease.stop_spans)
    (timer,) = timers
    timer.wait(10)
    assert result.status == Status.CORRECT.value, result.error
    (hold,) = [(e["start"], e["end"]) for e in _timeline(lock_dir)
               if e["pid"] == timer.pid and e["activity"] == "lease_exclusive"]
    # The timer held the GPU inside the answer's first call, not after it ...
    assert calls[0][0] < hold[0] and hold[1] < calls[0][1]
    # ... while the answer's tree stood stopped ...
    assert any(start <= hold[0] and hold[1] <= end for start, end in stops), (hold, stops)
    # ... and those seconds were not the answer's: its deadlines moved by them.
    assert result.phases_s["stepped_aside_s"] >= hold[1] - hold[0]


def test_yield_gpu_is_recorded_in_each_result_s_protocol_and_kept_out_of_the_store_key() -> None:
    """Whether a job stepped aside changes what ran beside the answer's untimed steps, never its timing: each result
    says which, and a result measured either way serves the other (the same store key)."""
    from workflow_scripts.evaluation.jobs import key_params
    from workflow_scripts.evaluation.verdict import protocol_record

    whole_job, yielding = EvalConfig(device="cpu"), EvalConfig(device="cpu", yield_gpu=True)
    assert protocol_record(whole_job)["yield_gpu"] is False and protocol_record(yielding)["yield_gpu"] is True
    assert key_params(whole_job) == key_params(yielding)


@pytest.mark.parametrize("driver_lock", [True, False])
def test_yield_gpu_auto_yields_only_on_a_gpu_whose_driver_holds_a_stopped_answer_s_gpu_work(
        monkeypatch: pytest.MonkeyPatch, driver_lock: bool) -> None:
    """The default, ``auto``: an evaluation steps aside only where the driver's checkpoint lock completes and holds a
    stopped answer's queued kernels (cuda_lock); elsewhere its lease lasts the whole job. ``true`` and ``false`` say
    so whatever the driver. The result's protocol records the choice resolved for the job's device and driver, not
    the setting."""
    from workflow_scripts.evaluation import cuda_lock
    from workflow_scripts.evaluation.verdict import protocol_record

    monkeypatch.setattr(cuda_lock, "available", lambda: driver_lock)
    assert EvalConfig().yield_gpu == "auto"
    assert EvalConfig(device="cuda").yields_gpu() is driver_lock
    assert protocol_record(EvalConfig(device="cuda"))["yield_gpu"] is driver_lock
    assert EvalConfig(device="cpu").yields_gpu() is False  # no GPU work to hold: no other job times beside it
    assert EvalConfig(device="cuda", yield_gpu=True).yields_gpu() is True
    assert EvalConfig(device="cuda", yield_gpu=False).yields_gpu() is False


def test_yield_gpu_takes_true_false_or_auto_and_names_the_key_otherwise() -> None:
    from workflow_scripts.core.params import ParamsError, parse_params

    for value in (True, False, "auto"):
        assert parse_params(EvalConfig, {"yield_gpu": value}).yield_gpu == value
    with pytest.raises(ParamsError, match="yield_gpu"):
        parse_params(EvalConfig, {"yield_gpu": "yes"}, source="--params evaluation")
    with pytest.raises(ValueError, match="yield_gpu must be true, false or auto"):
        EvalConfig(yield_gpu=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(("setting", "steps_aside"), [("auto", False), (True, True), (False, False)])
def test_an_evaluate_job_s_lease_steps_aside_as_its_setting_resolves(
        monkeypatch: pytest.MonkeyPatch, setting: object, steps_aside: bool) -> None:
    """``evaluate_answers`` hands the lease the resolved setting (on the CPU, ``auto`` resolves to the whole job)."""
    asked: list[bool] = []

    class Asked(Exception):
        pass

    def yielding(lease: object, steps_aside: bool = True, hold: object = None) -> None:
        asked.append(steps_aside)
        raise Asked

    monkeypatch.setattr(answer_module.gpu_lock, "yielding", yielding)
    with pytest.raises(Asked):
        answer_module.evaluate_answers(ADD, [HONEST], EvalConfig(device="cpu", run_static=False, yield_gpu=setting))
    assert asked == [steps_aside]


def test_an_answer_whose_tree_cannot_be_held_for_its_timing_is_rejected_untimed_and_the_job_goes_on(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Its upgrade gave up with the lease still shared (``TreeNotHeld``: a process of its tree still running, or GPU
    work the driver's lock could not complete or see): the answer is not timed, its verdict a rejection
    (``gpu_work_not_held``), and the job's later answers are judged and timed as usual."""
    from workflow_scripts.evaluation.gpu_lock import TreeNotHeld

    real_upgrade = YieldingLease.upgrade
    calls: list[bool] = []

    def first_not_held(self: YieldingLease, timeout_s: float, stop_followed: bool = False) -> float:
        calls.append(stop_followed)
        if len(calls) == 1:
            raise TreeNotHeld("the followed process tree could not be held off the GPU in 3 stops")
        return real_upgrade(self, timeout_s, stop_followed)

    monkeypatch.setattr(YieldingLease, "upgrade", first_not_held)
    results = _three_honest_answers_judged(tmp_path, steps_aside=True)
    first, *rest = results
    assert first.status == Status.REJECTED_RUNTIME and "gpu_work_not_held" in first.flags
    assert first.runtime_ms is None and "not timed" in (first.error or "")
    assert [r.status for r in rest] == [Status.CORRECT, Status.CORRECT] and all(r.runtime_ms for r in rest)
    assert calls[0] is True  # the answer's tree was to be stopped while its job waited


def test_a_driver_that_keeps_the_answer_locked_fails_the_job_not_the_answer(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The driver left the answer's process locked after its stop (``UnlockFailed``: its next CUDA call would wait
    forever): the trusted side's failure, so the job stops, rather than a crash or timeout pinned on the answer."""
    from workflow_scripts.evaluation import cuda_lock
    from workflow_scripts.evaluation.session import InfrastructureError

    def locked_for_good(self: YieldingLease, timeout_s: float, stop_followed: bool = False) -> float:
        raise cuda_lock.UnlockFailed("the CUDA driver left process(es) [1] locked after two unlocks")

    monkeypatch.setattr(YieldingLease, "upgrade", locked_for_good)
    with pytest.raises(InfrastructureError, match="locked after two unlocks"):
        _three_honest_answers_judged(tmp_path, steps_aside=True)


def test_each_result_says_how_often_its_tree_was_not_held_and_whether_its_lease_gave_up_yielding(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Stops that did not hold the answer's tree (here every one: a process of it always counts as running) are
    counted on its result (``lease_incomplete_stops``), and a lease that pinned the GPU says so (``lease_pinned``):
    what a GPU run needs to tell whether honest answers ever meet them."""
    monkeypatch.setattr(freezer.FrozenTree, "complete", property(lambda self: False))
    first, *_ = _three_honest_answers_judged(tmp_path, steps_aside=True)
    assert first.phases_s["lease_incomplete_stops"] == YieldingLease.UPGRADE_STOP_TRIES  # the upgrade's tries
    assert "gpu_work_not_held" in first.flags and "lease_pinned" not in first.phases_s  # no timer asked: no pin
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path / "pins", purpose="evaluate") as lease, \
            YieldingLease(lease) as yielding_lease:
        assert not yielding_lease.pinned
        lease.pin()
        assert yielding_lease.pinned


def test_a_hold_broken_before_timing_rejects_the_answer_before_it_is_timed() -> None:
    """``_flag_broken_holds`` runs between the correctness trials and ``_timeable``: an integrity flag then keeps the
    answer from being timed at all."""
    session = types.SimpleNamespace(lease=_Lease(gpu_lock.HoldCounts(broken_holds=1)),
                                    lease_counts_from=gpu_lock.HoldCounts(), flags=[])
    session.flag = session.flags.append
    AnswerSession._flag_broken_holds(session)  # type: ignore[arg-type]
    assert session.flags == ["hold_broken"]
    session = types.SimpleNamespace(lease=_Lease(gpu_lock.HoldCounts(broken_holds=1)),
                                    lease_counts_from=gpu_lock.HoldCounts(broken_holds=1), flags=[])
    session.flag = session.flags.append
    AnswerSession._flag_broken_holds(session)  # type: ignore[arg-type]
    assert session.flags == []  # broken while an earlier answer was followed: not this one's
