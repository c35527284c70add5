"""Verdicts identical to KernelBench's where we do not deliberately differ: the random-number state at the
answer's forward. KernelBench seeds, runs the reference's forward and then the answer's in one process without
reseeding, so an answer that draws random numbers the way the reference does gets *other* numbers (on
stochastic problems, e.g. dropout in training mode: level 2 problems 66 and 83, a different mask). The evaluator
relays the reference child's generator state to the answer child before each forward to reproduce that."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflow_scripts.core.statuses import Status
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answer

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n"
INPUTS = "\n\ndef get_inputs():\n    return [torch.rand(64, 32)]\n\n\ndef get_init_inputs():\n    return []\n"

DROPOUT_PROBLEM = HEADER + '''class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.5)  # training mode: KernelBench never calls eval()

    def forward(self, x):
        return self.dropout(x * 2.0)
''' + INPUTS

NOISE_PROBLEM = HEADER + '''class Model(nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)
''' + INPUTS

DETERMINISTIC_PROBLEM = HEADER + '''class Model(nn.Module):
    def forward(self, x):
        return x * 2.0
''' + INPUTS

# Answers that use the random-number generator exactly as their reference does.
DROPOUT_MIRROR = HEADER + '''class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        return self.dropout(x * 2.0)
'''
NOISE_MIRROR = HEADER + '''class ModelNew(nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)
'''
# An answer that draws random numbers on a problem whose reference does not: no effect on its output.
DETERMINISTIC_WITH_DRAWS = HEADER + '''class ModelNew(nn.Module):
    def forward(self, x):
        torch.rand(3)
        return x * 2.0
'''

CONFIG = EvalConfig(device="cpu", time_answer=False, require_triton=False, run_static=False)


def evaluate(tmp_path: Path, problem: str, answer: str) -> dict:
    (tmp_path / "problem.py").write_text(problem)
    (tmp_path / "answer.py").write_text(answer)
    return evaluate_answer(tmp_path / "problem.py", tmp_path / "answer.py", CONFIG).to_dict()


@pytest.mark.parametrize("problem, answer", [(DROPOUT_PROBLEM, DROPOUT_MIRROR), (NOISE_PROBLEM, NOISE_MIRROR)],
                         ids=["dropout", "rand_like"])
def test_an_answer_mirroring_the_reference_rng_gets_kernelbench_verdict(tmp_path: Path, problem: str,
                                                                         answer: str) -> None:
    result = evaluate(tmp_path, problem, answer)
    # KernelBench: the answer's draws continue the reference's sequence, so its mask/noise differs: incorrect.
    assert result["status"] == Status.MISMATCH.value, result["error"]
    assert result["trials"][0]["verdict"] == "value_mismatch"


def test_rng_use_without_effect_stays_correct(tmp_path: Path) -> None:
    result = evaluate(tmp_path, DETERMINISTIC_PROBLEM, DETERMINISTIC_WITH_DRAWS)
    assert result["status"] == Status.CORRECT.value, result["error"]


# -- KernelBench's verdicts to the letter (EvalConfig.kernelbench_exact, config/kernelbench_exact.yaml) ---------------
CHEATS = Path(__file__).resolve().parent / "cheats"


def test_kernelbench_exact_credits_what_kernelbench_credits(tmp_path: Path) -> None:
    """The reference itself as the answer (no Triton kernel): KernelBench credits it, the study's default does not."""
    from workflow_scripts.generation.replay import rename_reference_model

    problem = CHEATS / "problems" / "1_ElementwiseAdd.py"
    answer = tmp_path / "reference_answer.py"
    answer.write_text(rename_reference_model(problem.read_text()))
    assert evaluate_answer(problem, answer, EvalConfig(device="cpu", timing_trials=2)).status == \
        Status.NO_TRITON_LAUNCH.value
    exact = evaluate_answer(problem, answer, EvalConfig.kernelbench_exact(device="cpu", timing_trials=2))
    assert exact.status == Status.CORRECT.value, exact.error
    assert exact.paired_reference is None and exact.protocol["hidden_seeds"] == []
    assert [t["kind"] for t in exact.trials] == ["seeded"] * 5  # no hidden, no post-timing trial


def test_kernelbench_exact_flags_cheats_without_rejecting_them() -> None:
    """A cheat whose outputs are right (computed in place into its input and returned): rejected by default,
    only flagged under KernelBench's verdicts, which rest on the outputs."""
    problem = CHEATS / "problems" / "1_ElementwiseAdd.py"
    answer = CHEATS / "answers" / "cheats" / "add_alias_input.py"
    assert evaluate_answer(problem, answer, EvalConfig(device="cpu", timing_trials=2)).status == \
        Status.REJECTED_RUNTIME.value
    exact = evaluate_answer(problem, answer, EvalConfig.kernelbench_exact(device="cpu", timing_trials=2))
    assert exact.status == Status.CORRECT.value, exact.error
    assert "output_aliases_input" in exact.flags


def test_kernelbench_exact_casts_integer_inputs_as_kernelbench_does(tmp_path: Path) -> None:
    """Integer targets cast to fp32, as KernelBench casts every input: cross-entropy's reference then fails (level-1
    problem 95 fails in KernelBench the same way); kept as integers by default, it is correct."""
    from workflow_scripts.generation.replay import rename_reference_model

    problem = CHEATS / "problems" / "4_CrossEntropyIntTargets.py"
    answer = tmp_path / "reference_answer.py"
    answer.write_text(rename_reference_model(problem.read_text()))
    kept = evaluate_answer(problem, answer, EvalConfig(device="cpu", timing_trials=2, require_triton=False))
    assert kept.status == Status.CORRECT.value, kept.error
    cast = evaluate_answer(problem, answer, EvalConfig.kernelbench_exact(device="cpu", timing_trials=2))
    assert cast.status == Status.REFERENCE_ERROR.value and not cast.correct
