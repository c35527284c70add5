"""What the sandbox tests look for on the host: live processes whose command line carries a marker (a process an
answer started and that outlived its evaluation). Imported by test modules (pytest puts tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path


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
