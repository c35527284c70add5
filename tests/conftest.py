"""Shared fixtures. The KernelBench data (../shared/kernelbench, or $KERNELBENCH_DIR) is optional: tests that
need it skip cleanly where it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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
