"""The timing protocol, shared by answers and baselines (both timed in ``workflow_scripts.evaluation.child``).

Both are timed by the same code with the same :class:`TimingProtocol`, so their numbers are comparable:

* everything runs under ``torch.no_grad()`` (as KernelBench's correctness check does; KernelBench's timing loop
  inherits no grad mode, but a forward-only benchmark has no use for autograd bookkeeping, and timing answers and
  baselines the same way is what matters);
* ``warmup`` untimed calls first (each followed by a device-wide synchronize);
* then ``discard_first + trials`` timed calls; the first ``discard_first`` are reported separately and left out of
  the statistics;
* on CUDA (``timing_mode = "cuda_events"``) each trial is: device-wide ``torch.cuda.synchronize()``; an L2 flush
  (writing a ``l2_flush_mib`` MiB buffer, larger than any current L2) *outside* the events; synchronize;
  ``start.record()``; the call; ``torch.cuda.synchronize()`` (device-wide, so work the call left on any other
  stream is inside the measurement); ``end.record()``; ``end.synchronize()``. The host time of the same span is
  recorded too (``host_ms``). The device-wide synchronize adds a few microseconds of fixed overhead to every
  trial, answers and baselines alike;
* on CPU (``timing_mode = "cpu_wall_interpreter"``) each trial is ``time.perf_counter()`` around the call. With
  ``TRITON_INTERPRET=1`` this measures the Triton *interpreter*: it says nothing about GPU speed;
* after each call, outside the timed region, ``after_call(out)`` runs (the harness scrubs the output there, see
  :func:`scrub`, counts Triton launches and checks for tampering).

The clock functions are captured when :class:`Clock` is built, which the harness does before any answer code is
imported, so an answer that later replaces ``time.perf_counter`` or ``torch.cuda.Event.elapsed_time`` does not
change what the harness measures (and the replacement is reported by the harness's identity checks).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

TIMING_MODES: dict[str, str] = {"cuda": "cuda_events", "cpu": "cpu_wall_interpreter"}

# Captured at import time; the child imports this module before loading any answer.
_perf_counter = time.perf_counter


@dataclass(frozen=True)
class TimingProtocol:
    warmup: int
    trials: int
    discard_first: int = 1
    l2_flush_mib: int = 256
    no_grad: bool = True

    @classmethod
    def for_device(cls, device: str, **overrides: Any) -> "TimingProtocol":
        # KernelBench: 100 trials on the GPU. The CPU interpreter is ~1000x slower, so fewer by default.
        base = dict(warmup=3, trials=100) if device == "cuda" else dict(warmup=1, trials=10)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RawTimes:
    """Raw per-call numbers as measured in the child (milliseconds)."""

    trials_ms: list[float] = field(default_factory=list)  # the kept trials, in order
    discarded_ms: list[float] = field(default_factory=list)  # the first `discard_first` trials
    host_ms: list[float] = field(default_factory=list)  # host time of the kept trials (cuda only)
    warmup_ms: list[float] = field(default_factory=list)  # host time of each warm-up call

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def stats(trials_ms: Sequence[float]) -> dict[str, Any] | None:
    """Summary statistics of kept trials: mean (the headline, as KernelBench), median, population std (ddof=0,
    as KernelBench's ``np.std``), min, max, n and the raw trials. ``None`` for no trials or non-finite values."""
    xs = [float(x) for x in trials_ms]
    if not xs or not all(math.isfinite(x) for x in xs):
        return None
    n = len(xs)
    mean = math.fsum(xs) / n
    srt = sorted(xs)
    median = srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2.0
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / n)
    return {"mean": mean, "median": median, "std": std, "min": srt[0], "max": srt[-1], "n": n, "trials": xs}


class Clock:
    """Timer functions captured before any answer code runs (see the module docstring)."""

    def __init__(self, device: str, l2_flush_mib: int = 256) -> None:
        import torch

        self.device = device
        self.perf_counter = _perf_counter
        self._torch = torch
        self._flush_buf = None
        if device == "cuda":
            self.synchronize = torch.cuda.synchronize
            self.Event = torch.cuda.Event
            self.record = torch.cuda.Event.record
            self.elapsed_time = torch.cuda.Event.elapsed_time
            self.event_synchronize = torch.cuda.Event.synchronize
            self.zero_ = torch.Tensor.zero_
            if l2_flush_mib > 0:
                # Allocated once, before the answer runs; written (not just allocated) before every trial.
                self._flush_buf = torch.empty(l2_flush_mib * (1 << 20) // 8, dtype=torch.int64, device="cuda")
        else:
            self.synchronize = None

    def flush_l2(self) -> None:
        if self._flush_buf is not None:
            self.zero_(self._flush_buf)

    def time_callable(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        protocol: TimingProtocol,
        after_call: Callable[[Any, str], None] | None = None,
    ) -> RawTimes:
        """Time ``fn(*args)`` following ``protocol``; ``after_call(out, phase)`` runs outside the timed region
        after every call (phase is "warmup" or "trial")."""
        torch = self._torch
        raw = RawTimes()
        ctx = torch.no_grad() if protocol.no_grad else _Null()
        with ctx:
            for _ in range(protocol.warmup):
                h0 = self.perf_counter()
                out = fn(*args)
                if self.synchronize is not None:
                    self.synchronize()
                raw.warmup_ms.append((self.perf_counter() - h0) * 1e3)
                if after_call is not None:
                    after_call(out, "warmup")
                del out
            for i in range(protocol.discard_first + protocol.trials):
                if self.device == "cuda":
                    ms, host = self._one_cuda(fn, args, after_call)
                else:
                    h0 = self.perf_counter()
                    out = fn(*args)
                    ms = (self.perf_counter() - h0) * 1e3
                    host = ms
                    if after_call is not None:
                        after_call(out, "trial")
                    del out
                if i < protocol.discard_first:
                    raw.discarded_ms.append(ms)
                else:
                    raw.trials_ms.append(ms)
                    if self.device == "cuda":
                        raw.host_ms.append(host)
        return raw

    def _one_cuda(self, fn: Callable[..., Any], args: Sequence[Any], after_call: Callable[[Any, str], None] | None):
        sync = self.synchronize
        start = self.Event(enable_timing=True)
        end = self.Event(enable_timing=True)
        sync()
        self.flush_l2()  # outside the events
        sync()
        h0 = self.perf_counter()
        self.record(start)
        out = fn(*args)
        sync()  # device-wide: work left on any stream is inside the measurement
        self.record(end)
        self.event_synchronize(end)
        host = (self.perf_counter() - h0) * 1e3
        ms = float(self.elapsed_time(start, end))
        if after_call is not None:
            after_call(out, "trial")
        return ms, host


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def scrub(out: Any) -> None:
    """Overwrite an output in place (NaN for floating tensors, a sentinel for integers, False for bool) so memory
    that an answer hands back again later (a cached tensor, a recycled allocator block) no longer holds the right
    values. Done outside the timed region, for answers and baselines alike."""
    import torch

    tensors = [out] if isinstance(out, torch.Tensor) else [t for t in (out if isinstance(out, (list, tuple)) else [])
                                                            if isinstance(t, torch.Tensor)]
    for t in tensors:
        try:
            if t.dtype.is_floating_point or t.dtype.is_complex:
                t.detach().fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.detach().fill_(False)
            else:
                t.detach().fill_(-7)
        except RuntimeError:
            pass  # e.g. an expanded (overlapping) view cannot be written in place: nothing to scrub safely
