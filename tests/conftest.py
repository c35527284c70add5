"""Shared fixtures. The KernelBench data (../shared/kernelbench, or $KERNELBENCH_DIR) is optional: tests that
need it skip cleanly where it is absent. ``small_run`` is one small finished pipeline run shared by the end-to-end
tests of the store and of configuration errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml


def kernelbench_dir() -> Path:
    # CI clones the repo with shared/ beside it: <parent>/<clone> and <parent>/shared/kernelbench.
    env = os.environ.get("KERNELBENCH_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "kernelbench"


@pytest.fixture(scope="session")
def kb_dir() -> Path:
    """A KernelBench checkout with both levels and the prompt files, or a skip."""
    d = kernelbench_dir()
    if not (d / "KernelBench" / "level1").is_dir() or not (d / "src/kernelbench/prompts/prompts.toml").is_file():
        pytest.skip(f"KernelBench data not available at {d} (set KERNELBENCH_DIR)")
    return d


def snakemake(cwd: Path, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    """The Snakemake CLI in a subprocess, as a user runs it from the workflow root."""
    return subprocess.run(
        [sys.executable, "-m", "snakemake", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def snakemake_cli():
    """``snakemake(cwd, *args)`` for test modules (conftest is not imported by name)."""
    return snakemake


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


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory) -> SmallRun:
    """Two demo problems, three models (twin shares expert's answers; garbled's second completion is not UTF-8),
    run to the summary once per session. Tests that change it leave it complete and consistent again."""
    from workflow_scripts.devtools.workspace import copy_workflow

    work = copy_workflow(tmp_path_factory.mktemp("small"))
    garbled = work / "garbled"
    garbled.mkdir()
    (garbled / "level1_1.txt").write_bytes((work / "demo/completions/expert/level1_1.txt").read_bytes())
    (garbled / "level1_2.txt").write_bytes(b"\xff\xfe not utf-8 \x80")
    config = yaml.safe_load((work / "config.yaml").read_text())
    config["suite"].update(levels=[1], only={"1": [1, 2]})
    config["models"] = {name: config["models"][name] for name in ("expert", "twin")}
    config["models"]["garbled"] = {"label": "Garbled", "kind": "cached", "completions": "garbled"}
    config["summary"].update(reference="expert", resamples=1000)
    # Eager speedups from the baseline stage (no paired timing), as the published study's rows have them.
    config["evaluation"]["paired_block"] = 0
    # torch.compile's C++ build takes minutes per problem on a shared CPU; these tests read only eager numbers, and
    # an unknown mode fails at once (the baseline records compile_status "error: ...").
    config["baselines"]["compile_mode"] = "no-compile-in-tests"
    config.update(results_dir=SMALL_RESULTS, store=f"{SMALL_RESULTS}/.store")  # its own folder, as every configuration
    (work / "small.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    run = SmallRun(work, "small.yaml")
    done = run.snakemake("--cores", "2")
    assert done.returncode == 0, done.stderr[-5000:]
    return run
