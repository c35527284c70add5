"""A stand-in for the CUDA driver's checkpoint calls (``cuda_lock.state``/``lock``/``unlock``), which exist only on a
CUDA host: it keeps each process's CUDA state and the order of the calls, over real processes. What the real driver
does is measured on the device by bench/cuda_lock_probe.py (bench/README.md, s29)."""

from __future__ import annotations

import psutil
import pytest

from workflow_scripts.evaluation import cuda_lock

TIMEOUT = 600  # CUDA_ERROR_NOT_READY: what the driver returned as a lock's wait ran out (bench/cuda_lock_probe.py)


class Driver:
    """The checkpoint calls over a set of pids with CUDA state (``every_pid``: every process has); ``queued_s``: a
    pid's submitted work left, which a lock waits for up to its timeout."""

    def __init__(self, cuda_pids: set[int], queued_s: dict[int, float] | None = None, every_pid: bool = False) -> None:
        self.states = {pid: cuda_lock.STATE_RUNNING for pid in cuda_pids}
        self.queued_s = queued_s or {}
        self.every_pid = every_pid
        self.calls: list[tuple[str, int, str]] = []  # (call, pid, the process's status then)

    def _note(self, call: str, pid: int) -> None:
        self.calls.append((call, pid, psutil.Process(pid).status()))

    def state(self, pid: int) -> tuple[int, int]:
        self._note("state", pid)
        if self.every_pid:
            self.states.setdefault(pid, cuda_lock.STATE_RUNNING)
        if pid not in self.states:
            return cuda_lock.CUDA_ERROR_NOT_INITIALIZED, -1  # what the driver says of a process without CUDA state
        return cuda_lock.CUDA_SUCCESS, self.states[pid]

    def lock(self, pid: int, timeout_s: float) -> int:
        self._note("lock", pid)
        if self.queued_s.get(pid, 0.0) > timeout_s:
            return TIMEOUT  # the driver gave up: the process stays running
        self.states[pid] = cuda_lock.STATE_LOCKED
        return cuda_lock.CUDA_SUCCESS

    def unlock(self, pid: int) -> int:
        self._note("unlock", pid)
        self.states[pid] = cuda_lock.STATE_RUNNING
        return cuda_lock.CUDA_SUCCESS


def use_driver(monkeypatch: pytest.MonkeyPatch, driver: Driver) -> None:
    monkeypatch.setattr(cuda_lock, "available", lambda: True)
    monkeypatch.setattr(cuda_lock, "state", driver.state)
    monkeypatch.setattr(cuda_lock, "lock", driver.lock)
    monkeypatch.setattr(cuda_lock, "unlock", driver.unlock)
