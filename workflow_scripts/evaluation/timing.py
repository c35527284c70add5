"""The timing protocol, shared by answers and baselines (both timed in ``workflow_scripts.evaluation.child``).

Both are timed by the same code with the same :class:`TimingProtocol`, so their numbers are comparable:

* everything runs under ``torch.no_grad()`` (as KernelBench's correctness check does; KernelBench's timing loop
  inherits no grad mode, but a forward-only benchmark has no use for autograd bookkeeping, and timing answers and
  baselines the same way is what matters);
* ``warmup`` untimed calls first (each followed by a device-wide synchronize);
* then ``discard_first + trials`` timed calls; the first ``discard_first`` are reported separately and left out of
  the statistics;
* on CUDA (``timing_mode = "cuda_events"``) each trial has KernelBench's structure
  (``time_execution_with_cuda_event``): device-wide ``torch.cuda.synchronize()``; an L2 flush (writing a
  ``l2_flush_mib`` MiB buffer, larger than any current L2) enqueued on the current stream; ``start.record()``; the
  call; ``end.record()``. The start event fires when the flush is done, so the flush is outside the window while
  the host's launch work overlaps it, as in KernelBench. ``launch_headroom_us`` (an addition, 0 = KernelBench's
  window to the letter) enqueues a device-side wait of that length between the flush and the start event: the
  256 MiB flush takes about 60 us on an H200, about what Python needs to launch one Triton kernel, so in
  KernelBench's window a one-kernel call reads either its device time or that plus whatever host time exceeded the
  flush (3.5 or 8-48 us for the same kernel on an H200, bench/archive/NOTES.md, sixth session). With the headroom the host's launch work
  up to that long is never in the window; beyond it (many launches) it still is, as in KernelBench. Outside the
  window: ``end.synchronize()`` (the current stream is done), then a device-wide synchronize whose host time is the
  trial's ``leftover_us``: work the call left on another stream is still running then. Its minimum over the trials
  beyond ``leftover_limit_us(median)`` means every call leaves work behind (``side_stream_leftover``; the evaluator
  flags ``unsynchronized_stream``). No harness work runs inside the window (Triton launches are counted by a bare
  counter while timing, see ``integrity.LaunchCounter``);
* on CPU (``timing_mode = "cpu_wall_interpreter"``) each trial is ``time.perf_counter()`` around the call. With
  ``TRITON_INTERPRET=1`` this measures the Triton *interpreter*: it says nothing about GPU speed;
* after each call, outside the timed region, ``after_call(out, phase, ms)`` runs (the harness scrubs the output
  there, see :func:`scrub`, counts Triton launches, checks for tampering and, for answers, reports the trial to the
  trusted side, which may check its output); ``ms`` is the trial's time (None for warm-up calls).

Paired timing (answers only, ``paired_blocks``): the answer's trials are split into blocks, and the trusted side
times the eager reference on the same inputs in blocks of at most ``paired_reference_block`` trials
(``reference_block``), alternating in the order ABBA ABBA ... (answer, reference, reference, answer), so both see
the same GPU state (clock, power, temperature) and a linear drift cancels. Each block is timed by ``Clock.time_callable`` as above; the first block of each side carries the
warm-up and discarded calls. The reference's headline statistic over its blocks is the answer's paired eager time.

The clock functions are captured when :class:`Clock` is built, which the harness does before any answer code is
imported, so an answer that later replaces ``time.perf_counter`` or ``torch.cuda.Event.elapsed_time`` does not
change what the harness measures (and the replacement is reported by the harness's identity checks).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Callable, Sequence

# Device cycles per microsecond of launch headroom: the SM clock's top (1.98 GHz on an H200) rounded up, so the wait
# is at least the configured time (longer at lower clocks, which costs nothing: it is outside the window).
HEADROOM_CYCLES_PER_US = 2000

# Captured at import time; the child imports this module before loading any answer.
_perf_counter = time.perf_counter


@dataclass(frozen=True)
class TimingProtocol:
    """One timing's protocol, as the run configuration sets it (``config.RunConfig.timing_protocol``: the numbers'
    home) and as its result records it."""

    warmup: int
    trials: int
    discard_first: int
    l2_flush_mib: int
    launch_headroom_us: float  # device-side wait between the flush and the start event (CUDA; 0 on the CPU)
    no_grad: bool = True  # always: KernelBench times under torch.no_grad()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RawTimes:
    """Raw per-call numbers as measured in the child (milliseconds)."""

    trials_ms: list[float] = field(default_factory=list)  # the kept trials, in order
    discarded_ms: list[float] = field(default_factory=list)  # the first `discard_first` trials
    host_ms: list[float] = field(default_factory=list)  # host time of the kept trials (cuda only)
    leftover_us: list[float] = field(default_factory=list)  # kept trials: device-wide sync after the window (cuda)
    warmup_ms: list[float] = field(default_factory=list)  # host time of each warm-up call

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_blocks(protocol: TimingProtocol, block_trials: int) -> list[TimingProtocol]:
    """``protocol``'s trials split into blocks of ``block_trials`` (the last may be shorter); the first block also
    carries the warm-up and the discarded calls. One block (the whole protocol) when ``block_trials`` <= 0."""
    if block_trials <= 0 or block_trials >= protocol.trials:
        return [protocol]
    sizes = [block_trials] * (protocol.trials // block_trials)
    if protocol.trials % block_trials:
        sizes.append(protocol.trials % block_trials)
    first = replace(protocol, trials=sizes[0])
    return [first] + [replace(protocol, warmup=0, discard_first=0, trials=n) for n in sizes[1:]]


def reference_block(block: TimingProtocol, reference_trials: int) -> TimingProtocol:
    """The eager reference's block beside the answer's ``block`` in paired timing: at most ``reference_trials``
    trials (at least one), with the block's warm-up and discarded calls. Fewer trials than the answer's: each costs
    a reference forward, and with ABBA order linear drift still cancels (the reference's blocks are as centred in
    time as the answer's)."""
    return replace(block, trials=max(1, min(block.trials, reference_trials)))


def answer_goes_first(block: int) -> bool:
    """Within block pair ``block``: answer then reference in even blocks, reference then answer in odd ones, so the
    sequence reads A R R A A R R A ... (ABBA)."""
    return block % 2 == 0


def merge_raw(parts: Sequence[RawTimes]) -> RawTimes:
    """Blocks of one side put back together, in order."""
    merged = RawTimes()
    for part in parts:
        for f in fields(RawTimes):
            getattr(merged, f.name).extend(getattr(part, f.name))
    return merged


def stats(trials_ms: Sequence[float]) -> dict[str, Any] | None:
    """Summary statistics of kept trials: mean (the headline by default: ``core.records.HEADLINE_STATISTIC``),
    median, population std (ddof=0, as KernelBench's ``np.std``), min, max, n and the raw trials. ``None`` for no trials or non-finite values."""
    xs = [float(x) for x in trials_ms]
    if not xs or not all(math.isfinite(x) for x in xs):
        return None
    n = len(xs)
    mean = math.fsum(xs) / n
    srt = sorted(xs)
    median = srt[n // 2] if n % 2 else (srt[n // 2 - 1] + srt[n // 2]) / 2.0
    std = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / n)
    return {"mean": mean, "median": median, "std": std, "min": srt[0], "max": srt[-1], "n": n, "trials": xs}


# Held by every CUDA trial from its first synchronize to its last (``Clock._one_cuda``). A thread of the timing process
# whose Python work would otherwise take the interpreter's lock inside a window, between the host's launches (the
# trusted side's memory watcher, which walks process trees every 50 ms: ``memory_cap``), does that work holding this
# lock, so it runs between trials, never during one. Without it the paired reference's trials on L1/12 (0.054 ms)
# held polls 2-10x the median in 12 of 16 answers, +3.8% on the mean speedup (bench/archive/NOTES.md, thirteenth session).
TRIAL_GATE = threading.Lock()


class Clock:
    """Timer functions captured before any answer code runs (see the module docstring)."""

    def __init__(self, device: str, l2_flush_mib: int = 256) -> None:
        import torch

        self.device = device
        self.perf_counter = _perf_counter
        self._gate = TRIAL_GATE
        self._torch = torch
        self._flush_buf = None
        if device == "cuda":
            self.synchronize = torch.cuda.synchronize
            self.Event = torch.cuda.Event
            self.record = torch.cuda.Event.record
            self.elapsed_time = torch.cuda.Event.elapsed_time
            self.event_synchronize = torch.cuda.Event.synchronize
            self.zero_ = torch.Tensor.zero_
            self.sleep = torch.cuda._sleep  # a device-side spin of N cycles (the launch headroom)
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
        after_call: Callable[[Any, str, float | None], None] | None = None,
        before_trial: Callable[[], None] | None = None,
    ) -> RawTimes:
        """Time ``fn(*args)`` following ``protocol``; ``after_call(out, phase, ms)`` runs outside the timed region
        after every call (phase is "warmup" or "trial"; ms is the trial's time, None for a warm-up call), and
        ``before_trial()`` before every trial's synchronize and L2 flush (an answer's fresh timing inputs are drawn
        there: whatever it leaves in the cache is flushed)."""
        torch = self._torch
        raw = RawTimes()
        ctx = torch.no_grad() if protocol.no_grad else contextlib.nullcontext()
        with ctx:
            for _ in range(protocol.warmup):
                h0 = self.perf_counter()
                out = fn(*args)
                if self.synchronize is not None:
                    self.synchronize()
                raw.warmup_ms.append((self.perf_counter() - h0) * 1e3)
                if after_call is not None:
                    after_call(out, "warmup", None)
                del out
            for i in range(protocol.discard_first + protocol.trials):
                leftover = None
                if before_trial is not None:
                    before_trial()
                if self.device == "cuda":
                    ms, host, leftover = self._one_cuda(fn, args, after_call, protocol.launch_headroom_us)
                else:
                    h0 = self.perf_counter()
                    out = fn(*args)
                    ms = (self.perf_counter() - h0) * 1e3
                    host = ms
                    if after_call is not None:
                        after_call(out, "trial", ms)
                    del out
                if i < protocol.discard_first:
                    raw.discarded_ms.append(ms)
                else:
                    raw.trials_ms.append(ms)
                    if leftover is not None:
                        raw.host_ms.append(host)
                        raw.leftover_us.append(leftover)
        return raw

    def _one_cuda(self, fn: Callable[..., Any], args: Sequence[Any],
                  after_call: Callable[[Any, str, float | None], None] | None, headroom_us: float = 0.0
                  ) -> tuple[float, float, float]:
        """One trial: (event milliseconds, host milliseconds, leftover microseconds). See the module docstring."""
        sync = self.synchronize
        start = self.Event(enable_timing=True)
        end = self.Event(enable_timing=True)
        with self._gate:
            sync()
            self.flush_l2()  # on the current stream, before `start`: outside the window
            if headroom_us > 0:
                # GPU cycles at <= 2 GHz (the H200's top SM clock is 1.98 GHz): at least headroom_us of device time.
                self.sleep(int(headroom_us * HEADROOM_CYCLES_PER_US))
            h0 = self.perf_counter()
            self.record(start)
            out = fn(*args)
            self.record(end)
            self.event_synchronize(end)  # the current stream has passed `end`
            h1 = self.perf_counter()
            sync()  # every stream: whatever still runs now was left behind by the call
            leftover_us = (self.perf_counter() - h1) * 1e6
        ms = float(self.elapsed_time(start, end))
        if after_call is not None:
            after_call(out, "trial", ms)
        return ms, (h1 - h0) * 1e3, leftover_us


def leftover_limit_us(median_trial_ms: float) -> float:
    """How long the device-wide synchronize after a trial may take when the call left nothing behind: its own
    cost (a few microseconds) with margin, plus 5% of the trial so a slow call is not flagged for jitter."""
    return 20.0 + 0.05 * median_trial_ms * 1e3


def side_stream_leftover(raw: RawTimes | dict[str, Any]) -> bool:
    """True when every kept trial left work running on another stream after its window closed (the minimum
    over the trials is beyond the limit, so one slow synchronize never decides it)."""
    values = raw.get("leftover_us") if isinstance(raw, dict) else raw.leftover_us
    trials = raw.get("trials_ms") if isinstance(raw, dict) else raw.trials_ms
    if not values or not trials:
        return False
    median = sorted(trials)[len(trials) // 2]
    return min(values) > leftover_limit_us(median)


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
