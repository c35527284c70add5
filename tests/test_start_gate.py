"""The start gate (workflow_scripts.evaluation.start_gate) with real answer processes on the CPU: their host parts
run together, their device parts one at a time and none while the gate is paused (an answer being timed)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from workflow_scripts.evaluation.sandbox import ChildProcess
from workflow_scripts.evaluation.start_gate import StartGate
from workflow_scripts.evaluation.config import EvalConfig

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)


def _answer_process(tmp_path: Path, n: int) -> ChildProcess:
    work = tmp_path / f"answer{n}"
    work.mkdir()
    init = {"answer": "answer.py", "seed": 42, "tf32": "pytorch_default",
            "timing": EvalConfig(device="cpu").timing_protocol().to_dict(), "cast_integers": False,
            "start_gate": True}
    child = ChildProcess("answer", work, tmp_path / "logs" / f"answer{n}", "cpu", init, isolation="none",
                         areas_later=True)
    child.start()
    return child


@pytest.fixture
def children(tmp_path: Path):
    made: list[ChildProcess] = []
    yield lambda n: made.extend(_answer_process(tmp_path, i) for i in range(n)) or made
    for child in made:
        child.kill()


def _spans(gate: StartGate) -> dict[int, list[float]]:
    spans: dict[int, list[float]] = {}
    for event, at, n in gate.history:
        if event in ("go", "ready"):
            spans.setdefault(n, []).append(at)
    return spans


def test_no_device_part_starts_while_the_gate_is_paused(children) -> None:
    gate = StartGate(timeout_s=120.0)
    try:
        procs = children(3)
        for child in procs:
            gate.add(child)
        # Paused before any process finished its host part: pause returns once all three have (seconds: torch's
        # import), and not one device part has begun.
        waited = gate.pause()
        assert waited > 0.2
        assert not [e for e in gate.history if e[0] in ("go", "ready")]
        time.sleep(0.5)
        assert not [e for e in gate.history if e[0] in ("go", "ready")]  # still none while paused
        gate.resume()
        for child in procs:
            assert gate.wait_ready(child, timeout_s=120.0) < 120.0
        spans = _spans(gate)
        assert sorted(spans) == [0, 1, 2] and all(len(s) == 2 for s in spans.values())
        ordered = [spans[n] for n in range(3)]
        assert all(a[1] <= b[0] for a, b in zip(ordered, ordered[1:]))  # in start order, one at a time
        resumed = next(at for event, at, _ in gate.history if event == "resume")
        assert ordered[0][0] >= resumed
        # Handed over: the device part reported what it took; the hello (after the areas) is still to come.
        assert all(child.hello is None and not child.killed for child in procs)
    finally:
        gate.close()


def test_a_process_dropped_before_its_start_is_ended_and_left_alone(children) -> None:
    # The evaluator ends a surplus process: the gate kills it, never writes to it or reads it again, and the next
    # one starts.
    gate = StartGate(timeout_s=120.0)
    try:
        first, second = children(2)
        gate.pause()
        gate.add(first)
        gate.add(second)
        gate.drop(first)
        assert first.killed and first.returncode is not None and first.hello is None
        gate.resume()
        assert gate.wait_ready(second, timeout_s=120.0) < 120.0
        assert sorted(_spans(gate)) == [1]
    finally:
        gate.close()


def test_a_setup_error_is_kept_for_the_evaluator(tmp_path: Path) -> None:
    # A process whose host part fails reports a setup error instead of "staged": the gate keeps it as its hello,
    # which the evaluator reports, and hands the process over without a device part.
    gate = StartGate(timeout_s=120.0)
    work = tmp_path / "bad"
    work.mkdir()
    init = {"answer": "answer.py", "seed": 42, "tf32": "no-such-mode", "timing": {}, "start_gate": True}
    child = ChildProcess("answer", work, tmp_path / "logs", "cpu", init, isolation="none", areas_later=True)
    try:
        child.start()
        gate.add(child)
        gate.wait_ready(child, timeout_s=120.0)
        assert child.hello is not None and child.hello.type == "setup_error"
        assert "no-such-mode" in str(child.hello.header.get("error"))
        assert not _spans(gate)
    finally:
        gate.close()
        child.kill()


def test_a_process_not_ready_when_needed_is_killed_with_a_setup_error(children) -> None:
    # The evaluator stops waiting: the process (which never got its "go": the gate was paused) is killed, its hello
    # a setup error (an infrastructure failure, not the answer's), and the gate never starts it later.
    gate = StartGate(timeout_s=120.0)
    try:
        (child,) = children(1)
        gate.pause()
        gate.add(child)
        waited = gate.wait_ready(child, timeout_s=0.5)
        assert 0.5 <= waited < 30.0
        assert child.killed and child.returncode is not None
        assert child.hello is not None and child.hello.type == "setup_error"
        assert "not ready" in str(child.hello.header.get("error"))
        gate.resume()
        time.sleep(0.5)
        assert not _spans(gate)
    finally:
        gate.close()


def test_a_stuck_start_neither_holds_back_an_earlier_process_nor_a_timing(children) -> None:
    # The second process stops in its host part (SIGSTOP: no "staged", ever). The first, staged meanwhile, gets its
    # device part as soon as the gate is resumed, without waiting on the second; a pause before a timing returns
    # only once the second is dead (killed at the gate's bound), never while its start might still touch the GPU.
    bound = 12.0
    gate = StartGate(timeout_s=bound)
    try:
        first, second = children(2)
        os.kill(second.proc.pid, signal.SIGSTOP)
        gate.pause()  # paused while the first stages
        t0 = time.monotonic()
        gate.add(first)
        gate.add(second)
        while not gate._entries[0].staged and time.monotonic() - t0 < bound:
            time.sleep(0.05)
        time.sleep(0.5)  # the gate's thread has moved on to the second's "staged"
        gate.resume()
        assert gate.wait_ready(first, timeout_s=bound) < bound / 2
        assert first.hello is None and not first.killed  # handed over, alive
        assert not second.killed
        gate.pause()
        assert time.monotonic() - t0 >= bound - 1.0
        assert second.killed and second.returncode is not None
        assert second.hello is not None and "host part did not finish" in str(second.hello.header.get("error"))
        assert [e[2] for e in gate.history if e[0] == "killed"] == [1]
        assert gate.wait_ready(second, timeout_s=1.0) < 1.0  # handed over as failed: no device part
        assert sorted(_spans(gate)) == [0]
    finally:
        gate.close()


def test_a_pause_waits_for_the_trusted_side_page_locking_a_process_areas() -> None:
    # Page-locking a process's areas (cudaHostRegister on a GPU) is driver work on the trusted side: a timing never
    # begins while it runs.
    gate = StartGate(timeout_s=120.0)
    done: list[float] = []
    pinning = threading.Thread(target=lambda: (time.sleep(1.0), done.append(time.monotonic())))
    try:
        pinning.start()
        gate.track_pinning(pinning)
        gate.pause()
        paused_at = next(at for event, at, _ in gate.history if event == "pause")
        assert done and done[0] <= paused_at
    finally:
        gate.close()
