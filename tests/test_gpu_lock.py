"""Per-GPU lock files: exclusive (timing) vs shared (correctness-only), across real processes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from cuda_driver import Driver, use_driver
from gpu_timers import lock_refused, start_timer, stopped
from processes import computes, cpu_seconds

from workflow_scripts.evaluation import cuda_lock, freezer
from workflow_scripts.evaluation.gpu_lock import (GpuLease, GpuLockTimeout, TreeNotHeld, YieldingLease, acquire_gpu,
                                                  visible_gpus)

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

REPO = Path(__file__).resolve().parent.parent

HOLDER = """
import sys, time
from workflow_scripts.evaluation.gpu_lock import acquire_gpu
with acquire_gpu(exclusive=sys.argv[1] == "ex", gpus=sys.argv[2].split(","), lock_dir=sys.argv[3]) as lease:
    print(lease.gpu, flush=True)
    time.sleep(float(sys.argv[4]))
"""


def _hold(mode: str, gpus: str, lock_dir: Path, seconds: float = 30.0) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([sys.executable, "-c", HOLDER, mode, gpus, str(lock_dir), str(seconds)], cwd=REPO,
                         stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert p.stdout is not None
    gpu = p.stdout.readline().strip()  # printed once the lock is held
    assert gpu, "holder failed to lock"
    return p, gpu


def _stop(p: subprocess.Popen) -> None:
    p.kill()
    p.wait()


def test_exclusive_blocks_everyone(tmp_path: Path) -> None:
    p, gpu = _hold("ex", "0", tmp_path)
    try:
        assert gpu == "0"
        for exclusive in (True, False):
            t0 = time.monotonic()
            with pytest.raises(GpuLockTimeout):
                with acquire_gpu(exclusive=exclusive, gpus=["0"], lock_dir=tmp_path, timeout_s=1.0, poll_s=0.1):
                    pass
            assert time.monotonic() - t0 >= 1.0
    finally:
        _stop(p)
    # The holder died: its lock is gone with it.
    with acquire_gpu(exclusive=True, gpus=["0"], lock_dir=tmp_path, timeout_s=5.0) as lease:
        assert lease.gpu == "0" and lease.mode == "exclusive"


def test_shared_holders_coexist_but_exclude_timing(tmp_path: Path) -> None:
    p, gpu = _hold("sh", "0", tmp_path)
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=5.0) as lease:
            assert lease.gpu == "0" and lease.mode == "shared"
        with pytest.raises(GpuLockTimeout):
            with acquire_gpu(exclusive=True, gpus=["0"], lock_dir=tmp_path, timeout_s=1.0, poll_s=0.1):
                pass
    finally:
        _stop(p)


def test_exclusive_picks_a_free_gpu(tmp_path: Path) -> None:
    p, gpu = _hold("ex", "0", tmp_path)
    try:
        with acquire_gpu(exclusive=True, gpus=["0", "1"], lock_dir=tmp_path, timeout_s=5.0) as lease:
            assert lease.gpu == "1"
            info = list(tmp_path.glob("gpu1.*.json"))
            assert info, "holder info file missing"
        assert not list(tmp_path.glob("gpu1.*.json"))  # removed on release
    finally:
        _stop(p)


def test_waiting_exclusive_gets_the_gpu_when_freed(tmp_path: Path) -> None:
    p, _ = _hold("ex", "0", tmp_path, seconds=1.5)
    try:
        t0 = time.monotonic()
        with acquire_gpu(exclusive=True, gpus=["0"], lock_dir=tmp_path, timeout_s=20.0, poll_s=0.1) as lease:
            waited = time.monotonic() - t0
            assert lease.gpu == "0" and waited > 0.5 and lease.waited_s > 0.5
    finally:
        _stop(p)


def test_queued_exclusive_job_holds_back_new_shared_jobs(tmp_path: Path) -> None:
    # A shared holder runs; an exclusive job waits on its gate; a new shared job must not jump the queue.
    p, _ = _hold("sh", "0", tmp_path, seconds=30)
    q = subprocess.Popen([sys.executable, "-c", HOLDER, "ex", "0", str(tmp_path), "1"], cwd=REPO,
                         stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        time.sleep(1.0)  # q is now waiting with the gate held
        with pytest.raises(GpuLockTimeout):
            with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=1.0, poll_s=0.1):
                pass
        _stop(p)
        assert q.stdout is not None and q.stdout.readline().strip() == "0"  # q got it once p left
    finally:
        _stop(p)
        _stop(q)


def test_visible_gpus_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    assert visible_gpus(["2", 3]) == ["2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")
    assert visible_gpus() == ["4", "5"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_upgrade_shared_to_exclusive(tmp_path: Path) -> None:
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=5.0) as lease:
        p, _ = _hold("sh", "0", tmp_path, seconds=1.0)  # another shared holder, leaving after 1 s
        try:
            waited = lease.upgrade(timeout_s=20.0, poll_s=0.05)
            assert lease.mode == "exclusive" and waited > 0.3
            with pytest.raises(GpuLockTimeout):  # now nobody else gets in
                with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=0.5, poll_s=0.1):
                    pass
        finally:
            _stop(p)


def test_a_waiting_timer_takes_the_gpu_soon_after_the_last_holder_leaves(tmp_path: Path) -> None:
    # The GPU idles from the shared holder's release to the timer's next try: at the former 0.2-s poll each of these
    # hand-overs took about 0.14 s (the release comes 57 ms into the wait, off any round poll's multiple), 26 s of a GPU
    # run's 372 s (s33); at a 50-ms poll about 43 ms, at today's 10 ms a few.
    delays = []
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=5.0) as lease:
        for _ in range(10):
            other = os.open(tmp_path / "gpu0.lock", os.O_RDWR)  # its own open file: a holder as another job is
            fcntl.flock(other, fcntl.LOCK_SH)
            released: list[float] = []

            def release(other: int = other, released: list[float] = released) -> None:
                time.sleep(0.057)
                released.append(time.monotonic())
                fcntl.flock(other, fcntl.LOCK_UN)

            holder = threading.Thread(target=release)
            holder.start()
            lease.upgrade(timeout_s=5.0)
            delays.append(time.monotonic() - released[0])
            holder.join()
            os.close(other)
            lease.downgrade()
    assert statistics.median(delays) < 0.035, delays


@pytest.mark.parametrize("held, operation", [("gate", fcntl.LOCK_EX), ("lock", fcntl.LOCK_EX)])
def test_a_shared_job_kept_out_says_by_what(tmp_path: Path, held: str, operation: int) -> None:
    # A waiting timer holds the GPU's gate; a timing one its lock. The entering job's timeline line says which refused
    # its rounds (seen before the selection lock is taken), none by memory.
    other = os.open(tmp_path / f"gpu0.{held}", os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(other, operation)
    holder = threading.Timer(0.3, fcntl.flock, (other, fcntl.LOCK_UN))
    holder.start()
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=5.0, poll_s=0.02,
                         expected_mem_gib=1.0, capacity_gib=lambda gpu: 80.0) as lease:
            assert lease.mode == "shared" and lease.waited_s >= 0.25
    finally:
        holder.join()
        os.close(other)
    entry = next(json.loads(line) for line in (tmp_path / "timeline.jsonl").read_text().splitlines()
                 if json.loads(line)["activity"] == "lease_acquire")
    assert entry["refused"][held] >= 5 and entry["refused"]["memory"] == 0
    assert sum(entry["refused"].values()) == entry["refused"][held]


def test_upgrade_times_out_and_keeps_shared(tmp_path: Path) -> None:
    p, _ = _hold("sh", "0", tmp_path, seconds=30.0)
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=5.0) as lease:
            with pytest.raises(GpuLockTimeout):
                lease.upgrade(timeout_s=0.5, poll_s=0.05)
            assert lease.mode == "shared"
            with pytest.raises(GpuLockTimeout):  # still holding shared: an exclusive job cannot enter
                with acquire_gpu(exclusive=True, gpus=["0"], lock_dir=tmp_path, timeout_s=0.5, poll_s=0.1):
                    pass
    finally:
        _stop(p)


def test_shared_jobs_spread_over_the_gpus(tmp_path: Path) -> None:
    # Whatever their pids, a new shared job goes where the fewest jobs are.
    busy = [_hold("sh", "0", tmp_path)[0] for _ in range(2)]
    spread = []
    try:
        for _ in range(3):  # three pids in a row: a choice by pid alone would put one of them on GPU 0
            p, gpu = _hold("sh", "0,1", tmp_path)
            assert gpu == "1"
            _stop(p)
        for _ in range(4):  # 2 on GPU 0 already: the next four go 1, then alternate
            p, gpu = _hold("sh", "0,1", tmp_path)
            spread.append(gpu)
            busy.append(p)
        assert spread[:2] == ["1", "1"] and sorted(spread[2:]) == ["0", "1"]
    finally:
        for p in busy:
            _stop(p)
    with acquire_gpu(exclusive=False, gpus=["0", "1"], lock_dir=tmp_path) as lease:
        assert lease.gpu in ("0", "1")  # dead holders count for nothing


SAME_MOMENT = """
import os, sys, time
os.getpid = lambda: 0  # one tie-break for every job: only the holder counts can spread them
from workflow_scripts.evaluation import gpu_lock
count = gpu_lock._holder_count
gpu_lock._holder_count = lambda *a: (time.sleep(0.2), count(*a))[1]  # a busy host: counting takes its time
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
with gpu_lock.acquire_gpu(exclusive=False, gpus=["0", "1"], lock_dir=sys.argv[1]) as lease:
    print(lease.gpu, flush=True)
    time.sleep(3.0)  # past the last job's choice (4 jobs x 2 counts x 0.2 s, one job at a time)
