"""A baseline job's windows on its GPU (issue 34): both sides, and the messages between them.

A baseline job holds its GPU shared and yielding (``gpu_lock.YieldingLease``); it takes the GPU alone for what it times:
the eager and the compiled module's timing. The benchmarks with which Inductor's max-autotune picks its kernels during
the compiled module's first call run in windows too: by default with the GPU alone (``baselines.autotune_alone``,
``ExclusiveWindows.alone``), or in the job's GPU turn (no timing beside them, other jobs' untimed work may run: on an
H100 the compiled times changed by at most 0.8% in s28, one of 20 by 2.06x in s30). For the benchmarks the child
(trusted code: the problem's own ``Model``) routes every GPU benchmark of Inductor's through
``gate_inductor_benchmarks``: before one it sends ``REQUEST`` and blocks on its stdin until the parent's ``GRANT`` (it
runs nothing meanwhile), after it it sends ``DONE``. The parent (``ExclusiveWindows``) opens a window for a request (the
job's turn, or its lease upgraded) and keeps it ``LINGER_S`` after the last benchmark, so a burst of candidates shares
one window. Where Inductor's benchmarker is not found (another torch), the child asks for one window around its whole
first call instead; the result records which (``BENCHMARKS`` or ``WHOLE_FIRST_CALL``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from workflow_scripts.evaluation import gpu_lock, timeline

REQUEST = "autotune_request"  # child -> parent message: a GPU benchmark is about to run
GRANT = "autotune_go"  # parent -> child command: the window is open, the benchmark may run
DONE = "autotune_done"  # child -> parent message: the benchmark ended
# How long a window stays open after a benchmark ended: max-autotune benchmarks a layer's candidates back to back
# (milliseconds apart, compiling in between), and each new window would cost a turn (or, alone, a downgrade and an
# upgrade: the GPU drained of shared work each time); a tenth of a second keeps a burst in one window and gives the GPU
# back soon after.
LINGER_S = 0.1
# What ``gate_inductor_benchmarks`` managed: every GPU benchmark in a window, or (no benchmarker found) one window
# around the compiled module's whole first call.
BENCHMARKS = "benchmarks"
WHOLE_FIRST_CALL = "whole_first_call"
# Inductor's benchmarker methods that run candidates on the GPU (the second captures a CUDA graph, runs it once, then
# calls the first): each outermost call is one benchmark.
INDUCTOR_GPU_BENCHMARKS = ("benchmark_gpu", "benchmark_gpu_with_cuda_graph")


class ExclusiveCalls:
    """Child side: each outermost call of a wrapped method runs between ``ask`` (returns once the window is granted)
    and ``done``; calls made inside it (one benchmark method calling another) run in that same window, and a call
    from another thread meanwhile waits for it to end (one benchmark at a time)."""

    def __init__(self, ask: Callable[[], None], done: Callable[[], None]) -> None:
        self._ask, self._done = ask, done
        self._lock = threading.RLock()  # one benchmark at a time: the messages of two would interleave
        self._depth = 0

    def wrap(self, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        def in_window(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                if self._depth == 0:
                    self._ask()
                self._depth += 1
                try:
                    return method(*args, **kwargs)
                finally:
                    self._depth -= 1
                    if self._depth == 0:
                        self._done()

        return in_window

    def install(self, obj: object, names: tuple[str, ...]) -> list[str]:
        """Each of ``obj``'s methods ``names`` replaced, on the instance, by its wrapped self; the names wrapped."""
        wrapped = [name for name in names if callable(getattr(obj, name, None))]
        for name in wrapped:
            setattr(obj, name, self.wrap(getattr(obj, name)))
        return wrapped


def gate_inductor_benchmarks(ask: Callable[[], None], done: Callable[[], None]) -> str:
    """Child side, before ``torch.compile``'s first call: Inductor's GPU benchmarks (select_algorithm, the caching
    autotuner's ``bench``, coordinate descent, pad_mm: all go through the module's one ``benchmarker`` instance) in
    exclusive windows. ``BENCHMARKS``; ``WHOLE_FIRST_CALL`` where that instance or its ``benchmark_gpu`` is missing,
    or where a setting sends benchmarks past it (``bypasses_benchmarker``), and the caller then asks for one window
    around the whole first call."""
    try:
        from torch._inductor import config as inductor_config
        from torch._inductor.runtime.benchmarking import benchmarker
    except ImportError:
        return WHOLE_FIRST_CALL
    if bypasses_benchmarker(inductor_config) or not callable(getattr(benchmarker, "benchmark_gpu", None)):
        return WHOLE_FIRST_CALL
    ExclusiveCalls(ask, done).install(benchmarker, INDUCTOR_GPU_BENCHMARKS)
    return BENCHMARKS


