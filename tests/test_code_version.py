"""The code version every row carries (core/store.py package_version): the git commit when the package is
unmodified at it, the commit and the source hash when it was changed since, the source hash alone without git."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def version_in(folder: Path) -> str:
    done = subprocess.run([sys.executable, "-c", "from workflow_scripts.core.store import package_version; "
                           "print(package_version())"], cwd=folder, capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout.strip()


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=folder,
                          capture_output=True, text=True, check=True, timeout=120).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.integration
def test_version_is_the_commit_the_changed_source_or_the_source_alone(tmp_path: Path) -> None:
    copy = tmp_path / "workflow"
    shutil.copytree(ROOT / "workflow_scripts", copy / "workflow_scripts", ignore=shutil.ignore_patterns("__pycache__"))
    without_git = version_in(copy)
    assert re.fullmatch(r"source:[0-9a-f]{64}", without_git), without_git

    git(copy, "init", "-q")
    git(copy, "add", "workflow_scripts")
    git(copy, "commit", "-q", "-m", "x")
    commit = git(copy, "rev-parse", "HEAD")
    assert version_in(copy) == f"git:{commit}"

    helper = copy / "workflow_scripts" / "scoring" / "metrics.py"
    helper.write_text(helper.read_text() + "\n# changed\n")
    changed = version_in(copy)
    assert changed.startswith(f"git:{commit}+source:") and changed.split("+")[1] != without_git

    helper.write_text(helper.read_text().removesuffix("\n# changed\n"))
    (copy / "workflow_scripts" / "scoring" / "new_helper.py").write_text("X = 1\n")  # untracked: a change too
    assert version_in(copy).startswith(f"git:{commit}+source:")


@pytest.mark.integration
def test_devtools_are_no_part_of_the_source_hash(tmp_path: Path) -> None:
    copy = tmp_path / "workflow"
    shutil.copytree(ROOT / "workflow_scripts", copy / "workflow_scripts", ignore=shutil.ignore_patterns("__pycache__"))
    before = version_in(copy)
    (copy / "workflow_scripts" / "devtools" / "workspace.py").write_text("# a test helper changed\n")
    assert version_in(copy) == before
    (copy / "workflow_scripts" / "core" / "records.py").write_text(
        (copy / "workflow_scripts" / "core" / "records.py").read_text() + "# changed\n")
    assert version_in(copy) != before
