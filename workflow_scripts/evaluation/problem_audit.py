"""Degenerate problems and answers that ignore their inputs (issue 35). A problem is degenerate when KernelBench's
tolerance cannot tell a real answer from a trivial one: zeros, or one constant per output, pass on every seeded
trial (L1/23's softmax over 393,216 columns: every output is about 2.5e-6, under atol 1e-4), or the reference's
outputs on different inputs pass against each other. On such a problem an answer that ignores its inputs is
credited, as KernelBench credits it; the audit says so beside the verdict, and the summary reports each count also
without the degenerate problems (scoring/summary.py). The published counts stay as they are.

Computed by the trusted side from the reference's outputs on the seeded trials (``ReferenceSide.prepare``), on the
configured device and with the run's tolerance, and recorded in every evaluation of the problem
(``EvalResult.problem_audit``). An answer's outputs are fingerprinted on every correctness trial (``fingerprint``):
the same fingerprint on every trial where the reference's differ is ``output_ignores_input`` (an informational
flag, core/statuses.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# Flat positions sampled per output for a fingerprint: enough that two honest outputs on different random inputs
# never share all of them, few enough to cost nothing beside the comparison itself.
FINGERPRINT_SAMPLES = 1024


@dataclass(frozen=True)
class ProblemAudit:
    zeros_pass: bool  # zeros (one per output) within the tolerance of the reference on every seeded trial
    constant_pass: bool  # one constant per output, the same on every seeded trial, within the tolerance
    reference_input_independent: bool  # the reference's outputs on every seeded trial pass against the first's
    trials: int  # seeded trials audited
    output_bytes: int  # one trial's reference outputs

    @property
    def degenerate(self) -> bool:
        return self.zeros_pass or self.constant_pass or self.reference_input_independent

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), degenerate=self.degenerate)


def audit_outputs(trial_outputs: list[list[Any]], atol: float, rtol: float) -> ProblemAudit:
    """The audit of a problem from its reference's outputs on the seeded trials (one list of tensors per trial)."""
    from workflow_scripts.evaluation.protocol import compare_outputs

    first = trial_outputs[0] if trial_outputs else []
    by_output = list(zip(*trial_outputs)) if trial_outputs else []  # output i on every trial
    return ProblemAudit(
        zeros_pass=bool(by_output) and all(_constant_passes(outs, atol, rtol, zero=True) for outs in by_output),
        constant_pass=bool(by_output) and all(_constant_passes(outs, atol, rtol, zero=False) for outs in by_output),
        reference_input_independent=len(trial_outputs) > 1 and all(
            compare_outputs(first, outs, atol, rtol)[0] == "ok" for outs in trial_outputs[1:]),
        trials=len(trial_outputs),
        output_bytes=sum(o.numel() * o.element_size() for o in first))


def _constant_passes(outputs: tuple[Any, ...], atol: float, rtol: float, *, zero: bool) -> bool:
    """Whether one constant, the same on every trial (zero, or the midrange of the output over all trials: the
    constant nearest to every element at once), passes KernelBench's check ``|reference - c| <= atol + rtol * |c|``
    everywhere; for integer and boolean outputs, whether every element equals it. ``outputs``: one output of the
    reference on each trial. A NaN in the reference passes nothing."""
    import torch

    if all(out.numel() == 0 for out in outputs):
        return True
    if any(out.dtype.is_complex for out in outputs):
        return False  # not audited: no order to take a midrange in
    bounds = [torch.aminmax(flat.to(torch.uint8) if flat.dtype == torch.bool else flat)
              for flat in (out.reshape(-1) for out in outputs) if flat.numel()]
    low, high = min(b.min.item() for b in bounds), max(b.max.item() for b in bounds)
    if not outputs[0].dtype.is_floating_point:
        return low == high and (low == 0 or not zero)
    if low != low or high != high:
        return False
    c = 0.0 if zero else (low + high) / 2
    return max(high - c, c - low) <= atol + rtol * abs(c)


def fingerprint(outputs: list[Any]) -> bytes:
    """Shapes, dtypes and FINGERPRINT_SAMPLES evenly spaced elements of each output: equal for equal outputs, and
    for two honest outputs on different inputs all but never."""
    import torch

    parts: list[bytes] = []
    for out in outputs:
        flat = out.detach().reshape(-1)
        n = flat.numel()
        positions = torch.linspace(0, max(n - 1, 0), min(n, FINGERPRINT_SAMPLES), device=flat.device).long()
        parts.append(repr((tuple(out.shape), str(out.dtype))).encode())
        parts.append(flat[positions].cpu().contiguous().view(torch.uint8).numpy().tobytes() if n else b"")
    return b"\0".join(parts)


def ignores_input(answer_prints: list[bytes], reference_prints: list[bytes]) -> bool:
    """The answer's outputs had one fingerprint on every trial (at least two) while the reference's had several."""
    return len(answer_prints) > 1 and len(set(answer_prints)) == 1 and len(set(reference_prints)) > 1
