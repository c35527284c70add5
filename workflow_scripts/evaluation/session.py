"""One answer's evaluation, seen from the trusted side: a conversation with the answer's process, started ahead of
its answer (``AnswerSlot``), in named steps (``AnswerSession``): ready, load, correctness, timing (alone on the GPU,
paired with the reference), the post-timing check and the done message. Every verdict is decided here, from
the reference's outputs and this side's own clock; what the answer's process reports is evidence (``evidence``).
"""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workflow_scripts.core.statuses import Status, is_integrity_flag
from workflow_scripts.evaluation import cuda_lock, environment, freezer, gpu_lock, timeline, timing
from workflow_scripts.evaluation.channel import ChildDied, ChildTimeout, Message, ProtocolError
from workflow_scripts.evaluation.config import EvalConfig
from workflow_scripts.evaluation.evidence import count, launch_counts, number, raw_times, text
from workflow_scripts.evaluation.problem_audit import fingerprint, ignores_input
from workflow_scripts.evaluation.protocol import (PROBE_CALLS, TimedChecks, call_limit_s, compare_outputs,
                                                 timing_limit_s)
from workflow_scripts.evaluation.records import TrialRecord
from workflow_scripts.evaluation.reference import ReferenceFailed, ReferenceSide, ReferenceTrial
from workflow_scripts.evaluation.reference_timer import ReferenceTimer
from workflow_scripts.evaluation.sandbox import ChildProcess
from workflow_scripts.evaluation.start_gate import StartGate
from workflow_scripts.evaluation.transport import Area, TransportError, dtype_name, tensor_bytes

# What an answer's process reports its start took (child.main), kept as phases "child_<name>": not verdict inputs.
CHILD_SETUP_PHASES = ("startup_s", "host_start_s", "gate_wait_s", "device_start_s", "areas_wait_s", "areas_pin_s")


class InfrastructureError(RuntimeError):
    """The evaluation itself could not run (not the answer's fault): exit non-zero, record nothing."""


class ReferenceUnusable(Exception):
    """The problem's own reference failed on a trial drawn for this answer: the answer's verdict is
    ``reference_error``."""


@dataclass
class AnswerSlot:
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


