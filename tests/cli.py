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


def study_on_disk(work: Path, suite: dict | None = None) -> Path:
    """What the study's start-up checks want before they plan its jobs, in a copy of the workflow: its base model's
    and adapters' folders (an adapter_config.json each, no weights) and, for its command-line models, leave to run
    their tools (offline: false). Returns an overlay to pass after config/study.yaml (with ``suite``'s keys)."""
    import yaml

    study = yaml.safe_load((work / "config" / "study.yaml").read_text())
    overlay: dict = {"models": {}}
    for name, entry in study["models"].items():
        if entry["kind"] == "vllm":
            (work / entry["base_model"]).mkdir(parents=True, exist_ok=True)
            if entry.get("adapter"):
                (work / entry["adapter"]).mkdir(parents=True, exist_ok=True)
                (work / entry["adapter"] / "adapter_config.json").write_text("{}")
        elif entry["kind"] == "cli":
            overlay["models"][name] = {"offline": False}
    if suite is not None:
        overlay["suite"] = suite
    path = work / "study_on_disk.yaml"
    path.write_text(yaml.safe_dump(overlay))
    return path
