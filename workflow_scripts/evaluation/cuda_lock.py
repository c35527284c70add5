"""Holding another process's GPU work off through the CUDA driver's checkpoint lock (``cuCheckpointProcessLock``,
driver 550 and later): the driver blocks the process's further CUDA calls and completes the work it already
submitted before the call returns. So a process held this way has nothing left running on the GPU, which stopping it
(``freezer``) alone cannot say: a stopped process's queued kernels still run, and a hostile answer could leave a long
one queued into another job's timing (gpu_lock's "Yielding").

The calls go to libcuda through ctypes from the trusted process, which needs no CUDA context of its own for them
(``cuInit`` only). Where the driver lacks them (an older driver, the CPU), ``available`` is False and callers keep to
stopping alone.

Whether a process has CUDA state at all is asked first (``cuCheckpointProcessGetState``): a process of the tree that
never initialised CUDA (a compile worker, a shell) has nothing on the GPU and is left alone.

Measured on an H100 (driver 580, CUDA 13.0; bench/README.md, s29, ``bench/cuda_lock_probe.py``): a lock took 0.15-0.6
ms and an unlock 0.13-0.6 ms on a process running matmuls back to back or idle; while locked its matmuls stopped and its
CPU thread went on at the same rate; beside a queued 2-s kernel a lock with a 300-ms timeout returned
``CUDA_ERROR_NOT_READY`` (600) and left the process running, one with 5 s returned after 1.19 s (the kernel's rest).
A lock asked of a SIGSTOPped process did not return within a minute despite its 3-s timeout: the driver needs the
process to run to answer. So nothing here asks the driver about a process that is not running, and each call has a
deadline of its own (``_bounded``): a call past it counts as failed, and a lock it grants later is undone at once.
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import psutil

CUDA_SUCCESS = 0
# The lock's timeout passed with the process's submitted work still running: CUDA_ERROR_NOT_READY as measured (driver
# 580), CUDA_ERROR_TIMEOUT as the name would suggest on another driver.
STILL_RUNNING_CODES = frozenset({600, 909})
STATE_RUNNING, STATE_LOCKED = 0, 1  # CUprocessState
# What ``hold`` records where it did not ask the driver, or the driver did not answer (its own codes are >= 0).
UNANSWERED = -1  # the call passed its deadline
NOT_RUNNING = -2  # the process was stopped (by itself or another): the driver would not answer
HELD_ELSEWHERE = -3  # locked, but not by this record: whoever holds it may let it run any moment
# How long past the lock's own timeout a call may take before the caller goes on without it; a state query gets this.
CALL_MARGIN_S = 1.0
T = TypeVar("T")


class _LockArgs(ctypes.Structure):
    # CUcheckpointLockArgs: a timeout (0: none) and reserved fields that must be zero
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


CHECKPOINT_CALLS = ("cuCheckpointProcessLock", "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState")
CUDA_ERROR_NOT_INITIALIZED = 3  # what GetState says of a process without CUDA state (measured)


@functools.cache
def _library() -> ctypes.CDLL | None:
    """libcuda where it has the checkpoint calls; loading it initialises nothing."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    return cuda if all(hasattr(cuda, name) for name in CHECKPOINT_CALLS) else None


@functools.cache
def _driver() -> ctypes.CDLL:
    """libcuda, initialised at the first call that needs it: a freeze, which comes after the job's process bound its
    GPU (reference.bind_gpu sets CUDA_VISIBLE_DEVICES, which the driver reads once, at cuInit)."""
    cuda = _library()
    if cuda is None:
        raise RuntimeError("the CUDA driver's checkpoint lock is not available on this host")
    code = cuda.cuInit(0)
    if code != CUDA_SUCCESS:
        raise RuntimeError(f"cuInit failed ({code}): the checkpoint lock cannot be used")
    return cuda


