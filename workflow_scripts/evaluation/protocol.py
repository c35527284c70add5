"""KernelBench's correctness protocol as the trusted side applies it: the trial seeds, the output comparison, the
per-call watchdog's limits and the status an evaluation gets (the whole protocol:
``workflow_scripts.evaluation.answer``). Pure functions, called on the trusted side, never in the answer's process."""

from __future__ import annotations

from typing import Any

from workflow_scripts.core.statuses import Status, is_integrity_flag

KERNELBENCH_SEED = 42
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


def allclose_and_max_diff(ref: Any, new: Any, atol: float, rtol: float) -> tuple[bool, float]:
    """``torch.allclose(ref, new, atol, rtol, equal_nan=False)`` and :func:`max_abs_diff` in one chunked pass, with
    the same results: allclose is elementwise, so it holds for the whole exactly when it holds for every chunk; a
    chunk that is bitwise equal and finite is close with difference 0 without computing either (the common case for
    exact kernels). Once a chunk is not close the answer is wrong: the remaining chunks only add to the maximum."""
    import torch

    a, b = ref.reshape(-1), new.reshape(-1)
    ok, worst = True, 0.0
    for start in range(0, a.numel(), COMPARE_CHUNK):
        x, y = a[start:start + COMPARE_CHUNK], b[start:start + COMPARE_CHUNK]
        if torch.equal(x, y) and bool(torch.isfinite(x).all()):
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
