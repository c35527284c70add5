"""The reference's speed over placements of its buffers (evaluation/placement_audit.py): timed once per problem in
the first exclusive window, recorded in the problem audit and the rows. KB_TEST_DEVICE=cuda runs it on a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from workflow_scripts.evaluation import placement_audit, timing
from workflow_scripts.evaluation.placement_audit import PADS_BYTES, PlacementAudit, affordable, measure
from workflow_scripts.scoring.rows import build_row

DEVICE = os.environ.get("KB_TEST_DEVICE", "cpu")
PROTOCOL = timing.TimingProtocol(warmup=1, trials=10, discard_first=1, l2_flush_mib=0, launch_headroom_us=0.0)


def test_each_placement_times_fresh_copies_of_the_module_and_inputs() -> None:
    device = "cuda" if DEVICE == "cuda" and torch.cuda.is_available() else "cpu"
    model = torch.nn.Linear(64, 64).to(device)
    inputs = [torch.randn(32, 64, device=device)]
    seen: list[tuple[int, int]] = []

    class Recording(timing.Clock):
        def time_callable(self, fn, args, protocol, *rest):  # type: ignore[override]
            seen.append((fn.weight.data_ptr(), args[0].data_ptr()))
            assert (protocol.warmup, protocol.trials, protocol.discard_first) == (placement_audit.WARMUP,
                                                                               placement_audit.CALLS, 0)
            return super().time_callable(fn, args, protocol, *rest)

    audit = measure(torch, model, inputs, Recording(device, 0), PROTOCOL)
    assert len(audit.medians_ms) == len(PADS_BYTES) and all(ms > 0 for ms in audit.medians_ms)
    assert audit.spread >= 1.0
    assert all(w != model.weight.data_ptr() and x != inputs[0].data_ptr() for w, x in seen)  # copies, not these


def test_the_spread_is_the_slowest_placement_over_the_fastest() -> None:
    assert PlacementAudit([5.0, 6.5, 5.0, 6.45]).spread == pytest.approx(1.3)


def test_the_audit_keeps_to_its_budget() -> None:
    calls = len(PADS_BYTES) * (placement_audit.WARMUP + placement_audit.CALLS)
    assert affordable(placement_audit.BUDGET_S * 1e3 / calls, 1 << 20)
    assert not affordable(placement_audit.BUDGET_S * 1e3 / calls * 1.01, 1 << 20)
    assert not affordable(1.0, placement_audit.MAX_COPY_BYTES + 1)
    assert not affordable(None, 1)  # no forward measured


def test_the_row_carries_the_problems_spread() -> None:
    problem = {"level": 2, "problem_id": 77, "problem": "ConvTranspose3d", "sha256": "a" * 64}
    answer = {"completion_tokens": 7, "completion_sha256": "c", "code_sha256": "d", "require_triton": True}
    evaluation = {"status": "correct", "runtime_ms": 5.0, "flags": [], "device": "cuda", "timing_mode": "cuda_events",
                  "problem_audit": {"placement_spread": 1.3, "degenerate": False}}
    row = build_row("m", problem, answer, {}, evaluation, {"eager_status": "ok"}, "source:" + "e" * 64)
    assert row["placement_spread"] == 1.3
    del evaluation["problem_audit"]
    assert build_row("m", problem, answer, {}, evaluation, {}, "source:" + "e" * 64)["placement_spread"] is None


EVALUATE_TWO = """
import json, sys
from pathlib import Path
from workflow_scripts.evaluation.answer import evaluate_answers
from workflow_scripts.evaluation.config import EvalConfig
problem, a, b, locks = map(Path, sys.argv[1:])
cfg = EvalConfig(device="cuda", require_triton=False, run_static=False, lock_dir=str(locks))
print(json.dumps([[r.status, r.error, r.problem_audit, r.phases_s] for r in evaluate_answers(problem, [a, b], cfg)]))
"""


@pytest.mark.integration
@pytest.mark.skipif(DEVICE != "cuda" or not torch.cuda.is_available(), reason="KB_TEST_DEVICE=cuda on a GPU")
def test_the_evaluator_audits_placements_once_per_problem(tmp_path: Path) -> None:
    """In a process of its own: the evaluator binds its leased GPU before CUDA starts, which this one has done."""
    from workflow_scripts.generation.replay import rename_reference_model

    root = Path(__file__).resolve().parents[1]
    problem = root / "demo" / "suite" / "KernelBench" / "level1" / "7_Conv2dSmall.py"
    answers = [tmp_path / "a.py", tmp_path / "b.py"]
    for answer in answers:
        answer.write_text(rename_reference_model(problem.read_text()))
    out = subprocess.run([sys.executable, "-c", EVALUATE_TWO, str(problem), *map(str, answers), str(tmp_path / "l")],
                         capture_output=True, text=True, timeout=600, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-3000:]
    (status_a, error_a, audit_a, phases_a), (status_b, error_b, audit_b, phases_b) = json.loads(
        out.stdout.strip().splitlines()[-1])
    assert status_a == status_b == "correct", (error_a, error_b)
    assert audit_a["placement_spread"] >= 1.0 and len(audit_a["placement_ms"]) == len(PADS_BYTES)
    assert audit_b["placement_spread"] == audit_a["placement_spread"]  # measured once, for the problem
    assert phases_a.get("placement_audit_s", 0) > 0 and "placement_audit_s" not in phases_b
