"""Baselines: eager and torch.compile(max-autotune) timed like answers, in their own children (CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from workflow_scripts.evaluation.baseline import BaselineConfig, measure_baselines

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

REPO = Path(__file__).resolve().parent.parent
PROBLEMS = REPO / "tests" / "cheats" / "problems"


def baseline_cli(out: Path, *args: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "workflow_scripts", "baseline", "--problem", str(PROBLEMS / "5_LinearReLU.py"),
         "--device", "cpu", "--out", str(out), "--timing-trials", "5", *args],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_eager_and_compile_on_cpu(tmp_path: Path) -> None:
    cache = tmp_path / "compile-cache"
    d = baseline_cli(tmp_path / "base.json", "--compile-cache", str(cache))
    for k in ("eager_ms", "eager_stats", "eager_status", "compile_ms", "compile_stats", "compile_status",
              "compile_time_s", "compile_backend", "device", "timing_mode", "fingerprint"):
        assert k in d, k
    assert d["eager_status"] == "ok" and d["eager_ms"] > 0 and len(d["eager_stats"]["trials"]) == 5
    assert d["compile_status"] == "ok" and d["compile_ms"] > 0 and len(d["compile_stats"]["trials"]) == 5
    assert d["compile_backend"] == "inductor-cpp" and d["compile_mode"] == "max-autotune"
    assert d["compile_time_s"] > 0  # the first call, recorded apart from the run time
    assert d["compile_max_abs_diff_vs_eager"] is not None and d["compile_max_abs_diff_vs_eager"] < 1e-4
    assert d["timing_mode"] == "cpu_wall_interpreter" and d["fingerprint"]["key"]
    assert d["protocol"]["timing"]["trials"] == 5 and d["protocol"]["timing"]["discard_first"] == 1
    # The compile cache: empty at first, it keeps what the compile built, the precompiled header apart (shared by
    # every problem); the same problem compiled again takes it all back and compiles far faster.
    assert d["compile_cache"]["files_seeded"] == 0 and d["compile_cache"]["files_kept"] > 0
    assert list(cache.glob("shared/torchinductor_*/precompiled_headers/*.gch"))
    again = baseline_cli(tmp_path / "again.json", "--compile-cache", str(cache), "--no-eager")
    assert again["compile_cache"]["files_seeded"] == d["compile_cache"]["files_kept"]
    assert again["compile_status"] == "ok" and again["compile_time_s"] < d["compile_time_s"] / 2


def test_failing_baseline_keeps_the_problem(tmp_path: Path) -> None:
    prob = tmp_path / "98_Broken.py"
    prob.write_text((PROBLEMS / "1_ElementwiseAdd.py").read_text().replace(
        "return a + b", "raise RuntimeError('no kernel for this')"))
    res = measure_baselines(prob, BaselineConfig(device="cpu", timing_trials=2))
    assert res.eager_status.startswith("error") and "no kernel for this" in res.eager_status
    assert res.compile_status.startswith("error")
    assert res.eager_ms is None and res.compile_ms is None and res.compile_time_s is None


def test_same_timing_protocol_as_answers() -> None:
    from workflow_scripts.evaluation.answer import EvalConfig

    for dev in ("cpu", "cuda"):
        assert BaselineConfig(device=dev).timing_protocol() == EvalConfig(device=dev).timing_protocol()
