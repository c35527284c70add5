"""Stopping an answer's tree also holds its GPU work (freezer + cuda_lock): its CUDA processes are locked, which
completes what they submitted, before they are stopped, and unlocked after they resume; a process whose queued work
outlasts the wait leaves the tree incomplete, so nothing is timed beside it.

The driver's checkpoint calls exist only on a CUDA host; here a driver stand-in keeps each process's CUDA state and
the order of the calls, over real processes that the freezer really stops. What the real driver does (that a lock
waits for a queued kernel, how long a lock takes) is measured on the device by bench/cuda_lock_probe.py."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from cuda_driver import TIMEOUT, Driver, use_driver
from processes import computes, cpu_seconds

from workflow_scripts.evaluation import cuda_lock, freezer

@contextlib.contextmanager
def parent_and_child(code: str, *args: str) -> Iterator[tuple[int, int]]:
    """A process running ``code`` (which forks one child) and that child; both killed after."""
    proc = subprocess.Popen([sys.executable, "-c", code, *args])
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(proc.pid).children() and time.monotonic() < deadline:
            time.sleep(0.01)
        (child,) = psutil.Process(proc.pid).children()
        yield proc.pid, child.pid
    finally:
        for p in psutil.Process(proc.pid).children(recursive=True):
            p.kill()
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def parent_and_busy_child(holding: Path | None = None) -> Iterator[tuple[int, int]]:
    """A parent and its busy child (the child stands for the answer's CUDA process); ``holding``: a file the parent
    opens first and keeps open."""
    opens = "f = open(sys.argv[1], 'w')\n" if holding is not None else ""
    code = f"import os, sys, time\n{opens}if os.fork() == 0:\n    while True: pass\nwhile True: time.sleep(0.01)\n"
    with parent_and_child(code, *([str(holding)] if holding is not None else [])) as pids:
        yield pids


@pytest.fixture
def tree() -> Iterator[tuple[int, int]]:
    with parent_and_busy_child() as pids:
        yield pids


def test_a_tree_s_cuda_process_is_locked_before_it_is_stopped_and_unlocked_after_it_resumes(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int]) -> None:
    parent, child = tree
    driver = Driver({child})
    use_driver(monkeypatch, driver)
    with freezer.frozen(parent) as frozen:
        assert frozen is not None and frozen.complete and frozen.gpu_work.locked == [child]
        assert driver.states[child] == cuda_lock.STATE_LOCKED
        assert psutil.Process(child).status() == psutil.STATUS_STOPPED
    assert driver.states[child] == cuda_lock.STATE_RUNNING
    # Locked while it ran (a stopped process may not answer the driver), unlocked once it runs again; the parent,
    # without CUDA state, is never locked.
    locks = [(call, pid, status) for call, pid, status in driver.calls if call != "state"]
    assert [(call, pid) for call, pid, _ in locks] == [("lock", child), ("unlock", child)]
    assert locks[0][2] != psutil.STATUS_STOPPED and locks[1][2] != psutil.STATUS_STOPPED


def test_a_tree_whose_queued_gpu_work_outlasts_the_wait_is_incomplete(monkeypatch: pytest.MonkeyPatch,
                                                                      tree: tuple[int, int]) -> None:
    # An answer that queued a long kernel before it was stopped: stopped, but its kernel may still run, so the tree
    # is not complete (a yielding lease then does not step aside; an evaluation records answer_stop_incomplete).
    parent, child = tree
    driver = Driver({child}, queued_s={child: 10 * freezer.STOP_WAIT_S})
    use_driver(monkeypatch, driver)
    with freezer.frozen(parent) as frozen:
        assert frozen is not None and frozen.stops_complete and not frozen.complete
        assert frozen.gpu_work.failed == {child: TIMEOUT} and frozen.gpu_work.locked == []
        # the evaluator's cue to reject an answer so stopped after its timed calls (gpu_work_outlived_call)
        assert frozen.gpu_work.still_running == [child]
    assert "unlock" not in [call for call, _, _ in driver.calls]  # nothing to unlock


def test_a_lock_the_driver_refuses_leaves_the_tree_incomplete_without_calling_the_work_running(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int]) -> None:
    # Another failure than the wait running out (here CUDA_ERROR_NOT_SUPPORTED) is the driver's, not the answer's:
    # nothing is timed beside the tree, and nothing is held against the answer.
    parent, child = tree
    driver = Driver({child})
    driver.lock = lambda pid, timeout_s: 801  # type: ignore[method-assign]
    use_driver(monkeypatch, driver)
    with freezer.frozen(parent) as frozen:
        assert frozen is not None and not frozen.complete
        assert frozen.gpu_work.failed == {child: 801} and frozen.gpu_work.still_running == []


def test_without_the_driver_s_lock_a_tree_is_complete_once_stopped(monkeypatch: pytest.MonkeyPatch,
                                                                   tree: tuple[int, int]) -> None:
    parent, child = tree
    monkeypatch.setattr(cuda_lock, "available", lambda: False)  # an older driver, or none
    with freezer.frozen(parent) as frozen:
        assert frozen is not None and frozen.complete and frozen.gpu_work.locked == []
        assert psutil.Process(child).status() == psutil.STATUS_STOPPED


def test_a_trusted_tree_held_at_the_gpu_only_runs_on_with_its_cuda_process_locked(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int]) -> None:
    # A baseline's child (baselines.compile_beside_timing): locked, not stopped, so its compiling goes on.
    parent, child = tree
    driver = Driver({child})
    use_driver(monkeypatch, driver)
    with freezer.frozen(parent, freezer.Hold.GPU_HELD) as held:
        assert held is not None and not held.stops and held.complete and held.gpu_work.locked == [child]
        assert not held.stopped and driver.states[child] == cuda_lock.STATE_LOCKED
        assert psutil.Process(child).status() != psutil.STATUS_STOPPED and computes(child)
    assert driver.states[child] == cuda_lock.STATE_RUNNING


def test_a_trusted_tree_is_stopped_where_the_driver_cannot_lock(monkeypatch: pytest.MonkeyPatch,
                                                               tree: tuple[int, int]) -> None:
    parent, child = tree
    monkeypatch.setattr(cuda_lock, "available", lambda: False)
    with freezer.frozen(parent, freezer.Hold.GPU_HELD) as held:
        assert held is not None and held.stops and held.complete
        assert psutil.Process(child).status() == psutil.STATUS_STOPPED
    assert psutil.Process(child).status() != psutil.STATUS_STOPPED


def test_hold_locks_each_running_cuda_process_once_and_release_undoes_it(monkeypatch: pytest.MonkeyPatch,
                                                                         tree: tuple[int, int]) -> None:
    parent, child = tree
    driver = Driver({parent, child})
    use_driver(monkeypatch, driver)
    held = cuda_lock.hold([parent, child], 1.0)
    cuda_lock.hold([parent, child], 1.0, into=held)  # the second pass locks nothing again
    assert held.locked == [parent, child] and held.complete
    assert [call for call, _, _ in driver.calls if call != "state"] == ["lock", "lock"]
    cuda_lock.release(held)
    assert held.locked == [] and set(driver.states.values()) == {cuda_lock.STATE_RUNNING}


def test_a_stopped_cuda_process_is_never_asked_and_leaves_the_tree_incomplete(monkeypatch: pytest.MonkeyPatch,
                                                                              tree: tuple[int, int]) -> None:
    # The driver answers only a running process (a lock asked of a stopped one did not return within a minute on an
    # H100): an answer that stopped itself must not hang the trusted side.
    parent, child = tree
    driver = Driver({child})
    use_driver(monkeypatch, driver)
    os.kill(child, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 5
        while psutil.Process(child).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
            time.sleep(0.01)
        with freezer.frozen(parent) as frozen:
            assert frozen is not None and not frozen.complete
            assert frozen.gpu_work.failed == {child: cuda_lock.NOT_RUNNING} and frozen.gpu_work.still_running == []
        assert [call for call in driver.calls if call[1] == child] == []  # neither asked for its state nor locked
    finally:
        os.kill(child, signal.SIGCONT)


def test_a_driver_call_past_its_deadline_counts_as_failed_and_a_late_lock_is_undone(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int]) -> None:
    parent, child = tree
    driver = Driver({child})
    granted = threading.Event()

    def slow_lock(pid: int, timeout_s: float) -> int:
        time.sleep(1.5)  # the caller's deadline is the lock's timeout plus CALL_MARGIN_S: 0.2 s here
        code = Driver.lock(driver, pid, timeout_s)
        granted.set()
        return code

    driver.lock = slow_lock  # type: ignore[method-assign]
    use_driver(monkeypatch, driver)
    monkeypatch.setattr(cuda_lock, "CALL_MARGIN_S", 0.1)
    t0 = time.monotonic()
    held = cuda_lock.hold([child], 0.1)
    assert time.monotonic() - t0 < 1.2  # the caller went on without the lock
    assert held.failed == {child: cuda_lock.UNANSWERED} and held.locked == [] and not held.complete
    assert granted.wait(5)
    deadline = time.monotonic() + 5
    while driver.states[child] != cuda_lock.STATE_RUNNING and time.monotonic() < deadline:
        time.sleep(0.01)
    assert driver.states[child] == cuda_lock.STATE_RUNNING  # the late lock was undone: nobody holds it
    assert [call for call, _, _ in driver.calls if call != "state"] == ["lock", "unlock"]


def test_a_process_the_driver_keeps_locked_fails_the_release(monkeypatch: pytest.MonkeyPatch,
                                                             tree: tuple[int, int]) -> None:
    # Its next CUDA call would wait forever: the job's failure (the evaluator raises InfrastructureError), not a
    # verdict of the answer's.
    parent, child = tree
    driver = Driver({child})
    driver.unlock = lambda pid: 999  # type: ignore[method-assign]
    use_driver(monkeypatch, driver)
    held = cuda_lock.hold([child], 1.0)
    with pytest.raises(cuda_lock.UnlockFailed, match=str(child)):
        cuda_lock.release(held)
    assert held.locked == []


def test_protocol_record_loads_no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    # The record is written for answers rejected before the job binds its GPU: initialising the driver then would fix
    # which card the reference lands on (CUDA_VISIBLE_DEVICES is read once, at cuInit).
    from workflow_scripts.evaluation.config import EvalConfig
    from workflow_scripts.evaluation.verdict import protocol_record

    def refuse() -> None:
        raise AssertionError("the driver was initialised")

    monkeypatch.setattr(cuda_lock, "_driver", refuse)
    monkeypatch.setattr(cuda_lock, "_library", lambda: object())  # a host whose libcuda has the calls
    assert protocol_record(EvalConfig(device="cuda"))["gpu_work_held"] == "cuda_lock"
    monkeypatch.setattr(cuda_lock, "_library", lambda: None)
    assert protocol_record(EvalConfig(device="cuda"))["gpu_work_held"] == "stop only"


def test_a_process_without_cuda_state_that_holds_a_gpu_device_file_leaves_the_tree_incomplete(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A process the driver finds without CUDA state is not locked and runs on until it is stopped: it may have
    started CUDA meanwhile, or drive the GPU without the CUDA library (whose work the lock neither sees nor
    completes). Stopped, a GPU device file among its open files leaves the tree incomplete; without one it is
    complete (the CUDA process locked, the other stopped). The device files here are stand-ins under tmp_path."""
    monkeypatch.setattr(freezer, "GPU_DEVICE_PREFIX", str(tmp_path / "nvidia"))
    for opened, complete in ((tmp_path / "nvidia0", False), (tmp_path / "notes.txt", True)):
        with parent_and_busy_child(holding=opened) as (parent, child):
            use_driver(monkeypatch, Driver({child}))  # the child has CUDA state; the parent, holding the file, none
            with freezer.frozen(parent) as frozen:
                assert frozen is not None and frozen.stops_complete and frozen.gpu_work.locked == [child]
                assert frozen.complete is complete, opened
                assert frozen.gpu_work.failed == ({} if complete else {parent: cuda_lock.NOT_RUNNING})


def test_a_process_that_mapped_a_gpu_device_file_and_closed_it_still_holds_the_gpu(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    device = tmp_path / "nvidia0"
    device.write_bytes(bytes(4096))
    monkeypatch.setattr(freezer, "GPU_DEVICE_PREFIX", str(tmp_path / "nvidia"))
    # libc's mmap, then the descriptor closed (Python's mmap keeps a duplicate of it open)
    code = ("import ctypes, os, sys, time\nlibc = ctypes.CDLL(None)\nlibc.mmap.restype = ctypes.c_void_p\n"
            "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, "
            "ctypes.c_long]\nfd = os.open(sys.argv[1], os.O_RDWR)\nassert libc.mmap(None, 4096, 3, 1, fd, 0) != -1\n"
            "os.close(fd)\nprint('mapped', flush=True)\ntime.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(device)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "mapped"
        assert not any(os.readlink(f"/proc/{proc.pid}/fd/{fd}") == str(device)
                       for fd in os.listdir(f"/proc/{proc.pid}/fd"))  # no descriptor left, only the mapping
        assert freezer.opens_gpu_device(proc.pid) is True
    finally:
        proc.kill()
        proc.wait()


def test_a_process_whose_open_files_cannot_be_read_may_hold_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    def unreadable(path: str) -> list[str]:
        raise PermissionError(path)

    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert freezer.opens_gpu_device(idle.pid) is False  # a process that never opened the GPU
        monkeypatch.setattr(freezer.os, "listdir", unreadable)
        assert freezer.opens_gpu_device(idle.pid) is True
        monkeypatch.undo()
    finally:
        idle.kill()
        idle.wait()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert freezer.opens_gpu_device(gone.pid) is False  # gone: nothing of it can run


# A tree for ``Hold.LOCKED_RUNNING``: a parent without CUDA state and its busy child (the answer's CUDA process), which
# starts a process of its own once the file named by argv[1] exists (an answer that forks while it is held).
SPAWNING_CHILD = """
import os, subprocess, sys, time
if os.fork() == 0:
    while not os.path.exists(sys.argv[1]):
        sum(range(10000))
    subprocess.Popen([sys.executable, "-c", "while True: pass"])
    while True: sum(range(10000))
while True: time.sleep(0.01)
"""


@contextlib.contextmanager
def parent_and_spawning_child(go: Path) -> Iterator[tuple[int, int]]:
    with parent_and_child(SPAWNING_CHILD, str(go)) as pids:
        yield pids


def _spawned_once(go: Path, child: int, meanwhile: Callable[[], None] = lambda: None) -> psutil.Process:
    """The process ``child`` (of ``parent_and_spawning_child``) starts once ``go`` exists; ``meanwhile`` runs at each
    wait for it."""
    go.touch()
    deadline = time.monotonic() + 10
    while not psutil.Process(child).children() and time.monotonic() < deadline:
        meanwhile()
        time.sleep(0.005)
    (spawned,) = psutil.Process(child).children()
    return spawned


def test_an_answer_tree_held_locked_running_runs_its_cuda_process_on_and_stops_the_rest(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # evaluation.compile_beside_timing: the answer's CUDA process is locked and computes on (its kernels' compiling),
    # every other process of its tree is stopped; its CPU seconds while held are counted (the evidence of its load
    # beside the other job's timing), and both are resumed and unlocked at the thaw.
    with parent_and_spawning_child(tmp_path / "go") as (parent, child):
        driver = Driver({child})
        use_driver(monkeypatch, driver)
        with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
            assert held is not None and not held.stops and held.complete
            assert held.gpu_work.locked == [child] and driver.states[child] == cuda_lock.STATE_LOCKED
            assert list(held.stopped) == [parent] and psutil.Process(parent).status() == psutil.STATUS_STOPPED
            busy_from = cpu_seconds(child)
            assert psutil.Process(child).status() != psutil.STATUS_STOPPED and computes(child)
            busy_to = cpu_seconds(child)
        # It computed while held, counted as the kernel counts it: the hold spans busy_from to busy_to.
        assert held.cpu_s >= busy_to - busy_from > 0 and driver.states[child] == cuda_lock.STATE_RUNNING
        assert psutil.Process(parent).status() != psutil.STATUS_STOPPED
        assert _asked_while_stopped(driver) == []  # the driver answers only a running process


def test_a_process_that_appears_while_an_answer_tree_is_held_is_stopped_by_the_recheck(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A process started while held is not locked (the driver was asked before it was there): the recheck, at every
    # poll of the step-aside, stops it before it could have a context; it is resumed with the tree.
    go = tmp_path / "go"
    with parent_and_spawning_child(go) as (parent, child):
        use_driver(monkeypatch, Driver({child}))
        with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
            assert held is not None
            spawned = _spawned_once(go, child, held.recheck)  # rechecked meanwhile: nothing new, nothing stopped
            held.recheck()
            assert held.late_stops == 1 and spawned.pid in held.stopped
            assert _comes_to_stop(spawned.pid) and psutil.Process(child).status() != psutil.STATUS_STOPPED
            assert held.complete  # it could not have run GPU work: nothing of the tree's does beside the timing
        assert spawned.status() != psutil.STATUS_STOPPED


def _comes_to_stop(pid: int) -> bool:
    """Whether the process stands stopped within a second (a SIGSTOP lands once it is scheduled: on a loaded host, not
    at once)."""
    deadline = time.monotonic() + 1.0
    while psutil.Process(pid).status() != psutil.STATUS_STOPPED and time.monotonic() < deadline:
        time.sleep(0.005)
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


def _asked_while_stopped(driver: Driver) -> list[tuple[str, int]]:
    return [(call, pid) for call, pid, status in driver.calls if status == psutil.STATUS_STOPPED]


@pytest.mark.parametrize("how", ["unlocked", "exec'd"])
def test_a_locked_process_that_frees_itself_is_stopped_and_breaks_the_hold(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int], how: str) -> None:
    # Running again (its own unlock), or without CUDA state (it exec'd another program, which may make a context of
    # its own): stopped, the tree no longer complete, the answer's record rejected (hold_broken); never asked again
    # once stopped (the driver answers only a running process).
    parent, child = tree
    driver = Driver({child})
    use_driver(monkeypatch, driver)
    with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
        assert held is not None and held.complete
        held.recheck()
        assert held.complete and child not in held.stopped  # still locked: left running
        if how == "unlocked":
            driver.states[child] = cuda_lock.STATE_RUNNING
        else:
            del driver.states[child]
        held.recheck()
        assert held.gpu_work.failed == {child: freezer.UNLOCKED_ITSELF} and not held.complete and held.broken
        assert child in held.stopped and _comes_to_stop(child)
        held.recheck()
    assert psutil.Process(child).status() != psutil.STATUS_STOPPED
    assert _asked_while_stopped(driver) == []


def test_a_driver_that_does_not_answer_leaves_the_hold_incomplete_without_blaming_the_answer(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int]) -> None:
    parent, child = tree
    driver = Driver({child})
    use_driver(monkeypatch, driver)
    with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
        assert held is not None
        monkeypatch.setattr(cuda_lock, "state", lambda pid: (999, -1))  # a code the driver should not give
        held.recheck()
        assert held.gpu_work.failed == {child: cuda_lock.UNANSWERED} and not held.complete and not held.broken
        assert _comes_to_stop(child)


@pytest.mark.parametrize("burst", [False, True])
def test_a_stopped_process_resumed_by_a_locked_one_breaks_the_hold(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int], burst: bool) -> None:
    # A locked process runs on and shares the answer's user: it can send SIGCONT to a stopped sibling (its own code
    # under the audit hook is refused that; native code is not). Found running, or (a burst between two rechecks)
    # with its CPU time or context switches moved once they had settled: the hold is broken and the whole tree,
    # locked process too, stands stopped until the thaw.
    parent, child = tree
    use_driver(monkeypatch, Driver({child}))
    with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
        assert held is not None and parent in held.stopped
        for _ in range(3):  # an honest tree: nothing breaks, its stopped process's counters settle
            held.recheck()
            time.sleep(0.005)
        assert held.complete
        os.kill(parent, signal.SIGCONT)
        time.sleep(0.05)  # it runs its loop (10-ms sleeps)
        if burst:
            os.kill(parent, signal.SIGSTOP)
            assert _comes_to_stop(parent)
        held.recheck()
        assert held.broken == [f"stopped process {parent} ran"] and not held.complete
        assert _comes_to_stop(parent) and _comes_to_stop(child)
    assert psutil.Process(parent).status() != psutil.STATUS_STOPPED
    assert psutil.Process(child).status() != psutil.STATUS_STOPPED


def test_a_process_kept_running_by_sigcont_as_each_stop_lands_breaks_the_hold(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A process started while held, resumed again after each SIGSTOP: still running STOP_GRACE_POLLS rechecks after
    # its first stop, it breaks the hold.
    go = tmp_path / "go"
    with parent_and_spawning_child(go) as (parent, child):
        use_driver(monkeypatch, Driver({child}))
        with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
            assert held is not None
            spawned = _spawned_once(go, child)
            for _ in range(freezer.STOP_GRACE_POLLS + 1):
                held.recheck()
                if held.broken:
                    break
                os.kill(spawned.pid, signal.SIGCONT)
            assert held.broken == [f"stopped process {spawned.pid} ran"] and held.late_stops == 1
            assert _comes_to_stop(spawned.pid) and _comes_to_stop(child)


def test_a_recheck_that_fails_stops_the_whole_tree(monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int]) -> None:
    parent, child = tree
    use_driver(monkeypatch, Driver({child}))
    with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
        assert held is not None

        def no_listing(root: int) -> list[psutil.Process]:
            raise RuntimeError("no listing")

        monkeypatch.setattr(freezer, "_tree", no_listing)
        held.recheck()  # never raises into the step-aside
        assert held.unconfirmed and not held.broken and not held.complete
        assert _comes_to_stop(child)  # the locked one too
    assert psutil.Process(child).status() != psutil.STATUS_STOPPED


def test_a_process_whose_main_thread_ended_still_runs_while_a_thread_of_it_does() -> None:
    # Its status reads "zombie" (the main thread's), yet a thread of it lives on, and could hold CUDA: it runs until
    # stopped, and is gone only once no thread is left.
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=lambda: time.sleep(60)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        process = psutil.Process(proc.pid)
        deadline = time.monotonic() + 10
        while process.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process.status() == psutil.STATUS_ZOMBIE and cuda_lock.process_runs(process) is True
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while cuda_lock.process_runs(process) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert cuda_lock.process_runs(process) is False
    finally:
        proc.kill()
        proc.wait()
    assert cuda_lock.process_runs(process) is None


def test_an_answer_tree_held_locked_running_is_stopped_whole_where_the_driver_cannot_lock(
        monkeypatch: pytest.MonkeyPatch, tree: tuple[int, int]) -> None:
    parent, child = tree
    monkeypatch.setattr(cuda_lock, "available", lambda: False)
    with freezer.frozen(parent, freezer.Hold.LOCKED_RUNNING) as held:
        assert held is not None and held.stops and held.hold is freezer.Hold.STOPPED and held.complete
        assert psutil.Process(child).status() == psutil.STATUS_STOPPED
    assert freezer.beside_others_timing(freezer.Hold.LOCKED_RUNNING) == "stopped"
    monkeypatch.setattr(cuda_lock, "available", lambda: True)
    assert freezer.beside_others_timing(freezer.Hold.LOCKED_RUNNING) == "locked_running"


@pytest.mark.parametrize(("cpu_s", "held_s", "flagged"), [
    (1.9, 1.0, False),  # one compile thread and some: an honest answer
    (2.1, 1.0, True),   # more than two cores on average
    (0.9, 0.4, False),  # too short a hold to judge
])
def test_cpu_beside_a_timing_is_flagged_past_two_cores(cpu_s: float, held_s: float, flagged: bool) -> None:
    assert freezer.cpu_beside_timing_flagged(cpu_s, held_s) is flagged
