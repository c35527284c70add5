"""KernelBench's correctness protocol as the trusted side applies it: the trial seeds, the output comparison, the
per-call watchdog's limits and the status an evaluation gets (the whole protocol:
``workflow_scripts.evaluation.answer``). Pure functions, called on the trusted side, never in the answer's process."""

from __future__ import annotations

import secrets
import statistics
from dataclasses import dataclass, field
from typing import Any

from workflow_scripts.core.statuses import Status, is_integrity_flag
from workflow_scripts.suite.problem_module import KERNELBENCH_SEED

# Timed calls whose outputs the trusted side checks: all of them while their outputs add up to at most this many
# bytes, else a secret sample of that many bytes' worth, and always at least one call per answer.
TIMED_CHECK_BYTES = 1 << 30
# With fresh inputs on every timed call, each check costs this side a draw of the inputs and a reference forward:
# a secret sample of at most this many calls. An answer that skips its work on a share f of its calls passes all of
# them with probability (1 - f) ** TIMED_CHECK_CALLS (f = 0.3: 3%).
TIMED_CHECK_CALLS = 10
# How much longer than its reported time a timed call's interval, as the trusted side observes it, may be (median
# over the calls): (milliseconds, share of the reported time, milliseconds per GiB of output), per device. The
# interval holds the whole trial (synchronize, L2 flush, launch headroom, the window, the output's scrub and the
# harness's checks, two messages); on the CPU the interpreter's harness work is slower and noisier. Measured on
# honest answers on an H200 (bench/archive/NOTES.md, sixth session), four evaluations sharing the host: 0.61-1.58 ms on 120
# problems with outputs under 1 GiB, 1.8-2.1 ms with 6.4 GB outputs. The band is wide (a study runs more jobs per
# host, whose Python work shares its cores): it catches a call that reports about half of its time or less, or
# hides 5 ms or more of work outside its window, not a small forgery. With fresh inputs the interval also holds the
# call's draw (the problem's get_inputs on the device, then a copy into the timed tensors): the fourth number, per
# GiB of one call's inputs (an estimate from the H200's fill and copy rates, about 0.7 ms per GiB each, doubled).
TIMING_EXCESS_LIMIT: dict[str, tuple[float, float, float, float]] = {
    "cuda": (5.0, 0.5, 0.5, 3.0), "cpu": (250.0, 0.5, 500.0, 4000.0)}
# The relative bound: before its first timed block, under the same exclusive lease, the answer's process runs the
# whole trial loop this many times with a trusted stand-in for the answer (``OverheadProbe``: it allocates outputs of
# the reference's kinds and launches nothing), on the same inputs, fresh draws, scrubs and messages. The median excess
# of those calls is what the loop itself costs there and then; the answer's calls may exceed it by no more than
# TIMING_EXCESS_MARGIN: (milliseconds, share of the reported time), per device. Never looser than TIMING_EXCESS_LIMIT,
# which also bounds what an answer could gain by slowing the probe's calls (it is not told which calls they are).
PROBE_CALLS = 20
TIMING_EXCESS_MARGIN: dict[str, tuple[float, float]] = {"cuda": (1.0, 0.15), "cpu": (50.0, 0.3)}
# The reported time may exceed the observed interval by no more than this (ms, share): clocks of two processes.
TIMING_DEFICIT_LIMIT = (0.05, 0.01)


