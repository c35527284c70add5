"""What the tests look for in a host's processes: live processes whose command line carries a marker (a process an
answer started and that outlived its evaluation), and whether a process computes. Imported by test modules (pytest
puts tests/ on sys.path)."""

from __future__ import annotations

import time
from pathlib import Path

import psutil


def processes_with(marker: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "cmdline").read_bytes():
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def cpu_seconds(pid: int) -> float:
    """The process's CPU seconds so far (user and system), from the kernel's clock ticks (10 ms steps)."""
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def computes(pid: int, timeout_s: float = 5.0) -> bool:
    """Whether the process's CPU seconds grow within ``timeout_s``: it runs. Polled rather than slept for a fixed
    while: on a loaded 2-core CI host a busy process may get no clock tick in a few hundred milliseconds."""
    before = cpu_seconds(pid)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.02)
        if cpu_seconds(pid) > before:
            return True
    return False
