"""A baseline's exclusive windows (issue 34): the child's benchmarks wrapped (``baseline_windows.ExclusiveCalls``,
``WindowRequests``) ask the parent for the GPU alone over the real channel, and the parent (``baseline._Run`` with
``ExclusiveWindows`` on a yielding lease of a temporary lock folder) grants, lingers and gives the GPU back."""

from __future__ import annotations

import fcntl
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from gpu_timers import evaluation_holding, lock_refused, start_timer, stopped

from workflow_scripts.evaluation.baseline import _Run
from workflow_scripts.evaluation.baseline_windows import LINGER_S, ExclusiveWindows, bypasses_benchmarker
from workflow_scripts.evaluation.gpu_lock import YieldingLease, acquire_gpu
from workflow_scripts.evaluation.sandbox import ChildProcess

pytestmark = pytest.mark.integration  # starts a child process

# The child: Inductor's benchmarker in shape (the CUDA-graph benchmark runs the plain one), its methods wrapped as the
# baseline child wraps Inductor's; each benchmark reports whether the GPU was this job's alone while it ran (the
# child's own shared flock on the GPU's lock file is refused only while a holder has it exclusively).
CHILD = """
import fcntl, json, sys, time
from workflow_scripts.evaluation.baseline_windows import (INDUCTOR_GPU_BENCHMARKS, LINGER_S, ExclusiveCalls,
                                                          WindowRequests)
from workflow_scripts.evaluation.channel import Sender, read_command
from tests.gpu_timers import lock_refused

init = json.loads(sys.stdin.buffer.readline())
sender, stdin = Sender(int(init["fd"])), sys.stdin.buffer


def alone():
    return lock_refused(init["lock"], fcntl.LOCK_SH)


class Benchmarker:
    def benchmark_gpu(self, fn):
        return fn()

    def benchmark_gpu_with_cuda_graph(self, fn):
        return self.benchmark_gpu(fn)


bench = Benchmarker()
requests = WindowRequests(sender.send, lambda: read_command(stdin))
ExclusiveCalls(requests.ask, requests.done).install(bench, INDUCTOR_GPU_BENCHMARKS)
sender.send({"type": "loaded", "alone": alone()})
read_command(stdin)  # compile
burst = [bench.benchmark_gpu(alone) for _ in range(3)] + [bench.benchmark_gpu_with_cuda_graph(alone)]
time.sleep(5 * LINGER_S)  # compiling the next layer: the window closes meanwhile
between = alone()
later = bench.benchmark_gpu(alone)
sender.send({"type": "compiled", "burst": burst, "between": between, "later": later, "granted": requests.granted})
read_command(stdin)  # time
sender.send({"type": "timing", "alone": alone()})
read_command(stdin)
"""


# The same child for windows beside correctness work (``alone=False``): a burst in the job's turn, then a window around
# a whole first call (Inductor's benchmarker not reached), which is exclusive however the windows are configured.
CHILD_BESIDE = CHILD[:CHILD.index("burst = ")] + """
burst = [bench.benchmark_gpu(alone) for _ in range(2)]
time.sleep(5 * LINGER_S)  # the burst's window closes
requests.ask(whole_first_call=True)
whole = alone()
requests.done()
sender.send({"type": "compiled", "burst": burst, "whole": whole, "granted": requests.granted})
read_command(stdin)  # time
sender.send({"type": "timing", "alone": alone()})
read_command(stdin)
"""


def script_child(tmp_path: Path, init: dict, script_text: str = CHILD) -> ChildProcess:
    """A real ChildProcess whose interpreter runs ``script_text`` (CHILD) instead of the evaluation child."""
    script, python = tmp_path / "child.py", tmp_path / "python"
    script.write_text(script_text)
    python.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")  # the child module's arguments are ignored
    python.chmod(0o755)
    return ChildProcess("baseline", tmp_path / "work", tmp_path / "logs", "cpu", init, isolation="none",
                        python=str(python))