@dataclass
class TimedChecks:
    """The trusted side's checks on an answer's timed calls. The outputs of a secretly chosen set of calls are
    compared with the reference's on the timing inputs (the answer learns that a call is checked only after it
    returned, and every call looks the same until then), and each call's reported time is compared with the
    interval this side observed around it (a forged clock or work moved out of the window does not fit)."""

    chosen: frozenset[int]  # call numbers over the whole timing, discarded calls included
    comparable: bool  # False: the reference's forward is stochastic and the inputs fixed: outputs are not compared
    output_bytes: int = 0  # the reference's outputs: scrubbing and checking them lengthens each interval
    # Every timed call on inputs of its own (a secret seed per call, ``next_seed``): the answer's process draws them
    # right before the call, and this side draws the same ones again to check a chosen call. False: every call
    # sees the timing inputs (the problem's input builder cannot run without its classes).
    fresh: bool = False
    input_bytes: int = 0  # one call's inputs, drawn before it inside its interval (with fresh inputs)
    calls: int = 0
    checked: int = 0
    unchecked: int = 0  # chosen, but this side could not draw the reference's outputs (e.g. no device memory)
    mismatches: int = 0
    detail: str | None = None
    checked_seeds: list[int] = field(default_factory=list)  # the checked calls' input seeds, for replay
    probe_excess_ms: float | None = None  # the trial loop's own excess, measured with ``OverheadProbe`` (PROBE_CALLS)
    reported_ms: list[float] = field(default_factory=list)
    observed_ms: list[float] = field(default_factory=list)

    @classmethod
    def choose(cls, calls: int, output_bytes: int, comparable: bool, fresh: bool = False,
               input_bytes: int = 0) -> "TimedChecks":
        """The calls to check, drawn in secret: the stochastic reference's outputs are comparable only on fresh
        inputs, where the answer's call and this side's forward start from the generators' state the draw left."""
        input_bytes = input_bytes if fresh else 0
        if not (comparable or fresh) or calls <= 0:
            return cls(frozenset(), comparable, output_bytes, fresh, input_bytes)
        k = min(calls, max(1, TIMED_CHECK_BYTES // max(1, output_bytes)))
        if fresh:
            k = min(k, TIMED_CHECK_CALLS)
        sample = frozenset(secrets.SystemRandom().sample(range(calls), k))
        return cls(sample, comparable, output_bytes, fresh, input_bytes)

    def next_seed(self) -> int | None:
        """The input seed of the next timed call (a fresh secret), or None where the inputs are fixed."""
        return secrets.randbelow(2**32 - 1) if self.fresh else None

    def take(self) -> bool:
        """Whether the call that just ended is checked (called once per timed call, in order)."""
        self.calls += 1
        return (self.calls - 1) in self.chosen

    def observe(self, reported_ms: float, observed_ms: float) -> None:
        self.reported_ms.append(reported_ms)
        self.observed_ms.append(observed_ms)

    def judged(self, verdict: str, detail: str | None, seed: int | None = None) -> None:
        """A chosen call's verdict; ``seed``: its fresh inputs' (recorded for replay)."""
        if verdict == "unchecked":
            self.unchecked += 1
            return
        self.checked += 1
        if seed is not None:
            self.checked_seeds.append(seed)
        if verdict != "ok":
            self.failed(f"{verdict}: {detail}" if detail else verdict)

    def failed(self, detail: str) -> None:
        self.mismatches += 1
        self.detail = self.detail or detail

    def excess_ms(self) -> float | None:
        """Median of (observed interval - reported time) over the observed calls."""
        if not self.observed_ms:
            return None
        return statistics.median(o - r for o, r in zip(self.observed_ms, self.reported_ms))

    def excess_limit_ms(self, device: str) -> float:
        """The relative bound (the probe's excess + TIMING_EXCESS_MARGIN) where the probe ran, never looser than the
        absolute one (TIMING_EXCESS_LIMIT)."""
        if not self.reported_ms:
            return float("inf")
        reported = statistics.median(self.reported_ms)
        abs_ms, share, per_output_gib, per_input_gib = TIMING_EXCESS_LIMIT[device]
        absolute = (abs_ms + share * reported + per_output_gib * self.output_bytes / (1 << 30)
                    + per_input_gib * self.input_bytes / (1 << 30))
        if self.probe_excess_ms is None:
            return absolute
        margin_ms, margin_share = TIMING_EXCESS_MARGIN[device]
        return min(absolute, max(0.0, self.probe_excess_ms) + margin_ms + margin_share * reported)

    def unconfirmed(self, device: str) -> bool:
        """The reported times do not fit the observed intervals: far shorter (beyond TIMING_EXCESS_LIMIT) or
        longer than the intervals they happened in."""
        excess = self.excess_ms()
        if excess is None:
            return False
        deficit_ms, deficit_share = TIMING_DEFICIT_LIMIT
        too_short = excess > self.excess_limit_ms(device)
        return too_short or -excess > deficit_ms + deficit_share * statistics.median(self.reported_ms)

    def to_dict(self, device: str) -> dict[str, Any]:
        return {"calls": self.calls, "checked": self.checked, "unchecked": self.unchecked,
                "mismatches": self.mismatches, "comparable": self.comparable, "fresh_inputs": self.fresh,
                "checked_seeds": self.checked_seeds, "detail": self.detail, "excess_ms_median": self.excess_ms(),
                "probe_excess_ms": self.probe_excess_ms,
                "excess_limit_ms": self.excess_limit_ms(device) if self.reported_ms else None,
                "unconfirmed": self.unconfirmed(device),
                "observed_ms": self.observed_ms, "reported_ms": self.reported_ms}

SEED_DERIVATION = ("torch.manual_seed(seed); [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(n)] "
                   "(KernelBench run_and_check_correctness)")


def kernelbench_trial_seeds(seed: int = KERNELBENCH_SEED, n: int = 5) -> list[int]:
    """KernelBench's per-trial input seeds (see SEED_DERIVATION); uses a private generator."""
    import torch

    g = torch.Generator().manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,), generator=g).item()) for _ in range(n)]