"""


def test_jobs_started_at_the_same_moment_spread_over_the_gpus(tmp_path: Path) -> None:
    # Snakemake starts several evaluate jobs at once. Counting the holders and taking a slot in two steps let all of
    # them count none anywhere and share GPU 0 while GPU 1 idled (1 round in 3 without the slowed count, before the
    # selection lock; every round with it).
    for round_ in range(2):
        lock_dir = tmp_path / str(round_)
        start = time.time() + 1.5  # after every interpreter has started
        jobs = [subprocess.Popen([sys.executable, "-c", SAME_MOMENT, str(lock_dir), str(start)], cwd=REPO,
                                 stdout=subprocess.PIPE, text=True,
                                 env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}) for _ in range(4)]
        try:
            gpus = sorted(p.stdout.readline().strip() for p in jobs if p.stdout is not None)
        finally:
            for p in jobs:
                p.wait()
        assert gpus == ["0", "0", "1", "1"], f"round {round_}: {gpus}"


def test_a_job_that_finds_its_reserved_gpu_busy_moves_its_slot(tmp_path: Path) -> None:
    from workflow_scripts.evaluation.gpu_lock import _holder_count

    shared = [_hold("sh", "0", tmp_path)[0] for _ in range(2)]
    timing, _ = _hold("ex", "1", tmp_path)  # GPU 1 has the fewest holders, but it is timing
    try:
        with acquire_gpu(exclusive=False, gpus=["0", "1"], lock_dir=tmp_path, timeout_s=5.0) as lease:
            assert lease.gpu == "0"
            assert (_holder_count(tmp_path, "0"), _holder_count(tmp_path, "1")) == (3, 1)
        assert (_holder_count(tmp_path, "0"), _holder_count(tmp_path, "1")) == (2, 1)
    finally:
        for p in [*shared, timing]:
            _stop(p)


MEMORY_HOLDER = """
import sys, time
from workflow_scripts.evaluation.gpu_lock import acquire_gpu
with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=sys.argv[1], expected_mem_gib=float(sys.argv[2]),
                 capacity_gib=lambda gpu: 10.0) as lease:
    print(lease.gpu, flush=True)
    time.sleep(30)
