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
    # The reference's outputs on the first seeded trial move beyond the tolerance when TF32 is all on or all off
    # (``tf32_sensitive``): the problem's verdicts depend on the TF32 mode. None: not measured (on the CPU, where
    # there is no TF32, or without room on the device for the two forwards).
    tf32_sensitive: bool | None = None
    # The reference forward's median at each placement of its buffers in device memory, and the slowest over the
    # fastest (placement_audit): the noise paired timing cannot cancel. None: not measured (off CUDA, no answer
    # timed yet, or a forward too long or too large for the audit's budget).
    placement_ms: list[float] | None = None
    placement_spread: float | None = None

    @property
    def degenerate(self) -> bool:
        return self.zeros_pass or self.constant_pass or self.reference_input_independent

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), degenerate=self.degenerate)


def audit_outputs(trial_outputs: list[list[Any]], atol: float, rtol: float) -> ProblemAudit:
    """The audit of a problem from its reference's outputs on the seeded trials (one list of tensors per trial)."""
    audit = OutputAudit(atol, rtol)
    for outputs in trial_outputs:
        audit.add(outputs)
    return audit.result()


class OutputAudit:
    """The audit taken one seeded trial at a time (``add``), so a trial's outputs need not outlive its turn: a
    multi-GB problem's trusted side keeps some trials' outputs nowhere (memory_plan). Only the first trial's outputs
    are held, for the input-independence check, and per output its range over the trials."""

    def __init__(self, atol: float, rtol: float) -> None:
        self.atol, self.rtol = atol, rtol
        self.first: list[Any] | None = None
        self.trials = 0
        self.independent = True  # every later trial's outputs pass against the first's
        self.same_count = True  # every trial has as many outputs as the first: else no constant answers them
        self.ranges: list[_Range] = []

    def add(self, outputs: list[Any]) -> None:
        from workflow_scripts.evaluation.protocol import compare_outputs

        if self.first is None:
            self.first = list(outputs)
            self.ranges = [_Range(out) for out in outputs]
        elif len(outputs) != len(self.first):
            self.same_count = self.independent = False
        else:
            if self.independent:
                first = [f.to(o.device) for f, o in zip(self.first, outputs)]  # each beside its counterpart
                self.independent = compare_outputs(first, outputs, self.atol, self.rtol)[0] == "ok"
                del first
            for r, out in zip(self.ranges, outputs):
                r.add(out)
        self.trials += 1

    def result(self) -> ProblemAudit:
        audited = self.trials > 0 and bool(self.ranges) and self.same_count
        return ProblemAudit(
            zeros_pass=audited and all(r.constant_passes(self.atol, self.rtol, zero=True) for r in self.ranges),
            constant_pass=audited and all(r.constant_passes(self.atol, self.rtol, zero=False) for r in self.ranges),
            reference_input_independent=self.trials > 1 and self.independent,
            trials=self.trials,
            output_bytes=sum(o.numel() * o.element_size() for o in self.first or []))


class _Range:
    """One output's values over the seeded trials, as far as a constant answer needs them: their least and
    greatest element, its dtype, and whether every trial's is empty."""

    def __init__(self, out: Any) -> None:
        self.usable = not out.dtype.is_complex  # complex: no order to take a midrange in
        self.dtype = out.dtype
        self.empty = True
        self.nan = False
        self.low: float | None = None
        self.high: float | None = None
        self.add(out)

    def add(self, out: Any) -> None:
        import torch

        if out.dtype != self.dtype or out.dtype.is_complex:
            self.usable = False
            return
        flat = out.reshape(-1)
        if not flat.numel():
            return
        self.empty = False
        bounds = torch.aminmax(flat.to(torch.uint8) if flat.dtype == torch.bool else flat)
        low, high = bounds.min.item(), bounds.max.item()
        if low != low or high != high:
            self.nan = True
            return
        self.low = low if self.low is None else min(self.low, low)
        self.high = high if self.high is None else max(self.high, high)

    def constant_passes(self, atol: float, rtol: float, *, zero: bool) -> bool:
        """Whether one constant, the same on every trial (zero, or the midrange of the output over all trials: the
        constant nearest to every element at once), passes KernelBench's check ``|reference - c| <= atol + rtol *
        |c|`` everywhere; for integer and boolean outputs, whether every element equals it. A NaN in the reference
        passes nothing."""
        if not self.usable or self.nan:
            return False
        if self.empty:
            return True
        low, high = self.low, self.high
        assert low is not None and high is not None and self.dtype is not None
        if not self.dtype.is_floating_point:
            return low == high and (low == 0 or not zero)
        c = 0.0 if zero else (low + high) / 2
        return max(high - c, c - low) <= atol + rtol * abs(c)


