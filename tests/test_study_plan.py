"""The study's configuration plans its whole DAG against a real KernelBench checkout (a dry run): 200 problems,
15 models. The fetch-only plan on a fresh clone is in tests/test_pipeline_e2e.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli import study_on_disk

from workflow_scripts.devtools.workspace import copy_workflow


@pytest.mark.integration
def test_the_study_plans_every_evaluation_against_a_kernelbench_checkout(tmp_path: Path, kb_dir: Path) -> None:
    work = copy_workflow(tmp_path / "study")
    # The shared checkout has no git history nor REVISION file: its revision cannot be confirmed (the start-up check
    # that refuses that is tests/test_config_errors.py's).
    overlay = study_on_disk(work, {"path": str(kb_dir), "fetch": False, "revision": None})
    dry = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--configfile",
                          "config/study.yaml", str(overlay)], cwd=work, capture_output=True, text=True, timeout=600)
    # The CLI models' command templates ("--model {model}") are settings, never wildcards (rule summary failed with
    # a WildcardError before its settings became a function).
    assert dry.returncode == 0, dry.stderr[-3000:]
    planned = {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", dry.stdout, re.MULTILINE)}
    models = len(yaml.safe_load((work / "config" / "study.yaml").read_text())["models"])
    assert models == 15
    assert planned["evaluate"] == 200 * models and planned["baseline"] == 200
    assert planned["summary"] == 1 and planned["collect"] == 1
