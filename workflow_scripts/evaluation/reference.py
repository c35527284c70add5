"""The trusted side of a problem's evaluation: one per (problem, device), in the evaluating process, never in an
answer's.

It loads the problem's ``Model`` (KernelBench's code, trusted), builds the five seeded correctness inputs once,
exactly as KernelBench does (seed, ``get_inputs()`` on the CPU, floating tensors cast to float32), computes the
reference outputs once, and keeps them for every answer to the problem where ``memory_plan`` finds room: on the
device, else on the host, else recomputed for each answer (``reference_outputs``). The inputs go to the answers
through sealed memory areas (``transport``); where five sealed copies would not fit the host (the 16 GiB level-1
problem 45 on a 128 GiB host), the trials beyond ``memory_plan.HOST_INPUT_SHARE`` of its memory keep their inputs on
the device instead, and each answer gets them through its own input area when the trial starts (``trial_inputs``). Secret-seed inputs
(hidden and post-timing trials, drawn per answer; timing, drawn per problem) need only the distribution, so they
are built on the device. Answers' outputs are judged here, on the device, with ``protocol.compare_outputs``.

KernelBench's seeding uses torch's process-wide generators: every seed and the draws it governs run under one
process-wide lock (``seeding``), so problems judged from threads of one process build the inputs and weights they
build alone. The device binding and the TF32 flags are process-wide too: the pipeline judges problems side by side as
processes, one problem per process.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import secrets
import statistics
import subprocess
import sys
import threading
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from workflow_scripts.evaluation import environment, memory_plan, placement_audit, timing
from workflow_scripts.evaluation.memory_plan import LARGE_OUTPUT_BYTES, PARALLEL_INPUTS_MIN_BYTES
from workflow_scripts.evaluation.problem_audit import OutputAudit, ProblemAudit, output_samples, tf32_sensitive
from workflow_scripts.evaluation.protocol import compare_outputs
from workflow_scripts.evaluation.reference_timer import device_ooms
from workflow_scripts.evaluation.transport import (Area, Slot, TransportError, aligned, dtype_name, tensor_bytes,
                                                  torch_dtype)
from workflow_scripts.suite.problem_module import as_input, input_builder, input_builder_source, load_problem

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
# torch's random generators are the process's: a seed and the draws it governs (the model's weights, get_inputs(), a
# stochastic forward and the state it leaves) must not interleave with another thread's. Several problems judged
# from threads of one process (the spin bench) otherwise built each other's inputs: L2/71's reference differed from
# its own code's output by 0.105 beside two other problems (bench/archive/NOTES.md, twelfth session).
_SEEDED_DRAWS = threading.RLock()


class ReferenceFailed(Exception):
    """The problem's own code failed (every answer to it gets ``reference_error``)."""


@dataclass
class ReferenceTrial:
    """One trial's reference side: where its inputs lie, the outputs an answer must match and the generator state
    the reference's forward left (the answer's forward starts from it, as in KernelBench's single process)."""

    kind: str  # seeded | hidden | post_timing | timed (a checked timed call's)
    seed: int
    area: str | None  # the area holding the inputs; None while they wait on the device (device_inputs)
    entries: list[dict[str, Any]]
    structure: str
    outputs: list[Any]
    forward_ms: float | None
    rng: dict[str, str | None]
    output_devices: list[str] = field(default_factory=list)
    # A seeded trial's inputs kept on this side's device (memory_plan.host_input_trials), written into each answer's
    # own input area when its trial starts (ReferenceSide.trial_inputs).
    device_inputs: list[Any] | None = None
    # Where the outputs wait (memory_plan.PLACEMENTS). "recompute": ``outputs`` are shapes and dtypes only (the meta
    # device), and ``sample`` (output_samples of the first forward's) checks the outputs recomputed for each answer.
    placement: str = "device"
    sample: list[Any] | None = None