def bypasses_benchmarker(inductor_config: Any) -> bool:
    """Whether Inductor's settings send some GPU benchmarks past its ``benchmarker`` instance (all off by default in
    torch 2.13): autotuning in subprocesses (their benchmarker is not this one), CUTLASS among the GEMM backends
    (select_algorithm benchmarks it in a subprocess), pipelined GEMM autotuning, and bandwidth profiling by
    ``do_bench_using_profiling``."""
    backends = str(getattr(inductor_config, "max_autotune_gemm_backends", "")).upper().split(",")
    return (bool(getattr(inductor_config, "autotune_in_subproc", False)) or "CUTLASS" in backends
            or bool(getattr(inductor_config, "pipeline_max_autotune_gemm", False))
            or bool(getattr(inductor_config, "profile_bandwidth_with_do_bench_using_profiling", False)))


@dataclass
class ExclusiveWindows:
    """Parent side: the job's exclusive windows on its GPU. A window opens for a user (``enter``: a timing, or a
    benchmark the child asked for) by upgrading the lease and stays open while any user is in it; ``close_if_idle``
    closes it ``LINGER_S`` after its last user left, ``close`` at once. Benchmark windows go on the timeline as
    ``baseline_autotune`` (from the first grant to the last benchmark's end; the linger after it is the window's
    own overhead), with their count and the longest gap between them. Without a lease (the CPU) only the bookkeeping
    runs.

    ``alone=False`` (``baselines.autotune_alone: false``; the configuration's default is ``true``): a benchmark's
    window is the job's GPU turn instead (``YieldingLease.held``: the lease stays shared and does not step aside
    meanwhile). No timing runs beside the benchmarks then either (a timing needs the GPU exclusively, which a shared
    holder keeps it from), but other jobs' correctness work may (``beside_evaluation`` says whether an evaluation held
    the GPU), which can sway the picks (s30: one of 20 compiled baselines 2.06x slower); each window costs no drain of
    the GPU's shared holders (an H100 run's 721 windows waited 347 s for them, s27). A timing (``enter``) always
    upgrades."""

    yielding_lease: gpu_lock.YieldingLease | None
    lock_dir: Path | str | None
    where: str  # the timeline's gpu: the leased GPU's id, or the device
    problem: str
    # Benchmarks with the GPU exclusively, else in the job's GPU turn beside correctness work (the baseline stage passes
    # baselines.autotune_alone).
    alone: bool = True
    users: int = 0
    is_open: bool = False
    exclusive: bool = False  # the open window holds the GPU exclusively (else only the job's turn)
    idle_since: float | None = None  # monotonic: when the last user left
    autotune_start: float | None = None  # epoch: this window's first benchmark
    autotune_end: float | None = None  # epoch: its last benchmark's end
    # This window's benchmarks and the longest wait between one's end and the next one's request: what a shorter
    # LINGER_S would split into windows of their own (each a hand-over; s33: the baselines' 179 exclusive windows held
    # the GPU 15.1 s in all with nothing timed, lingers included).
    benchmarks: int = 0
    longest_gap_s: float = 0.0
    _turn: contextlib.ExitStack | None = None  # the job's GPU turn, held by a window that is not exclusive
    # A window in the job's turn with an evaluation holding the GPU as it opened or closed (its holder file: pinned,
    # or yielding between its steps): the picks may have been made beside answers' untimed work (the timeline line
    # says so; docs/evaluation.md, trust).
    beside_evaluation: bool = False

    def enter(self, timeout_s: float, exclusive: bool = True) -> float:
        """A user in the window, opened if it is not, upgraded if ``exclusive`` and it is not yet (waiting at most
        ``timeout_s``: GpuLockTimeout); the seconds waited for the GPU."""
        waited = 0.0
        if self.yielding_lease is not None:
            if exclusive and not self.exclusive:
                # A benchmark still running in the job's turn is stopped while the upgrade waits (its lock dropped).
                waited = self.yielding_lease.upgrade(timeout_s, stop_followed=self.users > 0)
                self.exclusive = True
            elif not exclusive and not self.is_open:
                self._turn = contextlib.ExitStack()
                self._turn.enter_context(self.yielding_lease.held())
                self.beside_evaluation = self._evaluation_holds_gpu()
        self.is_open = True
        self.users += 1
        self.idle_since = None
        return waited

    def _evaluation_holds_gpu(self) -> bool:
        """Whether an evaluation job holds the GPU now (``GpuLease.held_beside_by``): a pinned one, and a yielding one
        (``evaluation.yield_gpu``), whose pin would not show it."""
        return self.yielding_lease is not None and self.yielding_lease.lease.held_beside_by("evaluate")

    def leave(self) -> None:
        self.users = max(0, self.users - 1)  # a user left after ``close`` counted nobody
        if self.users == 0:
            self.idle_since = time.monotonic()

    def benchmark(self, timeout_s: float, whole_first_call: bool = False) -> float:
        """A benchmark the child asked for (``REQUEST``) in the window; the seconds waited for the GPU. The caller
        sends ``GRANT`` then. A window around the whole first call (``WHOLE_FIRST_CALL``) is exclusive whatever
        ``alone`` says: tens of seconds of compiling in the job's turn would keep every timer waiting."""
        asked = time.time()
        if self.autotune_end is not None:  # a benchmark of this window ended before: the gap the linger bridged
            self.longest_gap_s = max(self.longest_gap_s, asked - self.autotune_end)
        waited = self.enter(timeout_s, exclusive=self.alone or whole_first_call)
        if self.autotune_start is None:
            self.autotune_start = time.time()
        self.benchmarks += 1
        return waited

    def benchmark_done(self) -> None:
        """The child's ``DONE``."""
        self.autotune_end = time.time()
        self.leave()

    def linger_left(self) -> float | None:
        """Seconds until an idle window closes (``close_if_idle``); None when none is open or it is in use."""
        if not self.is_open or self.users or self.idle_since is None:
            return None
        return max(0.0, self.idle_since + LINGER_S - time.monotonic())

    def close_if_idle(self) -> None:
        if self.linger_left() == 0.0:
            self.close()

    def close(self) -> None:
        """The window closed now, whoever is in it (the child answered, failed or is ending): the lease shared again."""
        if not self.is_open:
            return
        if self.autotune_start is not None:
            beside = self.beside_evaluation or (self._turn is not None and self._evaluation_holds_gpu())
            timeline.append(self.lock_dir, "baseline_autotune", self.where, self.autotune_start,
                            self.autotune_end or time.time(), problem=self.problem, exclusive=self.exclusive,
                            beside_evaluation=beside, benchmarks=self.benchmarks,
                            longest_gap_s=round(self.longest_gap_s, 4))
        self.autotune_start = self.autotune_end = None
        self.benchmarks, self.longest_gap_s = 0, 0.0
        self.beside_evaluation = False
        exclusive, turn = self.exclusive, self._turn
        self.users, self.is_open, self.exclusive, self.idle_since, self._turn = 0, False, False, None, None
        try:
            if exclusive and self.yielding_lease is not None:
                self.yielding_lease.downgrade()
        finally:
            if turn is not None:
                turn.close()


class WindowRequests:
    """Child side: ``ask`` sends ``REQUEST`` and blocks until the parent's ``GRANT`` (a parent that says anything
    else is not following the protocol, and the child ends); ``done`` sends ``DONE``. ``wait_spans``: each wait for a
    grant, (start, end) in epoch seconds, which the compile time leaves out (the GPU was busy, nothing was compiled),
    counted once with the times the parent held the child stopped (``baseline.compile_seconds``)."""

    def __init__(self, send: Callable[[dict[str, Any]], None], read: Callable[[], dict[str, Any]]) -> None:
        self._send, self._read = send, read
        self.wait_spans: list[tuple[float, float]] = []
        self.granted = 0

    def ask(self, whole_first_call: bool = False) -> None:
        start = time.time()
        self._send({"type": REQUEST, "whole_first_call": whole_first_call})
        if self._read().get("cmd") != GRANT:
            os._exit(3)
        self.wait_spans.append((start, time.time()))
        self.granted += 1

    def done(self) -> None:
        self._send({"type": DONE})