def test_benchmarks_run_alone_a_burst_in_one_window(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=locks, purpose="baseline") as lease, \
            YieldingLease(lease) as yielding_lease:
        run = _Run(script_child(tmp_path, {"lock": str(lease.lock_path)}), yielding_lease,
                   ExclusiveWindows(yielding_lease, locks, "0", "p"), timeout_s=60.0)
        try:
            run.start()
            loaded = run.recv()
            assert loaded.type == "loaded" and loaded.header["alone"] is False  # it starts under the shared lease
            run.child.send("compile")
            m = run.recv()
            assert m.type == "compiled", m.header
            assert m.header["burst"] == [True] * 4 and m.header["later"] is True  # each benchmark ran alone
            assert m.header["between"] is False  # the window closed after its linger
            assert m.header["granted"] == 5  # the nested CUDA-graph benchmark asked once
            assert lease.mode == "shared" and not run.windows.is_open  # closed once the child answered
            assert run.timed("time", "baseline_compile").header["alone"] is True
            assert lease.mode == "shared"
        finally:
            run.stop()
    lines = [json.loads(line) for line in (locks / "timeline.jsonl").read_text().splitlines()]
    exclusive = [(e["start"], e["end"]) for e in lines if e["activity"] == "lease_exclusive"]
    autotune = [(e["start"], e["end"]) for e in lines if e["activity"] == "baseline_autotune"]
    timed = [(e["start"], e["end"]) for e in lines if e["activity"] == "baseline_compile"]
    assert len(exclusive) == 3 and len(autotune) == 2 and len(timed) == 1  # the burst's, the later one's, the timing's
    for (start, end), (held_from, held_to) in zip(autotune + timed, exclusive):
        assert held_from <= start <= end <= held_to  # each inside its exclusive window
    burst_held = exclusive[0][1] - autotune[0][1]
    assert burst_held >= LINGER_S * 0.9  # the window lingered after the burst's last benchmark


def test_an_idle_window_closes_after_its_linger_and_a_user_keeps_it_open(tmp_path: Path) -> None:
    locks = tmp_path / "locks"
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=locks, purpose="baseline") as lease, \
            YieldingLease(lease) as yielding_lease:
        windows = ExclusiveWindows(yielding_lease, locks, "0", "p")
        assert windows.linger_left() is None
        windows.benchmark(timeout_s=5.0)
        assert lease.mode == "exclusive" and windows.linger_left() is None  # in use: no linger
        windows.close_if_idle()
        assert lease.mode == "exclusive"
        windows.benchmark_done()
        assert 0.0 < windows.linger_left() <= LINGER_S
        windows.close_if_idle()
        assert lease.mode == "exclusive"  # still lingering
        fd = os.open(lease.lock_path, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # nobody else gets in meanwhile
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            while windows.linger_left():
                pass
            windows.close_if_idle()
            assert lease.mode == "shared" and not windows.is_open
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # shared work is let in again
        finally:
            os.close(fd)


def test_settings_that_send_benchmarks_past_the_benchmarker_take_the_whole_first_call() -> None:
    defaults = {"autotune_in_subproc": False, "max_autotune_gemm_backends": "ATEN,TRITON,CPP",
                "pipeline_max_autotune_gemm": False, "profile_bandwidth_with_do_bench_using_profiling": False}
    assert not bypasses_benchmarker(SimpleNamespace(**defaults))
    for key, value in {"autotune_in_subproc": True, "max_autotune_gemm_backends": "ATEN,TRITON,CUTLASS",
                       "pipeline_max_autotune_gemm": True,
                       "profile_bandwidth_with_do_bench_using_profiling": True}.items():
        assert bypasses_benchmarker(SimpleNamespace(**{**defaults, key: value})), key


def test_windows_beside_correctness_work_hold_the_job_s_turn_not_the_gpu(tmp_path: Path) -> None:
    """``alone=False``: a benchmark keeps the lease shared (other jobs' correctness work goes on) and holds the job's
    turn, so a timer that comes meanwhile waits for the burst and its linger, then gets the GPU through a step-aside
    with the child stopped; a timing, and a window around the whole first call, still take the GPU exclusively."""
    locks = tmp_path / "locks"
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=locks, purpose="baseline") as lease, \
                YieldingLease(lease) as yielding_lease:
            with yielding_lease.held():
                yielding_lease.follow(child.pid)
            windows = ExclusiveWindows(yielding_lease, locks, "0", "p", alone=False)
            windows.benchmark(timeout_s=5.0)
            assert lease.mode == "shared" and not lock_refused(str(lease.lock_path), fcntl.LOCK_SH)
            timer = start_timer(locks, 0.3)
            assert timer.stdout is not None
            time.sleep(0.5)  # the benchmark runs on: no step-aside in the middle of it
            assert not select.select([timer.stdout], [], [], 0)[0] and not stopped(child.pid)
            windows.benchmark_done()
            while windows.linger_left():
                time.sleep(0.005)
            windows.close_if_idle()
            assert not windows.is_open
            waited = float(timer.stdout.readline())  # in once the turn is given back
            assert waited < 0.5 + LINGER_S + 1.0  # let in soon after the turn was given back
            timer.wait(10)
            assert yielding_lease.frozen_s >= 0.3  # the child stood stopped for the timer's hold
            windows.enter(timeout_s=5.0)  # a timing
            assert lease.mode == "exclusive" and lock_refused(str(lease.lock_path), fcntl.LOCK_SH)
            windows.leave()
            windows.close()
            windows.benchmark(timeout_s=5.0, whole_first_call=True)
            assert lease.mode == "exclusive"
            windows.benchmark_done()
            windows.close()
            assert lease.mode == "shared"
            with yielding_lease.held():
                yielding_lease.follow(None)
    finally:
        child.kill()
        child.wait()
    autotune = [json.loads(line) for line in (locks / "timeline.jsonl").read_text().splitlines()
                if json.loads(line)["activity"] == "baseline_autotune"]
    # The burst beside correctness work, and the whole first call's window, each saying which it was.
    assert [line["exclusive"] for line in autotune] == [False, True]