"""


def test_memory_admission_makes_a_job_wait_for_room_on_its_gpu(tmp_path: Path) -> None:
    # Two by-hand evaluations of a large problem on one 10 GiB card: the second waits for the first instead of
    # failing out of memory (issue 33); a small one fits beside it; a job larger than the card runs when it is alone.
    def shared(gib: float, timeout_s: float):
        return acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=timeout_s, poll_s=0.05,
                           expected_mem_gib=gib, capacity_gib=lambda gpu: 10.0)

    first = subprocess.Popen([sys.executable, "-c", MEMORY_HOLDER, str(tmp_path), "6"], cwd=REPO,
                             stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "0"
        with pytest.raises(GpuLockTimeout):
            with shared(6.0, 1.0):
                pass
        with shared(3.0, 5.0) as lease:  # 6 + 3 fits 95% of 10 GiB
            assert lease.gpu == "0"
    finally:
        _stop(first)
    with shared(6.0, 5.0) as lease:  # the first job is gone, and its holder file counts no more
        assert lease.gpu == "0"
    with shared(20.0, 5.0) as lease:  # larger than the card: alone, it runs
        assert lease.gpu == "0"
    # Without an estimate (or a capacity) nothing is budgeted: the lock behaves as before.
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, timeout_s=5.0):
        pass


BUSY_CHILD = "while True: pass"  # a baseline child at work: running (R), never sleeping, until stopped


def _others_exclusive(lock_dir: Path) -> bool:
    return lock_refused(lock_dir / "gpu0.lock", fcntl.LOCK_SH)


def _shared_held(lock_dir: Path) -> bool:
    return lock_refused(lock_dir / "gpu0.lock", fcntl.LOCK_EX)


def _timeline(lock_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (lock_dir / "timeline.jsonl").read_text().splitlines()]


@contextlib.contextmanager
def _yielding_lease_following_a_busy_child(lock_dir: Path, hold: freezer.Hold = freezer.Hold.STOPPED,
                                           ) -> Iterator[tuple[GpuLease, YieldingLease, int]]:
    """A baseline's yielding shared lease on GPU 0 of ``lock_dir``, following a busy child; the child unfollowed
    before the lease ends, and killed after."""
    child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD])
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=lock_dir, purpose="baseline") as lease, \
                YieldingLease(lease, hold=hold) as yielding_lease:
            with yielding_lease.held():
                yielding_lease.follow(child.pid)
            yield lease, yielding_lease, child.pid
            with yielding_lease.held():
                yielding_lease.follow(None)
    finally:
        child.kill()
        child.wait()


def test_a_yielding_lease_steps_aside_for_a_timing_job_with_its_child_stopped(tmp_path: Path) -> None:
    with _yielding_lease_following_a_busy_child(tmp_path) as (lease, yielding_lease, child):
        timer = start_timer(tmp_path, 1.0)
        assert timer.stdout is not None
        waited = float(timer.stdout.readline())  # printed once the timer holds the GPU
        assert waited < 1.0  # the shared holder stepped aside at once (the timer's own start aside)
        assert _others_exclusive(tmp_path) and stopped(child)  # frozen during the timer's window
        assert yielding_lease.frozen_s > 0.0
        timer.wait(10)
        deadline = time.monotonic() + 2.0
        while stopped(child) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not stopped(child)  # running again once the lease is back
        assert lease.mode == "shared" and _shared_held(tmp_path) and not _others_exclusive(tmp_path)
    yielded = [e for e in _timeline(tmp_path) if e["activity"] == "lease_yielded"]
    assert len(yielded) == 1 and yielded[0]["purpose"] == "baseline"
    assert yielded[0]["end"] - yielded[0]["start"] >= 1.0  # it stood aside for the timer's whole hold


def test_a_trusted_child_compiles_on_while_its_lease_steps_aside_with_its_gpu_work_held(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """baselines.compile_beside_timing: where the driver can lock, the baseline's child is locked (its GPU work held),
    not stopped, while the timer holds the GPU; its seconds so held are counted apart from stops (which its compile
    time leaves out) and unlocked once the lease is back."""
    driver = Driver(set())
    use_driver(monkeypatch, driver)
    with _yielding_lease_following_a_busy_child(tmp_path, hold=freezer.Hold.GPU_HELD) as (lease, yielding_lease, child):
        driver.states[child] = cuda_lock.STATE_RUNNING  # the child has CUDA state
        timer = start_timer(tmp_path, 1.0)
        assert timer.stdout is not None
        assert float(timer.stdout.readline()) < 1.0  # it stepped aside at once
        assert _others_exclusive(tmp_path) and driver.states[child] == cuda_lock.STATE_LOCKED
        assert not stopped(child) and computes(child)  # it runs on
        timer.wait(10)
        deadline = time.monotonic() + 2.0
        while driver.states[child] == cuda_lock.STATE_LOCKED and time.monotonic() < deadline:
            time.sleep(0.01)
        assert driver.states[child] == cuda_lock.STATE_RUNNING and lease.mode == "shared"
        assert yielding_lease.stop_spans == [] and yielding_lease.gpu_held_s >= 0.9
        assert yielding_lease.frozen_s >= yielding_lease.gpu_held_s  # the deadline moves by it all the same
    assert [call for call, pid, _ in driver.calls if call != "state" and pid == child] == ["lock", "unlock"]


def test_an_answer_compiles_on_while_its_lease_steps_aside_and_what_it_starts_meanwhile_is_stopped(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """evaluation.compile_beside_timing: while the timer holds the GPU, the answer's CUDA process is locked and runs
    on; a process it starts meanwhile is stopped at the step-aside's next poll; its CPU seconds and held seconds are
    counted. Its own wait for an exclusive window stops it whole, as before."""
    go = tmp_path / "go"
    code = ("import os, subprocess, sys, time\n"
            "while not os.path.exists(sys.argv[1]): sum(range(10000))\n"
            "subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
            "while True: sum(range(10000))\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(go)])
    driver = Driver({child.pid})
    use_driver(monkeypatch, driver)
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease, \
                YieldingLease(lease, hold=freezer.Hold.LOCKED_RUNNING) as yielding_lease:
            with yielding_lease.held():
                yielding_lease.follow(child.pid)
            before = yielding_lease.counts()
            child_cpu_from = cpu_seconds(child.pid)
            timer = start_timer(tmp_path, 1.5)
            assert timer.stdout is not None
            assert float(timer.stdout.readline()) < 1.0  # it stepped aside at once
            assert driver.states[child.pid] == cuda_lock.STATE_LOCKED and not stopped(child.pid)
            go.touch()
            deadline = time.monotonic() + 10
            while not psutil.Process(child.pid).children() and time.monotonic() < deadline:
                time.sleep(0.01)
            (spawned,) = psutil.Process(child.pid).children()
            deadline = time.monotonic() + 2.0
            while not stopped(spawned.pid) and time.monotonic() < deadline:  # the step-aside's next poll
                time.sleep(0.005)
            assert stopped(spawned.pid) and not stopped(child.pid)
            timer.wait(10)
            deadline = time.monotonic() + 2.0
            while driver.states[child.pid] == cuda_lock.STATE_LOCKED and time.monotonic() < deadline:
                time.sleep(0.01)
            assert not stopped(spawned.pid)  # resumed with the tree
            met = yielding_lease.counts().since(before)
            # It ran while held (it started the process that was stopped); no more than the kernel counted for it
            # over a span that holds the hold (how much depends on the host's load: a 2-core CI host is busy).
            assert 0 < met.cpu_beside_timing_s <= cpu_seconds(child.pid) - child_cpu_from + 0.02
            assert met.gpu_held_s >= 1.0 and met.late_stops == 1
            assert met.broken_holds == 0 and yielding_lease.stop_spans == []
            yielding_lease.upgrade(timeout_s=5.0, stop_followed=True)  # the answer's own wait: stopped whole
            yielding_lease.downgrade()
            assert len(yielding_lease.stop_spans) == 2
            with yielding_lease.held():
                yielding_lease.follow(None)
    finally:
        for p in psutil.Process(child.pid).children(recursive=True):
            p.kill()
        child.kill()
        child.wait()


def test_an_answer_that_breaks_its_hold_beside_a_timing_is_never_held_beside_one_again(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A locked answer process found unlocked while the timer holds the GPU: stopped, the hold on the timeline
    (``hold_broken``), and the lease pins the GPU for the rest of the job (a later timer waits for the job)."""
    child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD])
    driver = Driver({child.pid})
    use_driver(monkeypatch, driver)
    try:
        with pytest.warns(RuntimeWarning, match="broke its hold"), \
                acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease, \
                YieldingLease(lease, hold=freezer.Hold.LOCKED_RUNNING) as yielding_lease:
            with yielding_lease.held():
                yielding_lease.follow(child.pid)
            timer = start_timer(tmp_path, 1.0)
            assert timer.stdout is not None
            float(timer.stdout.readline())
            driver.states[child.pid] = cuda_lock.STATE_RUNNING  # it freed itself
            deadline = time.monotonic() + 5
            while not stopped(child.pid) and time.monotonic() < deadline:
                time.sleep(0.005)
            assert stopped(child.pid)  # at the step-aside's next poll
            timer.wait(10)
            deadline = time.monotonic() + 5
            while not yielding_lease.pinned and time.monotonic() < deadline:
                time.sleep(0.01)
            assert yielding_lease.pinned and yielding_lease.counts().broken_holds == 1 and not stopped(child.pid)
            (broken,) = [e for e in _timeline(tmp_path) if e["activity"] == "hold_broken"]
            assert broken["reasons"] == [f"locked process {child.pid} found unlocked"]
            with yielding_lease.held():
                yielding_lease.follow(None)
    finally:
        child.kill()
        child.wait()


