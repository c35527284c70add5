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
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

CUDA_SUCCESS = 0
# The lock's timeout passed with the process's submitted work still running: CUDA_ERROR_NOT_READY as measured (driver
# 580), CUDA_ERROR_TIMEOUT as the name would suggest on another driver.
STILL_RUNNING_CODES = frozenset({600, 909})
STATE_RUNNING, STATE_LOCKED = 0, 1  # CUprocessState
# What ``hold`` records where it did not ask the driver, or the driver did not answer (its own codes are >= 0).
UNANSWERED = -1  # the call passed its deadline
NOT_RUNNING = -2  # the process was stopped (by itself or another): the driver would not answer
# How long past the lock's own timeout a call may take before the caller goes on without it; a state query gets this.
CALL_MARGIN_S = 1.0


class _LockArgs(ctypes.Structure):
    # CUcheckpointLockArgs: a timeout (0: none) and reserved fields that must be zero
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


@functools.cache
def _driver() -> ctypes.CDLL | None:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if not all(hasattr(cuda, name) for name in ("cuCheckpointProcessLock", "cuCheckpointProcessUnlock",
                                                   "cuCheckpointProcessGetState")):
        return None
    return cuda if cuda.cuInit(0) == CUDA_SUCCESS else None


def available() -> bool:
    """Whether this host's driver can lock another process's CUDA work."""
    return _driver() is not None


def state(pid: int) -> int | None:
    """The process's CUDA state (``STATE_RUNNING``, ``STATE_LOCKED``, ...); None where it has no CUDA state (or the
    driver cannot say)."""
    cuda = _driver()
    if cuda is None:
        return None
    value = ctypes.c_int(-1)
    return value.value if cuda.cuCheckpointProcessGetState(ctypes.c_int(pid), ctypes.byref(value)) == CUDA_SUCCESS \
        else None


def lock(pid: int, timeout_s: float) -> int:
    """Lock ``pid``'s CUDA work (its submitted work done, its further calls held): the driver's result code,
    ``CUDA_SUCCESS`` once locked. Past ``timeout_s`` the driver gives up and leaves the process running."""
    cuda = _driver()
    if cuda is None:
        raise RuntimeError("the CUDA driver's checkpoint lock is not available on this host")
    args = _LockArgs(max(1, int(timeout_s * 1000)), 0)
    return int(cuda.cuCheckpointProcessLock(ctypes.c_int(pid), ctypes.byref(args)))


def unlock(pid: int) -> int:
    cuda = _driver()
    if cuda is None:
        raise RuntimeError("the CUDA driver's checkpoint lock is not available on this host")
    return int(cuda.cuCheckpointProcessUnlock(ctypes.c_int(pid), None))


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
    that is stopped is not asked (the driver would not answer) and counts as failed. With no driver support nothing
    is locked and the record is complete: the caller's stop is all there is."""
    held = into if into is not None else HeldWork()
    if not available():
        return held
    for pid in pids:
        if pid in held.locked:
            continue
        running = _running(pid)
        if running is None:
            continue  # gone: nothing of it can run
        if not running:
            held.failed[pid] = NOT_RUNNING
            continue
        found = _bounded(lambda pid=pid: state(pid), CALL_MARGIN_S)
        if found is None or found == STATE_LOCKED:
            continue  # no CUDA state, or locked already by another caller: nothing of it runs for us to drain
        code = UNANSWERED if found == UNANSWERED else _lock_bounded(pid, timeout_s)
        if code == CUDA_SUCCESS:
            held.locked.append(pid)
            held.failed.pop(pid, None)
        else:  # it has CUDA state, unlocked: it could run beside what comes next
            held.failed[pid] = code
    return held


def mark_unknown(pids: Sequence[int], into: HeldWork) -> None:
    """Processes that could not be asked (they appeared after the locks, and are stopped now): each may hold CUDA
    work, so each counts as failed."""
    for pid in pids:
        if pid not in into.locked:
            into.failed[pid] = NOT_RUNNING


def release(held: HeldWork) -> None:
    """Unlock what ``hold`` locked (a process that ended meanwhile: nothing to unlock)."""
    for pid in held.locked:
        _bounded(lambda pid=pid: unlock(pid), CALL_MARGIN_S)
    held.locked.clear()


def _running(pid: int) -> bool | None:
    """Whether the process runs (False: stopped or traced), None where it is gone."""
    try:
        status = psutil.Process(pid).status()
    except psutil.Error:
        return None
    if status in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
        return None
    return status not in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)


def _bounded(call: Callable[[], int | None], deadline_s: float) -> int | None:
    """``call``'s result, or UNANSWERED where it has not returned within ``deadline_s`` (it runs on in its thread)."""
    result: list[int | None] = []
    worker = threading.Thread(target=lambda: result.append(call()), name="cuda-lock", daemon=True)
    worker.start()
    worker.join(deadline_s)
    return result[0] if result else UNANSWERED


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
