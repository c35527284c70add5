"""KernelBench problems reported unsound at the pinned revision, each entry with its source: what a reader of the
summary should know about a problem beyond what the evaluator's own audit finds (evaluation/problem_audit.py finds
the degenerate ones by measurement; these are reports, listed as reported). The summary's ``audit`` block names the
entries among the problems it counts. Add an entry with its source; remove one only with the fix's source."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

KERNELBENCH_PULLS = "https://github.com/ScalingIntelligence/KernelBench/pull/"


@dataclass(frozen=True)
class KnownIssue:
    level: int
    problem_id: int
    problem: str  # the file's name without its number and .py: another suite's problem of that number is not it
    kind: str  # constant_output | redundant_operations | closed_form_or_subsampled
    source: str  # where it was reported

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _entries(kind: str, source: str, level: int, problems: dict[int, str]) -> list[KnownIssue]:
    return [KnownIssue(level, pid, name, kind, source) for pid, name in problems.items()]


# As issue 35 of this project cites them (the pull requests' diagnoses, open at the pinned revision).
KNOWN_ISSUES: tuple[KnownIssue, ...] = tuple(
    _entries("constant_output", KERNELBENCH_PULLS + "108", 2, {
        23: "Conv3d_GroupNorm_Mean", 80: "Gemm_Max_Subtract_GELU", 83: "Conv3d_GroupNorm_Min_Clamp_Dropout"})
    + _entries("redundant_operations", KERNELBENCH_PULLS + "108", 2, {
        7: "Conv3d_ReLU_LeakyReLU_GELU_Sigmoid_BiasAdd", 44: "ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean",
        81: "Gemm_Swish_Divide_Clamp_Tanh_Clamp", 95: "Matmul_Add_Swish_Tanh_GELU_Hardtanh"})
    + _entries("closed_form_or_subsampled", KERNELBENCH_PULLS + "118", 1, {
        94: "MSELoss", 96: "HuberLoss", 100: "HingeLoss"}))


def known_issues(problems: Iterable[tuple[int, int, str]]) -> list[KnownIssue]:
    """The entries among ``problems`` ((level, problem_id, problem name) triples), in level and problem order."""
    wanted = set(problems)
    return sorted((k for k in KNOWN_ISSUES if (k.level, k.problem_id, k.problem) in wanted),
                  key=lambda k: (k.level, k.problem_id))
