"""Evaluate every answer to one problem (``evaluate_answers``): one trusted reference side for the problem, one fresh
child per answer, each answer's conversation with its child in ``session``, its record in ``verdict``. The trust
model (which side runs what) is ``workflow_scripts.evaluation``'s docstring; the verdicts themselves are
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
* Timing: see ``workflow_scripts.evaluation.timing`` (KernelBench's CUDA-event window with an L2 flush before it; work
  left on other streams is measured after it and flagged; warm-up, discarded and timed calls as
  ``config.DEVICE_DEFAULTS`` sets them per device; wall clock on the CPU, ``timing_mode`` says which). Only
  answers that passed every correctness trial are timed. ``runtime_ms`` is the headline statistic of the trials
  (``core.records.HEADLINE_STATISTIC``, the mean as in KernelBench), null unless correct.
* Status precedence (``protocol.decide_status``): a failure before the module finished importing is ``load_error`` (or
  ``no_model_new``); after that any flag that rejects (``core.statuses.FLAGS``) gives
  ``rejected_runtime``; then timeout, crash (child died, exited early, CUDA error, or no ``done``),
  init/runtime error, the first failing trial's shape/dtype/value mismatch; then ``no_triton_launch`` when
  ``require_triton`` and some correctness call launched no Triton kernel; else ``correct``.
* Static analysis (``workflow_scripts.analysis.static.analyze_source``) runs first; a
  ``reject`` finding gives ``rejected_static`` without running anything (``compiled`` stays False, as for other
  pre-run statuses); a syntax error gives ``load_error`` without running; ``flag`` findings become
  ``static:<code>`` flags.

CLI: ``python -m workflow_scripts evaluate --problem P.py --answer A.py --device cpu|cuda --out OUT.json
[--timeout S] [--no-require-triton] [--tf32 pytorch_default|ieee] [--no-timing] [--gpu-index N]``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from workflow_scripts.core.statuses import Status
from workflow_scripts.evaluation import gpu_lock, memory_plan, resources, sandbox, triton_stub_cache
from workflow_scripts.evaluation.channel import ChildDied, ChildTimeout, ProtocolError
from workflow_scripts.evaluation.config import EvalConfig
from workflow_scripts.evaluation.confinement import Cover, covers, problem_sources
from workflow_scripts.evaluation.isolation import SandboxUnavailable
from workflow_scripts.evaluation.protocol import kernelbench_trial_seeds
from workflow_scripts.evaluation.records import EvalResult
from workflow_scripts.evaluation.reference import (ReferenceFailed, ReferenceSide, available_memory, bind_gpu,
                                                   input_bytes_on_meta)
from workflow_scripts.evaluation.sandbox import ChildProcess
from workflow_scripts.evaluation.session import AnswerSession, AnswerSlot, InfrastructureError
from workflow_scripts.evaluation.start_gate import StartGate
from workflow_scripts.evaluation.transport import Area
from workflow_scripts.evaluation.verdict import StaticVerdict, judged, result_record, static_verdict
from workflow_scripts.suite.problem_module import load_problem

# The public interface: the evaluation of a problem's answers, its configuration and its records.
__all__ = ["EvalConfig", "EvalResult", "InfrastructureError", "ProblemEvaluator", "evaluate_answer", "evaluate_answers"]

# The repository's results folder, which holds every configuration's results_dir unless one is set elsewhere (the
# pipeline's evaluate stage hides its own results folder and store too, through hidden_paths).
DEFAULT_RESULTS = Path(__file__).resolve().parents[2] / "results"


class ProblemEvaluator:
    """Every answer to one problem: the problem's trusted side (``ReferenceSide``) is built once, and each answer runs
    in a fresh child. A batch of children (``batch_size``) is started ahead of the answers to come, one more as each
    answer is taken up (a rolling window); their CUDA contexts are created one at a time in the gaps between timings
    (``start_gate``), so no process starts during a timing."""

    def __init__(self, problem_path: Path, config: EvalConfig, lease: gpu_lock.YieldingLease | None) -> None:
        self.problem_path = Path(problem_path)
        self.cfg = config
        self.lease = lease  # shared; with yield_gpu it steps aside for other jobs' timing between GPU steps (gpu_turn)
        self.gpu = lease.gpu if lease else None
        self.base = Path(tempfile.mkdtemp(prefix="kbeval-"))
        self.triton_template: Path | None = None
        self.reference: ReferenceSide | None = None
        self.reference_error: str | None = None
        self.phases: dict[str, float] = {}
        self._count = 0
        self._slots: list[AnswerSlot] = []  # every slot started, so close() leaves no process behind
        self._early: deque[AnswerSlot] = deque()  # started while the problem was prepared
        self.gate = StartGate(config.effective_timeout(), self.gpu_turn)
        # Triton's driver helpers as an earlier problem's first answer process built them (compiled by gcc in every
        # process that starts without them): the whole first batch starts before this problem's first is ready.
        home = triton_stub_cache.template_home(config)
        if home is not None and triton_stub_cache.load_template(home, self.base / "triton-template"):
            self.triton_template = self.base / "triton-template"

    def gpu_turn(self) -> contextlib.AbstractContextManager[None]:
        """A block of this job's own GPU work: the lease does not step aside for another job's timing during it
        (``gpu_lock.YieldingLease.held``)."""
        return self.lease.held() if self.lease is not None else contextlib.nullcontext()

    def prepare(self, answers: int = 1) -> None:
        """The trusted side of the problem. The first answer's child starts meanwhile (its interpreter, torch, CUDA
        context and Triton get ready while the inputs are built) and, where the inputs are small enough, the rest of
        the first batch of the ``answers`` to come (``_early_count``): their host parts overlap the preparation, and
        their device parts follow one at a time (``start_gate``) instead of holding up the first answer's timing (on
        a GPU, each is a GPU turn of the job, between the preparation's). Each gets its areas once they exist."""
        t0 = time.monotonic()
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
            self._prepare_reference(answers)
        except ReferenceFailed as e:
            self.reference_error = str(e)[:4000]
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

    def _prepare_reference(self, answers: int) -> None:
        """The trusted side built, its GPU work in the job's GPU turns (``ReferenceSide.device_work``: one per seeded
        trial's forward, not one for the whole preparation, so a timer waits at most one while the inputs are drawn
        on the CPU); ``self.reference`` once fully prepared."""
        cfg = self.cfg
        reference = None
        try:
            t_init = time.monotonic()
            reference = ReferenceSide(self.problem_path, cfg.seed, cfg.device, self.gpu, cfg.tf32,
                                      timing_seed=cfg.timing_seed, cast_integers=cfg.integer_inputs == "cast",
                                      device_turn=self.gpu_turn)
            # Its model built on the device, the wait for the GPU turn left out (``prepare_turn_wait_s``).
            self.phases["prepare_reference_init_s"] = time.monotonic() - t_init - reference.turn_wait_s
            reference.prepare(kernelbench_trial_seeds(cfg.seed, cfg.correctness_trials), timing=cfg.time_answer,
                              atol=cfg.atol, rtol=cfg.rtol, answer_processes=min(answers, cfg.prestart_count() + 1))
        except ReferenceFailed:
            if reference is not None:
                reference.close()
            raise
        self.reference = reference  # only a fully prepared side judges answers
        self.phases.update(reference.prepare_phases)

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

    def start_slot(self) -> AnswerSlot:
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
                             covers=self.covers(work))
        try:
            child.start()
        except SandboxUnavailable as e:
            raise InfrastructureError(f"the configured sandbox is unavailable: {e}") from None
        slot = AnswerSlot(child)
        self._slots.append(slot)
        self.gate.add(child)
        if self.reference is not None:
            self.hand_areas(slot)
        return slot

    def hand_areas(self, slot: AnswerSlot) -> None:
        """The child's areas: the problem's sealed ones and its own secret-input and output areas. On CUDA this side
        page-locks the latter in the background (``AnswerSlot.ready``)."""
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
            slot.pinning = threading.Thread(target=self._pin, args=(slot.secret, slot.output), daemon=True)
            slot.pinning.start()
            self.gate.track_pinning(slot.pinning)  # driver work: ended before any timing

    def _pin(self, *areas: Area) -> None:
        """Page-locking (driver work) in one of the job's GPU turns."""
        with self.gpu_turn():
            for area in areas:
                area.pin()

    def covers(self, workdir: Path) -> tuple[Cover, ...]:
        """What the answer's sandbox shows empty (``confinement.covers``): every folder but the system's, the
        interpreter's, the harness's and its own, and wherever they lie, the problem's sources (its suite checkout),
        the repository's default results folder (prompts.jsonl holds every problem's reference code) and
        ``hidden_paths``."""
        extra = problem_sources(self.problem_path) + [DEFAULT_RESULTS] + [Path(p) for p in (self.cfg.hidden_paths or [])]
        return covers(workdir, extra, package=sandbox.CHILD_MODULE.split(".")[0])

    def batch_size(self) -> int:
        """How many children to start at once (``_children_for``, with each child's areas as the reference sized
        them)."""
        assert self.reference is not None
        return self._children_for(self.reference.input_bytes + self.reference.output_capacity())

    def _children_for(self, area_bytes: int) -> int:
        """The configured count of children, as many as the host's memory gives areas of ``area_bytes``
        (``memory_plan.answer_slots``)."""
        return memory_plan.answer_slots(self.cfg.prestart_count(), area_bytes, available_memory())

    def _keep_triton_template(self, slot: AnswerSlot) -> None:
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
            home = triton_stub_cache.template_home(self.cfg)
            if home is not None:
                triton_stub_cache.publish_template(template, home)

    def evaluate(self, answers: list[tuple[Path, StaticVerdict, EvalConfig]],
                 on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
        """Verdicts for answers that passed static analysis, in order, each under its own configuration (the
        problem's, with that answer's ``require_triton``: ``evaluate_answers``); ``on_result(k, result)`` as each
        is judged (a long job's progress)."""
        results: list[EvalResult] = []
        if self.reference is None:
            for _, static, cfg in answers:
                results.append(result_record(cfg, Status.REFERENCE_ERROR, None, self.reference_error, static, self.phases))
            return results
        batch = self.batch_size()
        self.phases["children_batch"] = float(batch)
        self.phases["answers_judged_together"] = float(len(answers))  # against this one reference side
        started, self._early = self._early, deque()
        for k, (path, static, cfg) in enumerate(answers):
            t_answer = time.monotonic()
            self._start_ahead(started, min(batch, len(answers) - k))
            slot = started.popleft()
            # A rolling window: as an answer is taken up, the child of the answer a batch later starts (while this
            # one is checked, before it is timed), so each child has the time of a batch of answers to get ready;
            # children started a batch at a time gave the first of each batch one answer's time (a study's job
            # judges up to 15 answers with batches of 4). Alive at once, as before: this answer's and a batch.
            self._start_ahead(started, min(batch, len(answers) - k - 1))
            t_wait = time.monotonic()
            self.gate.wait_ready(slot.child)
            slot.ready()
            self._keep_triton_template(slot)
            slot_wait_s = time.monotonic() - t_wait
            ev = AnswerSession(self.reference, slot, path, cfg, self.gpu, self.lease, self.gate)
            ev.phases["slot_wait_s"] = slot_wait_s  # its child getting ready after the evaluator needed it
            try:
                ev.run()
                # Ended before the verdict: a tree that reaches its memory cap after its last message (or a
                # process it started that still runs) is judged on its whole life.
                t_close = time.monotonic()
                slot.close()
                ev.phases["close_s"] = time.monotonic() - t_close  # its tree exited, its areas unmapped
                results.append(judged(cfg, ev, static, self.phases))
            finally:
                try:
                    with self.gpu_turn():  # its process's end and its areas' unpinning are driver work
                        slot.close()
                        self.reference.release_cached_memory()
                finally:
                    if self.lease is not None:
                        try:
                            self.lease.downgrade()  # where the answer was timed; whatever the lines above raised
                        finally:
                            self.gate.resume()  # shared again: the next processes' device parts may begin
            # From taking up the answer to being ready for the next (what an answer costs the job).
            results[-1].phases_s["answer_wall_s"] = time.monotonic() - t_answer
            if on_result is not None:
                on_result(k, results[-1])
        return results

    def _start_ahead(self, started: deque[AnswerSlot], count: int) -> None:
        """Start children until ``count`` wait in ``started`` for the answers to come."""
        while len(started) < count:
            started.append(self.start_slot())

    def close(self) -> None:
        self.gate.close()  # its thread leaves every channel before the children end; its page-locking has ended
        with self.gpu_turn():  # the children's ends and the trusted side's unpinning are driver work
            for slot in self._slots:
                slot.close()  # idempotent: kill() of a reaped child and close() of a closed area do nothing
            if self.reference is not None:
                self.reference.close()
        if self.cfg.keep_workdir:
            print(f"kept evaluation directory {self.base}", file=sys.stderr)
        else:
            shutil.rmtree(self.base, ignore_errors=True)


def evaluate_answers(problem_path: Path, answer_paths: list[Path], config: EvalConfig | None = None,
                     require_triton: list[bool] | None = None,
                     on_result: Callable[[int, EvalResult], None] | None = None) -> list[EvalResult]:
    """Evaluate every answer to one problem: static analysis first (a rejection or a syntax error runs nothing),
    then one trusted reference side for the problem and one fresh child per answer. ``require_triton`` holds each
    answer's own setting (the calibration model's reference code is exempt, every model's answer is judged against
    the one reference side); None: the configuration's, for every answer. ``on_result(i, result)`` is called as the
    answer ``answer_paths[i]`` gets its verdict (a long job prints its progress with it)."""
    cfg = config or EvalConfig()
    if require_triton is not None and len(require_triton) != len(answer_paths):
        raise ValueError(f"require_triton has {len(require_triton)} values for {len(answer_paths)} answers")
    configs = ([cfg] * len(answer_paths) if require_triton is None
               else [dataclasses.replace(cfg, require_triton=bool(r)) for r in require_triton])
    t0 = time.monotonic()
    statics = [static_verdict(Path(p), cfg) for p in answer_paths]
    results: list[EvalResult | None] = [None] * len(answer_paths)
    runnable = []
    for i, st in enumerate(statics):
        if st.reject is not None and cfg.reject_cheats:
            results[i] = result_record(configs[i], Status.REJECTED_STATIC, None, st.reject, st, {})
        elif st.syntax is not None:
            results[i] = result_record(configs[i], Status.LOAD_ERROR, None, f"syntax error: {st.syntax}", st, {})
        else:
            runnable.append(i)
            continue
        if on_result is not None:
            on_result(i, results[i])
    if runnable:
        # Shared while checking correctness; exclusive only while an answer is timed (see gpu_lock).
        with (gpu_lock.lease_for_job(cfg.device, cfg.gpu_index, cfg.gpus, cfg.lock_dir, exclusive=False,
                                     expected_mem_gib=expected_gpu_gib(problem_path, cfg, len(runnable)),
                                     purpose="evaluate") as lease,
              gpu_lock.yielding(lease, steps_aside=cfg.yields_gpu(), hold=cfg.beside_timing_hold()) as yielding_lease):
            evaluator = ProblemEvaluator(Path(problem_path), cfg, yielding_lease)
            try:
                evaluator.prepare(len(runnable))
                judged = evaluator.evaluate([(Path(answer_paths[i]), statics[i], configs[i]) for i in runnable],
                                            None if on_result is None else lambda k, r: on_result(runnable[k], r))
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


def expected_gpu_gib(problem_path: Path, cfg: EvalConfig, answers: int) -> float | None:
    """What the job asks the GPU's memory admission for (resources.py's estimate); None on the CPU."""
    if cfg.device != "cuda":
        return None
    evaluation = {"correctness_trials": cfg.correctness_trials, "time_answer": cfg.time_answer,
                  "prestart": cfg.prestart}
    return resources.problem_gpu_gib("evaluate", problem_path, evaluation, answers)


def evaluate_answer(problem_path: Path, answer_path: Path, config: EvalConfig | None = None) -> EvalResult:
    return evaluate_answers(problem_path, [answer_path], config)[0]