# Elements per chunk of the max-difference pass: wide temporaries for a chunk (a few hundred MB), never for a whole
# multi-GB output.
DIFF_CHUNK = 1 << 25


def max_abs_diff(ref: Any, new: Any) -> float:
    """max |ref - new| in float64 (complex128 for complex), NaN if any difference is NaN; chunk by chunk, so a
    6 GB float32 output needs about 0.5 GB of temporaries instead of 25 GB."""
    import torch

    wide = torch.complex128 if ref.dtype.is_complex else torch.float64
    a, b = ref.reshape(-1), new.reshape(-1)
    worst = 0.0
    for start in range(0, a.numel(), DIFF_CHUNK):
        chunk = (a[start:start + DIFF_CHUNK].to(wide) - b[start:start + DIFF_CHUNK].to(wide)).abs().max().item()
        if chunk != chunk:
            return float("nan")
        worst = max(worst, float(chunk))
    return worst


# Elements per chunk of the comparison: a chunk's temporaries stay in the CPU's cache (torch.allclose on a whole
# multi-GB CPU tensor allocates several full-size temporaries and runs at memory speed several times over).
COMPARE_CHUNK = 1 << 20


def same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors of one shape and dtype hold the same bytes, compared as the widest integers their layout
    allows (a byte-wise ``torch.equal`` is about eight times slower on the CPU)."""
    import torch

    x, y = a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    for wide in (torch.int64, torch.int32, torch.int16):
        try:
            xw, yw = x.view(wide), y.view(wide)
        except RuntimeError:  # a byte count or offset that is not a multiple of its size (and only that: the
            continue  # comparison itself, e.g. out of device memory, is outside this try)
        return bool(torch.equal(xw, yw))
    return bool(torch.equal(x, y))


def all_finite(x: Any) -> bool:
    """No NaN or infinity in a floating or complex tensor: a NaN makes the minimum and maximum NaN and an infinity
    is one of them, so one reduction without temporaries answers it (``isfinite().all()`` writes a mask first)."""
    import torch

    if x.numel() == 0:
        return True
    low, high = torch.aminmax(torch.view_as_real(x) if x.is_complex() else x)
    return bool(torch.isfinite(low)) and bool(torch.isfinite(high))


def allclose_and_max_diff(ref: Any, new: Any, atol: float, rtol: float) -> tuple[bool, float]:
    """``torch.allclose(ref, new, atol, rtol, equal_nan=False)`` and :func:`max_abs_diff` in one chunked pass, with
    the same results: allclose is elementwise, so it holds for the whole exactly when it holds for every chunk; a
    chunk that is bitwise equal and finite is close with difference 0 without computing either (the common case for
    exact kernels; equal values in other bits, -0.0 and 0.0, take the general path to the same result). Once a chunk
    is not close the answer is wrong: the remaining chunks only add to the maximum."""
    import torch

    a, b = ref.reshape(-1), new.reshape(-1)
    ok, worst = True, 0.0
    for start in range(0, a.numel(), COMPARE_CHUNK):
        x, y = a[start:start + COMPARE_CHUNK], b[start:start + COMPARE_CHUNK]
        if same_bits(x, y) and all_finite(x):
            continue
        if ok:
            ok = bool(torch.allclose(x, y, atol=atol, rtol=rtol, equal_nan=False))
        d = max_abs_diff(x, y)
        if d != d:
            return ok, float("nan")
        worst = max(worst, d)
    return ok, worst


def compare_outputs(ref: list[Any], new: list[Any], atol: float, rtol: float) -> tuple[str, float | None, str | None]:
    """KernelBench's check, done by the parent: (verdict, max_abs_diff, detail)."""
    import torch

    if len(ref) != len(new):
        return "shape_mismatch", None, f"expected {len(ref)} outputs, got {len(new)}"
    worst: float | None = 0.0
    for i, (r, n) in enumerate(zip(ref, new)):
        if tuple(r.shape) != tuple(n.shape):
            return "shape_mismatch", None, f"output {i}: expected shape {tuple(r.shape)}, got {tuple(n.shape)}"
        if r.dtype != n.dtype:
            return "dtype_mismatch", None, f"output {i}: expected dtype {r.dtype}, got {n.dtype}"
        if r.numel() == 0:
            continue
        if r.dtype.is_floating_point or r.dtype.is_complex:
            ok, d = allclose_and_max_diff(r, n, atol, rtol)
        elif r.dtype == torch.bool:
            ok = bool(torch.equal(r, n))
            d = float((r != n).any().item())
        else:
            ok = bool(torch.equal(r, n))
            d = max_abs_diff(r, n)
        d = None if d != d else float(d)  # NaN -> None (JSON has no NaN)
        if worst is not None:
            worst = None if d is None else max(worst, d)
        if not ok:
            nan = bool(n.isnan().any()) if (n.dtype.is_floating_point or n.dtype.is_complex) else False
            return "value_mismatch", worst, f"output {i}: not allclose(atol={atol}, rtol={rtol})" + (
                " (NaN in output)" if nan else "")
    return "ok", worst, None


