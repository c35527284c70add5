"""The trusted side's checks on timed calls (workflow_scripts/evaluation/protocol.py, TimedChecks): a secretly
chosen set of timed calls has its outputs judged against the reference's on the timing inputs, and every timed
call's reported time is compared with the interval the trusted side observed around it. Real children, CPU
interpreter (Triton with TRITON_INTERPRET=1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from workflow_scripts.core.statuses import Status
from workflow_scripts.evaluation import protocol, sandbox
from workflow_scripts.evaluation.answer import EvalConfig, evaluate_answer
from workflow_scripts.evaluation.protocol import TimedChecks

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

HERE = Path(__file__).resolve().parent
ADD = HERE / "cheats" / "problems" / "1_ElementwiseAdd.py"
HONEST_ADD = HERE / "cheats" / "answers" / "honest" / "add_triton.py"
TRITON_ADD = HONEST_ADD.read_text().split("class ModelNew")[0]

# Right on the 6 correctness calls, the warm-up call and the post-timing call; on the 5 timed calls in between
# (calls 8 to 12 with _config's protocol) it returns zeros after a token launch. The hidden and post-timing checks
# cannot see it: the post-timing check even reuses the timed tensors' storage.
SKIPS_WORK_WHEN_TIMED = TRITON_ADD + '''
class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, a, b):
        self.calls += 1
        if 8 <= self.calls <= 12:
            triton_add(a[:1], b[:1])
            return torch.zeros_like(a)
        return triton_add(a, b)
'''

# An input builder that needs one of the problem's classes: it cannot run without them in an answer's process.
ADD_INPUTS_FROM_A_CLASS = ADD.read_text().replace("def get_inputs():", '''class Sizes:
    rows, cols = rows, cols


def get_inputs():
    assert (Sizes.rows, Sizes.cols) == (rows, cols)''')

# Honest, slow work (a sleep stands for a slow kernel): with the under-reporting child
# (tests/fixtures/underreporting_child.py) each call claims a hundredth of its time.
SLOW_ADD = TRITON_ADD + '''
import time


class ModelNew(nn.Module):
    def forward(self, a, b):
        time.sleep(0.5)
        return triton_add(a, b)
'''


def _config(**overrides) -> EvalConfig:
    base = dict(device="cpu", run_static=False, timing_trials=4, warmup=1, paired_block=0, timeout_s=240)
    return EvalConfig(**{**base, **overrides})


def test_an_answer_that_skips_work_only_when_timed_is_caught_by_the_timed_output_checks(tmp_path: Path) -> None:
    answer = tmp_path / "answer.py"
    answer.write_text(SKIPS_WORK_WHEN_TIMED)
    res = evaluate_answer(ADD, answer, _config())
    checks = res.timing_raw["timed_checks"]
    assert res.status == Status.REJECTED_RUNTIME.value, (res.status, res.flags, res.error)
    assert "timed_output_mismatch" in res.flags
    # the correctness trials, the hidden trial and the post-timing check all passed: only the timed calls lied
    assert all(t["verdict"] == "ok" for t in res.trials), res.trials
    assert "post_timing_mismatch" not in res.flags and "hidden_input_mismatch" not in res.flags
    assert checks["mismatches"] >= 1 and "value_mismatch" in checks["detail"]


def test_an_honest_answer_has_every_small_timed_output_checked_and_its_times_confirmed(tmp_path: Path) -> None:
    res = evaluate_answer(ADD, HONEST_ADD, _config())
    checks = res.timing_raw["timed_checks"]
    assert res.status == Status.CORRECT.value, (res.status, res.flags, res.error)
    assert res.flags == []
    # 4 kept trials + 1 discarded; outputs of 32 KiB: every call is checked
    assert checks["calls"] == 5 and checks["checked"] == 5 and checks["mismatches"] == 0
    assert len(checks["observed_ms"]) == 4 and not checks["unconfirmed"]
    assert all(o >= r for o, r in zip(checks["observed_ms"], checks["reported_ms"]))


def test_every_timed_call_gets_inputs_of_its_own_where_the_input_builder_runs_alone(tmp_path: Path) -> None:
    """An answer that counts the distinct input values it is called with: correct only while every call so far had
    values of its own (else zeros). Fresh inputs for every timed call keep it correct; the problem whose input builder
    needs its classes keeps KernelBench's fixed timing inputs, says why, and the repeat is caught."""
    answer = tmp_path / "answer.py"
    answer.write_text(TRITON_ADD + '''
class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.seen = set()

    def forward(self, a, b):
        key = (float(a.sum()), float(b.sum()))
        repeat = key in self.seen
        self.seen.add(key)
        out = triton_add(a, b)
        return torch.zeros_like(out) if repeat and len(self.seen) >= 7 else out
''')
    res = evaluate_answer(ADD, answer, _config())
    checks = res.timing_raw["timed_checks"]
    assert res.status == Status.CORRECT.value, (res.status, res.flags, res.error)
    assert checks["fresh_inputs"] and checks["fixed_inputs_reason"] is None
    assert checks["checked"] == 5 and len(checks["checked_seeds"]) == 5 and len(set(checks["checked_seeds"])) == 5
    problem = tmp_path / "1_AddInputsFromAClass.py"
    problem.write_text(ADD_INPUTS_FROM_A_CLASS)
    fixed = evaluate_answer(problem, answer, _config())
    checks = fixed.timing_raw["timed_checks"]
    assert not checks["fresh_inputs"] and "NameError" in checks["fixed_inputs_reason"], checks
    assert "timed_output_mismatch" in fixed.flags, (fixed.status, fixed.flags)