def sample_positions(n: int, device: Any = "cpu") -> Any:
    """FINGERPRINT_SAMPLES (at most ``n``) evenly spaced flat positions of ``n`` elements, the first and the last
    included, in integer arithmetic: a float32 ``linspace`` rounds position ``n - 1`` up past the end from 2**24
    elements on (an index-out-of-bounds device assert on L1/40's 67M-element output on an H200)."""
    import torch

    k = min(n, FINGERPRINT_SAMPLES)
    return torch.arange(k, dtype=torch.int64, device=device) * max(n - 1, 0) // max(k - 1, 1)


def output_samples(outputs: list[Any]) -> list[Any]:
    """FINGERPRINT_SAMPLES evenly spaced elements of each output, copied to the host: what a fingerprint hashes, and
    what a recomputed reference output is checked against (memory_plan)."""

    samples = []
    for out in outputs:
        flat = out.detach().reshape(-1)
        n = flat.numel()
        samples.append(flat[sample_positions(n, flat.device)].cpu().contiguous())
    return samples


def fingerprint(outputs: list[Any]) -> bytes:
    """Shapes, dtypes and ``output_samples`` of each output: equal for equal outputs, and for two honest outputs on
    different inputs all but never."""
    import torch

    parts: list[bytes] = []
    for out, sample in zip(outputs, output_samples(outputs)):
        parts.append(repr((tuple(out.shape), str(out.dtype))).encode())
        parts.append(sample.view(torch.uint8).numpy().tobytes() if sample.numel() else b"")
    return b"\0".join(parts)


def ignores_input(answer_prints: list[bytes], reference_prints: list[bytes]) -> bool:
    """The answer's outputs had one fingerprint on every trial (at least two) while the reference's had several."""
    return len(answer_prints) > 1 and len(set(answer_prints)) == 1 and len(set(reference_prints)) > 1


def tf32_switches(torch: Any) -> list[tuple[Any, str, Any, Any]]:
    """Each switch TF32 has in this torch, as (object, attribute, value with TF32 on, value with it off): the new
    API's precisions where they exist (reading the legacy flags after setting them raises), else the legacy flags.
    The two extremes a problem's TF32 sensitivity is measured at: every float32 product and convolution in TF32, and
    none (IEEE float32), whatever the run's own mode (evaluation/environment.py TF32_MODES) sets."""
    backends = torch.backends
    if hasattr(backends.cuda.matmul, "fp32_precision") and hasattr(backends.cudnn, "conv"):
        return [(backends.cuda.matmul, "fp32_precision", "tf32", "ieee"),
                (backends.cudnn.conv, "fp32_precision", "tf32", "ieee")]
    return [(backends.cuda.matmul, "allow_tf32", True, False), (backends.cudnn, "allow_tf32", True, False)]


def tf32_sensitive(torch: Any, forward: Any, outputs: list[Any], atol: float, rtol: float) -> bool:
    """Whether ``forward()`` (the reference on one seeded trial, a new forward per call) gives outputs beyond the
    tolerance of ``outputs`` (the run's) with TF32 all on or all off; the run's switches are restored after."""
    from workflow_scripts.evaluation.protocol import compare_outputs

    switches = tf32_switches(torch)
    saved = [getattr(owner, name) for owner, name, _, _ in switches]
    try:
        for tf32_on in (True, False):  # all TF32, then IEEE
            for owner, name, on, off in switches:
                setattr(owner, name, on if tf32_on else off)
            again = forward()
            moved = compare_outputs(outputs, again, atol, rtol)[0] != "ok"
            del again
            if moved:
                return True
        return False
    finally:
        for (owner, name, _, _), value in zip(switches, saved):
            setattr(owner, name, value)
