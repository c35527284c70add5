"""Evaluate one answer against one problem: the parent side, which drives the two children and judges. The child
side is ``workflow_scripts.evaluation.child``, whose docstring holds the trust model; the verdicts themselves are
``workflow_scripts.evaluation.protocol``'s.

Protocol (KernelBench's, with the deviations marked):

* Reference ``Model`` and answer ``ModelNew`` are loaded from files (``importlib.util.spec_from_file_location``
  on copies in each child's temporary directory) in two separate child processes. Both models are built after
  ``torch.manual_seed(42)`` + ``torch.cuda.manual_seed(42)`` (``get_init_inputs`` is called after seeding too),
  under ``torch.no_grad()``, moved with ``.to(device, dtype=float32)``, and not switched to eval mode.
* Correctness: 5 trials. Their input seeds are KernelBench's derivation: ``torch.manual_seed(42)`` then
  ``torch.randint(0, 2**32 - 1, (1,)).item()`` five times (= 734796314, 576165995, 2197670066, 839703249,
  2584932063). Per trial: seed, ``get_inputs()``, seed again, forward under ``torch.no_grad()``.
  Floating inputs are cast to fp32; **deviation**: integer/bool inputs keep their dtype (KernelBench casts every
  input to float, which breaks e.g. level-1 problem 95, cross-entropy with integer targets).
  Outputs must match in structure, shape and dtype, and ``torch.allclose(ref, out, atol=1e-4, rtol=1e-4)``
  (``equal_nan=False``: NaN never passes; non-floating outputs must be equal).
* **Additions**: ``hidden_trials`` (default 1) extra trials on seeds the parent draws at random per run (sent only
  after the answer is loaded; recorded in ``protocol`` for replay); a failure there is ``rejected_runtime`` with
  ``hidden_input_mismatch``. Timing uses inputs from another secret seed (same distribution as KernelBench's
  seed-42 timing inputs; values do not change timing for these ops). After timing, the timed input tensors are
  overwritten in place with inputs from a third secret seed and the answer's output on them is checked
  (``post_timing_mismatch``).
* Timing: see ``workflow_scripts.evaluation.timing`` (KernelBench's CUDA-event window with an L2 flush before it; work left
  on other streams is measured after it and flagged, 3 warm-up +
  1 discarded + 100 trials on the GPU; wall clock, 1 + 1 + 10 on the CPU, ``timing_mode`` says which). Only
  answers that passed every correctness trial are timed. ``runtime_ms`` is the mean, null unless correct.
* Status precedence (``decide_status``): a failure before the module finished importing is ``load_error`` (or
  ``no_model_new``); after that any flag that rejects (``core.statuses.FLAGS``) gives
  ``rejected_runtime``; then timeout, crash (child died, exited early, CUDA error, or no authenticated ``done``),
  init/runtime error, the first failing trial's shape/dtype/value mismatch; then ``no_triton_launch`` when
  ``require_triton`` and some correctness call launched no Triton kernel; else ``correct``.
* Static analysis (``workflow_scripts.analysis.static.analyze_source``, when importable) runs first; a
  ``reject`` finding gives ``rejected_static`` without running anything (``compiled`` stays False, as for other
  pre-run statuses); a syntax error gives ``load_error`` without running; ``flag`` findings become
  ``static:<code>`` flags.

CLI: ``python -m workflow_scripts evaluate --problem P.py --answer A.py --device cpu|cuda --out OUT.json
[--timeout S] [--no-require-triton] [--tf32 pytorch_default|ieee] [--no-timing] [--gpu-index N]``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from workflow_scripts.analysis.static import analyze_source
from workflow_scripts.core.records import TIMING_MODES
from workflow_scripts.core.statuses import Status, is_compiled, is_integrity_flag
from workflow_scripts.evaluation import environment, gpu_lock, timing
from workflow_scripts.evaluation.channel import (
    HARNESS_VERSION,
    ChildDied,
    ChildTimeout,
    Message,
    ProtocolError,
)
from workflow_scripts.evaluation.config import RunConfig
from workflow_scripts.evaluation.protocol import (
    SEED_DERIVATION,
    TimedChecks,
    WATCHDOG_CALL_S,
    WATCHDOG_FIRST_CALL_S,
    call_limit_s,
    compare_outputs,
    decide_status,
    kernelbench_trial_seeds,
    timing_limit_s,
)
from workflow_scripts.evaluation.reference import (ReferenceFailed, ReferenceSide, ReferenceTrial, available_memory,
                                                   bind_gpu, input_bytes_on_meta, load_problem)
from workflow_scripts.evaluation.sandbox import ChildProcess, SandboxUnavailable, hideable, problem_sources
from workflow_scripts.evaluation.start_gate import StartGate
from workflow_scripts.evaluation.transport import Area, TransportError, dtype_name


# The repository's results folder, which holds every configuration's results_dir unless one is set elsewhere (the
# pipeline's evaluate stage hides its own results folder and store too, through hidden_paths).
DEFAULT_RESULTS = Path(__file__).resolve().parents[2] / "results"
# What an answer's process reports its start took (child.main), kept as phases "child_<name>": not verdict inputs.
CHILD_SETUP_PHASES = ("startup_s", "host_start_s", "gate_wait_s", "device_start_s", "areas_wait_s", "areas_pin_s")


class InfrastructureError(RuntimeError):
    """The evaluation itself could not run (not the answer's fault): exit non-zero, record nothing."""


@dataclass
class EvalConfig(RunConfig):
    """An answer's evaluation: the run configuration, KernelBench's correctness protocol and the additions."""

    default_timeout_s: ClassVar[dict[str, float]] = {"cpu": 300.0, "cuda": 1200.0}  # the whole evaluation
    correctness_trials: int = 5
    atol: float = 1e-4
    rtol: float = 1e-4
    require_triton: bool = True
    time_answer: bool = True
    hidden_trials: int = 1
    # Secret seeds, drawn per run when None; set them to replay a run.
    hidden_seeds: list[int] | None = None
    timing_seed: int | None = None
    post_timing_seed: int | None = None
    run_static: bool = True
    keep_workdir: bool = False
    # The per-call watchdog's floor in seconds (protocol.call_limit_s). None: the protocol's floors on CUDA, and no
    # watchdog on the CPU, where the Triton interpreter's speed says nothing about the reference's.
    watchdog_floor_s: float | None = None
    # Answer processes started at once, ahead of their answers (a process takes seconds to start: torch, CUDA,
    # Triton's driver, and none may start while an answer is timed, so each batch costs one wait). None: 15 on CUDA
    # (the study's answers per problem; an idle child holds a CUDA context and the L2 flush buffer, under 1 GiB of
    # GPU memory), 1 on the CPU. Bounded by host memory: each holds its own input and output areas
    # (ProblemEvaluator.batch_size).
    prestart: int | None = None
    # Trials per block of paired timing (timing.paired_blocks): the eager reference is timed on the same inputs in
    # blocks alternating with the answer's, and the speedup is taken against it. 0: the answer alone, in one window
    # (KernelBench's loop; the speedup is then taken against the baseline stage's eager time).
    paired_block: int = 10
    # Trials per block of the eager reference in paired timing (timing.reference_block; at most paired_block): as
    # many as the answer's by default, the protocol the calibration was measured with. Fewer save a reference forward
    # each (5: half a second per answer on a 10 ms problem) and widen the speedup's spread (bench/NOTES.md, eleventh
    # session: with 5, |speedup-1| p90 0.57% on 28 problems against 0.15% with 10 on the same problems).
    paired_reference_block: int = 10
    # "keep": only floating inputs become fp32 (integer targets stay integer); "cast": every input tensor becomes
    # fp32, as KernelBench casts them (its level-1 problem 95 then fails: cross-entropy needs integer targets).
    integer_inputs: str = "keep"
    # False: integrity flags and static-analysis rejections are recorded but do not change the verdict, which then
    # rests on the outputs alone, as KernelBench's does.
    reject_cheats: bool = True
    # The re-check on fresh inputs after timing (KernelBench has none).
    post_timing_check: bool = True
    # Directories the answer's sandbox shows empty, besides the problem's own sources (sandbox.problem_sources),
    # e.g. the workflow's results folder, which holds the prompts (the reference code of every problem).
    hidden_paths: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.integer_inputs not in ("keep", "cast"):
            raise ValueError(f"integer_inputs must be keep or cast, got {self.integer_inputs!r}")
        if self.paired_reference_block < 1:
            raise ValueError(f"paired_reference_block must be at least 1, got {self.paired_reference_block!r}")

    @classmethod
    def kernelbench_exact(cls, **overrides: Any) -> "EvalConfig":
        """KernelBench's verdicts to the letter (docs/evaluation.md, "Deviations"): no Triton requirement, only its 5
        seeded trials (no hidden or post-timing check), every input cast to fp32, cheats flagged but not rejected,
        the answer timed alone (its eager speedup against the baseline stage) in KernelBench's window to the letter
        (no launch headroom). Isolation, the watchdog and the dtype check stay: they decide nothing for an answer
        that KernelBench would pass."""
        settings: dict[str, Any] = dict(require_triton=False, hidden_trials=0, post_timing_check=False,
                                        integer_inputs="cast", reject_cheats=False, paired_block=0,
                                        launch_headroom_us=0.0)
        settings.update(overrides)
        return cls(**settings)

    def prestart_count(self) -> int:
        return max(1, int(self.prestart if self.prestart is not None else (15 if self.device == "cuda" else 1)))

    def watchdog_limits(self) -> tuple[float, float] | None:
        """(first call, later calls) floors in seconds, or None without a watchdog."""
        if self.watchdog_floor_s is not None:
            return (self.watchdog_floor_s, self.watchdog_floor_s)
        return (WATCHDOG_FIRST_CALL_S, WATCHDOG_CALL_S) if self.device == "cuda" else None


@dataclass
class TrialRecord:
    index: Any
    kind: str  # "seeded" | "hidden" | "post_timing"
    seed: int
    verdict: str  # ok | shape_mismatch | dtype_mismatch | device_mismatch | value_mismatch | bad_output | error
    max_abs_diff: float | None = None
    launches: int | None = None
    forward_ms: float | None = None
    ref_forward_ms: float | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class EvalResult:
    status: str
    compiled: bool
    correct: bool
    runtime_ms: float | None
    runtime_stats: dict[str, Any] | None
    max_abs_diff: float | None
    triton_launches: int | None
    flags: list[str]
    error: str | None
    device: str
    timing_mode: str
    tf32: dict[str, Any]
    fingerprint: dict[str, Any]
    protocol: dict[str, Any]
    trials: list[dict[str, Any]] = field(default_factory=list)
    timing_raw: dict[str, Any] | None = None  # discarded/warm-up/host times, launches per timed call
    phases_s: dict[str, float] = field(default_factory=dict)
    static: dict[str, Any] | None = None
    # The eager reference timed beside the answer (paired timing): stats, raw, block size, order.
    paired_reference: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def run_static_analysis(code: str) -> tuple[dict[str, Any] | None, list[str], str | None, str | None]:
    """(report, flags, reject_message, syntax_error) from ``analysis.static.analyze_source``."""
    try:
        report = analyze_source(code).to_dict()
    except Exception as e:  # noqa: BLE001 - an analyser bug on odd code must not cost the answer its verdict
        return None, [f"static_analysis_error:{type(e).__name__}"], None, None
    flags, reject = [], None
    for finding in report["findings"]:
        flags.append(f"static:{finding['code']}")
        if finding["severity"] == "reject" and reject is None:
            reject = f"static analysis: {finding['code']} (line {finding['line']}): {finding['message']}"
    syntax = report["syntax_error"] if not report["parses"] else None
    return report, flags, reject, syntax


# ---------------------------------------------------------------------------------------------------------------
# The evaluation
# ---------------------------------------------------------------------------------------------------------------


class _RefFailed(Exception):
    pass


# Values from the answer's child are untrusted: keep only well-typed, finite, bounded ones.
def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        x = float(x)
    except OverflowError:  # an integer beyond any float (JSON allows 10**400)
        return None
    return x if x == x and abs(x) != float("inf") else None


def _int(x: Any) -> int | None:
    return int(x) if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 62 else None


def _raw_times(raw: Any) -> timing.RawTimes:
    """One block's raw numbers as the answer's process sent them; anything but lists of numbers is a forged
    message."""
    if not isinstance(raw, dict):
        raise ProtocolError("timing without raw numbers")
    values: dict[str, list[float]] = {}
    for name in timing.RawTimes.__dataclass_fields__:
        xs = raw.get(name) or []
        if not isinstance(xs, list) or len(xs) > 100_000 or not all(_num(x) is not None for x in xs):
            raise ProtocolError(f"timing: {name} is not a list of numbers")
        values[name] = [float(x) for x in xs]
    return timing.RawTimes(**values)


def _launch_counts(report: Any, calls: int) -> list[int]:
    """A timing block's Triton launches per call (warm-up, discarded and timed calls, in order) as the answer's
    process counted them: anything but one count per call is a forged message. The trusted side judges them
    (``triton_launch_skipped_in_timing``)."""
    counts = [_int(x) for x in report] if isinstance(report, list) else []
    if len(counts) != calls or any(n is None for n in counts):
        raise ProtocolError(f"timing: launches_per_call is not {calls} counts")
    return [n for n in counts if n is not None]


def _text(x: Any, limit: int = 6000) -> str | None:
    return None if x is None else str(x)[:limit]


@dataclass
class _AnswerSlot:
    """An answer's process, started ahead of its answer, with its own writable areas (secret inputs, outputs) once
    the trusted side has handed it its areas (``ProblemEvaluator.hand_areas``)."""

    child: ChildProcess
    secret: Area | None = None
    output: Area | None = None
    pinning: threading.Thread | None = None

    def ready(self) -> None:
        """The child has its areas and this side's mappings of the answer's areas are page-locked (done in the
        background while the previous answer ran)."""
        if self.pinning is not None:
            self.pinning.join()
            self.pinning = None

    def close(self) -> None:
        self.ready()
        self.child.kill()
        for area in (self.secret, self.output):
            if area is not None:
                area.close()


class _Evaluation:
    """One answer, judged against the problem's trusted side in a child started for it."""

    def __init__(self, reference: ReferenceSide, slot: _AnswerSlot, answer_path: Path, config: EvalConfig,
                 gpu: str | None, lease: gpu_lock.GpuLease | None = None,
                 gate: StartGate | None = None) -> None:
        self.reference = reference
        self.slot = slot
        self.gate = gate  # the later answers' processes start in the gaps between timings
        self.lease = lease
        self.deadline = 0.0
        # (limit s, reference forward ms) of the call the watchdog killed, if it did
        self.watchdog: tuple[float, float] | None = None
        self.answer_path = answer_path
        self.cfg = config
        self.gpu = gpu
        self.flags: list[str] = []
        self.trials: list[TrialRecord] = []
        self.failure: Status | None = None
        self.pre_import_status: Status | None = None
        self.imported = False
        self.error: str | None = None
        self.timing_raw: dict[str, Any] | None = None
        self.runtime_stats: dict[str, Any] | None = None
        self.paired_reference: dict[str, Any] | None = None  # the eager reference timed beside the answer
        self.timed_checks = TimedChecks(frozenset(), False)  # drawn when timing starts (_time_paired)
        self.tf32: dict[str, Any] | None = None
        self.phases: dict[str, float] = {}
        self.sm_clocks: list[float] = []
        self.done_ok = False
        self.isolation = slot.child.sandbox
        cfg = config
        self.trial_seeds = [t.seed for t in reference.seeded]
        self.hidden_seeds = list(cfg.hidden_seeds) if cfg.hidden_seeds is not None else [
            secrets.randbelow(2**32 - 1) for _ in range(cfg.hidden_trials)]
        self.timing_seed = reference.timing_seed
        self.post_seed = cfg.post_timing_seed if cfg.post_timing_seed is not None else secrets.randbelow(2**32 - 1)

    def flag(self, f: str) -> None:
        f = str(f)[:160]
        if f not in self.flags and len(self.flags) < 64:
            self.flags.append(f)

    def _add_phase(self, name: str, seconds: float) -> None:
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def _merge(self, msg: Message | None) -> None:
        if msg is not None and isinstance(msg.header.get("flags"), list):
            for f in msg.header["flags"][:64]:
                self.flag(str(f))

    def _events(self, child: ChildProcess) -> None:
        for ev in child.events:
            self.flag(str(ev.get("flag")))

    def _secret_trial(self, kind: str, seed: int) -> ReferenceTrial:
        try:
            return self.reference.secret_trial(kind, seed, self.slot.secret)
        except ReferenceFailed as e:
            raise _RefFailed(str(e)) from None

    def run(self) -> None:
        t_start = time.monotonic()
        self.deadline = t_start + self.cfg.effective_timeout()
        ans = self.slot.child
        try:
            shutil.copyfile(self.answer_path, ans.workdir / "answer.py")
            self._drive(ans, t_start)
        except _RefFailed as e:
            self.failure = Status.REFERENCE_ERROR
            self.error = str(e)[:4000]
        finally:
            if self.gate is not None:
                self.gate.resume()  # paused for a timing that an error cut short
            self._events(ans)
            ans.kill()
            self.phases["total_s"] = time.monotonic() - t_start

    def _drive(self, ans: ChildProcess, t_start: float) -> None:
        cfg = self.cfg
        ref = self.reference
        phase = "setup"
        try:
            # -- setup (the child was started ahead of its answer) and load ----------------------------------
            m = ans.await_hello(self.deadline)
            if m.type != "hello":
                raise InfrastructureError(f"answer child setup failed: {m.header.get('error') or m.type}")
            self.tf32 = m.header.get("tf32")
            setup = m.header.get("setup_s")
            for k, v in (setup.items() if isinstance(setup, dict) else ()):
                if k in CHILD_SETUP_PHASES and _num(v) is not None:
                    self.phases[f"child_{k}"] = float(v)  # as the child reports it: not a verdict input
            if bool(m.header.get("interpret")) != (cfg.device == "cpu"):
                raise InfrastructureError("TRITON_INTERPRET does not match the device")
            self.phases["child_ready_wait_s"] = time.monotonic() - t_start
            phase = "import"
            t_load = time.monotonic()
            ans.send("load", init_inputs=ref.init_entries)
            m = ans.recv(self.deadline)
            answer_running = m.type == "loading"  # from here on the answer's code runs in that process
            if answer_running:
                m = ans.recv(self.deadline)
            self._merge(m)
            if m.type == "setup_error" and not answer_running:
                raise InfrastructureError(f"answer child setup failed: {m.header.get('error')}")
            if m.type == "setup_error":
                # Sent while the answer's module ran: the answer's doing (a message it sent with the nonce, or the
                # harness choking on what it did), never the evaluator's failure.
                self.pre_import_status = Status.LOAD_ERROR
                self.error = f"setup error while the answer was loading: {_text(m.header.get('error'), 2000)}"
                return
            if m.type in ("load_error", "no_model_new"):
                self.pre_import_status = Status.LOAD_ERROR if m.type == "load_error" else Status.NO_MODEL_NEW
                self.error = _text(m.header.get("error"))
                return
            if m.type != "imported":
                raise ProtocolError(f"unexpected {m.type} while importing")
            self.imported = True  # ModelNew exists (KernelBench's "compiled")
            phase = "init"
            m = ans.recv(self.deadline)
            self._merge(m)
            if m.type == "init_error":
                self.failure = Status.INIT_ERROR
                self.error = _text(m.header.get("error"))
                return
            if m.type != "loaded":
                raise ProtocolError(f"unexpected {m.type} while loading")
            self.phases["load_s"] = time.monotonic() - t_load

            # -- correctness: KernelBench's seeded trials (reference computed once per problem), then hidden ones
            phase = "correctness"
            t_corr = time.monotonic()
            plan: list[tuple[int, str, int]] = [(i, "seeded", s) for i, s in enumerate(self.trial_seeds)]
            plan += [(len(plan) + j, "hidden", s) for j, s in enumerate(self.hidden_seeds)]
            for idx, kind, seed in plan:
                rt = ref.seeded[idx] if kind == "seeded" else self._secret_trial(kind, seed)
                ans.send("trial", seed=seed, index=idx, kind=kind, inputs=ref.trial_inputs(rt, self.slot.secret),
                         rng=rt.rng)
                if not self._answer_trial(ans, rt, idx, kind, seed):
                    break
            self.phases["correctness_s"] = time.monotonic() - t_corr
            passed = all(t.verdict == "ok" for t in self.trials) and len(self.trials) == len(plan)
            integrity = any(is_integrity_flag(f) for f in self.flags + [str(e.get("flag")) for e in ans.events])
            launched = all((t.launches or 0) > 0 for t in self.trials)
            if self.failure is not None:
                return

            # -- timing + post-timing check (only answers that can still be correct) -------------------------
            timeable = passed and not (integrity and cfg.reject_cheats) and (launched or not cfg.require_triton)
            if timeable and cfg.time_answer:
                if self.gate is not None:
                    # No later answer's process starts while this one is timed (resumed once it is).
                    self.phases["next_child_wait_s"] = self.gate.pause()
                    self.deadline += self.phases["next_child_wait_s"]
                if self.lease is not None:
                    left = self.deadline - time.monotonic()
                    try:
                        waited = self.lease.upgrade(timeout_s=max(1.0, left))
                    except gpu_lock.GpuLockTimeout:
                        raise ChildTimeout() from None
                    self.phases["gpu_lock_wait_s"] = waited
                    self.deadline += waited  # waiting for the GPU never counts against the answer
                phase = "timing"
                t_time = time.monotonic()
                self._sample_clock()
                try:
                    tm, raw, per_call = self._time_paired(ans)
                finally:
                    self._sample_clock()
                    if self.gate is not None:
                        self.gate.resume()
                if tm.type in ("runtime_error", "cuda_error"):
                    self.failure = Status.CRASH if tm.type == "cuda_error" else Status.RUNTIME_ERROR
                    self.error = _text(tm.header.get("error"))
                    self.flag("timing_error")
                    return
                # Validated block by block (_raw_times): lists of finite numbers.
                checks = self.timed_checks
                self.timing_raw = {"discarded_ms": raw.discarded_ms, "warmup_ms": raw.warmup_ms,
                                   "host_ms": raw.host_ms, "leftover_us": raw.leftover_us,
                                   "launches_per_call": per_call, "wall_s_parent": time.monotonic() - t_time,
                                   "timed_checks": checks.to_dict(cfg.device)}
                if checks.mismatches:
                    self.flag("timed_output_mismatch")
                    self.error = self.error or f"timed call: {checks.detail}"
                if checks.unconfirmed(cfg.device):
                    self.flag("timing_unconfirmed")
                if cfg.require_triton and 0 in (per_call or []):
                    # Decided here, from the launches the child counted per call of its timing (warm-up and timed):
                    # Triton in every correctness call (else it would not be timed) and none in one of these.
                    self.flag("triton_launch_skipped_in_timing")
                self.runtime_stats = timing.stats(raw.trials_ms)
                if self.runtime_stats is None:
                    raise ProtocolError("timing without usable trials")
                if timing.side_stream_leftover(raw):
                    self.flag("unsynchronized_stream")  # judged here, from raw numbers, not in the answer's process
                self.phases["timing_s"] = time.monotonic() - t_time
                if cfg.post_timing_check:
                    phase = "post_timing"
                    t_post = time.monotonic()
                    # Built only now: the answer could not have seen these inputs before or while it was timed.
                    rpost = self._secret_trial("post_timing", self.post_seed)
                    ans.send("post_timing", seed=self.post_seed, inputs=ref.trial_inputs(rpost, self.slot.secret),
                             rng=rpost.rng)
                    self._answer_trial(ans, rpost, "post_timing", "post_timing", self.post_seed)
                    self.phases["post_timing_s"] = time.monotonic() - t_post

            # -- the authenticated end -----------------------------------------------------------------------
            phase = "finish"
            if self.failure is None:
                ans.send("finish")
                dm = ans.recv(self.deadline)
                if dm.type != "done":
                    raise ProtocolError(f"expected done, got {dm.type}")
                self._merge(dm)
                gf = dm.header.get("guard_flags")
                for f in (gf if isinstance(gf, list) else [])[:64]:
                    self.flag(str(f))
                if dm.header.get("threads_started"):
                    self.flag("python_threads_started")
                self.done_ok = True
        except ChildTimeout:
            if phase == "import":
                self.pre_import_status = Status.LOAD_ERROR
                self.error = f"timed out after {cfg.effective_timeout():.0f}s while importing the answer"
            elif self.watchdog is not None:
                self.failure = Status.TIMEOUT
                limit_s, reference_ms = self.watchdog
                self.error = (f"killed by the watchdog during {phase}: no result {limit_s:.0f}s after the call "
                              f"started (reference forward {reference_ms:.3g} ms)")
            else:
                self.failure = Status.TIMEOUT
                self.error = f"timed out after {cfg.effective_timeout():.0f}s during {phase}"
        except ChildDied:
            ans.wait(5.0)
            reason = ans.death_reason()
            if phase == "setup":
                raise InfrastructureError(f"answer child died during setup: {reason}\n{ans.log_tail()}") from None
            if phase == "import":
                self.pre_import_status = Status.LOAD_ERROR
                self.error = f"the child {reason} while importing the answer\n{ans.log_tail(1500)}"
            else:
                self.failure = Status.CRASH
                self.error = f"the child {reason} during {phase}\n{ans.log_tail(1500)}"
        except ProtocolError as e:
            self.flag("result_channel_forged")
            self.failure = Status.CRASH
            self.error = f"result channel: {e}"

    def _time_paired(self, ans: ChildProcess) -> tuple[Message, timing.RawTimes, list[int] | None]:
        """The answer's timing, in blocks alternating with the eager reference's on the same inputs
        (``timing.paired_blocks``, ABBA order). Returns the answer's last message (``timing`` or its error), its raw
        numbers merged over the blocks and its launches per call; the reference's go to ``paired_reference``."""
        cfg, ref = self.cfg, self.reference
        protocol = cfg.timing_protocol()
        blocks = timing.paired_blocks(protocol, cfg.paired_block)
        paired = cfg.paired_block > 0
        floors = cfg.watchdog_limits() or (0.0, 0.0)
        reference_ms = self.reference_ms() or 0.0
        answer_parts: list[timing.RawTimes] = []
        reference_parts: list[timing.RawTimes] = []
        per_call: list[int] = []
        tm: Message | None = None
        calls = sum(b.discard_first + b.trials for b in blocks)
        self.timed_checks = TimedChecks.choose(calls, ref.output_capacity(), ref.timing_trial is not None)
        for i, block in enumerate(blocks):
            order = ("answer", "reference") if timing.answer_goes_first(i) else ("reference", "answer")
            for side in order if paired else ("answer",):
                if side == "reference":
                    t_ref = time.monotonic()
                    try:
                        reference_parts.append(ref.time_block(timing.reference_block(block, cfg.paired_reference_block),
                                                              protocol.l2_flush_mib, cfg.cpu_threads))
                    except ReferenceFailed as e:
                        raise _RefFailed(str(e)) from None
                    self._add_phase("timing_reference_s", time.monotonic() - t_ref)
                    continue
                ans.send("time", seed=self.timing_seed, inputs={"area": "timing", "entries": ref.timing_entries},
                         block={"warmup": block.warmup, "trials": block.trials, "discard_first": block.discard_first})
                calls = block.warmup + block.discard_first + block.trials
                tm = self._timed_block(ans, timing_limit_s(reference_ms, calls, floors[0]), reference_ms)
                self._merge(tm)
                if tm.type in ("runtime_error", "cuda_error"):
                    return tm, timing.RawTimes(), None
                if tm.type != "timing":
                    raise ProtocolError(f"unexpected {tm.type} while timing")
                part = _raw_times(tm.header.get("raw"))
                if len(part.trials_ms) != block.trials:
                    raise ProtocolError(f"{len(part.trials_ms)} timed trials in a block of {block.trials}")
                answer_parts.append(part)
                per_call += _launch_counts(tm.header.get("launches_per_call"), calls)
        assert tm is not None
        if reference_parts:
            merged = timing.merge_raw(reference_parts)
            self.paired_reference = {"stats": timing.stats(merged.trials_ms), "raw": merged.to_dict(),
                                     "block_trials": cfg.paired_block, "blocks": len(blocks), "order": "ABBA",
                                     "reference_block_trials": cfg.paired_reference_block}
        return tm, timing.merge_raw(answer_parts), per_call

    def _timed_block(self, ans: ChildProcess, limit_s: float, reference_ms: float) -> Message:
        """One block of the answer's timing under the watchdog (``_watched``'s rules, for the whole block). Each
        timed call reports itself as it ends; this side notes when (the interval between the reply to one call and
        the next report holds that call's whole trial: the reported time must fit in it), tells the child whether
        it checks this call's output (a choice drawn in secret beforehand, told only after the call), judges a
        checked output against the reference's on the timing inputs before the next call starts, and replies.
        Returns the block's last message (``timing``, or the answer's error)."""
        m = ans.recv(self.deadline)
        if m.type != "calling":
            return m
        end = self._watch_end(limit_s)
        checks = self.timed_checks

        def recv() -> Message:
            return self._recv_watched(ans, end, limit_s, reference_ms)

        # A block's first call is not observed: no reply of ours precedes it (in the first block its interval
        # would also hold the warm-up calls).
        replied: float | None = None
        while True:
            m = recv()
            if m.type != "timed":
                return m
            now = time.monotonic()
            reported = _num(m.header.get("ms"))
            if reported is None or reported < 0:
                raise ProtocolError("a timed call without a valid time")
            if replied is not None:
                checks.observe(reported, (now - replied) * 1e3)
            if checks.take():
                t_check = time.monotonic()
                ans.send("check")
                om = recv()
                if om.type == "bad_output":
                    checks.failed("a timed call returned other than plain tensors")
                elif om.type == "output":
                    checks.judged(*self._judge_timed(om))
                else:
                    return om
                self._add_phase("timing_checks_s", time.monotonic() - t_check)
            replied = time.monotonic()  # before the reply: the next call cannot start earlier
            ans.send("next")

    def _judge_timed(self, om: Message) -> tuple[str, str | None]:
        """(verdict, detail) of a checked timed call's outputs. Judged on this side's device, or on the host when the
        device has no room left (the answer's process may hold most of it): a full device never crashes the job."""
        trial = self.reference.timing_trial
        assert trial is not None
        torch = self.reference.torch
        try:
            verdict, _, detail = self._judge(trial, om)
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
            verdict, _, detail = self._judge(trial, om, torch.device("cpu"))
        return verdict, detail

    def reference_ms(self) -> float | None:
        """The slowest forward of the reference so far (what the watchdog scales with)."""
        times = [t.ref_forward_ms for t in self.trials if isinstance(t.ref_forward_ms, (int, float))]
        return max(times) if times else None

    def _watched(self, ans: ChildProcess, limit_s: float, reference_ms: float) -> Message:
        """The answer child's next message after it announced a call: at most ``limit_s`` after the announcement
        (the per-call watchdog, which kills the child at once), never past the evaluation's deadline. Reading the
        inputs before the announcement is not the answer's time."""
        m = ans.recv(self.deadline)
        if m.type != "calling":
            return m  # it failed before calling (an error message): nothing to watch
        return self._recv_watched(ans, self._watch_end(limit_s), limit_s, reference_ms)

    def _watch_end(self, limit_s: float) -> float:
        """When the watchdog kills the call announced now: ``limit_s`` from now, never past the evaluation's own
        deadline (which comes first when it is earlier, or when there is no watchdog)."""
        if self.cfg.watchdog_limits() is None:
            return self.deadline
        return min(self.deadline, time.monotonic() + limit_s)

    def _recv_watched(self, ans: ChildProcess, end: float, limit_s: float, reference_ms: float) -> Message:
        """The child's next message by ``end``; a timeout before the evaluation's deadline is the watchdog's kill
        (recorded for the verdict's message)."""
        try:
            return ans.recv(end)
        except ChildTimeout:
            if end < self.deadline:
                self.watchdog = (limit_s, reference_ms)
            raise

    def _judge(self, rt: ReferenceTrial, am: Message, device: Any = None) -> tuple[str, float | None, str | None]:
        """(verdict, max_abs_diff, detail) of an ``output`` message against the reference trial, on this side's
        device (or ``device``), from the bytes in the answer's output area."""
        if rt.structure != am.header.get("structure"):
            return "shape_mismatch", None, (f"output structure differs: expected {rt.structure}, got "
                                            f"{_text(am.header.get('structure'), 40)}")
        metas = am.header.get("outputs")
        if not isinstance(metas, list) or not metas:
            raise ProtocolError("an output message without outputs")
        if not am.header.get("written"):
            # Larger than the reference's outputs (or a dtype the transport does not carry): a shape or dtype differs.
            if len(metas) != len(rt.outputs):
                return "shape_mismatch", None, f"expected {len(rt.outputs)} outputs, got {len(metas)}"
            for i, (r, m) in enumerate(zip(rt.outputs, metas)):
                m = m if isinstance(m, dict) else {}
                if list(r.shape) != m.get("shape"):
                    return "shape_mismatch", None, (f"output {i}: expected shape {tuple(r.shape)}, got "
                                                    f"{_text(m.get('shape'), 80)}")
                if dtype_name(r.dtype) != m.get("dtype"):
                    return "dtype_mismatch", None, (f"output {i}: expected dtype {r.dtype}, got "
                                                    f"{_text(m.get('dtype'), 40)}")
            raise ProtocolError("outputs that fit were not written")
        device = device or self.reference.device
        try:
            new_out = self.reference.answer_outputs(metas, self.slot.output, device)
        except TransportError as e:
            raise ProtocolError(f"output slots: {e}") from None
        ref_out = [o.to(device) for o in rt.outputs]
        verdict, diff, detail = compare_outputs(ref_out, new_out, self.cfg.atol, self.cfg.rtol)
        del new_out, ref_out
        new_dev = [m.get("device") for m in metas]
        if verdict == "ok" and rt.output_devices != new_dev:
            self.flag("output_wrong_device")
            return "device_mismatch", diff, f"output on {_text(new_dev, 200)}, expected {rt.output_devices}"
        return verdict, diff, detail

    def _answer_trial(self, ans: ChildProcess, rt: ReferenceTrial, idx: Any, kind: str, seed: int) -> bool:
        ref_max = max(x for x in (rt.forward_ms, self.reference_ms(), 0.0) if x is not None)
        floors = self.cfg.watchdog_limits() or (0.0, 0.0)
        am = self._watched(ans, call_limit_s(ref_max, floors[0] if not self.trials else floors[1]), ref_max)
        self._merge(am)
        rec = TrialRecord(index=idx, kind=kind, seed=seed, verdict="error", ref_forward_ms=rt.forward_ms)
        if am.type == "output":
            rec.launches = _int(am.header.get("launches"))
            rec.forward_ms = _num(am.header.get("forward_ms"))
            rec.verdict, rec.max_abs_diff, rec.detail = self._judge(rt, am)
            if rec.verdict != "ok" and rec.detail:
                self.error = self.error or f"trial {idx} ({kind}): {rec.detail}"
        elif am.type == "bad_output":
            rec.verdict, rec.detail = "bad_output", _text(am.header.get("error"), 500)
            rec.launches = _int(am.header.get("launches"))
            self.error = f"trial {idx}: {rec.detail}"
        elif am.type in ("runtime_error", "cuda_error"):
            rec.detail = "error"
            self.trials.append(rec)
            self.failure = Status.CRASH if am.type == "cuda_error" else Status.RUNTIME_ERROR
            self.error = _text(am.header.get("error"))
            return False
        else:
            raise ProtocolError(f"unexpected {am.type} during a trial")
        self.trials.append(rec)
        if rec.verdict != "ok":
            if kind == "hidden":
                self.flag("hidden_input_mismatch")
            elif kind == "post_timing":
                self.flag("post_timing_mismatch")
            return False
        return True

    def _sample_clock(self) -> None:
        # The SM clock right before and right after timing, never during it: an nvidia-smi query stalls CUDA
        # calls of every process on the GPU for milliseconds, which a timed window would count (seen on the H200
        # as single trials of tens of milliseconds).
        if self.cfg.device == "cuda":
            v = environment.sample_sm_clock(self.gpu)
            if v is not None:
                self.sm_clocks.append(v)


def _protocol(cfg: EvalConfig) -> dict[str, Any]:
    return {
        "harness_version": HARNESS_VERSION,
        "kernelbench_seed": cfg.seed,
        "seed_derivation": SEED_DERIVATION,
        "correctness_trials": cfg.correctness_trials,
        "atol": cfg.atol,
        "rtol": cfg.rtol,
        "precision": "fp32",
        "no_grad": True,
        "eval_mode": False,
        "require_triton": cfg.require_triton,
        "timing": cfg.timing_protocol().to_dict() if cfg.time_answer else None,
        "paired_block": cfg.paired_block if cfg.time_answer else None,
        "paired_reference_block": cfg.paired_reference_block if cfg.time_answer and cfg.paired_block else None,
        "integer_inputs": cfg.integer_inputs,
        "reject_cheats": cfg.reject_cheats,
        "post_timing_check": cfg.post_timing_check,
        "hidden_trials": cfg.hidden_trials,
        "cpu_threads": cfg.cpu_threads if cfg.device == "cpu" else None,
    }


@dataclass
class _Static:
    report: dict[str, Any] | None
    flags: list[str]
    reject: str | None
    syntax: str | None


def _result(cfg: EvalConfig, status: Status, ev: _Evaluation | None, error: str | None, static: _Static,
            phases: dict[str, float]) -> EvalResult:
    protocol = _protocol(cfg)
    flags = list(dict.fromkeys(static.flags + (ev.flags if ev else [])))
    stats = ev.runtime_stats if ev else None
    correct = status == Status.CORRECT
    diffs = [t.max_abs_diff for t in ev.trials] if ev else []
    max_diff = None if not diffs or any(d is None for d in diffs) else max(diffs)  # type: ignore[type-var]
    launches = sum(t.launches or 0 for t in ev.trials if t.kind != "post_timing") if ev and ev.trials else None
    tf32 = (ev.tf32 if ev and ev.tf32 else None) or environment.tf32_flags_for_mode(cfg.tf32)
    sm = sorted(ev.sm_clocks)[len(ev.sm_clocks) // 2] if ev and ev.sm_clocks else None
    fp = environment.fingerprint(cfg.device, ev.gpu if ev else cfg.gpu_index, cfg.tf32, tf32, sm)
    fp["key"] = environment.fingerprint_key(fp)
    if ev is not None:
        protocol.update({
            "trial_seeds": ev.trial_seeds, "hidden_seeds": ev.hidden_seeds, "timing_seed": ev.timing_seed,
            "post_timing_seed": ev.post_seed,
            # What confined the answer's process (sandbox.Isolation); network_isolation kept for older readers.
            "isolation": ev.isolation.to_dict() if ev.isolation else None,
            # Directories the answer's process found empty (its problem's sources; sandboxed levels only).
            "hidden_from_answer": list(ev.slot.child.hidden) if ev.isolation and ev.isolation.sandboxed else [],
            "network_isolation": bool(ev.isolation and ev.isolation.network),
            # The cap on the host memory of the answer's process tree, and its peak use (memory_cap.py).
            "host_memory": ev.slot.child.cap.record() if ev.slot.child.cap else None,
            "gpu": ev.gpu, "authenticated_done": ev.done_ok,
        })
    phases = dict(phases, **(ev.phases if ev else {}))
    return EvalResult(
        status=status.value, compiled=is_compiled(status), correct=correct,
        runtime_ms=stats["mean"] if (correct and stats) else None, runtime_stats=stats,
        max_abs_diff=max_diff, triton_launches=launches, flags=flags,
        error=(error[:6000] if error else None), device=cfg.device, timing_mode=TIMING_MODES[cfg.device],
        tf32=tf32, fingerprint=fp, protocol=protocol, trials=[t.to_dict() for t in ev.trials] if ev else [],
        timing_raw=ev.timing_raw if ev else None, phases_s=phases, static=static.report,
        paired_reference=ev.paired_reference if (ev and correct) else None,
    )


def _verdict(cfg: EvalConfig, ev: _Evaluation, static: _Static, phases: dict[str, float]) -> EvalResult:
    all_launched = all((t.launches or 0) > 0 for t in ev.trials if t.kind in ("seeded", "hidden"))
    cap = ev.slot.child.cap
    if cap is not None and cap.exceeded() and ev.failure is None:
        ev.failure = Status.CRASH  # the host-memory cap killed the tree, whenever that was
        ev.error = f"the child was {cap.describe()}" + (f"\n{ev.error}" if ev.error else "")
    status = decide_status(
        imported=ev.imported, pre_import_status=ev.pre_import_status, failure=ev.failure,
        trial_verdicts=[t.verdict for t in ev.trials], flags=ev.flags + static.flags,
        require_triton=cfg.require_triton, all_calls_launched=all_launched, reject_cheats=cfg.reject_cheats,
    )
    if status == Status.CORRECT and not ev.done_ok:
        status = Status.CRASH  # no authenticated end: never a pass
        ev.error = ev.error or "no authenticated done message"
    if status == Status.NO_TRITON_LAUNCH and not ev.error:
        ev.error = "require_triton: a correctness call launched no Triton kernel"
    if status == Status.REJECTED_RUNTIME:
        msg = "integrity check failed: " + ", ".join(f for f in ev.flags if is_integrity_flag(f))
        ev.error = msg + (f"\n{ev.error}" if ev.error else "")
    return _result(cfg, status, ev, ev.error, static, phases)


class ProblemEvaluator:
    """Every answer to one problem: the problem's trusted side (``ReferenceSide``) is built once, and each answer runs
    in a fresh child. Children are started in batches (``batch_size``), each batch while the last answer of the
    previous one is checked; their CUDA contexts are created one at a time in the gaps between timings
    (``start_gate``), so no process starts during a timing."""

    def __init__(self, problem_path: Path, config: EvalConfig, lease: gpu_lock.GpuLease | None) -> None:
        self.problem_path = Path(problem_path)
        self.cfg = config
        self.lease = lease
        self.gpu = lease.gpu if lease else None
        self.base = Path(tempfile.mkdtemp(prefix="kbeval-"))
        self.triton_template: Path | None = None
        self.reference: ReferenceSide | None = None
        self.reference_error: str | None = None
        self.phases: dict[str, float] = {}
        self._count = 0
        self._slots: list[_AnswerSlot] = []  # every slot started, so close() leaves no process behind
        self._early: deque[_AnswerSlot] = deque()  # started while the problem was prepared
        self.gate = StartGate(config.effective_timeout())
        # Triton's driver helpers as an earlier problem's first answer process built them (compiled by gcc in every
        # process that starts without them): the whole first batch starts before this problem's first is ready.
        home = triton_template_home(config)
        if home is not None and load_triton_template(home, self.base / "triton-template"):
            self.triton_template = self.base / "triton-template"

    def prepare(self, answers: int = 1) -> None:
        """The trusted side of the problem. The first answer's child starts meanwhile (its interpreter, torch, CUDA
        context and Triton get ready while the inputs are built) and, where the inputs are small enough, the rest of
        the first batch of the ``answers`` to come (``_early_count``): their host parts overlap the preparation, and
        their device parts follow one at a time (``start_gate``) instead of holding up the first answer's timing.
        Each gets its areas once they exist."""
        t0 = time.monotonic()
        cfg = self.cfg
        reference = None
        self.phases["triton_driver_shared"] = float(self.triton_template is not None)  # built by an earlier problem
        try:
            self._early.append(self.start_slot())
        except InfrastructureError:
            pass  # started after the reference side, as every other child: evaluate() says why it cannot
        else:
            self._start_early(self._early_count(answers) - 1)
        self.phases["children_started_early"] = float(len(self._early))
        self.phases["prepare_children_start_s"] = time.monotonic() - t0  # the early count's probe included
        try:
            t_init = time.monotonic()
            reference = ReferenceSide(self.problem_path, cfg.seed, cfg.device, self.gpu, cfg.tf32,
                                      timing_seed=cfg.timing_seed, cast_integers=cfg.integer_inputs == "cast")
            self.phases["prepare_reference_init_s"] = time.monotonic() - t_init  # its model built on the device
            reference.prepare(kernelbench_trial_seeds(cfg.seed, cfg.correctness_trials), timing=cfg.time_answer,
                              atol=cfg.atol, rtol=cfg.rtol)
            self.reference = reference  # only a fully prepared side judges answers
            self.phases.update(reference.prepare_phases)
        except ReferenceFailed as e:
            self.reference_error = str(e)[:4000]
            if reference is not None:
                reference.close()
        self.phases["reference_prepare_s"] = time.monotonic() - t0
        if self.reference is not None:
            # The early count guessed the outputs; where they leave no room for every early child's areas, the
            # surplus ends now (started again in a later batch): a child without its areas never says it is ready,
            # and each answer is timed only once every started child is.
            batch = self.batch_size()
            while len(self._early) > batch:
                surplus = self._early.pop()
                self.gate.drop(surplus.child)
                surplus.close()
            for slot in self._early:
                self.hand_areas(slot)

    def _early_count(self, answers: int) -> int:
        """Children to start before the problem is prepared: a batch (``prestart_count``) where the inputs are small
        enough, as ``batch_size`` bounds it with the outputs guessed as large as the inputs (known only once the
        reference has run); only the first where their size is unknown (``input_bytes_on_meta``; the problem loaded
        here once more for it, before the trusted side loads it and starts CUDA)."""
        if answers < 2 or self.cfg.prestart_count() < 2:
            return 1
        try:
            if self.cfg.device == "cuda":
                bind_gpu(self.gpu)  # before any problem code runs here, as the trusted side does
            per_trial = input_bytes_on_meta(load_problem(self.problem_path), self.cfg.device,
                                            self.cfg.integer_inputs == "cast")
        except Exception:  # noqa: BLE001 - a problem that does not load: the trusted side reports it
            return 1
        if per_trial is None:
            return 1
        return min(answers, self._children_for(2 * per_trial))

    def _start_early(self, count: int) -> None:
        for _ in range(count):
            try:
                self._early.append(self.start_slot())
            except InfrastructureError:
                return  # evaluate() starts them again, and says why it cannot

    def start_slot(self) -> _AnswerSlot:
        """A child for the next answer: started now, ready (torch, CUDA, Triton's driver) when its answer comes. It
        gets its areas from ``hand_areas``: at once when the trusted side is prepared, else once it is."""
        cfg = self.cfg
        self._count += 1
        work = self.base / f"answer{self._count}"
        work.mkdir()
        if self.triton_template is not None:
            # Triton's driver stub as the first child built it before any answer ran: not rebuilt by gcc each time.
            shutil.copytree(self.triton_template, work / ".triton")
        init = {"answer": "answer.py", "seed": cfg.seed, "tf32": cfg.tf32, "timing": cfg.timing_protocol().to_dict(),
                "cast_integers": cfg.integer_inputs == "cast", "start_gate": True}
        child = ChildProcess("answer", work, self.base / "logs" / f"answer{self._count}", cfg.device, init,
                             gpu=self.gpu, isolation=cfg.isolation, bwrap=cfg.bwrap, limits=cfg.limits(),
                             memory_cap_mode=cfg.memory_cap, extra_env=cfg.cpu_thread_env(), areas_later=True,
                             hidden=self.hidden_sources(work))
        try:
            child.start()
        except SandboxUnavailable as e:
            raise InfrastructureError(f"the configured sandbox is unavailable: {e}") from None
        slot = _AnswerSlot(child)
        self._slots.append(slot)
        self.gate.add(child)
        if self.reference is not None:
            self.hand_areas(slot)
        return slot

    def hand_areas(self, slot: _AnswerSlot) -> None:
        """The child's areas: the problem's sealed ones and its own secret-input and output areas. On CUDA this side
        page-locks the latter in the background (``_AnswerSlot.ready``)."""
        ref = self.reference
        assert ref is not None and slot.secret is None
        slot.secret = Area("secret", ref.input_bytes)
        slot.output = Area("output", ref.output_capacity())
        slot.secret.fix_seals()
        slot.output.fix_seals()
        areas = {name: a.spec() for name, a in ref.areas.items()}
        areas.update(secret=slot.secret.spec(), output=slot.output.spec())
        # The cap allows for the pages the child may touch first: its outputs, and on CUDA its secret area too (its
        # page-locking may reach pages before this side's does).
        first_touch = (slot.output.fd,) if self.cfg.device == "cpu" else (slot.secret.fd, slot.output.fd)
        try:
            slot.child.deliver_areas(areas, child_written_fds=first_touch)
        except SandboxUnavailable as e:
            raise InfrastructureError(f"the configured sandbox is unavailable: {e}") from None
        if self.cfg.device == "cuda":
            secret, output = slot.secret, slot.output
            slot.pinning = threading.Thread(target=lambda: (secret.pin(), output.pin()), daemon=True)
            slot.pinning.start()
            self.gate.track_pinning(slot.pinning)  # driver work: ended before any timing

    def hidden_sources(self, workdir: Path) -> tuple[str, ...]:
        """What the answer's sandbox shows empty: the problem's sources (its suite checkout), the repository's default
        results folder (prompts.jsonl holds every problem's reference code) and ``hidden_paths``."""
        extra = [DEFAULT_RESULTS] + [Path(p) for p in (self.cfg.hidden_paths or [])]
        return hideable(problem_sources(self.problem_path) + extra, workdir)

    def batch_size(self) -> int:
        """How many children to start at once (``_children_for``, with each child's areas as the reference sized
        them)."""
        assert self.reference is not None
        return self._children_for(self.reference.input_bytes + self.reference.output_capacity())

    def _children_for(self, area_bytes: int) -> int:
        """The configured count of children, bounded so that their areas (``area_bytes`` each: secret inputs and
        outputs, page-locked on the GPU) take at most a quarter of the host's available memory."""
        budget = available_memory() // 4
        return max(1, min(self.cfg.prestart_count(), budget // max(area_bytes, 1)))

    def _keep_triton_template(self, slot: _AnswerSlot) -> None:
        """Triton's cache as the first child built it, taken once it is ready and before its answer is loaded: a
        copy taken after the answer ran could carry files it planted into every later child. Read through the
        sandbox (``ChildProcess.private_dir``): the child's working directory is its own tmpfs."""
        if self.triton_template is not None:
            return
        try:
            hello = slot.child.await_hello(time.monotonic() + self.cfg.effective_timeout())
        except (ChildDied, ChildTimeout, ProtocolError):
            return  # its evaluation reports it
        cache = slot.child.private_dir() / ".triton"
        if hello.type == "hello" and cache.is_dir():
            template = self.base / "triton-template"
            shutil.copytree(cache, template)
            self.triton_template = template
            home = triton_template_home(self.cfg)
            if home is not None:
                publish_triton_template(template, home)

    def evaluate(self, answers: list[tuple[Path, _Static, EvalConfig]]) -> list[EvalResult]:
        """Verdicts for answers that passed static analysis, in order, each under its own configuration (the
        problem's, with that answer's ``require_triton``: ``evaluate_answers``)."""
        results: list[EvalResult] = []
        if self.reference is None:
            for _, static, cfg in answers:
                results.append(_result(cfg, Status.REFERENCE_ERROR, None, self.reference_error, static, self.phases))
            return results
        batch = self.batch_size()
        self.phases["children_batch"] = float(batch)
        self.phases["answers_judged_together"] = float(len(answers))  # against this one reference side
        started, self._early = self._early, deque()
        for k, (path, static, cfg) in enumerate(answers):
            t_answer = time.monotonic()
            if not started:
                started.extend(self.start_slot() for _ in range(min(batch, len(answers) - k)))
            slot = started.popleft()
            if not started and k + 1 < len(answers):
                # The next batch starts now, while this answer is checked (before it is timed).
                started.extend(self.start_slot() for _ in range(min(batch, len(answers) - k - 1)))
            t_wait = time.monotonic()
            self.gate.wait_ready(slot.child)
            slot.ready()
            self._keep_triton_template(slot)
            slot_wait_s = time.monotonic() - t_wait
            ev = _Evaluation(self.reference, slot, path, cfg, self.gpu, self.lease, self.gate)
            ev.phases["slot_wait_s"] = slot_wait_s  # its child getting ready after the evaluator needed it
            try:
                ev.run()
                # Ended before the verdict: a tree that reaches its memory cap after its last message (or a
                # process it started that still runs) is judged on its whole life.
                t_close = time.monotonic()
                slot.close()
                ev.phases["close_s"] = time.monotonic() - t_close  # its tree exited, its areas unmapped
                results.append(_verdict(cfg, ev, static, self.phases))
            finally:
                slot.close()
                self.reference.release_cached_memory()
                if self.lease is not None:
                    self.lease.downgrade()
            # From taking up the answer to being ready for the next (what an answer costs the job).
            results[-1].phases_s["answer_wall_s"] = time.monotonic() - t_answer
        return results

    def close(self) -> None:
        self.gate.close()  # its thread leaves every channel before the children end
        for slot in self._slots:
            slot.close()  # idempotent: kill() of a reaped child and close() of a closed area do nothing
        if self.reference is not None:
            self.reference.close()
        if self.cfg.keep_workdir:
            print(f"kept evaluation directory {self.base}", file=sys.stderr)
        else:
            shutil.rmtree(self.base, ignore_errors=True)


def triton_template_home(cfg: EvalConfig) -> Path | None:
    """Where the host keeps Triton's cache as an answer process built it before any answer ran (its driver's C
    helpers), for the processes of every later problem: in this user's own folder beside the GPU locks (the lock
    folder may be shared between users; that folder is trusted only while no one else can write to it:
    ``_own_private_dir``), keyed by Triton's and Python's versions. None on the CPU (the interpreter builds nothing)
    or without Triton."""
    if cfg.device != "cuda":
        return None
    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None
    key = hashlib.sha256(f"{version}|{sys.version}|{sys.platform}".encode()).hexdigest()[:16]
    return Path(cfg.lock_dir) / f"triton-driver-{os.getuid()}" / key


def _own_private_dir(path: Path, create: bool) -> int | None:
    """A descriptor of the folder ``path`` (made, mode 0700, where missing and ``create``) when it is this user's own
    and no one else may write in it, so nothing in it was planted by another user; None otherwise (another user's
    folder, a shared one, a link). Later paths go through the descriptor: the folder checked is the folder used."""
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError:
            return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    return fd


def load_triton_template(home: Path, dest: Path) -> bool:
    """Copy the kept template at ``home`` to ``dest`` (this job's own folder); False when there is none, or it is
    not in a folder that only this user can write to."""
    fd = _own_private_dir(home.parent, create=False)
    if fd is None:
        return False
    try:
        shutil.copytree(f"/proc/self/fd/{fd}/{home.name}", dest)
        return True
    except OSError:
        shutil.rmtree(dest, ignore_errors=True)
        return False
    finally:
        os.close(fd)


def publish_triton_template(template: Path, home: Path) -> None:
    """Copy ``template`` to ``home`` unless it is there: whole or not at all (a rename), and a job that loses the race
    to another keeps the other's. Nothing is published where ``home``'s folder is not this user's alone."""
    fd = _own_private_dir(home.parent, create=True)
    if fd is None:
        return
    staging = f"{home.name}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        if not os.path.lexists(f"/proc/self/fd/{fd}/{home.name}"):
            shutil.copytree(template, f"/proc/self/fd/{fd}/{staging}")
            os.rename(staging, home.name, src_dir_fd=fd, dst_dir_fd=fd)
    except OSError:
        pass  # another job's copy got there first: each problem keeps the one it finds
    finally:
        shutil.rmtree(f"/proc/self/fd/{fd}/{staging}", ignore_errors=True)
        os.close(fd)


def _static(path: Path, cfg: EvalConfig) -> _Static:
    code = path.read_text(errors="replace")
    return _Static(*run_static_analysis(code)) if cfg.run_static else _Static(None, [], None, None)


def evaluate_answers(problem_path: Path, answer_paths: list[Path], config: EvalConfig | None = None,
                     require_triton: list[bool] | None = None) -> list[EvalResult]:
    """Evaluate every answer to one problem: static analysis first (a rejection or a syntax error runs nothing),
    then one trusted reference side for the problem and one fresh child per answer. ``require_triton`` holds each
    answer's own setting (the calibration model's reference code is exempt, every model's answer is judged against
    the one reference side); None: the configuration's, for every answer."""
    cfg = config or EvalConfig()
    if require_triton is not None and len(require_triton) != len(answer_paths):
        raise ValueError(f"require_triton has {len(require_triton)} values for {len(answer_paths)} answers")
    configs = ([cfg] * len(answer_paths) if require_triton is None
               else [dataclasses.replace(cfg, require_triton=bool(r)) for r in require_triton])
    t0 = time.monotonic()
    statics = [_static(Path(p), cfg) for p in answer_paths]
    results: list[EvalResult | None] = [None] * len(answer_paths)
    runnable = []
    for i, st in enumerate(statics):
        if st.reject is not None and cfg.reject_cheats:
            results[i] = _result(configs[i], Status.REJECTED_STATIC, None, st.reject, st, {})
        elif st.syntax is not None:
            results[i] = _result(configs[i], Status.LOAD_ERROR, None, f"syntax error: {st.syntax}", st, {})
        else:
            runnable.append(i)
    if runnable:
        # Shared while checking correctness; exclusive only while an answer is timed (see gpu_lock).
        with gpu_lock.lease_for_job(cfg.device, cfg.gpu_index, cfg.gpus, cfg.lock_dir, exclusive=False) as lease:
            evaluator = ProblemEvaluator(Path(problem_path), cfg, lease)
            try:
                evaluator.prepare(len(runnable))
                judged = evaluator.evaluate([(Path(answer_paths[i]), statics[i], configs[i]) for i in runnable])
            finally:
                t_close = time.monotonic()
                evaluator.close()
                close_s = time.monotonic() - t_close  # the children's areas unmapped, the trusted side's memory freed
        for i, r in zip(runnable, judged):
            r.phases_s["problem_close_s"] = close_s
            results[i] = r
    for r in results:
        assert r is not None
        r.phases_s["evaluate_total_s"] = time.monotonic() - t0
    return [r for r in results if r is not None]


def evaluate_answer(problem_path: Path, answer_path: Path, config: EvalConfig | None = None) -> EvalResult:
    return evaluate_answers(problem_path, [answer_path], config)[0]
