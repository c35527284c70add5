"""The resource limits of an evaluation child: chosen by the trusted side (``Limits``, from the run configuration)
and applied by the child itself (``apply_rlimits``), first thing, before torch or any answer code is imported.
Soft and hard limits are set equal, so the answer cannot raise them again."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any


@dataclass
class Limits:
    nofile: int = 4096
    fsize_bytes: int = 1 << 30  # any one file (logs included); the answer's prints cannot fill the disk
    as_bytes: int | None = None  # CPU only: CUDA reserves huge virtual ranges
    cpu_seconds: int | None = None  # RLIMIT_CPU: a backstop behind the parent's wall-clock timeout
    nproc: int | None = 512  # RLIMIT_NPROC (threads too), set only inside a user namespace (see apply_rlimits)
    tmp_bytes: int = 2 << 30  # the private tmpfs (sandboxed levels)
    tmp_inodes: int = 32768
    # The host-memory cap on the child's whole process tree beside its transport areas (memory_cap.py); None: none.
    memory_bytes: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def apply_rlimits(limits: dict[str, Any], user_namespace: bool = False) -> None:
    """Child side, first thing in ``child.main``, before torch is imported: ``Limits.to_dict()``'s limits."""
    import resource

    def setl(which: int, value: int) -> None:
        try:
            resource.setrlimit(which, (value, value))  # soft = hard: the answer cannot raise it again
        except (ValueError, OSError):
            pass

    setl(resource.RLIMIT_CORE, 0)
    if limits.get("nofile"):
        setl(resource.RLIMIT_NOFILE, int(limits["nofile"]))
    if limits.get("fsize_bytes"):
        setl(resource.RLIMIT_FSIZE, int(limits["fsize_bytes"]))
    if limits.get("as_bytes"):
        setl(resource.RLIMIT_AS, int(limits["as_bytes"]))
    if limits.get("cpu_seconds"):
        setl(resource.RLIMIT_CPU, int(limits["cpu_seconds"]))
    # Linux >= 5.14 counts RLIMIT_NPROC per user namespace; outside one (or older) it would count every process of
    # the host user. The kernel never enforces it for host uid 0.
    if limits.get("nproc") and user_namespace and _kernel_at_least(5, 14):
        setl(resource.RLIMIT_NPROC, int(limits["nproc"]))


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        parts = os.uname().release.split(".")
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)
    except (ValueError, IndexError):
        return False