class ReferenceSide:
    def __init__(self, problem_path: Path, seed: int, device: str, gpu: str | None, tf32: str,
                 timing_seed: int | None = None, cast_integers: bool = False,
                 device_turn: Callable[[], AbstractContextManager[None]] = nullcontext) -> None:
        if device == "cuda":
            bind_gpu(gpu)
        import torch

        self.torch = torch
        # Each block of this side's GPU work runs in one (``device_work``): the job's GPU turn, between two of which
        # its lease may step aside for another job's timing while this side's host work (drawing inputs on the CPU,
        # writing their areas) goes on.
        self.device_turn = device_turn
        self.seed = seed
        self.cast_integers = cast_integers
        self.device_kind = device
        self.device = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        self.tf32 = environment.configure_tf32(tf32)
        self.areas: dict[str, Area] = {}
        self.seeded: list[ReferenceTrial] = []
        self.timing_entries: list[dict[str, Any]] = []
        self.timing_inputs: list[Any] = []
        # The reference's outputs on the timing inputs (timed calls' outputs are checked against them), or None
        # when its forward is stochastic (two forwards on the same inputs disagree: dropout in training mode).
        self.timing_trial: ReferenceTrial | None = None
        self.audit: ProblemAudit | None = None  # degenerate or not, from the seeded trials' outputs (problem_audit)
        # Where the seeded trials' outputs wait (memory_plan), planned at the first seeded forward; the tolerance
        # recomputed outputs are checked with.
        self.output_plan: memory_plan.OutputPlan | None = None
        self.atol = self.rtol = 1e-4
        self.answer_processes = 1  # answer processes the job wants alive at once (their areas share the host)
        self.param_bytes = 0
        # The kinds of the reference's outputs on the timing inputs ([shape, dtype name] each, and their structure):
        # what the answer's process allocates in the timing loop's overhead probe (protocol.PROBE_CALLS).
        self.output_specs: list[list[Any]] = []
        self.output_structure = "tensor"
        # The problem's input builder (``input_builder_source``), sent to every answer's process to draw each timed
        # call's inputs afresh, once it is known to build what the module builds (``_check_input_builder``); None:
        # the timed calls keep the timing inputs (``fresh_reason`` says why).
        self.fresh_source: str | None = None
        self.fresh_reason: str | None = None
        self._fresh_get_inputs: Any = None
        self._clock: timing.Clock | None = None
        self._judge_buffer: Any = None  # the answers' outputs copied out on the host (_host_copies)
        self._placements_tried = False  # audit_placements runs once per problem
        # One per problem (drawn here unless given, to replay a run): the timed values do not change the timing.
        self.timing_seed = timing_seed if timing_seed is not None else secrets.randbelow(2**32 - 1)
        self.input_bytes = 0
        self.output_bytes = 0
        # Where prepare's time goes (seconds; merged into every answer's phases_s): the seeded inputs built, read onto
        # the device and run, and the timing inputs with their two reference forwards.
        self.prepare_phases: dict[str, float] = {}
        try:
            self.problem_path = Path(problem_path)
            self.problem = load_problem(problem_path)
            with self.seeding(seed):
                init_inputs = list(self.problem.get_init_inputs())
            init_area = Area("init", max(tensor_bytes(init_inputs), 1))
            self.init_entries = init_area.write(init_inputs)
            init_area.seal()
            self.areas["init"] = init_area
            with self.device_work(), torch.no_grad(), self.seeding(seed):
                model = self.problem.Model(*[self._process(x) for x in init_inputs])
                self.model = model.to(device=self.device, dtype=torch.float32)
            self.param_bytes = tensor_bytes(list(self.model.parameters()) + list(self.model.buffers()))
        except TransportError as e:
            raise ReferenceFailed(f"the problem's init inputs: {e}") from None
        except Exception as e:  # noqa: BLE001 - the problem's own code
            raise ReferenceFailed(_describe(e, "building the reference model")) from None

    # -- KernelBench's conventions -------------------------------------------------------------------------------
    @contextmanager
    def seeding(self, seed: int) -> Iterator[None]:
        """KernelBench's seeding (the CPU's generator and the device's), then the draws of the block, which no other
        thread's seeding or draws interleave (``_SEEDED_DRAWS``)."""
        with _SEEDED_DRAWS:
            self.torch.manual_seed(seed)
            if self.device_kind == "cuda":
                self.torch.cuda.manual_seed(seed)
            yield

    def rng_state(self) -> dict[str, str | None]:
        torch = self.torch
        cuda = bytes(torch.cuda.get_rng_state().tolist()).hex() if self.device_kind == "cuda" else None
        return {"cpu": bytes(torch.get_rng_state().tolist()).hex(), "cuda": cuda}

    def _process(self, x: Any, device: Any = None) -> Any:
        return as_input(x, device or self.device, self.cast_integers)

    def _sync(self) -> None:
        if self.device_kind == "cuda":
            self.torch.cuda.synchronize()

    @property
    def turn_wait_s(self) -> float:
        """Seconds this side has waited for the job's GPU turn so far (``device_work``)."""
        return self.prepare_phases.get("prepare_turn_wait_s", 0.0)

    @contextmanager
    def device_work(self) -> Iterator[None]:
        """A block of this side's GPU work, in one of the job's GPU turns (``device_turn``), its work done before
        the turn ends (a failed block's too, as far as the device lets): nothing of it runs into a timing the lease
        steps aside for. The wait for the turn (another job's timing, an answer process's device start) is counted
        apart (``prepare_turn_wait_s``, ``turn_wait_s``), out of the phases that span it."""
        asked = time.monotonic()
        with self.device_turn():
            self.prepare_phases["prepare_turn_wait_s"] = self.turn_wait_s + time.monotonic() - asked
            try:
                yield
            except BaseException:
                with suppress(Exception):  # a device error raises again here: the block's own error is the one told
                    self._sync()
                raise
            self._sync()

    # -- building inputs and reference outputs -------------------------------------------------------------------
    def prepare(self, trial_seeds: list[int], timing: bool, atol: float = 1e-4, rtol: float = 1e-4,
                answer_processes: int = 1) -> None:
        """The seeded trials (KernelBench's inputs, on the CPU, one sealed area each, or on the device beyond the
        host's share: ``memory_plan.host_input_trials``), their reference outputs placed by
        ``memory_plan.plan_outputs`` once the first forward is measured, and, if ``timing``, the timing inputs (one
        sealed area shared by every answer) with the reference's outputs on them (``timing_trial``: what a timed
        call's output is checked against, within ``atol``/``rtol``). Where helper processes build the seeded inputs,
        the timing inputs and the device-resident trials' inputs are built while they run; the reference's forwards
        keep KernelBench's order (the seeded trials first: a forward may change the model's state).
        ``answer_processes``: how many answer processes the job wants alive at once."""
        self.atol, self.rtol, self.answer_processes = atol, rtol, answer_processes
        self.prepare_phases["prepare_timing_s"] = self.prepare_phases["prepare_device_inputs_s"] = 0.0
        ooms = device_ooms(self.torch, self.device_kind)
        on_host = len(trial_seeds) if self.trial_input_bytes is None else memory_plan.host_input_trials(
            len(trial_seeds), self.trial_input_bytes, timing, available_memory())
        on_device, built = self._build_seeded_inputs(trial_seeds, on_host, timing)
        self._seeded_forwards(trial_seeds, on_device, built, timing)
        if timing:
            with self.device_work():
                if "timing" not in self.areas:
                    self._build_timing_inputs()
                self._timing_forwards(atol, rtol)
            with self.device_work():
                self._check_input_builder()
        if ooms is not None:  # a full card while the reference first ran (reference_timer says why it matters)
            self.prepare_phases["prepare_device_ooms"] = float(device_ooms(self.torch, self.device_kind) - ooms)

    def _build_seeded_inputs(self, trial_seeds: list[int], on_host: int, timing: bool
                             ) -> tuple[dict[int, list[Any]], list[tuple[Area, list[dict[str, Any]]]] | None]:
        """Multi-GB problems' seeded inputs built ahead: the first ``on_host`` trials' by helper processes into
        their sealed areas (``built``, None without helpers: built one at a time by ``_seeded_forwards``), the rest
        here on the device (``on_device``, by trial), and meanwhile the timing inputs."""
        clock, phases = time.monotonic, self.prepare_phases
        t0 = clock()
        builders = None
        on_device: dict[int, list[Any]] = {}
        try:
            builders = self._start_builders(trial_seeds[:on_host], self.trial_input_bytes, timing,
                                            beside=on_host < len(trial_seeds))
            phases["prepare_parallel_start_s"] = clock() - t0
            if timing and builders is not None:
                with self.device_work():
                    self._build_timing_inputs()  # on the device, while the helpers build on the CPU
            t0, waited = clock(), self.turn_wait_s
            for i in range(on_host, len(trial_seeds)):  # one at a time here, the helpers' trials meanwhile
                drawn = self._seeded_inputs(trial_seeds[i], "cpu")  # on the host, in no turn
                with self.device_work():
                    on_device[i] = [self._process(x) for x in drawn]
                del drawn
            phases["prepare_device_inputs_s"] = clock() - t0 - (self.turn_wait_s - waited)
            t0 = clock()
            built = builders.collect() if builders is not None else None
            phases["prepare_parallel_inputs_s"] = clock() - t0
        finally:
            if builders is not None:
                builders.stop()
        return on_device, built

    def _seeded_forwards(self, trial_seeds: list[int], on_device: dict[int, list[Any]],
                         built: list[tuple[Area, list[dict[str, Any]]]] | None, timing: bool) -> None:
        """Each seeded trial in order: its inputs sealed (or kept on the device), the reference's forward on them,
        its outputs audited and placed where the memory plan (made at the first forward) puts them."""
        clock, phases = time.monotonic, self.prepare_phases
        phases["prepare_seeded_inputs_s"] = phases["prepare_seeded_forward_s"] = 0.0
        audit = OutputAudit(self.atol, self.rtol)
        for i, seed in enumerate(trial_seeds):
            t0, waited = clock(), self.turn_wait_s
            kept = on_device.pop(i, None)
            area, entries, host_inputs = self._seeded_trial_area(i, seed, kept, built)  # host work: no turn
            with self.device_work():
                device_inputs = self._seeded_device_inputs(area, entries, host_inputs, kept)
                del host_inputs
                t1 = clock()
                phases["prepare_seeded_inputs_s"] += t1 - t0 - (self.turn_wait_s - waited)
                base = self._memory_mark()
                trial = self._forward(device_inputs, "seeded", seed, area.name if area else None, entries)
                del device_inputs
                trial.device_inputs = kept
                if self.output_plan is None:
                    self.output_plan = self._plan_outputs(
                        trial, base, len(trial_seeds), timing,
                        on_host=len(trial_seeds) - len(on_device) - (kept is not None))
                audit.add(trial.outputs)
                self._place(trial, self.output_plan.place(i))
            if i == 0 and trial.placement != "recompute":
                audit.first = trial.outputs  # later trials compare with the kept copy (the plan keeps the first's)
            self.seeded.append(trial)
            phases["prepare_seeded_forward_s"] += clock() - t1
        with self.device_work():
            self.audit = dataclasses.replace(audit.result(), tf32_sensitive=self._tf32_sensitive())
            del audit
            if self.device_kind == "cuda":
                self.torch.cuda.empty_cache()
        if self.output_plan is not None:  # where the seeded outputs wait, in every answer's phases_s
            phases.update(seeded_outputs_on_device=float(self.output_plan.on_device),
                          seeded_outputs_on_host=float(self.output_plan.on_host),
                          seeded_outputs_recomputed=float(self.output_plan.recomputed))

    def _tf32_sensitive(self) -> bool | None:
        """The first seeded trial's outputs against the reference's at both TF32 extremes (problem_audit
        ``tf32_sensitive``). None on the CPU; where the first trial's outputs are not on the device or are large
        (the audit's forwards must fit the room the memory plan keeps for an answer's); and where the reference
        does not reproduce its own outputs in the run's mode (its noise would read as TF32's)."""
        trial = self.seeded[0] if self.seeded else None
        if (self.device_kind != "cuda" or trial is None or trial.placement != "device"
                or tensor_bytes(trial.outputs) >= LARGE_OUTPUT_BYTES):
            return None
        t0 = time.monotonic()
        try:
            if compare_outputs(trial.outputs, self._forward_again(trial).outputs, self.atol, self.rtol)[0] != "ok":
                return None
            return tf32_sensitive(self.torch, lambda: self._forward_again(trial).outputs, trial.outputs, self.atol,
                                  self.rtol)
        except (self.torch.OutOfMemoryError, ReferenceFailed):
            return None
        finally:
            self.release_cached_memory()
            self.prepare_phases["prepare_tf32_audit_s"] = time.monotonic() - t0

    def _seeded_trial_area(self, i: int, seed: int, kept: list[Any] | None,
                           built: list[tuple[Area, list[dict[str, Any]]]] | None
                           ) -> tuple[Area | None, list[dict[str, Any]], list[Any] | None]:
        """Seeded trial ``i``'s sealed area (None where its inputs wait on the device: ``kept``), the area's
        entries, and, where they were drawn here, the inputs on the host: work on the host only."""
        if kept is not None:
            self.input_bytes = max(self.input_bytes, tensor_bytes(kept))
            return None, [], None
        inputs = None
        if built is not None:
            area, entries = built[i]
        else:
            inputs = self._seeded_inputs(seed, "cpu")
            area = Area(f"seeded{i}", max(tensor_bytes(inputs), 1))
            entries = self._write(area, inputs)
            area.seal()
        self.areas[area.name] = area
        self.input_bytes = max(self.input_bytes, area.size)
        return area, entries, inputs

    def _seeded_device_inputs(self, area: Area | None, entries: list[dict[str, Any]], host_inputs: list[Any] | None,
                              kept: list[Any] | None) -> list[Any]:
        """The inputs a seeded trial's reference forward runs on, on this side's device (``_seeded_trial_area``'s):
        copies of the ``kept`` ones (a forward may change its inputs), the host's moved, or its area's read."""
        if kept is not None:
            return [self._copy(x) for x in kept]
        if host_inputs is not None:
            return [self._process(x) for x in host_inputs]
        assert area is not None
        return area.read(entries, self.device)

    def _memory_mark(self) -> int:
        """The device memory this side holds now, its peak counter reset: what a forward's peak is measured from
        (0 on the CPU, which has no counter)."""
        if self.device_kind != "cuda":
            return 0
        self.torch.cuda.synchronize()
        self.torch.cuda.reset_peak_memory_stats()
        return int(self.torch.cuda.memory_allocated())

    def _plan_outputs(self, first: ReferenceTrial, base: int, trials: int, timing: bool,
                      on_host: int) -> memory_plan.OutputPlan:
        """The seeded outputs' plan, from the first seeded forward (its outputs, and its peak beyond its inputs on
        the device: ``base`` is ``_memory_mark`` before it), the card (``_card_bytes``), the host's memory available
        now less what this side will still take there (the sealed areas of the ``on_host`` trials not built yet,
        the timing inputs' area, large timing outputs), and the answer processes that will hold areas at once: a
        batch (``memory_plan.answer_slots``, at most ``answer_processes``) and the next, started while the batch's
        last answer is checked."""
        outputs = tensor_bytes(first.outputs)
        extra = int(self.torch.cuda.max_memory_allocated()) - base if self.device_kind == "cuda" else outputs
        sizes = memory_plan.TrialBytes(inputs=self.input_bytes, outputs=outputs, params=self.param_bytes,
                                       forward_extra=max(extra, outputs))
        available = available_memory()
        batch = memory_plan.answer_slots(self.answer_processes, sizes.inputs + outputs, available)
        slots = min(self.answer_processes, 2 * batch)
        sealed = sum(name.startswith("seeded") for name in self.areas)
        pending = max(0, on_host - sealed) * sizes.inputs  # built one at a time after this forward (no helpers)
        pending += sizes.inputs if timing and "timing" not in self.areas else 0
        pending += outputs if timing and self.device_kind == "cuda" and outputs >= LARGE_OUTPUT_BYTES else 0
        return memory_plan.plan_outputs(sizes, trials, timing, self._card_bytes(), available - pending, slots,
                                        trials - on_host)

    def _card_bytes(self) -> int | None:
        """The GPU's memory as this process finds it (what other processes hold there now is not this job's: an
        evaluation beside it, a vLLM server); None on the CPU."""
        if self.device_kind != "cuda":
            return None
        free, total = self.torch.cuda.mem_get_info()
        return min(int(total), int(free) + int(self.torch.cuda.memory_reserved()))

    def _place(self, trial: ReferenceTrial, placement: str) -> None:
        """A seeded trial's outputs where the plan puts them: kept on the device, moved to the host, or reduced to
        their shapes and a sample (recomputed when judged: ``reference_outputs``)."""
        trial.placement = placement
        if placement == "host" and self.device_kind == "cuda":
            trial.outputs = [o.cpu() for o in trial.outputs]
        elif placement == "recompute":
            trial.sample = output_samples(trial.outputs)
            trial.outputs = [self.torch.empty(o.shape, dtype=o.dtype, device="meta") for o in trial.outputs]

    def reference_outputs(self, trial: ReferenceTrial, device: Any) -> list[Any]:
        """The reference's outputs on ``trial``, on ``device``: the kept ones, or, for a trial the memory plan keeps
        nowhere, the reference's forward again on its inputs under its seed (on this side's device), checked
        against the first forward's outputs: the same structure, shapes and dtypes, and its sample within the
        tolerance, NaN where NaN was (a reference that does not reproduce them cannot judge: ``ReferenceFailed``).
        A full device raises ``torch.OutOfMemoryError`` as it is (the caller may make room and try again)."""
        if trial.placement != "recompute":
            return [o.to(device) for o in trial.outputs]
        again = self._forward_again(trial)
        problem = _unlike(trial, again, self.atol, self.rtol)
        if problem is not None:
            raise ReferenceFailed(f"the reference's outputs on seeded trial {trial.seed}, recomputed because the "
                                  f"memory plan keeps them nowhere, differ from its first forward's ({problem}): it "
                                  "does not reproduce its own outputs, so they cannot be recomputed")
        outputs = [o.to(device) for o in again.outputs]
        del again
        self.release_cached_memory()
        return outputs

    def _seeded_inputs(self, seed: int, device: Any) -> list[Any]:
        """A seeded trial's inputs as KernelBench builds them (seed, ``get_inputs()`` on the CPU, processed), moved
        to ``device``."""
        try:
            with self.seeding(seed):
                return [self._process(x, device) for x in self.problem.get_inputs()]
        except Exception as e:  # noqa: BLE001
            raise ReferenceFailed(_describe(e, f"get_inputs() for seed {seed}")) from None

    def _copy(self, x: Any) -> Any:
        return x.clone() if isinstance(x, self.torch.Tensor) else x

    def trial_inputs(self, trial: ReferenceTrial, area: Area) -> dict[str, Any]:
        """Where an answer's process reads ``trial``'s inputs (the ``inputs`` of its trial message): the trial's own
        area (sealed seeded inputs, or the answer's secret area a secret trial was written into), or, for a seeded
        trial whose inputs wait on the device, the answer's own input ``area``, written now."""
        if trial.device_inputs is None:
            return {"area": trial.area, "entries": trial.entries}
        return {"area": area.name, "entries": self._write(area, trial.device_inputs)}

    def _build_timing_inputs(self) -> None:
        """The timing inputs (a secret seed, built on the device) in their sealed area."""
        t0 = time.monotonic()
        inputs = self.secret_inputs(self.timing_seed)
        area = Area("timing", max(tensor_bytes(inputs), 1))
        self.timing_entries = self._write(area, inputs)
        area.seal()
        self.areas["timing"] = area
        self.input_bytes = max(self.input_bytes, area.size)
        self.timing_inputs = inputs  # the reference is timed on them too, paired with each answer
        self.prepare_phases["prepare_timing_s"] += time.monotonic() - t0

    def _timing_forwards(self, atol: float, rtol: float) -> None:
        """The reference's outputs on the timing inputs, kept only when a second forward agrees (a stochastic
        forward leaves timed outputs unchecked)."""
        torch = self.torch
        t0 = time.monotonic()
        inputs = self.timing_inputs
        trial = self._forward(inputs, "timing", self.timing_seed, "timing", self.timing_entries)
        self.output_specs = [[list(o.shape), dtype_name(o.dtype)] for o in trial.outputs]
        self.output_structure = trial.structure
        try:
            again = self._forward(inputs, "timing", self.timing_seed ^ 1, "timing", self.timing_entries)
            comparable = compare_outputs(trial.outputs, again.outputs, atol, rtol)[0] == "ok"
            del again
        except (ReferenceFailed, RuntimeError):  # e.g. no device memory for a second set of outputs
            comparable = False  # timed outputs then go unchecked; the problem itself ran
        if comparable:
            if tensor_bytes(trial.outputs) >= LARGE_OUTPUT_BYTES:
                # Checked once or a few times per answer: on the host, so the GPU keeps room for answers.
                trial.outputs = [o.cpu() for o in trial.outputs]
            self.timing_trial = trial
        del trial
        if self.device_kind == "cuda":
            torch.cuda.empty_cache()
        self.prepare_phases["prepare_timing_s"] += time.monotonic() - t0

    def _check_input_builder(self) -> None:
        """``fresh_source`` set when the problem's input builder, run on its own as an answer's process runs it,
        draws inputs of the timing inputs' kinds, shapes and dtypes (a builder that needs the problem's classes
        does not run without them)."""
        try:
            source = input_builder_source(self.problem_path.read_text(encoding="utf-8"))
            self._fresh_get_inputs = input_builder(source)
            with self.seeding(self.timing_seed ^ 2):
                drawn = self._draw(self._fresh_get_inputs)
        except Exception as e:  # noqa: BLE001 - the problem's own code, run without its classes
            self.fresh_reason = _describe(e, "the input builder without the problem's classes")
            return
        same = _kinds(drawn) == _kinds(self.timing_inputs)
        del drawn
        if not same:
            self.fresh_reason = "the input builder without the problem's classes draws other shapes or dtypes"
            return
        self.fresh_source = source

    def _draw(self, get_inputs: Any) -> list[Any]:
        """Inputs drawn by ``get_inputs`` (under ``seeding``): the problem's distribution, built on the device
        (seconds, not minutes, for multi-GB inputs); the generators are left where the draw left them."""
        with self.torch.device(self.device):
            return [self._process(x) for x in get_inputs()]

    def timed_call_trial(self, seed: int) -> ReferenceTrial:
        """The reference's outputs on a timed call's fresh inputs (``seed``), drawn as the answer's process drew them;
        the forward starts from the generators' state the draw left, as the answer's call did."""
        torch = self.torch
        try:
            with torch.no_grad(), self.seeding(seed):
                inputs = self._draw(self._fresh_get_inputs)
                out = self.model(*inputs)
                self._sync()
        except Exception as e:  # noqa: BLE001
            raise ReferenceFailed(_describe(e, f"the reference on a timed call's inputs (seed {seed})")) from None
        del inputs
        trial = self._trial("timed", seed, "", [], out, None, {})
        self.release_cached_memory()
        return trial

    @functools.cached_property
    def trial_input_bytes(self) -> int | None:
        """Bytes of one trial's inputs (``input_bytes_on_meta``), probed once."""
        return input_bytes_on_meta(self.problem, self.device_kind, self.cast_integers)

    def _start_builders(self, seeds: list[int], per_trial: int | None, timing: bool,
                        beside: bool) -> "_InputBuilders | None":
        """Multi-GB problems: each host-resident seeded trial's inputs built by its own helper process
        (``reference_inputs``), as many side by side as cores and memory allow (the timing inputs, built meanwhile,
        and with ``beside`` the one device-resident trial built here at a time, counted). None where that does not pay
        (small inputs) or the input sizes are unknown (``trial_input_bytes``)."""
        if per_trial is None or per_trial < PARALLEL_INPUTS_MIN_BYTES or len(seeds) < 2:
            return None
        # Room for every trial's area and the timing area (on the CPU its inputs too), a trial being built here, plus,
        # per running helper, its own copy of the inputs.
        timing_copies = (2 if self.device_kind == "cpu" else 1) if timing else 0
        spare = available_memory() * 0.8 - per_trial * (len(seeds) + timing_copies + int(beside))
        width = int(min(len(seeds), max(1, (os.cpu_count() or 1) - 1), max(1, spare // per_trial)))
        if width < 2:
            return None
        return _InputBuilders(self.problem_path, self.cast_integers, seeds, per_trial, width)

    def _write(self, area: Area, inputs: list[Any]) -> list[dict[str, Any]]:
        try:
            return area.write(inputs)
        except TransportError as e:
            raise ReferenceFailed(f"the problem's inputs: {e}") from None

    def secret_inputs(self, seed: int) -> list[Any]:
        """Inputs from a secret seed (``_draw``)."""
        try:
            with self.seeding(seed):
                return self._draw(self.problem.get_inputs)
        except Exception as e:  # noqa: BLE001
            raise ReferenceFailed(_describe(e, "get_inputs() for a secret seed")) from None

    def secret_trial(self, kind: str, seed: int, area: Area) -> ReferenceTrial:
        """A hidden or post-timing trial for one answer: inputs from ``seed`` written into the answer's own
        writable ``area`` (only now, so the answer cannot see them earlier), and the reference's outputs on them."""
        inputs = self.secret_inputs(seed)
        entries = self._write(area, inputs)
        trial = self._forward(inputs, kind, seed, area.name, entries)
        del inputs
        self.release_cached_memory()  # the answer's process reads them next, onto the same device
        return trial

    def _forward_again(self, trial: ReferenceTrial) -> ReferenceTrial:
        """The reference's forward on a seeded trial's inputs again (from the device where they wait there, else from
        its sealed area), by the first forward's own code (``_forward``): the same seeding, so a reproducible
        reference gives the same outputs. A full device raises ``torch.OutOfMemoryError`` as it is."""
        if trial.device_inputs is not None:
            inputs = [self._copy(x) for x in trial.device_inputs]
        else:
            inputs = self.areas[str(trial.area)].read(trial.entries, self.device)
        return self._forward(inputs, trial.kind, trial.seed, str(trial.area), trial.entries, device_full_raises=True)

    def _forward(self, inputs: list[Any], kind: str, seed: int, area: str, entries: list[dict[str, Any]],
                 device_full_raises: bool = False) -> ReferenceTrial:
        """The reference's forward on ``inputs`` under KernelBench's seeding, as a trial; its failure is
        ``ReferenceFailed``, but with ``device_full_raises`` a full device raises ``torch.OutOfMemoryError`` as it is
        (a caller that can make room and try again)."""
        torch = self.torch
        try:
            with torch.no_grad(), self.seeding(seed):
                t0 = time.perf_counter()
                out = self.model(*inputs)
                self._sync()
                ms = (time.perf_counter() - t0) * 1e3
                # KernelBench runs the answer's forward right after the reference's, in one process, without
                # reseeding: the answer's starts from the state this forward left.
                rng = self.rng_state()
        except Exception as e:  # noqa: BLE001
            if device_full_raises and isinstance(e, torch.OutOfMemoryError):
                raise
            raise ReferenceFailed(_describe(e, f"the reference forward ({kind} trial, seed {seed})")) from None
        return self._trial(kind, seed, area, entries, out, ms, rng)

    def _trial(self, kind: str, seed: int, area: str, entries: list[dict[str, Any]], out: Any, ms: float | None,
               rng: dict[str, str | None]) -> ReferenceTrial:
        torch = self.torch
        if isinstance(out, (tuple, list)) and type(out) in (tuple, list):
            structure, outs = "sequence", list(out)
        else:
            structure, outs = "tensor", [out]
        outs = [o.detach() if isinstance(o, torch.Tensor) else torch.as_tensor(o) for o in outs]
        self.output_bytes = max(self.output_bytes, tensor_bytes(outs))
        return ReferenceTrial(kind, seed, area, entries, structure, outs, ms, rng, [str(o.device) for o in outs])

    # -- paired timing -------------------------------------------------------------------------------------------
    def _timing_clock(self, l2_flush_mib: int) -> timing.Clock:
        if self._clock is None:
            self._clock = timing.Clock(self.device_kind, l2_flush_mib)
        return self._clock

    @property
    def placements_due(self) -> bool:
        """The placement audit is yet to be tried: on CUDA, once per problem."""
        return self.device_kind == "cuda" and self.audit is not None and not self._placements_tried

    def audit_placements(self, protocol: timing.TimingProtocol) -> None:
        """Once per problem, on CUDA, in the first exclusive window: the reference's speed over placements of its
        buffers (``placement_audit``), into ``audit``. Skipped where the forward or its copies exceed the audit's
        budget; a card too full for the copies, or a forward failing on them, leaves it unmeasured."""
        if not self.placements_due:
            return
        self._placements_tried = True
        if not placement_audit.affordable(self._typical_forward_ms(),
                                          tensor_bytes(self.timing_inputs) + self.param_bytes):
            return
        try:
            # The generators as they were: a stochastic reference's forwards here must not move the state later
            # draws start from.
            with self.torch.no_grad(), self.torch.random.fork_rng(devices=[self.device.index or 0]):
                measured = placement_audit.measure(self.torch, self.model, self.timing_inputs,
                                                   self._timing_clock(protocol.l2_flush_mib), protocol)
        except Exception:  # noqa: BLE001 - the problem's own code on copies, or the card full: not measured
            return
        finally:
            self.torch.cuda.empty_cache()  # the copies' placements go back before the answer's first block
        self.audit = dataclasses.replace(self.audit, placement_ms=[round(ms, 5) for ms in measured.medians_ms],
                                         placement_spread=round(measured.spread, 5))

    def _typical_forward_ms(self) -> float | None:
        """The seeded forwards' median (the first one's time holds the kernels' and libraries' first-call costs)."""
        times = [t.forward_ms for t in self.seeded if t.forward_ms is not None]
        return statistics.median(times) if times else None

    def time_block(self, block: timing.TimingProtocol, l2_flush_mib: int, cpu_threads: int | None) -> timing.RawTimes:
        """One block of the eager reference's timing on the timing inputs, by the same ``Clock`` code that times
        answers and baselines (``timing.paired_blocks``). On the CPU with ``cpu_threads`` threads, as the
        baseline's child runs."""
        torch = self.torch
        clock = self._timing_clock(l2_flush_mib)
        threads = torch.get_num_threads()
        if self.device_kind == "cpu" and cpu_threads:
            torch.set_num_threads(cpu_threads)
        try:
            # Nothing after each call: the reference is trusted (no scrub), and an output aliasing the timing
            # inputs must not be overwritten.
            return clock.time_callable(self.model, self.timing_inputs, block)
        except Exception as e:  # noqa: BLE001 - the problem's own code
            raise ReferenceFailed(_describe(e, "the reference forward (paired timing)")) from None
        finally:
            torch.set_num_threads(threads)

    # -- judging ---------------------------------------------------------------------------------------------------
    def answer_outputs(self, metas: Any, area: Area, device: Any = None) -> list[Any]:
        """The answer's outputs, copied out of its output area onto this side's device or ``device`` (validated
        slots only)."""
        if not isinstance(metas, list) or not metas or len(metas) > 4096:
            raise TransportError("an output message without outputs")
        slots: list[Slot] = []
        end = 0
        for m in metas:
            slot = Slot.from_dict(m, area.size)
            if slot.offset < end:
                raise TransportError("overlapping output slots")
            end = slot.offset + slot.nbytes
            slots.append(slot)
        target = self.torch.device(device or self.device)
        if target.type != "cpu":
            return [area.read([{"tensor": slot.to_dict()}], target)[0] for slot in slots]
        return self._host_copies(area, slots)

    def _host_copies(self, area: Area, slots: list[Slot]) -> list[Any]:
        """Copies of the slots' bytes on the host, typed, in a buffer this side keeps for every answer to the problem:
        fresh multi-GB host memory costs its page faults each time (about 0.5 s per GiB), a copy into touched
        memory a tenth of that. Valid until the next call."""
        torch = self.torch
        need = sum(aligned(slot.nbytes) for slot in slots)
        if self._judge_buffer is None or self._judge_buffer.numel() < need:
            self._judge_buffer = None
            self._judge_buffer = torch.empty(need, dtype=torch.uint8)
        outs, position = [], 0
        for slot in slots:
            dtype = torch_dtype(slot.dtype)
            if not slot.nbytes:
                outs.append(torch.empty(slot.shape, dtype=dtype))
                continue
            flat = self._judge_buffer[position:position + slot.nbytes]
            flat.copy_(area.view(slot))
            outs.append(flat.view(dtype).reshape(slot.shape))
            position += aligned(slot.nbytes)
        return outs

    def output_capacity(self) -> int:
        return max(self.output_bytes, 1)

    def release_cached_memory(self) -> None:
        """After a secret trial's forward or an answer, on a problem with large inputs or outputs: the device memory
        cached for it (the secret inputs, the judged outputs) goes back."""
        if self.device_kind == "cuda" and max(self.input_bytes, self.output_bytes) >= LARGE_OUTPUT_BYTES:
            self.torch.cuda.empty_cache()

    def close(self) -> None:
        for area in self.areas.values():
            area.close()
        self.areas.clear()
        self.seeded.clear()
        self.timing_inputs = []
        self.timing_trial = None
        self._clock = None
        self._judge_buffer = None


class _InputBuilders:
    """Helper processes building seeded trials' inputs into their areas, ``width`` at a time: started at once,
    collected later (``collect``), stopped in any case (``stop``)."""

    def __init__(self, problem_path: Path, cast_integers: bool, seeds: list[int], per_trial: int,
                 width: int) -> None:
        self.problem_path = problem_path
        self.cast_integers = cast_integers
        self.width = width
        self.areas = [Area(f"seeded{i}", per_trial) for i in range(len(seeds))]
        self.pending = list(zip(self.areas, seeds))
        self.running: list[tuple[Area, subprocess.Popen[bytes]]] = []
        self.env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", PYTHONPATH=_PACKAGE_ROOT)
        self.done = False
        try:
            self._launch()
        except BaseException:  # a helper that could not start: none of the others is left running
            self.stop()
            raise

    def _launch(self) -> None:
        while self.pending and len(self.running) < self.width:
            area, seed = self.pending.pop(0)
            job = json.dumps({"problem": str(self.problem_path), "seed": seed, "fd": area.fd, "size": area.size,
                              "cast_integers": self.cast_integers})
            proc = subprocess.Popen([sys.executable, "-m", "workflow_scripts.evaluation.reference_inputs", job],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env,
                                    pass_fds=(area.fd,))
            self.running.append((area, proc))

    def collect(self) -> list[tuple[Area, list[dict[str, Any]]]]:
        """Every trial's area, sealed, with its entries, in seed order."""
        results: list[tuple[Area, list[dict[str, Any]]]] = []
        while self.running:
            area, proc = self.running.pop(0)
            out, err = proc.communicate()
            if proc.returncode != 0:
                raise ReferenceFailed(f"the reference failed in get_inputs() (seeded inputs helper): "
                                      f"{err.decode(errors='replace')[-2500:]}")
            results.append((area, json.loads(out.decode().strip().splitlines()[-1])))
            self._launch()
        for area, _ in results:
            area.seal()
        self.done = True
        return results

    def stop(self) -> None:
        """Kill helpers still running; without a full collect, the areas go too (nothing else holds them)."""
        for _, proc in self.running:
            proc.kill()
            proc.communicate()  # reaped, its pipes closed
        self.running.clear()
        if not self.done:
            for area in self.areas:
                area.close()


def _unlike(first: ReferenceTrial, again: ReferenceTrial, atol: float, rtol: float) -> str | None:
    """How recomputed outputs (``again``) differ from a trial's first (its structure, the shapes and dtypes it
    keeps, and its ``sample``), or None where they reproduce them: floating samples within the tolerance with NaN
    where NaN was, others equal."""
    import torch

    if again.structure != first.structure or len(again.outputs) != len(first.outputs):
        return "another structure or number of outputs"
    for i, (kept, new) in enumerate(zip(first.outputs, again.outputs)):
        if tuple(kept.shape) != tuple(new.shape) or kept.dtype != new.dtype:
            return f"output {i}: {tuple(new.shape)} {new.dtype}, first {tuple(kept.shape)} {kept.dtype}"
    for i, (kept, new) in enumerate(zip(first.sample or [], output_samples(again.outputs))):
        same = (torch.allclose(new, kept, atol=atol, rtol=rtol, equal_nan=True) if kept.dtype.is_floating_point
                else torch.equal(new, kept))
        if not same:
            return f"output {i}: {kept.numel()} sampled elements not within atol={atol}, rtol={rtol}"
    return None


def input_bytes_on_meta(problem: Any, device_kind: str, cast_integers: bool = False) -> int | None:
    """Bytes of one trial's inputs of a loaded problem module, from ``get_inputs()`` on the meta device (nothing
    allocated, no CUDA); None where the meta device cannot build them or they are not all tensors, and on a CPU-only
    host with too few cores for helpers, where the size would decide nothing (no input-building helpers, one answer
    process at a time; keeping trials "on the device" saves no host memory there) and the meta device's first use
    costs about two seconds."""
    import torch

    if device_kind != "cuda" and (os.cpu_count() or 1) < 3:
        return None
    try:
        with torch.device("meta"):
            probe = list(problem.get_inputs())
        if probe and all(isinstance(x, torch.Tensor) for x in probe):
            return tensor_bytes([as_input(x, "meta", cast_integers) for x in probe])
    except Exception:  # noqa: BLE001 - a problem whose inputs the meta device cannot build: built for real later
        pass
    return None


def available_memory() -> int:
    """Host bytes this process may still take: the host's ``MemAvailable``, bounded by what its memory cgroups
    allow (``memory_cap.cgroup_headroom``: a Slurm job's limit, a container's)."""
    from workflow_scripts.evaluation.memory_cap import cgroup_headroom

    available = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    headroom = cgroup_headroom()
    return available if headroom is None else min(available, headroom)


def _kinds(values: list[Any]) -> list[tuple[Any, ...]]:
    """What a timed call's inputs must keep whatever their values: each one's type, and a tensor's shape and dtype."""
    return [(type(v).__name__, tuple(v.shape), str(v.dtype)) if hasattr(v, "shape") and hasattr(v, "dtype")
            else (type(v).__name__, v) for v in values]


def bind_gpu(gpu: str | None) -> None:
    """Make the leased GPU this process's ``cuda:0`` (as each child sees it), before CUDA initialises here."""
    if gpu is None:
        return
    wanted = str(gpu)
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        if os.environ.get("CUDA_VISIBLE_DEVICES") != wanted:
            raise RuntimeError(f"this process already uses GPU {os.environ.get('CUDA_VISIBLE_DEVICES')!r}, "
                               f"the lease is for GPU {wanted!r}")
        return
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ["CUDA_VISIBLE_DEVICES"] = wanted


def _describe(e: BaseException, what: str) -> str:
    import traceback

    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    return f"the reference failed in {what}: {type(e).__name__}: {e}\n{tb[-2500:]}"