DROPOUT = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def forward(self, x):
        return F.dropout(x, p=0.5, training=True)


def get_inputs():
    return [torch.rand(64, 128)]


def get_init_inputs():
    return []
'''


def test_a_stochastic_reference_has_its_timed_calls_checked_from_the_draws_generator_state(tmp_path: Path) -> None:
    """Dropout in training mode: the answer's timed call and this side's forward both start from the generators'
    state the call's draw left, so an answer that draws as the reference does matches on every checked call, and one
    that draws its mask elsewhere in the stream does not (no correctness trial here: under KernelBench's order no
    answer to a stochastic reference passes them, so this is the only place its outputs can be compared)."""
    problem = tmp_path / "8_Dropout.py"
    problem.write_text(DROPOUT)
    config = _config(correctness_trials=0, hidden_trials=0, require_triton=False, post_timing_check=False)
    same, shifted = tmp_path / "same.py", tmp_path / "shifted.py"
    same.write_text(DROPOUT.replace("class Model(", "class ModelNew("))
    shifted.write_text(DROPOUT.replace("class Model(", "class ModelNew(").replace(
        "        return F.dropout", "        torch.rand(1)\n        return F.dropout"))
    # With no correctness trial the status itself says nothing (no trial passed); the timed checks do.
    res = evaluate_answer(problem, same, config)
    checks = res.timing_raw["timed_checks"]
    assert not checks["comparable"] and checks["fresh_inputs"], checks
    assert checks["checked"] == 5 and checks["mismatches"] == 0 and res.flags == [], (res.flags, checks)
    res = evaluate_answer(problem, shifted, config)
    assert "timed_output_mismatch" in res.flags, (res.status, res.flags, res.timing_raw["timed_checks"])


def test_the_input_builder_is_the_problem_file_without_its_classes() -> None:
    from workflow_scripts.suite.problem_module import input_builder_source

    source = input_builder_source(ADD_INPUTS_FROM_A_CLASS + "\nif __name__ == '__main__':\n    print(get_inputs())\n")
    assert "def get_inputs" in source and "import torch" in source and "rows = 64" in source
    assert "class " not in source and "__main__" not in source
    with pytest.raises(ValueError, match="get_inputs"):
        input_builder_source("import torch\n\nclass Model:\n    pass\n")


def test_under_reported_times_do_not_fit_the_intervals_the_trusted_side_observed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answer = tmp_path / "answer.py"
    answer.write_text(SLOW_ADD)
    honest = evaluate_answer(ADD, answer, _config())
    assert honest.status == Status.CORRECT.value and "timing_unconfirmed" not in honest.flags, honest.flags
    monkeypatch.setattr(sandbox, "CHILD_MODULE", "tests.fixtures.underreporting_child")
    res = evaluate_answer(ADD, answer, _config())
    checks = res.timing_raw["timed_checks"]
    assert res.status == Status.REJECTED_RUNTIME.value and "timing_unconfirmed" in res.flags, (res.flags, checks)
    # each call reports about 5 ms of its 500 ms
    assert checks["excess_ms_median"] > 400 and max(checks["reported_ms"]) < 100


def test_timed_output_checks_are_a_secret_sample_bounded_by_bytes() -> None:
    small = TimedChecks.choose(101, 4096, comparable=True)
    assert small.chosen == frozenset(range(101))
    big = TimedChecks.choose(101, protocol.TIMED_CHECK_BYTES // 3, comparable=True)
    assert len(big.chosen) == 3 and big.chosen <= set(range(101))
    huge = TimedChecks.choose(101, 4 * protocol.TIMED_CHECK_BYTES, comparable=True)
    assert len(huge.chosen) == 1  # at least one call per answer
    draws = {TimedChecks.choose(101, protocol.TIMED_CHECK_BYTES // 3, comparable=True).chosen for _ in range(20)}
    assert len(draws) > 1  # drawn anew for every answer
    assert TimedChecks.choose(101, 4096, comparable=False).chosen == frozenset()  # stochastic, fixed inputs
    # Fresh inputs: each check costs a draw and a forward on this side, so at most TIMED_CHECK_CALLS, stochastic
    # references included (the answer's call and this side's forward start from the draw's generator state).
    for comparable in (True, False):
        fresh = TimedChecks.choose(101, 4096, comparable=comparable, fresh=True)
        assert len(fresh.chosen) == protocol.TIMED_CHECK_CALLS
    seeds = {TimedChecks.choose(101, 4096, comparable=True, fresh=True).next_seed() for _ in range(20)}
    assert len(seeds) == 20 and TimedChecks.choose(101, 4096, comparable=True).next_seed() is None


@pytest.mark.parametrize("observed, reported, output_gib, unconfirmed", [
    ([1.6, 1.7, 1.5], [1.0, 1.0, 1.0], 0, False),     # an honest trial's overhead (H200: 0.6-1.6 ms)
    ([4.5, 4.8, 4.4], [1.0, 1.0, 1.0], 0, False),     # a busy host's Python work in the interval
    ([12.0, 12.5, 11.8], [1.0, 1.0, 1.0], 0, True),   # 11 ms of each call unaccounted for
    ([0.5, 0.5, 0.5], [1.0, 1.0, 1.0], 0, True),      # reported longer than the interval it happened in
    ([10.3, 10.4, 10.2], [3.2, 3.2, 3.2], 6, False),  # a 6 GiB output's scrub lengthens the interval (H200: 2.1 ms)
    ([10.3, 10.4, 10.2], [3.2, 3.2, 3.2], 0, True),   # the same excess with a small output
    ([40.0, 41.0, 39.0], [4.0, 4.0, 4.0], 6, True),   # a 10x forged report on a 6 GiB problem
    ([21.0, 21.5, 20.5], [10.0, 10.0, 10.0], 0, True),  # a 10 ms call reporting half its time
])
def test_reported_times_must_fit_the_observed_intervals(observed, reported, output_gib, unconfirmed) -> None:
    checks = TimedChecks(frozenset(), True, output_gib << 30)
    for o, r in zip(observed, reported):
        checks.observe(r, o)
    assert checks.unconfirmed("cuda") is unconfirmed


@pytest.mark.parametrize("probe_ms, observed, unconfirmed", [
    (None, 14.5, False),  # 4.5 ms of a 10 ms call hidden: inside the absolute band (5 ms + 50%)
    (1.2, 14.5, True),    # the loop itself costs 1.2 ms: 3.3 ms beyond it > 1 ms + 15% of 10 ms
    (1.2, 12.0, False),   # an honest call: 0.8 ms beyond the probe's excess
    (30.0, 25.0, True),   # a probe slowed to 30 ms: the absolute band (10 ms) still bounds the excess
])
def test_the_overhead_probe_makes_the_bound_relative(probe_ms, observed, unconfirmed) -> None:
    checks = TimedChecks(frozenset(), True, 0, probe_excess_ms=probe_ms)
    for _ in range(5):
        checks.observe(10.0, observed)
    assert checks.unconfirmed("cuda") is unconfirmed
    assert checks.excess_limit_ms("cuda") <= 10.0  # never looser than 5 ms + 50% of 10 ms
    assert checks.to_dict("cuda")["probe_excess_ms"] == probe_ms


def test_a_fresh_draw_inside_the_interval_is_allowed_for_per_gib_of_input() -> None:
    """With fresh inputs each observed interval also holds the call's draw: 4 GiB of inputs drawn in 10 ms fit the
    band; the same excess without a draw (fixed inputs) does not."""
    drawn = TimedChecks(frozenset(), True, 0, fresh=True, input_bytes=4 << 30)
    fixed = TimedChecks(frozenset(), True, 0)
    for checks in (drawn, fixed):
        for _ in range(3):
            checks.observe(3.0, 3.0 + 1.5 + 10.0)
    assert not drawn.unconfirmed("cuda") and fixed.unconfirmed("cuda")
    assert TimedChecks.choose(101, 4096, comparable=True, input_bytes=4 << 30).input_bytes == 0  # only when drawn


def test_a_full_device_while_judging_a_timed_output_falls_back_to_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """The answer's process may hold most of the device: judging a timed call's outputs there can run out of
    memory, which must cost the check its speed, never the job (the evaluation of every answer of the problem)."""
    import torch

    from workflow_scripts.evaluation.session import AnswerSession

    judge = AnswerSession._judge
    devices = []

    def judge_on_a_full_device(self, rt, am, device=None):
        devices.append(device)
        if rt.kind in ("timing", "timed") and device is None:
            raise torch.OutOfMemoryError("CUDA out of memory (stand-in)")
        return judge(self, rt, am, device)

    monkeypatch.setattr(AnswerSession, "_judge", judge_on_a_full_device)
    res = evaluate_answer(ADD, HONEST_ADD, _config())
    checks = res.timing_raw["timed_checks"]
    assert res.status == Status.CORRECT.value and checks["checked"] == 5 and checks["mismatches"] == 0
    assert devices.count(torch.device("cpu")) == 5  # each checked call judged again, on the host
