"""Regression suite: honest answers pass, cheating answers are caught, failure modes get their status.

Every answer under ``tests/cheats/answers`` is evaluated once per session on the CPU (``TRITON_INTERPRET=1``),
in parallel, by the real evaluator (children, isolation, parent-side verdicts). Cheats are evaluated with static
analysis OFF, so the run-time layer is shown to catch each of them on its own; a separate test checks what the
static analyzer (when present) adds. GPU-only cheats are marked ``gpu`` and skipped without CUDA.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from workflow_scripts.evaluation.answer import EvalConfig, EvalResult, evaluate_answer
from workflow_scripts.evaluation.verdict import run_static_analysis
from workflow_scripts.core.statuses import Status

pytestmark = pytest.mark.integration  # starts processes (evaluator children, the Snakemake CLI)

HERE = Path(__file__).resolve().parent / "cheats"
PROBLEMS = HERE / "problems"
ANSWERS = HERE / "answers"

ADD = PROBLEMS / "1_ElementwiseAdd.py"
ROWSUM = PROBLEMS / "2_RowSum.py"
MATMUL = PROBLEMS / "3_Matmul64.py"
CE = PROBLEMS / "4_CrossEntropyIntTargets.py"
LINEAR = PROBLEMS / "5_LinearReLU.py"
MIXED = PROBLEMS / "6_MixedDtypes.py"
SOFTMAX = PROBLEMS / "7_WideSoftmax.py"
VERY_WIDE_SOFTMAX = PROBLEMS / "8_VeryWideSoftmax.py"  # degenerate: zeros pass the tolerance


def _cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


HAS_CUDA = _cuda()
# KB_TEST_DEVICE=cuda runs the whole suite on the GPU (compiled Triton, CUDA events); default: CPU interpreter.
DEVICE = os.environ.get("KB_TEST_DEVICE", "cpu")
ON_GPU = DEVICE == "cuda" and HAS_CUDA
WRITE_TARGET = Path("/tmp/kb_cheat_written_outside.txt")


@dataclass(frozen=True)
class Case:
    answer: str  # path under answers/
    problem: Path
    statuses: tuple[Status, ...]  # acceptable statuses
    flags: tuple[str, ...] = ()  # flags (prefix match) that must be present
    gpu: bool = False
    static: bool = False  # run with static analysis (the pipeline's default)


HONEST = [
    Case("honest/add_triton.py", ADD, (Status.CORRECT,), static=True),
    Case("honest/add_triton_dynamo_disabled.py", ADD, (Status.CORRECT,), static=True),
    Case("honest/add_triton_module_from_source.py", ADD, (Status.CORRECT,), static=True),
    Case("honest/add_hybrid.py", ADD, (Status.CORRECT,), static=True),
    Case("honest/add_autotune_stdlib.py", ADD, (Status.CORRECT,), static=True),
    Case("honest/rowsum_triton.py", ROWSUM, (Status.CORRECT,), static=True),
    Case("honest/matmul_triton.py", MATMUL, (Status.CORRECT,), static=True),
    Case("honest/cross_entropy_hybrid.py", CE, (Status.CORRECT,), static=True),
    Case("honest/linear_relu_hybrid.py", LINEAR, (Status.CORRECT,), static=True),
    Case("honest/mixed_dtypes_triton.py", MIXED, (Status.CORRECT,), static=True),
    Case("honest/softmax_triton.py", VERY_WIDE_SOFTMAX, (Status.CORRECT,), static=True),
]

RR = Status.REJECTED_RUNTIME
CHEATS = [
    Case("cheats/add_stale_buffer.py", ADD, (Status.MISMATCH,)),
    Case("cheats/add_stale_empty_gpu.py", ADD, (Status.MISMATCH,), gpu=True),
    Case("cheats/add_side_stream_gpu.py", ADD, (RR, Status.MISMATCH), gpu=True),
    Case("cheats/add_memo_data_ptr.py", ADD, (RR, Status.MISMATCH)),
    Case("cheats/rowsum_memo_shape.py", ROWSUM, (Status.MISMATCH,)),
    Case("cheats/add_mutate_inputs.py", ADD, (RR,), ("inputs_mutated",)),
    Case("cheats/add_alias_input.py", ADD, (RR,), ("inputs_mutated", "output_aliases_input")),
    Case("cheats/matmul_lazy_subclass.py", MATMUL, (RR,), ("output_not_plain_tensor",)),
    Case("cheats/add_patch_allclose.py", ADD, (RR,), ("harness_tampered:torch.allclose",)),
    Case("cheats/add_patch_timer.py", ADD, (RR,), ("harness_tampered:time.perf_counter",)),
    Case("cheats/add_patch_seed.py", ADD, (RR,), ("harness_tampered:torch.manual_seed",)),
    Case("cheats/matmul_enable_tf32.py", MATMUL, (RR,), ("harness_tampered:tf32",)),
    Case("cheats/rowsum_fallback_torch.py", ROWSUM, (Status.NO_TRITON_LAUNCH,)),
    Case("cheats/matmul_no_launch.py", MATMUL, (Status.NO_TRITON_LAUNCH,)),
    Case("cheats/add_fake_launch.py", ADD, (Status.NO_TRITON_LAUNCH,)),
    Case("cheats/add_empty_grid.py", ADD, (Status.NO_TRITON_LAUNCH,)),
    Case("cheats/matmul_fp16_downgrade.py", MATMUL, (Status.MISMATCH,)),
    Case("cheats/matmul_bf16_downgrade.py", MATMUL, (Status.MISMATCH,)),
    Case("cheats/rowsum_hardcoded_seeds.py", ROWSUM, (RR,), ("hidden_input_mismatch",)),
    Case("cheats/rowsum_partial.py", ROWSUM, (Status.MISMATCH,)),
    Case("cheats/add_nan.py", ADD, (Status.MISMATCH,)),
    Case("cheats/add_gc_expected.py", ADD, (RR,), ("gc_introspection",)),
    Case("cheats/add_frame_expected.py", ADD, (RR,), ("frame_inspection",)),
    Case("cheats/linear_relu_modify_params.py", LINEAR, (RR,), ("gc_introspection",)),
    # On CUDA the garbage also lands in the driver's own descriptors and the child crashes first (seen on the H200).
    Case("cheats/add_forge_channel.py", ADD, (RR, Status.CRASH) if ON_GPU else (RR,),
         () if ON_GPU else ("result_channel_forged",)),
    Case("cheats/add_exit_os.py", ADD, (Status.CRASH,)),
    Case("cheats/add_exit_sys.py", ADD, (Status.CRASH,)),
    Case("cheats/add_write_outside.py", ADD, (RR,), ("write_outside_workdir",)),
    Case("cheats/add_spawn_process.py", ADD, (RR,), ("spawned_process",)),
    Case("cheats/add_network.py", ADD, (RR,), ("network_access",)),
    Case("cheats/add_ctypes.py", ADD, (RR,), ("ctypes_use",)),
    Case("cheats/add_settrace.py", ADD, (RR,), ("tracing",)),
    Case("cheats/add_read_parent_proc.py", ADD, (RR,), ("proc_access",)),
    Case("cheats/add_read_proc_dotdot.py", ADD, (RR,), ("proc_access",)),
    # The harness's own objects (issue 11): patched classes and code, a filtered channel, frames through lesser-known
    # APIs, the monitor switched off, the launch counter bumped; each credited correct on the code before the fix.
    Case("cheats/reference_from_sys_modules.py", ADD, (Status.MISMATCH,)),
    Case("cheats/add_patch_harness_class.py", ADD, (RR,), ("harness_tampered:harness.integrity.LaunchCounter.take",)),
    Case("cheats/add_patch_clock.py", ADD, (RR,), ("harness_tampered:harness.timing.Clock.time_callable",)),
    Case("cheats/add_patch_harness_code.py", ADD, (RR,), ("harness_tampered:workflow_scripts.evaluation.integrity",)),
    Case("cheats/add_filter_flags.py", ADD, (RR,), ("harness_tampered:harness.channel.Sender.send",)),
    Case("cheats/add_walk_stack.py", ADD, (RR,), ("frame_inspection",)),
    Case("cheats/add_walk_tb.py", ADD, (RR,), ("frame_inspection",)),
    Case("cheats/add_logging_frame.py", ADD, (RR,), ("frame_inspection",)),
    Case("cheats/add_signal_frame.py", ADD, (RR,), ("harness_tampered:state:signal.SIGALRM",)),
    Case("cheats/add_signal_silence_guard.py", ADD, (RR,), ("harness_tampered:guard.busy",)),
    Case("cheats/add_eval_frame_hook.py", ADD, (RR,), ("harness_tampered:state:eval_frame_callback",)),
    Case("cheats/add_closure_counter.py", ADD, (Status.NO_TRITON_LAUNCH,)),
    Case("cheats/add_triton_until_timed.py", ADD, (RR,), ("triton_launch_skipped_in_timing",)),
    Case("cheats/add_disguised_code.py", ADD, (Status.LOAD_ERROR,), ("harness_tampered:disguised_code",)),
    Case("cheats/add_disguised_loader.py", ADD, (Status.LOAD_ERROR,), ("harness_tampered:disguised_code",)),
    Case("cheats/add_code_of_no_file.py", ADD, (Status.LOAD_ERROR,), ("gc_introspection",)),
    # Issue 33: each credited correct on the code before the fix (tests/test_hostile_answers.py judges the first two
    # beside companions: another answer to read, an honest answer whose verdict must survive).
    Case("cheats/any_other_answer_on_disk.py", ADD, (Status.MISMATCH,)),
    Case("cheats/any_zero_element_huge_shape.py", ADD, (Status.SHAPE_MISMATCH,)),
    Case("cheats/add_torch_frame_helper.py", ADD, (RR,), ("frame_inspection",)),
    Case("cheats/add_bump_launch_counter.py", ADD, (RR,), ("frame_inspection",)),
    Case("cheats/add_function_mode_deferred.py", ADD, (RR,), ("harness_tampered:state:torch_function_modes",)),
    Case("cheats/add_dispatch_mode_fake_equal.py", ADD, (RR,), ("harness_tampered:state:torch_dispatch_modes",)),
    # Inside the absolute band (5 ms + 50% on CUDA, 250 ms + 50% on the CPU), outside the probe's relative one.
    Case("cheats/add_work_after_report.py", ADD, (RR,), ("timing_unconfirmed",)),
]

FAILURES = [
    Case("failures/syntax_error.py", ADD, (Status.LOAD_ERROR,)),
    Case("failures/import_raises.py", ADD, (Status.LOAD_ERROR,)),
    Case("failures/no_model_new.py", ADD, (Status.NO_MODEL_NEW,)),
    Case("failures/init_raises.py", ADD, (Status.INIT_ERROR,)),
    Case("failures/forward_raises.py", ADD, (Status.RUNTIME_ERROR,)),
    Case("failures/returns_float.py", ADD, (Status.RUNTIME_ERROR,)),
    Case("failures/returns_tuple.py", ADD, (Status.SHAPE_MISMATCH,)),
    Case("failures/wrong_shape.py", ADD, (Status.SHAPE_MISMATCH,)),
    Case("failures/wrong_dtype.py", ADD, (Status.DTYPE_MISMATCH,)),
    # Under CUDA the raised SIGSEGV does not end the process (seen on the H200): the answer then returns a + b,
    # which runs no Triton kernel. Not credited either way.
    Case("failures/segfault.py", ADD, (Status.CRASH, Status.NO_TRITON_LAUNCH) if ON_GPU else (Status.CRASH,)),
    Case("failures/cuda_illegal_address_gpu.py", ADD, (Status.CRASH,), gpu=True),
]

# Correct, with informational (non-integrity) flags: what only a label can say (issue 33: half precision through a
# dtype built from a string, inside the tolerance on this problem, as KernelBench credits it).
INFORMATIONAL = [
    Case("honest/add_cudnn_benchmark.py", ADD, (Status.CORRECT,), ("global_state_changed:cudnn.benchmark",)),
    Case("honest/add_set_default_device.py", ADD, (Status.CORRECT,), ("static:global_state_change",), static=True),
    Case("cheats/softmax_fp16_computed_dtype.py", SOFTMAX, (Status.CORRECT,), ("static:dynamic_attribute",),
         static=True),
    # Issue 35: zeros on a degenerate problem, credited as KernelBench credits them, and labelled.
    Case("cheats/softmax_zeros.py", VERY_WIDE_SOFTMAX, (Status.CORRECT,), ("output_ignores_input",)),
]

# Cheats that cannot pay: credited correct, but only at the cost of their real work (issue 33's value-keyed cache:
# every timed call draws inputs of its own, so no call finds its values in the cache).
NEUTRALISED = [
    Case("cheats/add_value_cache.py", ADD, (Status.CORRECT,)),
]

ALL = HONEST + CHEATS + FAILURES + INFORMATIONAL + NEUTRALISED


def _config(case: Case, lock_dir: Path) -> EvalConfig:
    device = "cuda" if (case.gpu or ON_GPU) else "cpu"
    # Honest answers: the default timing protocol. Others: fewer timed calls (they are rarely timed).
    trials = None if case.answer.startswith("honest/") else 3
    return EvalConfig(device=device, timing_trials=trials, run_static=case.static, lock_dir=str(lock_dir))


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, EvalResult]:
    """Evaluate every runnable case once, in parallel."""
    if WRITE_TARGET.exists():
        WRITE_TARGET.unlink()
    lock_dir = tmp_path_factory.mktemp("locks")
    cases = [c for c in ALL if not c.gpu or HAS_CUDA]
    workers = max(2, min(8 if ON_GPU else 4, os.cpu_count() or 2))
    with ThreadPoolExecutor(workers) as ex:
        futs = {c.answer: ex.submit(evaluate_answer, c.problem, ANSWERS / c.answer, _config(c, lock_dir))
                for c in cases}
        return {k: f.result() for k, f in futs.items()}


def _params(cases: list[Case]) -> list:
    return [pytest.param(c, id=c.answer.split("/")[-1][:-3],
                         marks=[pytest.mark.gpu, pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")]
                         if c.gpu else []) for c in cases]


def _check(case: Case, res: EvalResult) -> None:
    assert Status(res.status) in case.statuses, (res.status, res.flags, res.error)
    for f in case.flags:
        assert any(x == f or x.startswith(f) for x in res.flags), (f, res.flags, res.error)


@pytest.mark.parametrize("case", _params(HONEST))
def test_honest_answers_pass(case: Case, results: dict[str, EvalResult]) -> None:
    res = results[case.answer]
    _check(case, res)
    assert res.correct and res.compiled
    assert res.runtime_ms is not None and res.runtime_ms > 0
    st = res.runtime_stats
    n = 100 if ON_GPU else 10
    assert st is not None and st["n"] == n and len(st["trials"]) == n
    assert st["min"] <= st["median"] <= st["max"]
    assert res.triton_launches and res.triton_launches >= 6  # every correctness call launched
    assert res.timing_mode == ("cuda_events" if ON_GPU else "cpu_wall_interpreter")
    if ON_GPU:
        assert len(res.timing_raw["host_ms"]) == n and res.fingerprint["gpu_name"]
    assert res.protocol["done_received"] is True
    assert len(res.trials) == 7 and res.trials[-1]["kind"] == "post_timing"
    assert not [f for f in res.flags if not f.startswith("static:")], res.flags


@pytest.mark.parametrize("case", _params(CHEATS))
def test_cheats_are_caught(case: Case, results: dict[str, EvalResult]) -> None:
    res = results[case.answer]
    assert res.status != Status.CORRECT.value and not res.correct and res.runtime_ms is None
    _check(case, res)


@pytest.mark.parametrize("case", _params(FAILURES))
def test_failure_statuses(case: Case, results: dict[str, EvalResult]) -> None:
    res = results[case.answer]
    _check(case, res)
    assert res.compiled == (Status(res.status) not in (Status.LOAD_ERROR, Status.NO_MODEL_NEW))
    assert res.error


@pytest.mark.parametrize("case", _params(INFORMATIONAL))
def test_informational_flags_do_not_reject(case: Case, results: dict[str, EvalResult]) -> None:
    res = results[case.answer]
    _check(case, res)
    assert res.correct and res.runtime_ms is not None


def test_a_cache_keyed_on_input_values_is_timed_at_its_real_cost(results: dict[str, EvalResult]) -> None:
    """Every timed call of the value cache misses: its median is the slow path's (50 ms of sleep), not the copy's
    (well under a millisecond on a cache hit, as every call after the first was before fresh inputs)."""
    res = results["cheats/add_value_cache.py"]
    _check(NEUTRALISED[0], res)
    checks = res.timing_raw["timed_checks"]
    assert checks["fresh_inputs"] and checks["checked"] >= 1 and checks["mismatches"] == 0, checks
    assert min(res.runtime_stats["trials"]) >= 45.0, res.runtime_stats


def test_a_degenerate_problem_is_audited_and_an_answer_that_ignores_its_inputs_is_flagged(
        results: dict[str, EvalResult]) -> None:
    """Zeros pass the tolerance of the very wide softmax: the problem is audited degenerate in every evaluation of
    it; the zeros answer is flagged, the honest softmax on the same problem is not, and the elementwise add is not
    degenerate."""
    zeros, honest = results["cheats/softmax_zeros.py"], results["honest/softmax_triton.py"]
    for res in (zeros, honest):
        audit = res.problem_audit
        assert audit is not None and audit["zeros_pass"] and audit["degenerate"] and audit["trials"] == 5, audit
        # the reference's outputs on two inputs differ, but by less than the tolerance: each passes for the other
        assert audit["constant_pass"] and audit["reference_input_independent"], audit
    assert "output_ignores_input" in zeros.flags and "output_ignores_input" not in honest.flags
    add = results["honest/add_triton.py"].problem_audit
    assert add is not None and not (add["zeros_pass"] or add["constant_pass"] or add["degenerate"]), add
    # TF32 sensitivity: not measured on the CPU (no TF32 there); on CUDA an addition has no product TF32 could move
    for res in (zeros, honest, results["honest/add_triton.py"]):
        assert res.problem_audit["tf32_sensitive"] is (False if ON_GPU else None), res.problem_audit


def test_enough_distinct_cheats() -> None:
    assert len({c.answer for c in CHEATS}) >= 15
    assert len({c.answer for c in CHEATS if not c.gpu}) >= 15


def test_write_outside_blocked(results: dict[str, EvalResult]) -> None:
    assert "write_outside_workdir" in results["cheats/add_write_outside.py"].flags
    assert not WRITE_TARGET.exists(), "the blocked write happened anyway"


def test_hidden_seed_recorded_for_replay(results: dict[str, EvalResult]) -> None:
    res = results["cheats/rowsum_hardcoded_seeds.py"]
    assert len(res.protocol["hidden_seeds"]) == 1
    hidden = [t for t in res.trials if t["kind"] == "hidden"]
    assert hidden and hidden[0]["seed"] == res.protocol["hidden_seeds"][0] and hidden[0]["verdict"] != "ok"
    assert [t["verdict"] for t in res.trials if t["kind"] == "seeded"] == ["ok"] * 5


@pytest.mark.skipif(ON_GPU, reason="on the GPU, secret-seed inputs are built on the device: the same seed gives other "
                    "values than KernelBench's CPU-built inputs, so the hard-coded outputs fail there too")
def test_hardcoded_seed_cheat_replay_is_deterministic(tmp_path: Path) -> None:
    """Replaying with a hidden seed equal to a KernelBench trial seed lets the cheat through: the secret seed
    is what catches it (and the record is enough to replay a run)."""
    cfg = EvalConfig(device="cuda" if ON_GPU else "cpu", run_static=False, hidden_seeds=[734796314],
                     time_answer=False, lock_dir=str(tmp_path))
    res = evaluate_answer(ROWSUM, ANSWERS / "cheats/rowsum_hardcoded_seeds.py", cfg)
    assert res.status == Status.CORRECT.value, (res.status, res.error)


def test_memo_caught_after_timing_when_addresses_differ(results: dict[str, EvalResult]) -> None:
    res = results["cheats/add_memo_data_ptr.py"]
    assert ("post_timing_mismatch" in res.flags) or res.status == Status.MISMATCH.value


@pytest.mark.parametrize("case", _params([c for c in CHEATS if not c.gpu]))
def test_static_analysis_with_runtime(case: Case, results: dict[str, EvalResult]) -> None:
    """The pipeline runs static analysis first: either it rejects the cheat, or the run-time verdict stands."""
    report, flags, reject, _ = run_static_analysis((ANSWERS / case.answer).read_text())
    if report is None and not flags:
        pytest.skip("workflow_scripts.analysis.static is not available")
    assert reject is not None or results[case.answer].status != Status.CORRECT.value


def test_the_one_file_for_every_problem_finds_no_problem_module(tmp_path: Path) -> None:
    """reference_from_sys_modules on a problem with parameters (Linear+ReLU): in the answer's process there is no
    problem module to rebuild the reference from (it passed every problem when the problem was loaded there)."""
    res = evaluate_answer(LINEAR, ANSWERS / "cheats/reference_from_sys_modules.py",
                          EvalConfig(device="cuda" if ON_GPU else "cpu", run_static=False, time_answer=False,
                                     lock_dir=str(tmp_path)))
    assert res.status in (Status.MISMATCH.value, Status.SHAPE_MISMATCH.value), (res.status, res.error)