def available() -> bool:
    """Whether this host's driver has the calls that lock another process's CUDA work (nothing initialised)."""
    return _library() is not None


def state(pid: int) -> tuple[int, int]:
    """The driver's result code and the process's CUDA state (``STATE_RUNNING``, ``STATE_LOCKED``, ...; -1 where the
    code is not ``CUDA_SUCCESS``). ``CUDA_ERROR_NOT_INITIALIZED``: the process has no CUDA state."""
    value = ctypes.c_int(-1)
    code = int(_driver().cuCheckpointProcessGetState(ctypes.c_int(pid), ctypes.byref(value)))
    return code, value.value


def lock(pid: int, timeout_s: float) -> int:
    """Lock ``pid``'s CUDA work (its submitted work done, its further calls held): the driver's result code,
    ``CUDA_SUCCESS`` once locked. Past ``timeout_s`` the driver gives up and leaves the process running."""
    args = _LockArgs(max(1, int(timeout_s * 1000)), 0)
    return int(_driver().cuCheckpointProcessLock(ctypes.c_int(pid), ctypes.byref(args)))


def unlock(pid: int) -> int:
    return int(_driver().cuCheckpointProcessUnlock(ctypes.c_int(pid), None))


class UnlockFailed(RuntimeError):
    """A process this side locked stays locked: its next CUDA call would wait forever (the job's failure, not the
    answer's)."""


@dataclass
class HeldWork:
    """What ``hold`` did to a set of processes: those it locked, and those with CUDA state it could not lock."""

    locked: list[int] = field(default_factory=list)
    failed: dict[int, int] = field(default_factory=dict)  # pid -> the driver's result code, or UNANSWERED/NOT_RUNNING

    @property
    def complete(self) -> bool:
        """Every process with CUDA state among them is locked: none has work on the GPU, none can submit more."""
        return not self.failed

    @property
    def still_running(self) -> list[int]:
        """The processes whose submitted GPU work was still running when the lock's wait ran out (other failures are
        the driver's, or its silence: an unsupported process, say)."""
        return [pid for pid, code in self.failed.items() if code in STILL_RUNNING_CODES]


def hold(pids: Sequence[int], timeout_s: float, into: HeldWork | None = None) -> HeldWork:
    """Lock each of ``pids`` that has CUDA state and is running (``into``'s locked ones again: no), those without
    are left alone; the locks go into ``into`` (a new record where None), to be undone by ``release``. A process
    that is stopped is not asked (the driver would not answer) and counts as failed, as does any answer of the
    driver's but success and "no CUDA state". With no driver support nothing is locked and the record is complete:
    the caller's stop is all there is."""
    held = into if into is not None else HeldWork()
    if not available():
        return held
    for pid in pids:
        if pid in held.locked:
            continue
        running = _running(pid)
        if running is None:
            continue  # gone: nothing of it can run
        code = _held_code(pid, timeout_s) if running else NOT_RUNNING
        if code == CUDA_SUCCESS:
            held.locked.append(pid)
            held.failed.pop(pid, None)
        elif code != CUDA_ERROR_NOT_INITIALIZED:  # it may have CUDA work, unlocked: it could run beside what comes next
            held.failed[pid] = code
    return held


def _held_code(pid: int, timeout_s: float) -> int:
    """The driver's state query, then its lock where the process has CUDA state and runs: the code that decides."""
    found = _bounded(lambda: state(pid), CALL_MARGIN_S)
    if found is None:
        return UNANSWERED
    code, current = found
    if code != CUDA_SUCCESS:
        return code  # CUDA_ERROR_NOT_INITIALIZED: no CUDA state; anything else: the driver cannot tell
    if current == STATE_LOCKED:
        return HELD_ELSEWHERE
    return _lock_bounded(pid, timeout_s)


