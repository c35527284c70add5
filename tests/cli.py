"""The Snakemake CLI as a user runs it, for the end-to-end tests: ``snakemake(cwd, *args)`` runs
``python -m snakemake`` from the workflow's folder in a subprocess; ``SmallRun`` is conftest's small finished run.
Imported by test modules and conftest (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


def snakemake(cwd: Path, *args: str, timeout: float = 1500,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``snakemake *args`` in ``cwd`` (its output captured), within ``timeout`` seconds."""
    return subprocess.run([sys.executable, "-m", "snakemake", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


SMALL_RESULTS = "results/small"  # the small run's results folder (relative to its workflow copy)


@dataclass(frozen=True)
class SmallRun:
    """A finished run of a small configuration on a copy of the workflow (tests/conftest.py small_run)."""

    work: Path
    configfile: str  # relative to work, for --configfile

    def snakemake(self, *args: str, timeout: float = 1500, configfile: str | None = None
                  ) -> subprocess.CompletedProcess:
        """Snakemake in the run's folder with its configuration (or ``configfile``, another one there)."""
        return snakemake(self.work, *args, "--configfile", configfile or self.configfile, timeout=timeout)

    def events(self) -> list[dict]:
        path = self.work / SMALL_RESULTS / ".store" / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]