def test_an_answer_held_locked_running_is_stopped_whole_where_the_driver_cannot_lock(tmp_path: Path) -> None:
    """No driver lock (the CPU, an older driver): the step-aside stops the answer's tree whole, counted as stops, not
    as seconds it ran on."""
    with _yielding_lease_following_a_busy_child(tmp_path, hold=freezer.Hold.LOCKED_RUNNING) as (lease, yielding_lease,
                                                                                                child):
        timer = start_timer(tmp_path, 0.3)
        assert timer.stdout is not None
        float(timer.stdout.readline())
        assert stopped(child)
        timer.wait(10)
        deadline = time.monotonic() + 2.0
        while not yielding_lease.stop_spans and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(yielding_lease.stop_spans) == 1 and yielding_lease.gpu_held_s == 0.0


def test_a_trusted_child_the_driver_cannot_lock_keeps_its_lease_from_stepping_aside(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A CUDA process of the baseline's that the driver refuses to lock could run GPU work into the timing: the
    lease stays put (the timer waits for the baseline's own window or end), as for an incomplete stop."""
    driver = Driver(set())
    locks_asked: list[int] = []
    driver.lock = lambda pid, timeout_s: locks_asked.append(pid) or 801  # type: ignore[method-assign]
    use_driver(monkeypatch, driver)
    with pytest.warns(RuntimeWarning, match="did not step aside"), \
            _yielding_lease_following_a_busy_child(tmp_path, hold=freezer.Hold.GPU_HELD) as (lease, yielding_lease, child):
        driver.states[child] = cuda_lock.STATE_RUNNING
        timer = start_timer(tmp_path, 0.2)
        assert timer.stdout is not None
        time.sleep(0.5)
        assert not select.select([timer.stdout], [], [], 0)[0] and not stopped(child)  # the timer still waits
        # A few incomplete holds in a row, then the lease keeps the GPU for the rest of the job, pinning it as a
        # whole-job lease does (a yielding lease elsewhere leaves the timer alone), instead of asking the driver at
        # every poll.
        tries = YieldingLease.INCOMPLETE_STOPS_BEFORE_PIN
        assert yielding_lease.incomplete_stops == tries and lease.mode == "shared"
        assert locks_asked == [child] * tries
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as another:
            assert another.timer_blocked_elsewhere()
        yielding_lease.upgrade(timeout_s=5.0)  # the baseline's own timing, then the timer
        yielding_lease.downgrade()
        timer.wait(10)


@pytest.mark.parametrize("steps_aside", [True, False])
def test_an_answer_s_tree_that_cannot_be_held_keeps_its_lease_shared_instead_of_waiting_to_time(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, steps_aside: bool) -> None:
    """An upgrade's wait lets another job's timer in first: a followed tree whose GPU work the driver cannot hold
    (here its queued work outlasts every lock's wait) must not be left so. The upgrade tries its stops, then gives
    up with the lease still shared, no exclusive window taken, the tree resumed; the job's next GPU step is not
    blocked. Whole-job leases (``steps_aside`` False) wait for their upgrade the same way."""
    child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD])
    driver = Driver({child.pid}, queued_s={child.pid: 10 * freezer.STOP_WAIT_S})
    use_driver(monkeypatch, driver)
    monkeypatch.setattr(freezer, "STOP_WAIT_S", 0.05)  # each lock's wait, shortened: still shorter than the work
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease, \
                YieldingLease(lease, steps_aside=steps_aside) as yielding_lease:
            with yielding_lease.held():
                yielding_lease.follow(child.pid)
            with pytest.raises(TreeNotHeld, match="3 stops"):
                yielding_lease.upgrade(timeout_s=5.0, stop_followed=True)
            assert lease.mode == "shared" and _shared_held(tmp_path) and not _others_exclusive(tmp_path)
            assert yielding_lease.incomplete_stops == YieldingLease.UPGRADE_STOP_TRIES
            assert [call for call, _, _ in driver.calls].count("lock") == YieldingLease.UPGRADE_STOP_TRIES
            assert not stopped(child.pid)  # resumed: the caller ends it while no other job times
            with yielding_lease.held():  # the turn was given back
                yielding_lease.follow(None)
    finally:
        child.kill()
        child.wait()