# The per-call watchdog: a forward that runs this many times longer than the reference's is killed at once (not at the
# end of the whole evaluation's timeout), with floors: the first call compiles the answer's Triton kernels.
WATCHDOG_FACTOR = 100.0
WATCHDOG_FIRST_CALL_S = 45.0
WATCHDOG_CALL_S = 15.0


def call_limit_s(reference_ms: float | None, floor_s: float) -> float:
    """Seconds one correctness forward of the answer may take (the floor: WATCHDOG_FIRST_CALL_S for the first call,
    which compiles the answer's kernels, WATCHDOG_CALL_S after it)."""
    return max(floor_s, WATCHDOG_FACTOR * (reference_ms or 0.0) / 1e3)


def timing_limit_s(reference_ms: float | None, calls: int, floor_s: float) -> float:
    """Seconds the whole timing phase (warm-up and timed calls) may take."""
    return max(floor_s, WATCHDOG_FACTOR * (reference_ms or 0.0) / 1e3 * calls)


_VERDICT_STATUS = {
    "shape_mismatch": Status.SHAPE_MISMATCH,
    "dtype_mismatch": Status.DTYPE_MISMATCH,
    "device_mismatch": Status.MISMATCH,
    "value_mismatch": Status.MISMATCH,
    "bad_output": Status.RUNTIME_ERROR,
}


def decide_status(
    *,
    imported: bool,
    pre_import_status: Status | None,
    failure: Status | None,
    trial_verdicts: list[str],
    flags: list[str],
    require_triton: bool,
    all_calls_launched: bool,
    reject_cheats: bool = True,
) -> Status:
    """Status precedence: a failure before the answer module finished importing is ``load_error`` (or
    ``no_model_new``); after that any flag that rejects (``core.statuses.FLAGS``) gives ``rejected_runtime``; then
    the failure (timeout, crash, init/runtime error), the first failing trial's shape/dtype/value mismatch; then
    ``no_triton_launch`` when ``require_triton`` and some correctness call launched no Triton kernel; else
    ``correct``. A reference failure (``reference_error``) comes before everything. With ``reject_cheats`` off
    (KernelBench's verdicts: outputs alone) rejecting flags stay flags."""
    if failure == Status.REFERENCE_ERROR:
        return failure
    if not imported:
        return pre_import_status or Status.LOAD_ERROR
    if reject_cheats and any(is_integrity_flag(f) for f in flags):
        return Status.REJECTED_RUNTIME
    if failure is not None:
        return failure
    for v in trial_verdicts:
        if v != "ok":
            return _VERDICT_STATUS.get(v, Status.MISMATCH)
    if not trial_verdicts:
        return Status.CRASH
    if require_triton and not all_calls_launched:
        return Status.NO_TRITON_LAUNCH
    return Status.CORRECT