def lock_state(pid: int, deadline_s: float = CALL_MARGIN_S) -> str:
    """What the driver says of a process this side locked: "locked", "unlocked" (running again), "no_cuda" (no CUDA
    state: it exec'd another program), or "unknown" (no answer within ``deadline_s``, or another code)."""
    found = _bounded(lambda: state(pid), deadline_s)
    if found is None:
        return "unknown"
    code, current = found
    if code == CUDA_ERROR_NOT_INITIALIZED:
        return "no_cuda"
    if code != CUDA_SUCCESS:
        return "unknown"
    return "locked" if current == STATE_LOCKED else "unlocked"


def mark_unknown(pids: Sequence[int], into: HeldWork) -> None:
    """Processes that could not be asked (they appeared after the locks, and are stopped now): each may hold CUDA
    work, so each counts as failed."""
    for pid in pids:
        if pid not in into.locked:
            into.failed[pid] = NOT_RUNNING


def release(held: HeldWork) -> None:
    """Unlock what ``hold`` locked (a process that ended meanwhile: nothing to unlock); one the driver leaves locked
    after a second try raises ``UnlockFailed``."""
    stuck = []
    for pid in held.locked:
        for _ in range(2):
            if _bounded(lambda pid=pid: unlock(pid), CALL_MARGIN_S) == CUDA_SUCCESS or _running(pid) is None:
                break
            now = _bounded(lambda pid=pid: state(pid), CALL_MARGIN_S)
            if now is not None and now[0] == CUDA_SUCCESS and now[1] != STATE_LOCKED:
                break
        else:
            stuck.append(pid)
    held.locked.clear()
    if stuck:
        raise UnlockFailed(f"the CUDA driver left process(es) {stuck} locked after two unlocks")


def _running(pid: int) -> bool | None:
    try:
        return process_runs(psutil.Process(pid))
    except psutil.Error:
        return None


def process_runs(process: psutil.Process) -> bool | None:
    """Whether the process runs (False: stopped or traced), None where it is gone: what the driver needs of it here,
    and what ``freezer`` waits for (a tree is stopped once none of it runs)."""
    try:
        status = process.status()
    except psutil.Error:
        return None
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        # Its main thread ended; the process lives on where other threads of it do (they may run, and hold CUDA).
        return _threads_run(process.pid)
    return status not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


def _threads_run(pid: int) -> bool | None:
    """For a process whose main thread ended: whether a thread of it runs (False: those left are stopped; None: none
    is left)."""
    live = [state for state in thread_states(pid) if state not in ("Z", "X")]
    return None if not live else any(state not in ("T", "t") for state in live)


def thread_states(pid: int) -> list[str]:
    """The state letter of each thread of the process (``/proc/<pid>/task/<tid>/stat``: R, S, D, T, t, Z, ...);
    none where it is gone."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    states = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii", errors="replace") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        except (OSError, IndexError):
            continue  # ended since the listing
    return states


def _bounded(call: Callable[[], T], deadline_s: float) -> T | None:
    """``call``'s result, or None where it has not returned within ``deadline_s`` (it runs on in its thread)."""
    result: list[T] = []
    worker = threading.Thread(target=lambda: result.append(call()), name="cuda-lock", daemon=True)
    worker.start()
    worker.join(deadline_s)
    return result[0] if result else None


def _lock_bounded(pid: int, timeout_s: float) -> int:
    """``lock`` with a deadline of the caller's own: a lock the driver grants after the caller went on is undone."""
    guard = threading.Lock()
    outcome: dict[str, int] = {}
    abandoned = threading.Event()

    def run() -> None:
        code = lock(pid, timeout_s)
        with guard:
            outcome["code"] = code
            if abandoned.is_set() and code == CUDA_SUCCESS:
                unlock(pid)

    worker = threading.Thread(target=run, name="cuda-lock", daemon=True)
    worker.start()
    worker.join(timeout_s + CALL_MARGIN_S)
    with guard:
        if "code" in outcome:
            return outcome["code"]
        abandoned.set()
        return UNANSWERED