def test_a_trusted_tree_not_held_is_waited_for_as_it_stands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A baseline's child (trusted code) whose GPU work the driver will not hold: its exclusive window is taken all
    the same (its code leaves no work queued on purpose); only an answer's tree makes the upgrade give up."""
    driver = Driver(set())
    driver.lock = lambda pid, timeout_s: 801  # type: ignore[method-assign]
    use_driver(monkeypatch, driver)
    with _yielding_lease_following_a_busy_child(tmp_path, hold=freezer.Hold.GPU_HELD) as (lease, yielding_lease, child):
        driver.states[child] = cuda_lock.STATE_RUNNING
        yielding_lease.upgrade(timeout_s=5.0, stop_followed=True)
        assert lease.mode == "exclusive" and yielding_lease.incomplete_stops == 1
        yielding_lease.downgrade()


def test_an_answer_s_tree_held_at_a_later_stop_is_timed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stop that finds the tree not yet held (a trial's last kernels still queued) is tried again before the
    upgrade gives up: held at the second, the job takes its exclusive window as usual."""
    child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD])
    driver = Driver({child.pid}, queued_s={child.pid: 10 * freezer.STOP_WAIT_S})
    use_driver(monkeypatch, driver)

    def lock_finding_the_work_done_the_second_time(pid: int, timeout_s: float) -> int:
        code = driver.lock(pid, timeout_s)
        driver.queued_s.clear()  # the trial's last kernels end
        return code

    monkeypatch.setattr(cuda_lock, "lock", lock_finding_the_work_done_the_second_time)
    try:
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease, \
                YieldingLease(lease) as yielding_lease:
            with yielding_lease.held():
                yielding_lease.follow(child.pid)
            yielding_lease.upgrade(timeout_s=5.0, stop_followed=True)
            assert lease.mode == "exclusive" and yielding_lease.incomplete_stops == 1
            yielding_lease.downgrade()
            with yielding_lease.held():
                yielding_lease.follow(None)
    finally:
        child.kill()
        child.wait()


def test_a_step_aside_that_fails_takes_the_gpu_back_before_the_tree_resumes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The shared lock let go for a timer, taking it back fails (an flock error): the lease waits for the lock
    (after the timer's window) before the tree is resumed, never resuming it beside the timing; then it stops
    stepping aside, visibly."""
    events: list[str] = []
    hold_again, thaw = GpuLease.hold_shared_again, freezer.FrozenTree.thaw

    def failing_reentry(self: GpuLease, poll_s: float, give_up: object = None) -> bool:
        raise OSError("no locks available")

    def noting_hold_again(self: GpuLease) -> None:
        hold_again(self)
        events.append("held")

    def noting_thaw(self: freezer.FrozenTree) -> None:
        events.append("resumed")
        thaw(self)

    monkeypatch.setattr(GpuLease, "_reenter_shared", failing_reentry)
    monkeypatch.setattr(GpuLease, "hold_shared_again", noting_hold_again)
    monkeypatch.setattr(freezer.FrozenTree, "thaw", noting_thaw)
    with pytest.warns(RuntimeWarning, match="stops stepping aside"), \
            _yielding_lease_following_a_busy_child(tmp_path) as (lease, yielding_lease, child):
        timer = start_timer(tmp_path, 0.2, give_up_s=60.0)
        deadline = time.monotonic() + 5.0
        while "resumed" not in events and time.monotonic() < deadline:
            time.sleep(0.01)
        assert events[:2] == ["held", "resumed"] and lease.mode == "shared" and _shared_held(tmp_path)
        assert not stopped(child)
        deadline = time.monotonic() + 5.0
        while not lease.pins and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lease.pins  # it keeps the GPU from now on: yielding leases elsewhere leave the timer alone
    timer.wait(30)  # the GPU once the job let it go


def test_a_stop_s_seconds_count_from_before_its_locks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The driver's locks may take seconds, during which the answer does not run either: its deadline moves by them
    (``frozen_s`` counts from before the freeze)."""
    driver = Driver(set(), every_pid=True)
    slow_lock = driver.lock

    def lock_taking_a_while(pid: int, timeout_s: float) -> int:
        time.sleep(0.3)
        return slow_lock(pid, timeout_s)

    driver.lock = lock_taking_a_while  # type: ignore[method-assign]
    use_driver(monkeypatch, driver)
    with _yielding_lease_following_a_busy_child(tmp_path) as (lease, yielding_lease, child):
        before = yielding_lease.frozen_s
        yielding_lease.upgrade(timeout_s=5.0, stop_followed=True)
        yielding_lease.downgrade()
        assert yielding_lease.frozen_s - before >= 0.3 * 2  # the upgrade's stop and the downgrade's, each locked


def test_a_yielding_lease_never_steps_aside_in_its_own_exclusive_window(tmp_path: Path) -> None:
    with _yielding_lease_following_a_busy_child(tmp_path) as (lease, yielding_lease, child):
        yielding_lease.upgrade(timeout_s=5.0)
        timer = start_timer(tmp_path, 0.5)
        assert timer.stdout is not None
        time.sleep(1.5)  # the timer waits on the gate all along
        assert lease.mode == "exclusive" and not stopped(child)
        assert not select.select([timer.stdout], [], [], 0)[0]  # it has not got the GPU
        t_down = time.monotonic()
        yielding_lease.downgrade()  # the timer goes first: the downgrade returns once it is done
        assert time.monotonic() - t_down >= 0.4 and lease.mode == "shared"
        assert float(timer.stdout.readline()) >= 1.4
        timer.wait(10)
    kinds = [e["activity"] for e in _timeline(tmp_path) if e["purpose"] == "baseline"]  # the timer's lines apart
    assert kinds == ["lease_acquire", "lease_shared", "lease_wait", "lease_exclusive", "lease_shared",
                     "lease_held"]  # no yield


@pytest.mark.parametrize("threads", [1, 3])
def test_a_job_taking_turns_back_to_back_lets_a_waiting_timer_in_after_the_current_turn(tmp_path: Path,
                                                                                       threads: int) -> None:
    """A job whose threads take their GPU turns back to back (the start gate, page-locking, the preparation) never
    leave the turn free at the watcher's poll: the watcher goes first once the current turn ends (s39: a timer waited
    11.3 s behind one job's turns). Each turn is 0.2 s: the timer waits one, not until the job's threads stop."""
    done = threading.Event()
    turns_after_the_timer: list[float] = []
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease, \
            YieldingLease(lease) as yielding_lease:
        def take_turns() -> None:
            while not done.is_set():
                with yielding_lease.held():
                    time.sleep(0.2)
                    turns_after_the_timer.append(time.monotonic())

        workers = [threading.Thread(target=take_turns, daemon=True) for _ in range(threads)]
        for worker in workers:
            worker.start()
        try:
            time.sleep(0.3)
            timer = start_timer(tmp_path, 0.3, give_up_s=8.0)
            assert timer.stdout is not None
            timer_started = time.monotonic()
            waited = timer.stdout.readline()
            timer.wait(10)
            time.sleep(0.5)
        finally:
            done.set()
            for worker in workers:
                worker.join()
    assert waited and float(waited) < 1.0  # about one turn (0.2 s): before, the timer gave up after 8 s
    waited_s = float(waited)
    assert [t for t in turns_after_the_timer if t > timer_started + waited_s + 0.3]  # the job's turns went on
    yielded = [e for e in _timeline(tmp_path) if e["activity"] == "lease_yielded"]
    assert len(yielded) == 1


def test_a_turn_taken_again_inside_one_never_waits_for_the_watcher(tmp_path: Path) -> None:
    """A thread that holds the turn may take it again (a nested held block, a held block that takes an exclusive
    window) while the watcher waits for it: it goes on at once."""
    waits: dict[str, float] = {}
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as lease, \
            YieldingLease(lease) as yielding_lease:
        holds_turn, timer_waits = threading.Event(), threading.Event()

        def nested_turns() -> None:
            with yielding_lease.held():
                holds_turn.set()
                timer_waits.wait(10)
                time.sleep(0.3)  # the watcher waits for the turn by now
                t0 = time.monotonic()
                with yielding_lease.held():
                    waits["nested"] = time.monotonic() - t0
                waits["upgrade"] = yielding_lease.upgrade(timeout_s=5.0)
                yielding_lease.downgrade()

        job = threading.Thread(target=nested_turns)
        job.start()
        assert holds_turn.wait(10)
        timer = start_timer(tmp_path, 0.3, give_up_s=8.0)
        timer_waits.set()
        job.join(10)
        assert not job.is_alive()  # no deadlock between the job's own turns and the waiting watcher
        assert timer.stdout is not None and float(timer.stdout.readline()) >= 0.3  # behind the job's turn
        timer.wait(10)
    assert waits["nested"] < 0.1 and "upgrade" in waits


def test_a_yielding_lease_stays_put_while_a_pinned_holder_keeps_the_timer_out(tmp_path: Path) -> None:
    """An evaluation that never steps aside pins the GPU while shared: a baseline stepping aside then would stop its
    compile for nothing (the timer cannot start before the evaluation lets go). The baseline steps aside once the
    evaluation's upgrade drops its pin, and the evaluation's timing still excludes the timer."""
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, purpose="evaluate") as pinned_lease, \
            YieldingLease(pinned_lease, steps_aside=False) as evaluation, \
            _yielding_lease_following_a_busy_child(tmp_path) as (_lease, baseline, child):
        timer = start_timer(tmp_path, 0.5)
        assert timer.stdout is not None
        time.sleep(1.0)  # the timer waits on the gate all along, behind the pinned evaluation
        assert not stopped(child) and baseline.frozen_s == 0.0  # the baseline's child kept running
        assert not select.select([timer.stdout], [], [], 0)[0]
        evaluation.upgrade(timeout_s=10.0)  # drops its shared lock and its pin: now the baseline steps aside
        assert pinned_lease.mode == "exclusive"
        evaluation.downgrade()  # the timer went first or goes now
        assert float(timer.stdout.readline()) >= 1.0
        assert baseline.frozen_s > 0.0  # it stood aside for the timer once nothing else kept it out
        timer.wait(10)
        timer_pid = timer.pid
    lines = _timeline(tmp_path)
    (timer_hold,) = [(e["start"], e["end"]) for e in lines if e["pid"] == timer_pid and e["activity"] == "lease_exclusive"]
    (own,) = [(e["start"], e["end"]) for e in lines if e["pid"] != timer_pid and e["activity"] == "lease_exclusive"]
    (aside,) = [(e["start"], e["end"]) for e in lines if e["activity"] == "lease_yielded"]
    assert own[1] <= timer_hold[0] or timer_hold[1] <= own[0]  # the two windows never overlap (either goes first)
    assert aside[0] <= timer_hold[0] and timer_hold[1] <= aside[1]  # the baseline stood aside for the timer's hold


def test_a_pin_follows_the_shared_lock(tmp_path: Path) -> None:
    """The pin is held exactly while a pinning lease holds its shared lock: not across an upgrade's wait or window."""
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path) as lease, \
            acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path) as other:
        assert not other.timer_blocked_elsewhere()
        lease.pin()
        assert other.timer_blocked_elsewhere() and not lease.timer_blocked_elsewhere()
    with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path) as lease, \
            acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path / "other") as elsewhere:
        lease.pin()
        lease.upgrade(timeout_s=5.0)
        probe = GpuLease("0", "shared", tmp_path / "gpu0.lock", 0.0,
                         _pin_fd=os.open(tmp_path / "gpu0.pin", os.O_RDWR))
        try:
            assert not probe.timer_blocked_elsewhere()  # in its window the lease pins nothing
            lease.downgrade()
            assert probe.timer_blocked_elsewhere()  # shared again, pinned again
        finally:
            os.close(probe._pin_fd)
        assert not elsewhere.timer_blocked_elsewhere()  # another lock folder's GPU 0 is another GPU


