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
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

CUDA_SUCCESS = 0
CUDA_ERROR_TIMEOUT = 909  # the lock's timeout passed with the process's submitted work still running
STATE_RUNNING, STATE_LOCKED = 0, 1  # CUprocessState


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
    """What ``held_off`` did to a set of processes: those it locked, and those with CUDA state it could not lock."""

    locked: list[int] = field(default_factory=list)
    failed: dict[int, int] = field(default_factory=dict)  # pid -> the driver's result code

    @property
    def complete(self) -> bool:
        """Every process with CUDA state among them is locked: none has work on the GPU, none can submit more."""
        return not self.failed

    @property
    def still_running(self) -> list[int]:
        """The processes whose submitted GPU work was still running when the lock's wait ran out (other failures are
        the driver's: an unsupported process, say)."""
        return [pid for pid, code in self.failed.items() if code == CUDA_ERROR_TIMEOUT]


def hold(pids: Sequence[int], timeout_s: float, into: HeldWork | None = None) -> HeldWork:
    """Lock each of ``pids`` that has CUDA state and is running (``into``'s locked ones again: no), those without
    are left alone; the locks go into ``into`` (a new record where None), to be undone by ``release``. With no driver
    support nothing is locked and the record is complete: the caller's stop is all there is."""
    held = into if into is not None else HeldWork()
    if not available():
        return held
    for pid in pids:
        if pid in held.locked or state(pid) != STATE_RUNNING:
            continue  # locked already, or no CUDA state: nothing of it can run on the GPU
        code = lock(pid, timeout_s)
        if code == CUDA_SUCCESS:
            held.locked.append(pid)
            held.failed.pop(pid, None)
        elif state(pid) is not None:  # it still has CUDA state, unlocked: it could run beside what comes next
            held.failed[pid] = code
    return held


def release(held: HeldWork) -> None:
    """Unlock what ``hold`` locked (a process that ended meanwhile: nothing to unlock)."""
    for pid in held.locked:
        unlock(pid)
    held.locked.clear()