def test_a_child_s_benchmarks_beside_correctness_work_and_its_whole_first_call_alone(tmp_path: Path) -> None:
    """The child's requests over the real channel with ``alone=False``: the burst runs under the shared lease, the
    window it asks for around a whole first call and the timing hold the GPU alone."""
    locks = tmp_path / "locks"
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=locks, purpose="baseline") as lease, \
            YieldingLease(lease) as yielding_lease:
        run = _Run(script_child(tmp_path, {"lock": str(lease.lock_path)}, CHILD_BESIDE), yielding_lease,
                   ExclusiveWindows(yielding_lease, locks, "0", "p", alone=False), timeout_s=60.0)
        try:
            run.start()
            assert run.recv().type == "loaded"
            run.child.send("compile")
            m = run.recv()
            assert m.type == "compiled", m.header
            assert m.header["burst"] == [False, False] and m.header["whole"] is True and m.header["granted"] == 3
            assert lease.mode == "shared" and not run.windows.is_open
            assert run.timed("time", "baseline_compile").header["alone"] is True
        finally:
            run.stop()
    lines = [json.loads(line) for line in (locks / "timeline.jsonl").read_text().splitlines()]
    assert [e["exclusive"] for e in lines if e["activity"] == "baseline_autotune"] == [False, True]


def test_a_window_line_counts_its_benchmarks_and_the_longest_gap_its_linger_bridged(tmp_path: Path) -> None:
    # The bookkeeping alone (no lease: the CPU): three benchmarks in one window, 20 and 60 ms apart, then another
    # window of one.
    windows = ExclusiveWindows(None, tmp_path, "cpu", "p")
    for gap in (0.0, 0.02, 0.06):
        time.sleep(gap)
        windows.benchmark(timeout_s=1.0)
        windows.benchmark_done()
    windows.close()
    windows.benchmark(timeout_s=1.0)
    windows.benchmark_done()
    windows.close()
    lines = [json.loads(line) for line in (tmp_path / "timeline.jsonl").read_text().splitlines()]
    first, second = [e for e in lines if e["activity"] == "baseline_autotune"]
    assert first["benchmarks"] == 3 and 0.06 <= first["longest_gap_s"] < 0.06 + LINGER_S
    assert second["benchmarks"] == 1 and second["longest_gap_s"] == 0.0


def test_a_burst_in_the_job_s_turn_says_whether_an_evaluation_held_the_gpu(tmp_path: Path) -> None:
    """In the job's turn, picks may be made beside answers' untimed work: each ``baseline_autotune`` line says whether
    an evaluate job held the GPU (its holder file), one that pins it or one that yields between its steps
    (``evaluation.yield_gpu``, whose pin would not show it), so a reviewer sees which picks were."""
    locks = tmp_path / "locks"
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=locks, purpose="baseline") as lease, \
            YieldingLease(lease) as yielding_lease:
        windows = ExclusiveWindows(yielding_lease, locks, "0", "p", alone=False)
        windows.benchmark(timeout_s=5.0)  # alone on the GPU
        windows.benchmark_done()
        windows.close()
        for yields in (False, True):
            with evaluation_holding(locks, yields):
                windows.benchmark(timeout_s=5.0)  # beside an evaluation's lease: whole-job, then yielding
                windows.benchmark_done()
                windows.close()
        windows.benchmark(timeout_s=5.0)  # an evaluation that comes during the burst is seen at its close
        with evaluation_holding(locks, yields=False):
            windows.benchmark_done()
            windows.close()
    autotune = [json.loads(line) for line in (locks / "timeline.jsonl").read_text().splitlines()
                if json.loads(line)["activity"] == "baseline_autotune"]
    assert [(line["exclusive"], line["beside_evaluation"]) for line in autotune] == [
        (False, False), (False, True), (False, True), (False, True)]
