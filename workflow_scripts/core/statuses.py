"""The documented set of per-answer statuses.

Every (model, problem) row carries exactly one of these. ``compiled`` keeps KernelBench's meaning: the answer
module was imported and defined ``ModelNew`` (statuses after ``load_error``/``no_model_new``). Only ``correct``
counts as correct. Rejected answers (cheats) stay in every denominator.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    # Before any code runs.
    MISSING_COMPLETION = "missing_completion"  # the model produced no answer (generation failed or absent)
    NO_CODE = "no_code"  # the completion holds no fenced code block
    REJECTED_STATIC = "rejected_static"  # a static finding that is a hack by itself (e.g. patches torch)
    # Loading the answer (compiled = False).
    LOAD_ERROR = "load_error"  # syntax error or exception while importing the answer module
    NO_MODEL_NEW = "no_model_new"  # the module imported but defines no ModelNew
    # After a successful load (compiled = True).
    INIT_ERROR = "init_error"  # ModelNew(*get_init_inputs()) raised
    RUNTIME_ERROR = "runtime_error"  # forward() raised
    TIMEOUT = "timeout"  # the child exceeded its wall-clock limit and was killed
    CRASH = "crash"  # the child died (signal, early exit, CUDA fault) without a verdict
    SHAPE_MISMATCH = "shape_mismatch"  # output shape differs from the reference
    DTYPE_MISMATCH = "dtype_mismatch"  # output dtype differs from the reference
    MISMATCH = "mismatch"  # values differ beyond atol/rtol, or NaN
    NO_TRITON_LAUNCH = "no_triton_launch"  # require_triton and no Triton kernel ran at run time
    REJECTED_RUNTIME = "rejected_runtime"  # a run-time integrity check failed (see the row's flag_list)
    CORRECT = "correct"
    # The problem's reference failed in this environment (crash, timeout, load failure): the answer could not be
    # judged. Not the answer's fault; kept as a row so the denominator stays complete.
    REFERENCE_ERROR = "reference_error"


COMPILED_STATUSES: frozenset[Status] = frozenset(
    {
        Status.INIT_ERROR,
        Status.RUNTIME_ERROR,
        Status.TIMEOUT,
        Status.CRASH,
        Status.SHAPE_MISMATCH,
        Status.DTYPE_MISMATCH,
        Status.MISMATCH,
        Status.NO_TRITON_LAUNCH,
        Status.REJECTED_RUNTIME,
        Status.CORRECT,
    }
)

DESCRIPTIONS: dict[Status, str] = {
    Status.MISSING_COMPLETION: "no completion exists for this (model, problem), or generation failed",
    Status.NO_CODE: "the completion has no fenced code block",
    Status.REJECTED_STATIC: "the answer's source contains a construct that is a hack by itself",
    Status.LOAD_ERROR: "the answer module failed to import (syntax error or import-time exception)",
    Status.NO_MODEL_NEW: "the answer module imported but defines no ModelNew",
    Status.INIT_ERROR: "constructing ModelNew raised",
    Status.RUNTIME_ERROR: "ModelNew.forward raised",
    Status.TIMEOUT: "the evaluation child exceeded its time limit and was killed",
    Status.CRASH: "the evaluation child died without reporting a verdict",
    Status.SHAPE_MISMATCH: "an output's shape differs from the reference output",
    Status.DTYPE_MISMATCH: "an output's dtype differs from the reference output",
    Status.MISMATCH: "an output differs from the reference beyond atol/rtol (NaN never matches)",
    Status.NO_TRITON_LAUNCH: "require_triton is on and no Triton kernel was launched at run time",
    Status.REJECTED_RUNTIME: "a run-time integrity check failed (inputs mutated, tampering, hidden-input mismatch)",
    Status.CORRECT: "all correctness trials passed",
    Status.REFERENCE_ERROR: "the reference model itself failed in this environment; the answer was not judged",
}


def is_compiled(status: Status | str) -> bool:
    return Status(status) in COMPILED_STATUSES


# ---------------------------------------------------------------------------------------------------------------
# Flags: what a row's `flag_list` column may hold. One registry: each flag's name, whether raising it rejects the
# answer (status rejected_runtime) and what it means. A flag may carry a detail after ":" (e.g.
# "harness_tampered:timing.time_ms"); its registry entry is the part before.
# ---------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    name: str
    rejects: bool
    description: str


FLAGS: dict[str, Flag] = {flag.name: flag for flag in (
    # Integrity checks (run time): the answer is rejected.
    Flag("inputs_mutated", True, "the answer changed its input tensors"),
    Flag("output_aliases_input", True, "an output shares memory with an input"),
    Flag("output_not_plain_tensor", True, "an output is a tensor subclass or not a tensor"),
    Flag("unsynchronized_stream", True, "work was still running on another stream when the call returned"),
    Flag("harness_tampered", True, "a harness, timer or checker function was replaced"),
    Flag("hidden_input_mismatch", True, "the answer was wrong on secret-seed inputs only"),
    Flag("post_timing_mismatch", True, "the answer was wrong on the inputs checked after timing"),
    Flag("write_outside_workdir", True, "a file was written outside the child's working directory"),
    Flag("spawned_process", True, "the answer started a process"),
    Flag("network_access", True, "the answer opened a network connection"),
    Flag("gc_introspection", True, "the answer walked the garbage collector's objects"),
    Flag("frame_inspection", True, "the answer inspected the caller's stack frames"),
    Flag("tracing", True, "the answer installed a tracer or profiler hook"),
    Flag("ctypes_use", True, "the answer called into ctypes"),
    Flag("proc_access", True, "the answer read /proc"),
    Flag("result_channel_forged", True, "a message on the result channel failed authentication"),
    Flag("triton_launch_skipped_in_timing", True, "timed calls launched no Triton kernel where checked calls did"),
    Flag("timed_output_mismatch", True, "a timed call's output, checked by the trusted side, was wrong"),
    Flag("timing_unconfirmed", True, "the reported times do not fit the intervals the trusted side observed"),
    Flag("signal_sent", True, "the answer sent a signal"),
    Flag("gpu_work_not_held", True, "the answer's process tree could not be held off the GPU while its job waited "
         "to time it (a process still running, or GPU work the driver's lock could not complete or see): timing it "
         "would have let that work run into another job's timing; not timed"),
    Flag("hold_broken", True, "while another job timed (evaluation.compile_beside_timing), a process of the answer's "
         "that was stopped ran again, or one locked by the CUDA driver was found unlocked: its work may have run into "
         "that timing (evaluation/freezer.py; hold_broken on the GPU timeline)"),
    # Review flags: recorded, counted per model, never change the status.
    Flag("global_state_changed", False, "the answer changed a cudnn setting (tunes its own PyTorch calls)"),
    Flag("python_threads_started", False, "the answer started Python threads"),
    Flag("output_wrong_device", False, "an output is on another device than the reference's"),
    Flag("output_ignores_input", False, "the answer's outputs were the same on every correctness trial where the "
         "reference's differed: credited only where the problem is degenerate (problem_audit)"),
    Flag("timing_error", False, "a timing trial failed after the correctness trials passed"),
    Flag("gpu_work_outlived_call", False, "GPU work of the answer's process was still running 2 s after it answered "
         "its calls and was stopped for the reference's timing beside them (evaluation/cuda_lock.py; a review flag "
         "until a run on a GPU shows honest answers never raise it)"),
    Flag("gpu_work_unheld", False, "the driver could not lock the answer's stopped process for another reason (its "
         "code after ':'; evaluation/cuda_lock.py): the reference's timing beside it had only the stop"),
    Flag("cpu_beside_timing", False, "the answer's locked processes kept more than two cores busy on average while "
         "another job timed (evaluation.compile_beside_timing; evaluation/freezer.py CPU_BESIDE_TIMING_CORES)"),
    Flag("trusted_side_error", False, "judging the answer raised on the trusted side (the answer's crash, the reason "
                                      "in its error; its companions keep their verdicts)"),
    Flag("static", False, "a static-analysis finding (static:<code>, table in analysis/static)"),
    Flag("static_analysis_error", False, "the static analyser failed on this answer"),
    Flag("reference", False, "an event in the reference child (reference:<flag>)"),
    Flag("suspicious_speedup", False, "a correct answer faster than the flag limit (scoring/metrics.py)"),
    Flag("reference_memory_starved", False, "the eager reference timed beside the answer met a full card (its "
         "blocks saw out-of-memory events: a slower fallback cuDNN plan is possible); the speed interval is withheld "
         "(evaluation/reference_timer.py)"),
    Flag("faster_than_floor", False, "a correct answer timed more than 10% below its problem's speed-of-light floor "
                                     "(scoring/speed_of_light.py)"),
)}


def flag_entry(flag: str) -> Flag | None:
    return FLAGS.get(flag.split(":", 1)[0])


def is_integrity_flag(flag: str) -> bool:
    """True for the flags that reject an answer (status rejected_runtime)."""
    entry = flag_entry(flag)
    return entry is not None and entry.rejects