class AnswerSession:
    """One answer, judged against the problem's trusted side in a child started for it (``run``)."""

    def __init__(self, reference: ReferenceSide, slot: AnswerSlot, answer_path: Path, config: EvalConfig,
                 gpu: str | None, lease: gpu_lock.YieldingLease | None = None,
                 gate: StartGate | None = None) -> None:
        self.reference = reference
        self.slot = slot
        self.lease_counts_from: gpu_lock.HoldCounts | None = None  # the lease's counts as this answer's run began
        self.gate = gate  # the later answers' processes start in the gaps between timings
        # Shared; where it steps aside (``evaluation.yield_gpu``) it does so outside this side's GPU steps
        # (``_gpu_turn``), the answer's process stopped meanwhile once it runs the answer's code (followed from the
        # load on): between the steps, and during the answer's import and its correctness calls (``_recv``).
        self.lease = lease
        self.deadline = 0.0
        # (limit s, reference forward ms) of the call the watchdog killed, if it did
        self.watchdog: tuple[float, float] | None = None
        self.answer_path = answer_path
        self.cfg = config
        self.gpu = gpu
        self.flags: list[str] = []
        self.trials: list[TrialRecord] = []
        # The answer's and the reference's outputs on each correctness trial, fingerprinted (problem_audit): the same
        # answer output on every trial where the reference's differ is ``output_ignores_input``.
        self.answer_prints: list[bytes] = []
        self.reference_prints: list[bytes] = []
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
        self.phase = "setup"  # the step the evaluation is in: how a timeout or the child's death is judged
        self.planned_trials = 0
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

    def _send(self, ans: ChildProcess, cmd: str, **fields: Any) -> None:
        """A command to the answer's process, written by the evaluation's deadline (a process that stops reading
        its commands times out; it never holds this side in a write)."""
        ans.send(cmd, deadline=self.deadline, **fields)

    def _events(self, child: ChildProcess) -> None:
        for ev in child.events:
            self.flag(str(ev.get("flag")))

    def _secret_trial(self, kind: str, seed: int) -> ReferenceTrial:
        try:
            return self.reference.secret_trial(kind, seed, self.slot.secret)
        except ReferenceFailed as e:
            raise ReferenceUnusable(str(e)) from None

    def run(self) -> None:
        t_start = time.monotonic()
        self.deadline = t_start + self.cfg.effective_timeout()
        ans = self.slot.child
        self.lease_counts_from = self.lease.counts() if self.lease is not None else None
        try:
            self._drive(ans, t_start)
        except ReferenceUnusable as e:
            self.failure = Status.REFERENCE_ERROR
            self.error = str(e)[:4000]
        finally:
            self._resume_starts()  # paused for a timing that an error cut short
            self._events(ans)
            with self._gpu_turn():  # its process ends before the lease may stand aside again
                if self.lease is not None:
                    self.lease.follow(None)  # before the kill: its pid, once reused, is never stopped
                ans.kill()
            self.phases["total_s"] = time.monotonic() - t_start
            self._lease_phases()

    def _lease_phases(self) -> None:
        """What the job's lease met while this answer was its followed tree: its stops that did not hold the tree
        (``lease_incomplete_stops``: the upgrade's and the yielding watcher's; ``answer_stop_incomplete`` says so of the
        upgrade's and the reference blocks' stops, not the watcher's), whether the lease had given up yielding
        (``lease_pinned``; after incomplete stops in a row, docs/evaluation.md "Scheduling"), and where its locked
        processes ran on while held (``evaluation.compile_beside_timing``): the seconds so held, the CPU seconds they
        ran (``freezer.CPU_BESIDE_TIMING_CORES``), the processes stopped as they appeared, and a hold it broke
        (``hold_broken``: a stopped process of it ran, or a locked one was found unlocked)."""
        met = _lease_met(self.lease, self.lease_counts_from)
        if self.lease is None or met is None:
            return
        if met.incomplete_stops:
            self.phases["lease_incomplete_stops"] = float(met.incomplete_stops)
        if self.lease.steps_aside and self.lease.pinned:
            self.phases["lease_pinned"] = 1.0
        if self.lease.hold is not freezer.Hold.LOCKED_RUNNING or not met.gpu_held_s:
            return
        self.phases.update(answer_gpu_held_s=met.gpu_held_s, cpu_beside_timing_s=met.cpu_beside_timing_s,
                           answer_late_stops=float(met.late_stops))
        if met.unconfirmed_holds:  # the driver did not answer, or the recheck failed: stopped whole, not the answer's
            self.phases["answer_holds_unconfirmed"] = float(met.unconfirmed_holds)
        if met.broken_holds:
            self.flag("hold_broken")
        if freezer.cpu_beside_timing_flagged(met.cpu_beside_timing_s, met.gpu_held_s):
            self.flag("cpu_beside_timing")

    def _drive(self, ans: ChildProcess, t_start: float) -> None:
        """The answer's process through every step, in order; a step that ends the answer's evaluation (a failed
        load or trial, an error while timed) returns False. A timeout, the process's death or a forged message
        ends it wherever it comes, judged by the step it came in (``phase``)."""
        try:
            self._await_ready(ans, t_start)
            if self.lease is not None and ans.proc is not None:
                self.lease.follow(ans.proc.pid)  # the answer's code runs in it from the load on
            # Not in the job's turn: the answer's own work (its import, its ModelNew built), during which a lease that
            # steps aside stops its tree (``_recv`` moves its deadline by that).
            if not self._load(ans) or not self._correctness(ans):
                return
            self._flag_broken_holds()
            if self._timeable(ans) and self.cfg.time_answer:
                if not self._timing(ans):
                    return
                if self.cfg.post_timing_check:
                    with self._gpu_turn():
                        self._post_timing(ans)
            if self.failure is None:
                with self._gpu_turn():
                    self._finish(ans)
        except ChildTimeout:
            self._timed_out()
        except ChildDied:
            self._died(ans)
        except ProtocolError as e:
            self.flag("result_channel_forged")
            self.failure = Status.CRASH
            self.error = f"result channel: {e}"
        except (InfrastructureError, ReferenceUnusable):
            raise
        except Exception as e:  # noqa: BLE001 - whatever this side met while judging: this answer's, never a companion's
            # What the answer's process sent or did broke this side's judging (an output no check foresaw, the
            # device's memory taken): its own verdict, with the reason, and the job goes on to the next answer.
            self.flag("trusted_side_error")
            self.failure = Status.CRASH
            self.error = f"the trusted side could not judge this answer during {self.phase}: {type(e).__name__}: {e}"[:4000]

    # -- the steps -----------------------------------------------------------------------------------------------
    def _await_ready(self, ans: ChildProcess, t_start: float) -> None:
        """The child was started ahead of its answer: its hello (TF32 flags, what its start took)."""
        self.phase = "setup"
        m = ans.await_hello(self.deadline)
        if m.type != "hello":
            raise InfrastructureError(f"answer child setup failed: {m.header.get('error') or m.type}")
        self.tf32 = m.header.get("tf32")
        setup = m.header.get("setup_s")
        for k, v in (setup.items() if isinstance(setup, dict) else ()):
            if k in CHILD_SETUP_PHASES and number(v) is not None:
                self.phases[f"child_{k}"] = float(v)  # as the child reports it: not a verdict input
        if bool(m.header.get("interpret")) != (self.cfg.device == "cpu"):
            raise InfrastructureError("TRITON_INTERPRET does not match the device")
        self.phases["child_ready_wait_s"] = time.monotonic() - t_start

    def _load(self, ans: ChildProcess) -> bool:
        """The answer imported and its ``ModelNew`` built on the reference's init inputs. False: it did not load
        (``pre_import_status``) or did not build (``init_error``)."""
        self.phase = "import"
        t_load = time.monotonic()
        try:
            source = Path(self.answer_path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as e:
            self.pre_import_status = Status.LOAD_ERROR
            self.error = f"the answer's file is not UTF-8 text: {e}"
            return False
        # The source itself goes with the command: the answer's process writes it into its own folder.
        self._send(ans, "load", init_inputs=self.reference.init_entries, source=source,
                   inputs_source=self.reference.fresh_source)
        m = self._recv(ans)
        answer_running = m.type == "loading"  # from here on the answer's code runs in that process
        if answer_running:
            m = self._recv(ans)
        self._merge(m)
        if m.type == "setup_error" and not answer_running:
            raise InfrastructureError(f"answer child setup failed: {m.header.get('error')}")
        if m.type == "setup_error":
            # Sent while the answer's module ran: the answer's doing (a message it wrote itself, or the
            # harness choking on what it did), never the evaluator's failure.
            self.pre_import_status = Status.LOAD_ERROR
            self.error = f"setup error while the answer was loading: {text(m.header.get('error'), 2000)}"
            return False
        if m.type in ("load_error", "no_model_new"):
            self.pre_import_status = Status.LOAD_ERROR if m.type == "load_error" else Status.NO_MODEL_NEW
            self.error = text(m.header.get("error"))
            return False
        if m.type != "imported":
            raise ProtocolError(f"unexpected {m.type} while importing")
        self.imported = True  # ModelNew exists (KernelBench's "compiled")
        self.phase = "init"
        m = self._recv(ans)
        self._merge(m)
        if m.type == "init_error":
            self.failure = Status.INIT_ERROR
            self.error = text(m.header.get("error"))
            return False
        if m.type != "loaded":
            raise ProtocolError(f"unexpected {m.type} while loading")
        self.phases["load_s"] = time.monotonic() - t_load
        return True

    def _correctness(self, ans: ChildProcess) -> bool:
        """KernelBench's seeded trials (their reference computed once per problem), then the hidden ones on secret
        seeds, until the first that fails. False: a call failed (``failure``)."""
        self.phase = "correctness"
        t_corr = time.monotonic()
        ref = self.reference
        plan: list[tuple[int, str, int]] = [(i, "seeded", s) for i, s in enumerate(self.trial_seeds)]
        plan += [(len(plan) + j, "hidden", s) for j, s in enumerate(self.hidden_seeds)]
        self.planned_trials = len(plan)
        for idx, kind, seed in plan:
            # The trusted side's GPU work in the job's turn (the trial's reference and inputs, then the judging of
            # the answer's outputs); the answer's call between the two outside it: a lease that steps aside may stop
            # the answer's tree during its call (the first compiles its kernels), which moves its deadlines (_recv).
            with self._gpu_turn():
                rt = ref.seeded[idx] if kind == "seeded" else self._secret_trial(kind, seed)
                self._send(ans, "trial", index=idx, kind=kind, inputs=ref.trial_inputs(rt, self.slot.secret),
                           rng=rt.rng)
            am = self._trial_output(ans, rt)
            with self._gpu_turn():
                passed = self._judge_trial(rt, am, idx, kind, seed)
            if not passed:
                break
        self.phases["correctness_s"] = time.monotonic() - t_corr
        if ignores_input(self.answer_prints, self.reference_prints):
            self.flag("output_ignores_input")
        return self.failure is None

    def _flag_broken_holds(self) -> None:
        """A hold the answer broke beside another job's timing so far rejects it (``hold_broken``): flagged before it
        could be timed (``_lease_phases`` flags one broken later)."""
        met = _lease_met(self.lease, self.lease_counts_from)
        if met is not None and met.broken_holds:
            self.flag("hold_broken")

    def _timeable(self, ans: ChildProcess) -> bool:
        """Only answers that can still be correct are timed: every trial passed, no integrity flag (where cheats are
        rejected), and Triton launched in every call where the run requires it."""
        passed = all(t.verdict == "ok" for t in self.trials) and len(self.trials) == self.planned_trials
        integrity = any(is_integrity_flag(f) for f in self.flags + [str(e.get("flag")) for e in ans.events])
        launched = all((t.launches or 0) > 0 for t in self.trials)
        return passed and not (integrity and self.cfg.reject_cheats) and (launched or not self.cfg.require_triton)

    def _timing(self, ans: ChildProcess) -> bool:
        """The answer timed (paired with the reference, ``_time_paired``) alone on the GPU, and the trusted side's
        reading of the raw numbers. False: the answer failed while timed."""
        if not self._exclusive():
            return False
        self.phase = "timing"
        t_time = time.monotonic()
        self._sample_clock()
        try:
            tm, raw, per_call = self._time_paired(ans)
        finally:
            self._sample_clock()
            self._resume_starts()
        if tm.type in ("runtime_error", "cuda_error"):
            self.failure = Status.CRASH if tm.type == "cuda_error" else Status.RUNTIME_ERROR
            self.error = text(tm.header.get("error"))
            self.flag("timing_error")
            return False
        self._read_timing(raw, per_call, time.monotonic() - t_time)
        self.phases["timing_s"] = time.monotonic() - t_time
        return True

    def _resume_starts(self) -> None:
        """The start gate resumed after a timing, where no lease is held (the CPU). Under a lease the evaluator
        resumes it once the lease is shared again (``ProblemEvaluator.evaluate``): while the job's downgrade lets a
        waiting timer go first, its lease holds nothing, and a process's device part then would run beside that
        timing."""
        if self.gate is not None and self.lease is None:
            self.gate.resume()

    def _exclusive(self) -> bool:
        """Before timing: no later answer's process starts (the gate is paused until the timing ends, under a lease
        until the job holds it shared again) and the GPU is this job's alone. Waiting for either never counts against
        the answer. False: the answer's tree could not be held off the GPU for the wait (``gpu_work_not_held``): not
        timed, its verdict a rejection (a crash where cheats are only flagged)."""
        if self.gate is not None:
            self.phases["next_child_wait_s"] = self.gate.pause()
            self.deadline += self.phases["next_child_wait_s"]
        if self.lease is None:
            return True
        left = self.deadline - time.monotonic()
        t0, incomplete = time.monotonic(), self.lease.incomplete_stops
        try:
            # The answer's process stopped while it waits: nor beside another job's timing.
            waited = self.lease.upgrade(max(1.0, left), stop_followed=True)
        except gpu_lock.GpuLockTimeout:
            raise ChildTimeout() from None
        except cuda_lock.UnlockFailed as e:  # the answer's process would wait forever: this side's failure
            raise InfrastructureError(str(e)) from None
        except gpu_lock.TreeNotHeld as e:
            self.flag("gpu_work_not_held")
            self.failure = Status.CRASH
            self.error = f"not timed: {e}"
            return False
        finally:
            self._add_phase("answer_stopped_s", time.monotonic() - t0)
            if self.lease.incomplete_stops > incomplete:
                self.phases["answer_stop_incomplete"] = 1.0  # a process of its tree still ran while it waited
        self.phases["gpu_lock_wait_s"] = waited
        self.deadline += time.monotonic() - t0
        return True

    @contextlib.contextmanager
    def _gpu_turn(self) -> Iterator[None]:
        """A step that uses the GPU (the trusted side computes, the answer's process is asked to run): the job's
        lease does not step aside for another job's timing during it. Waiting for a step-aside to end never counts
        against the answer: the deadline moves by it."""
        if self.lease is None:
            yield
            return
        t0 = time.monotonic()
        with self.lease.held():
            waited = time.monotonic() - t0
            self.deadline += waited
            self._add_phase("gpu_turn_wait_s", waited)
            yield

    @contextlib.contextmanager
    def _answer_stopped(self, ans: ChildProcess) -> Iterator[None]:
        """The answer's process tree stopped meanwhile, its GPU work completed and held where the driver can
        (``freezer``, ``cuda_lock``): it cannot slow what runs beside it. It is stopped only after it answered its
        calls, so GPU work of its still running seconds later (a kernel queued past its call) would run into the
        reference's timing beside it: flagged for review (``gpu_work_outlived_call``; ``gpu_work_unheld:<code>`` where
        the driver could not lock it for another reason) until a run on a GPU has shown honest answers never raise it."""
        t0 = time.monotonic()
        try:
            with freezer.frozen(ans.proc.pid if ans.proc is not None and ans.returncode is None else None) as tree:
                if tree is not None:
                    self._add_phase("answer_gpu_locks", len(tree.gpu_work.locked))
                    for code in sorted(set(tree.gpu_work.failed.values())):
                        self.flag("gpu_work_outlived_call" if code in cuda_lock.STILL_RUNNING_CODES
                                  else f"gpu_work_unheld:{code}")
                yield
        except cuda_lock.UnlockFailed as e:  # the answer's process would wait forever: this side's failure
            raise InfrastructureError(str(e)) from None
        self._add_phase("answer_stopped_s", time.monotonic() - t0)
        if tree is not None and not tree.complete:
            # a process of its tree was still running after the wait, or its GPU work could not be held
            self.phases["answer_stop_incomplete"] = 1.0

    def _timeline(self, kind: str) -> contextlib.AbstractContextManager[None]:
        """One timed block on the run's GPU timeline (``timeline``), named by problem and answer."""
        return timeline.span(self.cfg.lock_dir, kind, self.lease.gpu if self.lease is not None else self.cfg.device,
                             problem=self.reference.problem_path.stem, answer=str(self.answer_path))

    def _read_timing(self, raw: timing.RawTimes, per_call: list[int] | None, wall_s: float) -> None:
        """The answer's raw numbers (validated block by block: lists of finite numbers) judged here: the timed-call
        checks, the launches per call, the statistics, work left on other streams."""
        cfg, checks = self.cfg, self.timed_checks
        self.timing_raw = {"discarded_ms": raw.discarded_ms, "warmup_ms": raw.warmup_ms, "host_ms": raw.host_ms,
                           "leftover_us": raw.leftover_us, "launches_per_call": per_call, "wall_s_parent": wall_s,
                           "timed_checks": dict(checks.to_dict(cfg.device),
                                                fixed_inputs_reason=self.reference.fresh_reason)}
        if checks.mismatches:
            self.flag("timed_output_mismatch")
            self.error = self.error or f"timed call: {checks.detail}"
        if checks.unconfirmed(cfg.device):
            self.flag("timing_unconfirmed")
        if cfg.require_triton and 0 in (per_call or []):
            # Decided here, from the launches the child counted per call of its timing (warm-up and timed): Triton
            # in every correctness call (else it would not be timed) and none in one of these.
            self.flag("triton_launch_skipped_in_timing")
        self.runtime_stats = timing.stats(raw.trials_ms)
        if self.runtime_stats is None:
            raise ProtocolError("timing without usable trials")
        if timing.side_stream_leftover(raw):
            self.flag("unsynchronized_stream")  # judged here, from raw numbers, not in the answer's process

    def _post_timing(self, ans: ChildProcess) -> None:
        """The timed input tensors overwritten in place with inputs built only now (the answer could not have seen
        them before or while it was timed), and one more call checked."""
        self.phase = "post_timing"
        t_post = time.monotonic()
        rpost = self._secret_trial("post_timing", self.post_seed)
        self._send(ans, "post_timing", inputs=self.reference.trial_inputs(rpost, self.slot.secret), rng=rpost.rng)
        self._answer_trial(ans, rpost, "post_timing", "post_timing", self.post_seed)
        self.phases["post_timing_s"] = time.monotonic() - t_post

    def _finish(self, ans: ChildProcess) -> None:
        """The done message: without it, no answer is correct."""
        self.phase = "finish"
        self._send(ans, "finish")
        dm = self._recv(ans)
        if dm.type != "done":
            raise ProtocolError(f"expected done, got {dm.type}")
        self._merge(dm)
        gf = dm.header.get("guard_flags")
        for f in (gf if isinstance(gf, list) else [])[:64]:
            self.flag(str(f))
        if dm.header.get("threads_started"):
            self.flag("python_threads_started")
        self.done_ok = True

    # -- how an evaluation can end early -------------------------------------------------------------------------
    def _timed_out(self) -> None:
        if self.phase == "import":
            self.pre_import_status = Status.LOAD_ERROR
            self.error = f"timed out after {self.cfg.effective_timeout():.0f}s while importing the answer"
        elif self.watchdog is not None:
            self.failure = Status.TIMEOUT
            limit_s, reference_ms = self.watchdog
            self.error = (f"killed by the watchdog during {self.phase}: no result {limit_s:.0f}s after the call "
                          f"started (reference forward {reference_ms:.3g} ms)")
        else:
            self.failure = Status.TIMEOUT
            self.error = f"timed out after {self.cfg.effective_timeout():.0f}s during {self.phase}"

    def _died(self, ans: ChildProcess) -> None:
        ans.wait(5.0)
        reason = ans.death_reason()
        if self.phase == "setup":
            raise InfrastructureError(f"answer child died during setup: {reason}\n{ans.log_tail()}") from None
        if self.phase == "import":
            self.pre_import_status = Status.LOAD_ERROR
            self.error = f"the child {reason} while importing the answer\n{ans.log_tail(1500)}"
        else:
            self.failure = Status.CRASH
            self.error = f"the child {reason} during {self.phase}\n{ans.log_tail(1500)}"

    # -- timing ----------------------------------------------------------------------------------------------------
    def _time_paired(self, ans: ChildProcess) -> tuple[Message, timing.RawTimes, list[int] | None]:
        """The answer's timing, in blocks alternating with the eager reference's on the same inputs
        (``timing.paired_blocks``, ABBA order). Returns the answer's last message (``timing`` or its error), its raw
        numbers merged over the blocks and its launches per call; the reference's go to ``paired_reference``."""
        cfg, ref = self.cfg, self.reference
        blocks = timing.paired_blocks(cfg.timing_protocol(), cfg.paired_block)
        floors = cfg.watchdog_limits() or (0.0, 0.0)
        reference_ms = self.reference_ms() or 0.0
        answer_parts: list[timing.RawTimes] = []
        reference_parts: list[timing.RawTimes] = []
        per_call: list[int] = []
        calls = sum(b.discard_first + b.trials for b in blocks)
        self.timed_checks = TimedChecks.choose(calls, ref.output_capacity(), ref.timing_trial is not None,
                                               fresh=ref.fresh_source is not None,
                                               input_bytes=tensor_bytes(ref.timing_inputs))
        with self._timeline("timing_probe"):
            failed = self._probe_overhead(ans, reference_ms, floors[0])
        if failed is not None:
            return failed, timing.RawTimes(), None
        if cfg.paired_block > 0 and ref.placements_due:
            self._audit_placements(ans)
        with ReferenceTimer(ref.torch, ref.device_kind) as timer:
            tm = self._time_blocks(ans, blocks, timer, answer_parts, reference_parts, per_call)
        if tm.type != "timing":  # the answer's call failed (runtime_error, cuda_error): nothing timed stands
            return tm, timing.RawTimes(), None
        if reference_parts:
            merged = timing.merge_raw(reference_parts)
            self.paired_reference = {"stats": timing.stats(merged.trials_ms), "raw": merged.to_dict(),
                                     "block_trials": cfg.paired_block, "blocks": len(blocks), "order": "ABBA",
                                     "reference_block_trials": cfg.paired_reference_block,
                                     "device_ooms": timer.device_ooms}
            if timer.device_ooms:
                self.flag("reference_memory_starved")
        return tm, timing.merge_raw(answer_parts), per_call

    def _time_blocks(self, ans: ChildProcess, blocks: list[timing.TimingProtocol], timer: ReferenceTimer,
                     answer_parts: list[timing.RawTimes], reference_parts: list[timing.RawTimes],
                     per_call: list[int]) -> Message:
        """The answer's blocks and, paired, the reference's (in ``timer``'s thread), ABBA; the parts are appended
        as they come. Returns the answer's last message: ``timing``, or the error that ended its timing."""
        cfg, ref = self.cfg, self.reference
        protocol = cfg.timing_protocol()
        paired = cfg.paired_block > 0
        floors = cfg.watchdog_limits() or (0.0, 0.0)
        reference_ms = self.reference_ms() or 0.0
        tm: Message | None = None
        for i, block in enumerate(blocks):
            order = ("answer", "reference") if timing.answer_goes_first(i) else ("reference", "answer")
            for side in order if paired else ("answer",):
                if side == "reference":
                    reference_parts.append(self._reference_block(ans, timer, block, protocol.l2_flush_mib))
                    continue
                seed = self.timed_checks.next_seed()
                self._send(ans, "time", inputs={"area": "timing", "entries": ref.timing_entries}, seed=seed,
                           block={"warmup": block.warmup, "trials": block.trials, "discard_first": block.discard_first})
                calls = block.warmup + block.discard_first + block.trials
                with self._timeline("timing_answer"):
                    tm = self._timed_block(ans, block.discard_first + block.trials,
                                           timing_limit_s(reference_ms, calls, floors[0]), reference_ms, seed,
                                           self.timed_checks)
                self._merge(tm)
                if tm.type in ("runtime_error", "cuda_error"):
                    return tm
                if tm.type != "timing":
                    raise ProtocolError(f"unexpected {tm.type} while timing")
                part = raw_times(tm.header.get("raw"))
                if len(part.trials_ms) != block.trials:
                    raise ProtocolError(f"{len(part.trials_ms)} timed trials in a block of {block.trials}")
                answer_parts.append(part)
                per_call += launch_counts(tm.header.get("launches_per_call"), calls)
        assert tm is not None
        return tm

    def _audit_placements(self, ans: ChildProcess) -> None:
        """The problem's placement audit (``placement_audit``), in its first timed answer's exclusive window, with
        the answer's tree stopped; in a thread of its own, so the plans it picks with its pads held, and a card its
        pads fill, stay out of the reference's timing thread and its out-of-memory count."""
        t0 = time.monotonic()
        with (self._answer_stopped(ans), self._timeline("placement_audit"),
              ReferenceTimer(self.reference.torch, self.reference.device_kind) as audit_thread):
            audit_thread.run(self.reference.audit_placements, self.cfg.timing_protocol())
        self._add_phase("placement_audit_s", time.monotonic() - t0)

    def _reference_block(self, ans: ChildProcess, timer: ReferenceTimer, block: timing.TimingProtocol,
                         l2_flush_mib: int) -> timing.RawTimes:
        """The eager reference's block beside the answer's ``block``, with the answer's tree stopped."""
        t0 = time.monotonic()
        try:
            with self._answer_stopped(ans), self._timeline("timing_reference"):
                return timer.run(self.reference.time_block, timing.reference_block(
                    block, self.cfg.paired_reference_block), l2_flush_mib, self.cfg.cpu_threads)
        except ReferenceFailed as e:
            raise ReferenceUnusable(str(e)) from None
        finally:
            self._add_phase("timing_reference_s", time.monotonic() - t0)

    def _probe_overhead(self, ans: ChildProcess, reference_ms: float, floor_s: float) -> Message | None:
        """Before the answer's first timed block, in the same exclusive window: the same loop (inputs, fresh draws,
        flush, scrubs, messages) run PROBE_CALLS times on the trusted stand-in ``child_answer.OverheadProbe``, observed
        as the answer's calls are. Its median excess sets the relative bound on the answer's reported times
        (``TimedChecks.excess_limit_ms``). Returns the message that ended the probe when it failed (the answer's
        process failing it is the answer's timing failing), else None."""
        ref, checks = self.reference, self.timed_checks
        if not ref.output_specs:
            return None
        t0 = time.monotonic()
        probe = TimedChecks.choose(0, checks.output_bytes, False, fresh=checks.fresh, input_bytes=checks.input_bytes)
        seed = probe.next_seed()
        self._send(ans, "probe", inputs={"area": "timing", "entries": ref.timing_entries}, seed=seed,
                   block={"warmup": 1, "trials": PROBE_CALLS, "discard_first": 0}, outputs=ref.output_specs,
                   structure=ref.output_structure)
        m = self._timed_block(ans, PROBE_CALLS, timing_limit_s(reference_ms, PROBE_CALLS + 1, floor_s),
                              reference_ms, seed, probe)
        self._merge(m)
        self._add_phase("timing_probe_s", time.monotonic() - t0)
        if m.type in ("runtime_error", "cuda_error"):
            return m
        if m.type != "timing":
            raise ProtocolError(f"unexpected {m.type} while probing the timing loop")
        checks.probe_excess_ms = probe.excess_ms()
        return None

    def _timed_block(self, ans: ChildProcess, trials: int, limit_s: float, reference_ms: float,
                     seed: int | None, checks: TimedChecks) -> Message:
        """One block of the answer's timing (``trials`` timed calls, the discarded ones included) under the watchdog
        (``_watched``'s rules, for the whole block). Each timed call reports itself as it ends; this side notes when
        (the interval between the reply to one call and the next report holds that call's whole trial: the reported
        time must fit in it), tells the child whether it checks this call's output (a choice drawn in secret
        beforehand, told only after the call), judges a checked output against the reference's on that call's
        inputs (``seed``: the call's fresh inputs, drawn here again; None: the timing inputs) before the next call
        starts, and replies with the next call's seed. A report beyond the block's calls is forged. Returns the
        block's last message (``timing``, or the answer's error)."""
        m = self._recv(ans)
        if m.type != "calling":
            return m
        end = self._watch_end(limit_s)

        def recv() -> Message:
            return self._recv_watched(ans, end, limit_s, reference_ms)

        # A block's first call is not observed: no reply of ours precedes it (in the first block its interval
        # would also hold the warm-up calls).
        replied: float | None = None
        reports = 0
        while True:
            m = recv()
            if m.type != "timed":
                return m
            now = time.monotonic()
            reports += 1
            if reports > trials:
                raise ProtocolError(f"more than the block's {trials} timed calls reported")
            reported = number(m.header.get("ms"))
            if reported is None or reported < 0:
                raise ProtocolError("a timed call without a valid time")
            if replied is not None:
                checks.observe(reported, (now - replied) * 1e3)
            if checks.take():
                t_check = time.monotonic()
                self._send(ans, "check")
                om = recv()
                if om.type == "bad_output":
                    checks.failed("a timed call returned other than plain tensors")
                elif om.type == "output":
                    checks.judged(*self._judge_timed(om, seed), seed)
                else:
                    return om
                self._add_phase("timing_checks_s", time.monotonic() - t_check)
            seed = checks.next_seed()
            replied = time.monotonic()  # before the reply: the next call cannot start earlier
            self._send(ans, "next", seed=seed)

    def _judge_timed(self, om: Message, seed: int | None) -> tuple[str, str | None]:
        """(verdict, detail) of a checked timed call's outputs, against the reference's on the call's fresh inputs
        (``seed``) or on the timing inputs (``_judge_anywhere``)."""
        if seed is None:
            trial = self.reference.timing_trial
        else:
            try:
                trial = self.reference.timed_call_trial(seed)
            except ReferenceFailed as e:
                return "unchecked", str(e)[:300]
        assert trial is not None
        verdict, _, detail = self._judge_anywhere(trial, om)
        return verdict, detail

    def _judge_anywhere(self, rt: ReferenceTrial, om: Message) -> tuple[str, float | None, str | None]:
        """``_judge`` on this side's device, or on the host when the device has no room left (the answer's process
        may hold most of it): a full device never crashes the job. A reference that cannot recompute its outputs
        leaves the answer unjudged (``reference_error``)."""
        torch = self.reference.torch
        try:
            try:
                return self._judge(rt, om)
            except torch.OutOfMemoryError:
                pass  # retried below, once the failed attempt's tensors (held by its traceback) are gone
            torch.cuda.empty_cache()
            return self._judge(rt, om, torch.device("cpu"))
        except ReferenceFailed as e:
            raise ReferenceUnusable(str(e)) from None

    def reference_ms(self) -> float | None:
        """The slowest forward of the reference so far (what the watchdog scales with)."""
        times = [t.ref_forward_ms for t in self.trials if isinstance(t.ref_forward_ms, (int, float))]
        return max(times) if times else None

    def _watched(self, ans: ChildProcess, limit_s: float, reference_ms: float) -> Message:
        """The answer child's next message after it announced a call: at most ``limit_s`` after the announcement
        (the per-call watchdog, which kills the child at once), never past the evaluation's deadline. Reading the
        inputs before the announcement is not the answer's time."""
        m = self._recv(ans)
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
        """The child's next message by ``end`` (``_recv``: moved by the seconds its tree stands stopped); a timeout
        before the evaluation's deadline is the watchdog's kill (recorded for the verdict's message)."""
        watchdog_first = end < self.deadline  # both move by the same seconds
        try:
            return self._recv(ans, end)
        except ChildTimeout:
            if watchdog_first:
                self.watchdog = (limit_s, reference_ms)
            raise

    def _recv(self, ans: ChildProcess, end: float | None = None) -> Message:
        """The child's next message by ``end`` (default: the evaluation's deadline). The seconds its tree stands
        stopped meanwhile because the job's lease stepped aside for another job's timing (``evaluation.yield_gpu``:
        outside the job's turns) are not the answer's: they move ``end`` and the evaluation's deadline, and add to
        ``phases_s.stepped_aside_s``. A lease that never steps aside never stops it during a receive: ``recv``."""
        base = self.deadline if end is None else end
        if self.lease is None or not self.lease.steps_aside:
            return ans.recv(base)
        lease = self.lease
        stopped_from = lease.frozen_s  # the followed tree's (this answer's, from its load on) stopped seconds so far
        try:
            return ans.recv_moving(lambda: base + lease.frozen_s - stopped_from)
        finally:
            moved = lease.frozen_s - stopped_from
            self.deadline += moved
            if moved:
                self._add_phase("stepped_aside_s", moved)

    def _judge(self, rt: ReferenceTrial, am: Message, device: Any = None) -> tuple[str, float | None, str | None]:
        """(verdict, max_abs_diff, detail) of an ``output`` message against the reference trial, on this side's
        device (or ``device``), from the bytes in the answer's output area."""
        if rt.structure != am.header.get("structure"):
            return "shape_mismatch", None, (f"output structure differs: expected {rt.structure}, got "
                                            f"{text(am.header.get('structure'), 40)}")
        metas = am.header.get("outputs")
        if not isinstance(metas, list) or not metas:
            raise ProtocolError("an output message without outputs")
        # Shapes and dtypes as the answer's process describes them, compared before any byte is read: an output
        # unlike the reference's is never built here (a shape of no element can still have strides no tensor has).
        if len(metas) != len(rt.outputs):
            return "shape_mismatch", None, f"expected {len(rt.outputs)} outputs, got {len(metas)}"
        for i, (r, m) in enumerate(zip(rt.outputs, metas)):
            m = m if isinstance(m, dict) else {}
            if list(r.shape) != m.get("shape"):
                return "shape_mismatch", None, (f"output {i}: expected shape {tuple(r.shape)}, got "
                                                f"{text(m.get('shape'), 80)}")
            if dtype_name(r.dtype) != m.get("dtype"):
                return "dtype_mismatch", None, (f"output {i}: expected dtype {r.dtype}, got "
                                                f"{text(m.get('dtype'), 40)}")
        if not am.header.get("written"):
            # Written only when they fit the area, which the reference's outputs size: these do.
            raise ProtocolError("outputs that fit were not written")
        device = device or self.reference.device
        # The reference's first: a recomputed one (memory_plan) needs its forward's room before the answer's copy.
        ref_out = self.reference.reference_outputs(rt, device)
        try:
            new_out = self.reference.answer_outputs(metas, self.slot.output, device)
        except TransportError as e:
            raise ProtocolError(f"output slots: {e}") from None
        verdict, diff, detail = compare_outputs(ref_out, new_out, self.cfg.atol, self.cfg.rtol)
        if verdict == "ok" and rt.kind in ("seeded", "hidden", "post_timing"):
            self.answer_prints.append(fingerprint(new_out))
            self.reference_prints.append(fingerprint(ref_out))
        del new_out, ref_out
        new_dev = [m.get("device") for m in metas]
        if verdict == "ok" and rt.output_devices != new_dev:
            self.flag("output_wrong_device")
            return "device_mismatch", diff, f"output on {text(new_dev, 200)}, expected {rt.output_devices}"
        return verdict, diff, detail

    def _answer_trial(self, ans: ChildProcess, rt: ReferenceTrial, idx: Any, kind: str, seed: int) -> bool:
        """The answer's call on a trial and its outputs judged; False: it failed (``failure``) or its outputs did."""
        return self._judge_trial(rt, self._trial_output(ans, rt), idx, kind, seed)

    def _trial_output(self, ans: ChildProcess, rt: ReferenceTrial) -> Message:
        """The answer's reply to the trial it was sent (its outputs, or its error), under the per-call watchdog."""
        ref_max = max(x for x in (rt.forward_ms, self.reference_ms(), 0.0) if x is not None)
        floors = self.cfg.watchdog_limits() or (0.0, 0.0)
        am = self._watched(ans, call_limit_s(ref_max, floors[0] if not self.trials else floors[1]), ref_max)
        self._merge(am)
        return am

    def _judge_trial(self, rt: ReferenceTrial, am: Message, idx: Any, kind: str, seed: int) -> bool:
        """The answer's reply to a trial judged against the reference's outputs, and recorded."""
        rec = TrialRecord(index=idx, kind=kind, seed=seed, verdict="error", ref_forward_ms=rt.forward_ms)
        if am.type == "output":
            rec.launches = count(am.header.get("launches"))
            rec.forward_ms = number(am.header.get("forward_ms"))
            rec.verdict, rec.max_abs_diff, rec.detail = self._judge_anywhere(rt, am)
            if rec.verdict != "ok" and rec.detail:
                self.error = self.error or f"trial {idx} ({kind}): {rec.detail}"
        elif am.type == "bad_output":
            rec.verdict, rec.detail = "bad_output", text(am.header.get("error"), 500)
            rec.launches = count(am.header.get("launches"))
            self.error = f"trial {idx}: {rec.detail}"
        elif am.type in ("runtime_error", "cuda_error"):
            rec.detail = "error"
            self.trials.append(rec)
            self.failure = Status.CRASH if am.type == "cuda_error" else Status.RUNTIME_ERROR
            self.error = text(am.header.get("error"))
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


def _lease_met(lease: gpu_lock.YieldingLease | None, counts_from: gpu_lock.HoldCounts | None
               ) -> gpu_lock.HoldCounts | None:
    """What a job's lease met since ``counts_from`` (its counts as an answer's run began); None without a lease."""
    if lease is None or counts_from is None:
        return None
    return lease.counts().since(counts_from)
