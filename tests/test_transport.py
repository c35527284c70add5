"""The memory areas between the trusted side and an answer's process (workflow_scripts.evaluation.transport), and
the trusted side's seeded inputs (reference.py): sealed areas cannot be changed by anyone, forged slots are refused,
values keep their types, inputs built by parallel helpers are byte for byte the serial ones, and areas reach an
answer's process after it started."""

from __future__ import annotations

import contextlib
import mmap
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from workflow_scripts.evaluation import memory_plan, reference
from workflow_scripts.evaluation.protocol import kernelbench_trial_seeds
from workflow_scripts.evaluation.transport import Area, Slot, TransportError

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

DEMO_PROBLEM = Path(__file__).resolve().parents[1] / "demo" / "suite" / "KernelBench" / "level1" / "1_ScaledAdd.py"


def test_a_sealed_area_cannot_be_written_resized_or_mapped_writable() -> None:
    area = Area("t", 1024)
    entries = area.write([torch.arange(8, dtype=torch.float32), 3, (1, [2, 3])])
    area.seal()
    with pytest.raises(PermissionError):
        mmap.mmap(area.fd, area.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    with pytest.raises(PermissionError):
        os.pwrite(area.fd, b"x", 0)
    with pytest.raises(PermissionError):
        os.ftruncate(area.fd, 10)
    tensor, number, nested = area.read(entries, "cpu")
    assert torch.equal(tensor, torch.arange(8, dtype=torch.float32))
    assert number == 3 and nested == (1, [2, 3])  # tuples stay tuples, lists stay lists
    area.close()


@pytest.mark.parametrize("slot, message", [
    ({"offset": 1000, "shape": [8], "dtype": "float32", "nbytes": 32}, "outside"),
    ({"offset": 0, "shape": [8], "dtype": "float32", "nbytes": 31}, "not 8 x 4"),
    ({"offset": 0, "shape": [8], "dtype": "object", "nbytes": 32}, "dtype"),
    ({"offset": -1, "shape": [8], "dtype": "float32", "nbytes": 32}, "offset"),
    ({"offset": 0, "shape": [True], "dtype": "float32", "nbytes": 4}, "shape"),
])
def test_forged_slots_are_refused(slot: dict, message: str) -> None:
    with pytest.raises(TransportError, match=message):
        Slot.from_dict(slot, 1024)


def test_seeded_inputs_from_parallel_helpers_equal_the_serial_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    seeds = kernelbench_trial_seeds(42, 3)
    serial = reference.ReferenceSide(DEMO_PROBLEM, 42, "cpu", None, "pytorch_default", timing_seed=1234)
    serial.prepare(seeds, timing=True)
    monkeypatch.setattr(reference, "PARALLEL_INPUTS_MIN_BYTES", 0)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    helpers: list[object] = []
    popen = reference.subprocess.Popen

    def counting_popen(*args: object, **kwargs: object) -> object:
        helpers.append(args)
        return popen(*args, **kwargs)

    monkeypatch.setattr(reference.subprocess, "Popen", counting_popen)
    parallel = reference.ReferenceSide(DEMO_PROBLEM, 42, "cpu", None, "pytorch_default", timing_seed=1234)
    parallel.prepare(seeds, timing=True)  # the timing inputs prepared while the helpers run
    assert len(helpers) == len(seeds)  # one helper process per seeded trial
    assert "prepare_parallel_start_s" in parallel.prepare_phases
    for side in (serial, parallel):
        assert side.timing_trial is not None
    xs = serial.areas["timing"].read(serial.timing_entries, "cpu")
    ys = parallel.areas["timing"].read(parallel.timing_entries, "cpu")
    assert all(torch.equal(x, y) for x, y in zip(xs, ys, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(serial.timing_trial.outputs, parallel.timing_trial.outputs,
                                                 strict=True))
    for a, b in zip(serial.seeded, parallel.seeded, strict=True):
        xs = serial.areas[a.area].read(a.entries, "cpu")
        ys = parallel.areas[b.area].read(b.entries, "cpu")
        assert all(torch.equal(x, y) for x, y in zip(xs, ys, strict=True))
        assert all(torch.equal(x, y) for x, y in zip(a.outputs, b.outputs, strict=True))
    serial.close()
    parallel.close()


@pytest.mark.parametrize("kept_on_device", [0, 2])
def test_the_preparation_draws_seeded_inputs_outside_its_gpu_turns_with_the_same_numbers(
        monkeypatch: pytest.MonkeyPatch, kept_on_device: int) -> None:
    """The trusted side's GPU work runs in the job's turns (``ReferenceSide.device_work``), one per seeded trial's
    forward and a few more, not one for the whole preparation: every seeded trial's inputs are drawn on the host
    between turns (also those kept on the device beyond the host's share), where the job's lease may step aside for
    another job's timing. The numbers are the same, and the waits for the turns are counted apart from the phases."""
    seeds = kernelbench_trial_seeds(42, 3)
    if kept_on_device:  # the sizes are probed (on a host of 2 cores they are not: nothing to decide there)
        monkeypatch.setattr(os, "cpu_count", lambda: 8)
        monkeypatch.setattr(memory_plan, "host_input_trials", lambda trials, *_: trials - kept_on_device)
    whole = reference.ReferenceSide(DEMO_PROBLEM, 42, "cpu", None, "pytorch_default", timing_seed=1234)
    whole.prepare(seeds, timing=True)
    in_turn = [False]
    turns: list[str] = []
    draws_in_turn: list[bool] = []

    @contextlib.contextmanager
    def device_turn() -> Iterator[None]:
        assert not in_turn[0]  # turns never nest
        time.sleep(0.2)  # the turn comes after another job's timing
        in_turn[0] = True
        turns.append("turn")
        try:
            yield
        finally:
            in_turn[0] = False

    seeded_inputs = reference.ReferenceSide._seeded_inputs

    def recording_draw(self: reference.ReferenceSide, seed: int, device: Any) -> list[Any]:
        draws_in_turn.append(in_turn[0])
        return seeded_inputs(self, seed, device)

    monkeypatch.setattr(reference.ReferenceSide, "_seeded_inputs", recording_draw)
    split = reference.ReferenceSide(DEMO_PROBLEM, 42, "cpu", None, "pytorch_default", timing_seed=1234,
                                    device_turn=device_turn)
    split.prepare(seeds, timing=True)
    assert draws_in_turn == [False] * len(seeds)  # every seeded trial's inputs drawn on the host, in no turn
    # The model's build, a turn per seeded trial (and per trial kept on the device, for its upload), the audit's, the
    # timing inputs' and forwards', the builder's check.
    assert len(turns) == 1 + len(seeds) + kept_on_device + 3
    assert split.turn_wait_s >= 0.2 * len(turns) and split.prepare_phases["prepare_turn_wait_s"] == split.turn_wait_s
    assert split.prepare_phases["prepare_seeded_inputs_s"] < 0.2  # not the 0.2 s waited for each trial's turn
    assert split.prepare_phases["prepare_device_inputs_s"] < 0.2
    for a, b in zip(whole.seeded, split.seeded, strict=True):
        assert a.placement == b.placement and (a.device_inputs is None) == (b.device_inputs is None)
        assert all(torch.equal(x, y) for x, y in zip(a.outputs, b.outputs, strict=True))
    assert sum(t.device_inputs is not None for t in split.seeded) == kept_on_device
    assert whole.timing_trial is not None and split.timing_trial is not None
    assert all(torch.equal(x, y) for x, y in zip(whole.timing_trial.outputs, split.timing_trial.outputs, strict=True))
    assert whole.audit == split.audit and split.fresh_source == whole.fresh_source
    whole.close()
    split.close()


def test_the_first_answers_child_starts_before_the_problem_is_prepared(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    """The first child is running (its interpreter, torch and Triton loading) while the trusted side builds the
    inputs; it gets its areas over its socket afterwards and is judged as before, and its setup is recorded."""
    from workflow_scripts.core.statuses import Status
    from workflow_scripts.evaluation import answer

    seen: list[int | None] = []
    prepare = reference.ReferenceSide.prepare

    def watching_prepare(self: reference.ReferenceSide, *args: object, **kwargs: object) -> None:
        seen.extend(slot.child.returncode for slot in evaluators[0]._slots)  # None: started and running
        prepare(self, *args, **kwargs)

    evaluators: list[answer.ProblemEvaluator] = []
    init = answer.ProblemEvaluator.__init__

    def remember(self: answer.ProblemEvaluator, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)
        evaluators.append(self)

    monkeypatch.setattr(reference.ReferenceSide, "prepare", watching_prepare)
    monkeypatch.setattr(answer.ProblemEvaluator, "__init__", remember)
    (tmp_path / "same.py").write_text(DEMO_PROBLEM.read_text() + "\nModelNew = Model\n")
    cfg = answer.EvalConfig(device="cpu", time_answer=False, run_static=False, require_triton=False)
    results = answer.evaluate_answers(DEMO_PROBLEM, [tmp_path / "same.py", tmp_path / "same.py"], cfg)
    assert seen == [None]
    assert [r.status for r in results] == [Status.CORRECT.value] * 2
    for r in results:
        assert r.phases_s["child_startup_s"] > 0 and r.phases_s["slot_wait_s"] >= 0
        assert r.phases_s["child_areas_wait_s"] >= 0


def test_areas_handed_over_later_widen_the_cap_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Polling allows for every area and stops counting it; a cgroup's limits (v1: memory and memory+swap) grow
    by the areas the child may touch first only."""
    from workflow_scripts.evaluation import memory_cap

    inputs, outputs = os.memfd_create("inputs"), os.memfd_create("outputs")
    os.ftruncate(inputs, 64 << 20)
    os.ftruncate(outputs, 16 << 20)
    try:
        watch = memory_cap.TreeMemoryCap("watch", 1 << 30)
        watch.add_areas((inputs, outputs), (outputs,))
        assert watch.limit_bytes == (1 << 30) + (80 << 20)
        st = os.fstat(inputs)
        assert (st.st_dev, st.st_ino) in watch._exempt
        monkeypatch.setattr(memory_cap, "cgroup_root", lambda: memory_cap.CgroupRoot(1, tmp_path))
        cgroup = memory_cap.TreeMemoryCap("cgroup", 1 << 30)
        assert cgroup.cgroup is not None
        (cgroup.cgroup / "memory.memsw.limit_in_bytes").write_text(str(1 << 30))
        cgroup.add_areas((inputs, outputs), (outputs,))
        for name in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            assert int((cgroup.cgroup / name).read_text()) == (1 << 30) + (16 << 20) == cgroup.limit_bytes
    finally:
        os.close(inputs)
        os.close(outputs)


def test_a_broken_reference_stays_a_reference_error_where_no_child_can_start(monkeypatch: pytest.MonkeyPatch,
                                                                             tmp_path: Path) -> None:
    """The first child starts before the reference side: when the sandbox refuses it, a problem whose Model fails
    is still the problem's fault (reference_error), as it was when children started after the reference."""
    from workflow_scripts.core.statuses import Status
    from workflow_scripts.evaluation import answer, sandbox

    def refused(self: sandbox.ChildProcess) -> None:
        raise sandbox.SandboxUnavailable("refused for the test")

    monkeypatch.setattr(sandbox.ChildProcess, "start", refused)
    problem = tmp_path / "1_Broken.py"
    problem.write_text(DEMO_PROBLEM.read_text().replace("self.alpha = alpha", "raise RuntimeError('broken model')"))
    (tmp_path / "same.py").write_text(DEMO_PROBLEM.read_text() + "\nModelNew = Model\n")
    cfg = answer.EvalConfig(device="cpu", time_answer=False, run_static=False, require_triton=False)
    [result] = answer.evaluate_answers(problem, [tmp_path / "same.py"], cfg)
    assert result.status == Status.REFERENCE_ERROR.value and "broken model" in (result.error or "")


def test_a_helper_that_cannot_start_leaves_none_running(monkeypatch: pytest.MonkeyPatch) -> None:
    popen = reference.subprocess.Popen
    started: list[object] = []

    def second_fails(*args: object, **kwargs: object) -> object:
        if started:
            raise OSError("no more processes")
        started.append(popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(reference.subprocess, "Popen", second_fails)
    with pytest.raises(OSError, match="no more processes"):
        reference._InputBuilders(DEMO_PROBLEM, False, kernelbench_trial_seeds(42, 3), 1 << 20, 3)
    assert started and started[0].returncode is not None  # killed and reaped


def test_the_host_keeps_as_many_seeded_trials_as_fit_its_share() -> None:
    gib = 1 << 30
    assert memory_plan.host_input_trials(5, 6 * gib, True, 120 * gib) == 5  # L1/19 on a 128 GiB host: all sealed
    assert memory_plan.host_input_trials(5, 8 * gib, True, 120 * gib) == 5  # L1/47
    assert memory_plan.host_input_trials(5, 16 * gib, True, 120 * gib) == 2  # L1/45: three wait on the device
    assert memory_plan.host_input_trials(5, 16 * gib, False, 120 * gib) == 3  # no timing area beside them
    assert memory_plan.host_input_trials(5, 16 * gib, True, 20 * gib) == 0
    assert memory_plan.host_input_trials(5, 0, True, 0) == 0  # nothing available: nothing sealed on the host


SPILL_ANSWERS = {
    "same": "\nModelNew = Model\n",
    # Right on the first three calls, wrong from the fourth on: the fourth and fifth seeded trials wait on the device.
    "late_wrong": ("\nclass ModelNew(Model):\n    calls = 0\n    def forward(self, a, b):\n"
                   "        ModelNew.calls += 1\n        out = super().forward(a, b)\n"
                   "        return out if ModelNew.calls <= 3 else out + 1.0\n"),
    # Changes its inputs in place after computing its output: the next answer must still get pristine inputs.
    "mutates": ("\nclass ModelNew(Model):\n    def forward(self, a, b):\n        out = super().forward(a, b)\n"
                "        a.zero_()\n        return out\n"),
}


def test_seeded_trials_beyond_the_host_share_wait_on_the_device_with_the_same_verdicts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where five sealed input copies would not fit the host (L1/45), trials beyond memory_plan.HOST_INPUT_SHARE keep their
    inputs on the trusted side's device and each answer gets them through its own input area when the trial starts:
    every verdict is what the all-sealed run gives, a later trial's outputs are really judged, and an answer that
    changes its inputs changes nothing another answer reads."""
    from workflow_scripts.evaluation import answer

    paths = []
    for name, code in SPILL_ANSWERS.items():
        paths.append(tmp_path / f"{name}.py")
        paths[-1].write_text(DEMO_PROBLEM.read_text() + code)
    paths.append(paths[0])  # the honest answer again, after the one that changed its inputs
    cfg = answer.EvalConfig(device=os.environ.get("KB_TEST_DEVICE", "cpu"), time_answer=False, run_static=False,
                            require_triton=False, hidden_trials=0, post_timing_check=False)
    sealed = [(r.status, r.flags) for r in answer.evaluate_answers(DEMO_PROBLEM, paths, cfg)]
    assert [s for s, _ in sealed] == ["correct", "mismatch", "rejected_runtime", "correct"]

    placed: list[tuple[list[str], list[bool]]] = []  # (sealed seeded areas, which trials wait on the device)
    prepare = reference.ReferenceSide.prepare

    def keeping_prepare(self: reference.ReferenceSide, *args: object, **kwargs: object) -> None:
        prepare(self, *args, **kwargs)
        placed.append((sorted(n for n in self.areas if n.startswith("seeded")),
                       [t.device_inputs is not None for t in self.seeded]))

    monkeypatch.setattr(os, "cpu_count", lambda: 8)  # the meta probe runs on small machines too
    monkeypatch.setattr(memory_plan, "host_input_trials", lambda trials, *_: 2)
    monkeypatch.setattr(reference.ReferenceSide, "prepare", keeping_prepare)
    spilled = answer.evaluate_answers(DEMO_PROBLEM, paths, cfg)
    assert [(r.status, r.flags) for r in spilled] == sealed
    late = spilled[1]
    assert [t["verdict"] for t in late.trials] == ["ok", "ok", "ok", "value_mismatch"]  # the fourth trial failed
    assert placed == [(["seeded0", "seeded1"], [False, False, True, True, True])]
    assert "prepare_device_inputs_s" in spilled[0].phases_s


def _placements(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each prepared reference side's seeded output placements, recorded as ``prepare`` ends."""
    placed: list[list[str]] = []
    prepare = reference.ReferenceSide.prepare

    def keeping_prepare(self: reference.ReferenceSide, *args: object, **kwargs: object) -> None:
        prepare(self, *args, **kwargs)
        placed.append([t.placement for t in self.seeded])

    monkeypatch.setattr(reference.ReferenceSide, "prepare", keeping_prepare)
    return placed


def test_seeded_outputs_the_memory_plan_keeps_nowhere_are_recomputed_with_the_same_verdicts(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Where neither the device nor the host holds every seeded trial's reference outputs (L1/38 on an 80 GB card),
    the trials the plan keeps nowhere are recomputed for each answer: every verdict is the all-kept run's, a
    recomputed trial's outputs are really judged (the fourth trial fails the late-wrong answer), and an answer that
    changes its inputs changes nothing a recomputation reads."""
    from workflow_scripts.evaluation import answer

    paths = []
    for name, code in SPILL_ANSWERS.items():
        paths.append(tmp_path / f"{name}.py")
        paths[-1].write_text(DEMO_PROBLEM.read_text() + code)
    paths.append(paths[0])
    cfg = answer.EvalConfig(device=os.environ.get("KB_TEST_DEVICE", "cpu"), time_answer=False, run_static=False,
                            require_triton=False, hidden_trials=0, post_timing_check=False)
    placed = _placements(monkeypatch)
    kept = answer.evaluate_answers(DEMO_PROBLEM, paths, cfg)
    assert [r.status for r in kept] == ["correct", "mismatch", "rejected_runtime", "correct"]
    assert placed == [["device"] * 5]  # a small problem: every trial's outputs kept where the reference ran

    monkeypatch.setattr(memory_plan, "plan_outputs", lambda _sizes, trials, *_: memory_plan.OutputPlan(trials, 1, 1))
    recomputed = answer.evaluate_answers(DEMO_PROBLEM, paths, cfg)
    assert [(r.status, r.flags) for r in recomputed] == [(r.status, r.flags) for r in kept]
    assert placed[1] == ["device", "host", "recompute", "recompute", "recompute"]
    late = recomputed[1]
    assert [t["verdict"] for t in late.trials] == ["ok", "ok", "ok", "value_mismatch"]  # a recomputed trial failed
    assert recomputed[1].problem_audit == kept[1].problem_audit  # the audit taken as the trials went


COUNTING_PROBLEM = '''import torch
import torch.nn as nn

CALLS = [0]


class Model(nn.Module):
    """Each forward scales by how many forwards its process has run: the same outputs only in the same order."""

    def forward(self, x):
        CALLS[0] += 1
        return x * CALLS[0]


def get_inputs():
    return [torch.rand(64)]


def get_init_inputs():
    return []
'''


def _own_answer_judge(tmp_path: Path, source: str) -> Callable[[], Any]:
    """A problem from ``source`` and its own Model as the answer, judged on the CPU without timing each call."""
    from workflow_scripts.evaluation import answer

    problem = tmp_path / "problem.py"
    problem.write_text(source)
    own = tmp_path / "own.py"
    own.write_text(source + "\nModelNew = Model\n")
    cfg = answer.EvalConfig(device="cpu", time_answer=False, run_static=False, require_triton=False,
                            hidden_trials=0, post_timing_check=False)
    return lambda: answer.evaluate_answer(problem, own, cfg)


def test_a_reference_that_does_not_reproduce_its_outputs_is_not_recomputed_into_a_verdict(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A recomputed trial is checked against a sample of the reference's first outputs on it: a reference whose
    outputs depend on its own history judges its own code correct while every output is kept, and leaves the answer
    unjudged (reference_error, saying why) when an output had to be recomputed."""
    judge = _own_answer_judge(tmp_path, COUNTING_PROBLEM)
    assert judge().status == "correct"
    monkeypatch.setattr(memory_plan, "plan_outputs", lambda _sizes, trials, *_: memory_plan.OutputPlan(trials, 2, 0))
    result = judge()
    assert result.status == "reference_error"
    assert "does not reproduce its own outputs" in (result.error or "")
    assert [t["verdict"] for t in result.trials] == ["ok", "ok"]  # judged up to the first recomputed trial


NAN_PROBLEM = COUNTING_PROBLEM.replace("CALLS[0] += 1\n        return x * CALLS[0]",
                                       "return torch.where(x > 0.5, x, torch.full_like(x, float('nan')))")


def test_a_reference_with_nan_outputs_is_recomputed_into_the_kept_verdict(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """NaN where the reference's first outputs had NaN is a reproduction (KernelBench's own check then fails the
    answer, as it does where the outputs were kept): the same verdict either way, never reference_error."""
    assert "nan" in NAN_PROBLEM  # the substitution took
    judge = _own_answer_judge(tmp_path, NAN_PROBLEM)
    kept = judge()
    # Nothing kept: the first trial, the one KernelBench's check fails, is itself recomputed.
    monkeypatch.setattr(memory_plan, "plan_outputs", lambda _sizes, trials, *_: memory_plan.OutputPlan(trials, 0, 0))
    placed = _placements(monkeypatch)
    recomputed = judge()
    assert placed == [["recompute"] * 5]
    assert kept.status == recomputed.status == "mismatch", (kept.error, recomputed.error)
    assert "NaN" in (recomputed.error or "")