def test_the_wait_to_get_onto_a_gpu_is_on_the_timeline_with_what_refused_it(tmp_path: Path) -> None:
    """A shared job that comes while a timer waits on the gate waits behind it (the gate refuses it), then behind the
    timer's hold (the lock does): both counted on its ``lease_acquire`` line, whose span is the wait."""
    holder, _ = _hold("sh", "0", tmp_path, seconds=2.0)  # keeps the timer waiting
    try:
        timer = start_timer(tmp_path, 0.3)
        deadline = time.monotonic() + 10.0
        while not lock_refused(tmp_path / "gpu0.gate", fcntl.LOCK_SH):  # the timer holds the gate: it waits
            assert time.monotonic() < deadline, "the timer never took the gate"
            time.sleep(0.01)
        t0 = time.time()
        with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=tmp_path, poll_s=0.05):
            waited = time.time() - t0
        timer.wait(10)
    finally:
        _stop(holder)
    (line,) = [e for e in _timeline(tmp_path) if e["activity"] == "lease_acquire" and e["pid"] == os.getpid()]
    assert line["end"] - line["start"] == pytest.approx(waited, abs=0.05) and waited >= 0.25  # the timer's hold
    assert line["refused"]["gate"] > 0 and line["refused"]["memory"] == 0 and line["mode"] == "shared"
