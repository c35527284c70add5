"""The memory an evaluate job and a baseline job need: host MB (Snakemake's ``mem_mb``, 10^6 bytes) and GPU GiB
(``gpu_mem_gb``), from the sizes of the problem's tensors (the problems table: ``input_bytes``, ``param_bytes``,
``output_bytes``, computed on the meta device by ``suite.sizes``) and the evaluation configuration.

This is the one place the estimate lives; rules/common.smk only reads it. Each term below names what the code holds
(``evaluation.reference``: the trusted side; ``evaluation.answer``: ``ProblemEvaluator.start_slot`` and
``batch_size``; ``evaluation.child``: answer and baseline children). Nothing is capped: a problem whose estimate
exceeds any host still says so (Snakemake clips a job's resources to the ``--resources`` bound, so it then runs alone).

A problem without sizes (the meta device could not build it, or the table predates the sizes) falls back to the
configured ``evaluation.memory_gb`` for the GPU and ``FALLBACK_MEM_MB`` for the host, the values every job had before.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import psutil

from workflow_scripts.evaluation.memory_cap import cgroup_limit
from workflow_scripts.evaluation.memory_plan import (ANSWER_FORWARD_FACTOR, CHILD_PROCESS_BYTES, CUDA_CONTEXT_BYTES,
                                                    GIB, LARGE_OUTPUT_BYTES, PARALLEL_INPUTS_MIN_BYTES)

if TYPE_CHECKING:
    from workflow_scripts.suite.sizes import ProblemSizes

# The host memory every evaluate and baseline job declared before the estimate: no job gets less (small problems).
FLOOR_MEM_MB = 8000
FALLBACK_MEM_MB = 8000
# The evaluating process itself (Python, torch, the CUDA runtime, pandas for the tables) and, for a baseline, the
# stage process that drives its children.
TRUSTED_PROCESS_GIB = 2.0
# An answer's (or baseline's) child process beyond the areas it maps (memory_plan). Each is capped at evaluation's
# memory_limit_gib (default 16) of its own, a bound against runaway answers, not what an answer normally takes, so
# the typical value is declared.
CHILD_PROCESS_GIB = CHILD_PROCESS_BYTES / GIB
# torch.compile(mode="max-autotune") in the baseline's compile child: Inductor's code generation and autotuning.
COMPILE_GIB = 2.0
# The compile child on the GPU beyond its context and outputs, measured on six level-2 problems
# (bench/job_memory_probe.py --job baseline, an H100, bench/README.md s38): up to 2.11 x the forward's traced peak
# where that peak is GiBs (the eager forward's blocks kept by the caching allocator beside CUDA graphs' private pool
# and the autotuning benchmarks' tensors). The sizes' bound alone declared 7 GiB where level 2 problem 82's child
# held 9.03: where the peak was traced, the baseline declares at least this factor of it, its outputs and a margin.
COMPILED_TRACED_FACTOR = 2.25
COMPILED_MARGIN_GIB = 1.0
# The compile child's host memory while it compares the compiled module's first outputs with eager's (child._compile:
# the maximum absolute difference in float64 on the host): double-width copies of both outputs and their difference
# alive at once, beyond the eager outputs' copy. On the same six problems the child held up to 14.9 GiB resident
# (level 2 problem 4, 2 GiB of outputs) where 8.47 were declared without them.
COMPARE_OUTPUTS_FACTOR = 6.0
CUDA_CONTEXT_GIB = CUDA_CONTEXT_BYTES / GIB  # per process on the GPU (memory_plan)
# One forward's working set beyond 3 x inputs + 2 x outputs + parameters: the intermediates the sizes cannot see.
# Over the 200 level-1/2 problems measured on an H200 (the reference's peak GPU memory), peak <= 3 x inputs +
# 2 x outputs + parameters + 3.8 GiB (level 2 problem 65, a convolution whose intermediate dwarfs its input).
INTERMEDIATES_GIB = 4.0
# Where the problems table has the forward's traced peak (``forward_peak_bytes``: its live tensors at most, on the meta
# device, suite/sizes.py), a second bound: 1.5 x traced + 2 x inputs + 1.5 GiB. The factor is the room memory_plan
# gives an answer's forward over the reference's (ANSWER_FORWARD_FACTOR); over the 200 reference peaks measured on an
# H200 the bound needs 0.36 GiB of its margin (level 2 problem 58, a 3-D transposed convolution, whose workspace the
# trace cannot see; level 1's largest gaps, 96 HuberLoss's fused temporaries and 76's dilated-convolution workspace,
# are within 2 x inputs). tests/test_resources.py checks every measured problem against both bounds;
# bench/forward_bounds.py prints the margins and what the whole-DAG bench's jobs declare.
TRACED_PEAK_FACTOR = ANSWER_FORWARD_FACTOR
TRACED_INPUTS_FACTOR = 2
TRACED_MARGIN_GIB = 1.5
LARGE_OUTPUT_GIB = LARGE_OUTPUT_BYTES / GIB  # reference timing outputs this large wait on the host
# Evaluate and baseline jobs one GPU runs side by side where a local run does not bound `gpu` itself (--resources
# gpu=N, rules/common.smk). Only what is timed holds a GPU exclusively (gpu_lock): while one job times, the others
# start their answer processes, compile, build inputs and check correctness. The whole-DAG bench runs with it
# (bench/dag_bench_run.sh).
JOBS_PER_GPU = 4
# The share of the host's memory (or of what the run's cgroups allow) a local run lets its jobs declare at once
# (Snakemake's `mem_mb`) where --resources sets none: the rest is Snakemake's own, the page cache's and the system's.
HOST_MEMORY_SHARE = 0.9
# torch.compile's worker processes in a baseline's compile child (TORCHINDUCTOR_COMPILE_THREADS): Inductor compiles
# the autotuning candidates' Triton kernels in them in parallel. A baseline job takes a quarter of the run's cores, at
# most this many, and baselines together at most BASELINES_CORE_SHARE of them (baseline_slots): a baseline is tens of
# seconds of compiling with the GPU only in short windows, so the run starts them first and keeps them going beside
# the evaluations, whose cores are the rest (a quarter: one per evaluation of an H200 host's JOBS_PER_GPU on its 16
# cores). With half the cores each, two baselines on that host left no core for an evaluation: they ran after every
# evaluation; with two slots of a quarter each, 8 of 20 baselines had ended when the evaluations had (bench/README.md,
# s26).
MAX_COMPILE_THREADS = 8
COMPILE_CORE_FRACTION = 4  # a baseline's workers: the run's cores divided by this
BASELINES_CORE_SHARE = 0.75
# The cores a baseline job reserves (its rule's threads) per compile worker: its workers are busy only in bursts
# (Inductor compiles a graph's candidates at once, then the child loads, builds inputs, waits for its GPU turn and
# times), so reserving all of them kept the host idle: on an H100 host's 16 cores, once the last evaluation had ended,
# baselines of 4 workers kept a median 1.8 cores busy each (mean 2.2; three at once: 4.7 of 16; bench/README.md, s28,
# call 1's last 120 s, 5-s host samples), and the whole run's cores were a median 31% busy while Snakemake saw all 16
# reserved. Half the workers doubles the baselines that compile at once on the same cores (six of 4 workers on 16).
BASELINE_CORES_PER_WORKER = 0.5


@dataclass(frozen=True)
class Sizes:
    """A problem's tensor bytes, as the problems table records them."""

    input_bytes: int
    param_bytes: int
    output_bytes: int
    forward_peak_bytes: int | None = None  # None: a table (or a problem) without the traced peak


@dataclass(frozen=True)
class Memory:
    """What a job declares: host MB (mem_mb, 10^6 bytes, as Snakemake counts it) and GPU GiB (gpu_mem_gb; 0 on
    the CPU)."""

    mem_mb: int
    gpu_mem_gb: int


def compile_threads(cores: int | None, configured: int | None = None) -> int:
    """A baseline job's compile workers (its rule reserves ``baseline_reserved_cores`` of them): the configuration's
    ``baselines.compile_threads`` where set (at most the cores below), else a quarter (``COMPILE_CORE_FRACTION``) of
    the cores this process may run on (its CPU affinity) or of ``cores`` (the run's --cores) where fewer, from 1 to
    ``MAX_COMPILE_THREADS``. The affinity keeps a cluster job's own evaluation of the rule (on the node, inside its
    allocation) at or below what the submitting process asked for."""
    if configured:  # at most the cores the run may use, as Snakemake capped the rule's threads when they were these
        return max(1, min(int(configured), _usable_cores(cores)))
    return max(1, min(MAX_COMPILE_THREADS, _usable_cores(cores) // COMPILE_CORE_FRACTION))


def baseline_reserved_cores(workers: int) -> int:
    """The cores a baseline job with ``workers`` compile workers reserves (its rule's threads): a share
    (``BASELINE_CORES_PER_WORKER``) of them, at least one."""
    return max(1, math.ceil(workers * BASELINE_CORES_PER_WORKER))


def baseline_slots(cores: int | None, threads: int) -> int:
    """How many baseline jobs a local run lets compile at once (Snakemake's ``baselines`` resource): together at most
    ``BASELINES_CORE_SHARE`` of the cores it may use (``_usable_cores``) at ``threads`` (the cores each reserves,
    ``baseline_reserved_cores``) each, and at least one."""
    return max(1, int(_usable_cores(cores) * BASELINES_CORE_SHARE) // max(1, threads))


def _usable_cores(cores: int | None) -> int:
    """``cores`` (the run's --cores), or the cores this process may run on (its CPU affinity) where fewer or where
    none is given."""
    usable = len(os.sched_getaffinity(0))
    return min(cores or usable, usable)


def sizes_bound_gib(sizes: Sizes) -> float:
    """The forward's working set by the measured relation to its sizes (INTERMEDIATES_GIB: elementwise problems peak
    near 3 x their inputs)."""
    return 3 * sizes.input_bytes / GIB + 2 * sizes.output_bytes / GIB + sizes.param_bytes / GIB + INTERMEDIATES_GIB


def traced_bound_gib(sizes: Sizes) -> float | None:
    """The forward's working set by the measured relation to its traced peak (TRACED_*); None where it was not
    traced."""
    if sizes.forward_peak_bytes is None:
        return None
    return (TRACED_PEAK_FACTOR * sizes.forward_peak_bytes / GIB + TRACED_INPUTS_FACTOR * sizes.input_bytes / GIB
            + TRACED_MARGIN_GIB)


def forward_gib(sizes: Sizes, use_trace: bool = True) -> float:
    """One forward pass's memory on its device: its inputs, parameters and outputs and the intermediates, bounded by
    its sizes (``sizes_bound_gib``), or, where the forward's peak was traced and ``use_trace``, by the traced peak
    (``traced_bound_gib``) where that gives less; never less than the traced peak itself."""
    bound = sizes_bound_gib(sizes)
    if sizes.forward_peak_bytes is None:
        return bound
    traced = traced_bound_gib(sizes)
    return max(min(bound, traced) if use_trace else bound, sizes.forward_peak_bytes / GIB)


def answer_processes(evaluation: Mapping[str, Any], answers: int) -> int:
    """Answer processes alive at once in one evaluate job: the answer judged and the batch of
    ``EvalConfig.prestart_count()`` (4 on CUDA, 1 on the CPU) started ahead of it (``answer.ProblemEvaluator``: one
    more as each answer is taken up); never more than the job's answers (its own model's and the companions', one per
    model)."""
    from workflow_scripts.evaluation.config import EvalConfig

    device = evaluation.get("device", "cpu")
    batch = EvalConfig(device=device, prestart=evaluation.get("prestart")).prestart_count()
    return max(1, min(int(answers), batch + 1))


def evaluate_memory(sizes: Sizes | None, evaluation: Mapping[str, Any], answers: int = 1) -> Memory:
    """An evaluate job: the problem's trusted side and every answer to it that the job judges (``answers``)."""
    cuda = evaluation.get("device", "cpu") == "cuda"
    if sizes is None:
        return Memory(FALLBACK_MEM_MB, math.ceil(evaluation.get("memory_gb", 40)) if cuda else 0)
    i, p, o = (sizes.input_bytes / GIB, sizes.param_bytes / GIB, sizes.output_bytes / GIB)
    trials = int(evaluation.get("correctness_trials", 5))
    timed = bool(evaluation.get("time_answer", True))
    slots = answer_processes(evaluation, answers)

    # Held for the whole job.
    host = TRUSTED_PROCESS_GIB
    host += p  # Model(*init) is built on the host and then moved (.to(device)); on the CPU it stays there
    host += trials * i  # one sealed input area per seeded trial (KernelBench's 5 inputs)
    host += i if timed else 0  # the timing inputs' area, shared by every answer
    host += slots * CHILD_PROCESS_GIB  # each live answer process beyond its areas (the first may start while preparing)
    if cuda:
        # The reference's timing outputs wait on the host once they reach 1 GiB (the GPU keeps room for answers).
        host += o if timed and o >= LARGE_OUTPUT_GIB else 0
        # The seeded reference outputs, where they take 1 GiB or more: memory_plan keeps them on the host when the
        # card has no room beside the answer (an 80 GB card on L1/38), which the scheduler cannot know.
        host += trials * o if trials * o >= LARGE_OUTPUT_GIB else 0
    else:
        host += (trials + timed) * o  # the reference outputs (seeded and timing) stay in host memory
        host += i if timed else 0  # the timing inputs as tensors, besides their area (the reference is timed on them)
    # Then the larger of two phases that never overlap (reference.ReferenceSide.prepare, then
    # answer.ProblemEvaluator.hand_areas): while the reference side is prepared, the trials being built by
    # get_inputs() before they are written into their areas, one, or for multi-GB inputs one per helper process side
    # by side (reference._start_builders, every helper ended before the first forward); while answers are judged,
    # each live answer's own secret-input and output areas (start_slot: handed out once the side is prepared), and
    # what judging an output holds on the host:
    # - on CUDA, where judging on the device runs out of memory and is done again on the CPU (session._judge), the
    #   reference's outputs copied to the host and the buffer the answer's are read into (kept for the job);
    # - on the CPU, where no device memory holds them, the running answer's forward (its copy of the inputs read from
    #   the areas, its outputs, intermediates) and the trusted side's copy of its outputs, a secret trial's reference
    #   outputs kept while the answer runs, and, while a checked timed call is judged, the answer's timing inputs and
    #   their fresh snapshot, its model and the trusted side's own forward beside them.
    building = (trials if sizes.input_bytes >= PARALLEL_INPUTS_MIN_BYTES else 1) * i
    judging = slots * (i + o) + (2 * o if cuda else forward_gib(sizes) + o + o + 2 * i + p)
    host += max(building, judging)
    mem_mb = max(FLOOR_MEM_MB, math.ceil(host * GIB / 1e6))

    gpu = 0.0
    if cuda:
        gpu += (1 + slots) * CUDA_CONTEXT_GIB  # the trusted side and every live answer process hold a context
        gpu += p  # the reference model
        # The seeded reference outputs, on the GPU where memory_plan finds room beside the answer (else on the host or
        # recomputed), which the scheduler cannot know: counted here, the case of a card that holds them all.
        gpu += trials * o
        gpu += i if timed else 0  # the timing inputs, built on the device and kept for every answer's paired timing
        gpu += min(o, LARGE_OUTPUT_GIB) if timed else 0  # the timing outputs, on the GPU while under 1 GiB
        # The running answer: its forward (its own copy of the inputs, its outputs, intermediates), the pristine
        # copy of its inputs kept to detect mutation and the snapshot of its outputs; the reference's forward on a
        # secret trial runs between the answer's calls and needs no more than this.
        gpu += forward_gib(sizes) + i + o
        gpu += o  # the answer's outputs copied onto the trusted side's device to be judged
        gpu += i if timed else 0  # a checked timed call's fresh inputs, drawn again on the trusted side
    return Memory(mem_mb, math.ceil(gpu))


def baseline_memory(sizes: Sizes | None, evaluation: Mapping[str, Any]) -> Memory:
    """A baseline job: the stage process and one child at a time (eager, then torch.compile), each building the
    model and the seed-42 inputs itself (``child._run_baseline``)."""
    cuda = evaluation.get("device", "cpu") == "cuda"
    if sizes is None:
        return Memory(FALLBACK_MEM_MB, math.ceil(evaluation.get("memory_gb", 40)) if cuda else 0)
    i, p, o = (sizes.input_bytes / GIB, sizes.param_bytes / GIB, sizes.output_bytes / GIB)

    host = TRUSTED_PROCESS_GIB  # the stage process
    host += CHILD_PROCESS_GIB + COMPILE_GIB  # the running child; the compile child's Inductor and autotuning
    host += i + p  # the child builds the model and the inputs on the CPU before moving them to the device
    host += o  # the eager outputs copied to the CPU (compile_max_abs_diff_vs_eager is taken against them)
    host += COMPARE_OUTPUTS_FACTOR * o  # the comparison's host copies
    if not cuda:
        # the forward itself (by its sizes, as on the GPU below), and the compiled model's first outputs beside it
        host += forward_gib(sizes, use_trace=False) + o
    mem_mb = max(FLOOR_MEM_MB, math.ceil(host * GIB / 1e6))

    gpu = 0.0
    if cuda:
        # The child's context (the stage process itself touches no GPU memory) and the compiled model's first outputs
        # while the eager reference is compared with them, beside the forward, eager or compiled, by its sizes alone:
        # the compile child holds more than one eager forward (the eager outputs, CUDA graphs' private pool and copies
        # of the inputs, autotuning's benchmark tensors), and the traced bound is fitted to eager peaks only. Where the
        # peak was traced, never less than the measured relation of the compile child to it.
        gpu = CUDA_CONTEXT_GIB + forward_gib(sizes, use_trace=False) + o
        if sizes.forward_peak_bytes is not None:
            compiled = COMPILED_TRACED_FACTOR * sizes.forward_peak_bytes / GIB + COMPILED_MARGIN_GIB
            gpu = max(gpu, CUDA_CONTEXT_GIB + compiled + o)
    return Memory(mem_mb, math.ceil(gpu))


# -- the problems table ----------------------------------------------------------------------------------------------

_TABLES: dict[str, tuple[tuple[int, int], dict[tuple[int, int], Sizes | None]]] = {}
SIZE_COLUMNS = ("input_bytes", "param_bytes", "output_bytes")
PEAK_COLUMN = "forward_peak_bytes"  # optional: a table written before the peak was traced has none


def table_sizes(problems: Path | str, level: int, problem_id: int) -> Sizes | None:
    """The problem's sizes from the problems table; None where the table, its size columns or the problem's sizes
    are missing (the fallback). Each table is read once while it is unchanged (Snakemake evaluates a job's
    resources again at every scheduling round, for thousands of jobs)."""
    path = str(problems)
    try:
        stat = os.stat(path)
    except OSError:
        return None  # not built yet: a dry run, or the DAG built before the problems stage ran
    version = (stat.st_mtime_ns, stat.st_size)
    cached = _TABLES.get(path)
    if cached is None or cached[0] != version:
        _TABLES[path] = cached = (version, _read(path))
    return cached[1].get((int(level), int(problem_id)))


def _read(path: str) -> dict[tuple[int, int], Sizes | None]:
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as e:  # noqa: BLE001 - a resource callable must not stop the scheduler: fall back, said
        print(f"WARNING: memory resources: cannot read {path} ({e}); using the configured fallback", file=sys.stderr)
        return {}
    if not all(c in schema.names for c in SIZE_COLUMNS):
        return {}  # a table written before the sizes were recorded
    peak = [PEAK_COLUMN] if PEAK_COLUMN in schema.names else []
    table = pq.read_table(path, columns=["level", "problem_id", *SIZE_COLUMNS, *peak]).to_pylist()
    found: dict[tuple[int, int], Sizes | None] = {}
    for row in table:
        values = [row[c] for c in SIZE_COLUMNS]
        traced = row.get(PEAK_COLUMN)
        found[(int(row["level"]), int(row["problem_id"]))] = (
            None if any(v is None for v in values) else Sizes(*(int(v) for v in values),
                                                               None if traced is None else int(traced)))
    return found


def job_memory(job: str, problems: Path | str, level: int, problem_id: int, evaluation: Mapping[str, Any],
               answers: int = 1) -> Memory:
    """The memory of one evaluate or baseline job, from the problems table (rules/common.smk's resources)."""
    return _estimate(job, table_sizes(problems, level, problem_id), evaluation, answers)


def problem_gpu_gib(job: str, problem: Path | str, evaluation: Mapping[str, Any], answers: int = 1) -> float:
    """The GPU memory (GiB) one job on this problem file expects, its sizes read on the meta device: what the
    trusted side asks the GPU's memory admission for (gpu_lock), by hand as in a pipeline job."""
    from workflow_scripts.suite.sizes import problem_sizes

    sizes = sizes_of(problem_sizes(problem))
    return float(_estimate(job, sizes, {**evaluation, "device": "cuda"}, answers).gpu_mem_gb)


def sizes_of(found: ProblemSizes) -> Sizes | None:
    """The estimate's sizes of a problem sized on the meta device (``suite.sizes.problem_sizes``); None where it
    could not be sized (its jobs declare the fallback)."""
    if found.error:
        return None
    return Sizes(found.input_bytes or 0, found.param_bytes or 0, found.output_bytes or 0, found.forward_peak_bytes)


def _estimate(job: str, sizes: Sizes | None, evaluation: Mapping[str, Any], answers: int) -> Memory:
    if job == "evaluate":
        return evaluate_memory(sizes, evaluation, answers)
    if job == "baseline":
        return baseline_memory(sizes, evaluation)
    raise ValueError(f"no memory estimate for job {job!r} (evaluate, baseline)")


def host_resources(device: str, gpus: Sequence[str], card_gib: Callable[[str], float | None],
                   host_bytes: int | None, baselines: int = 1) -> dict[str, int]:
    """What a local run on this host gives its jobs at once, as Snakemake's global resources: ``mem_mb``
    (``HOST_MEMORY_SHARE`` of ``host_bytes``, in Snakemake's 10^6-byte MB), ``baselines`` (the baseline jobs that
    compile at once: ``baseline_slots``) and on CUDA ``evaluations`` (``JOBS_PER_GPU`` per GPU of ``gpus``), ``gpu``
    (those, and one more for each baseline slot: a baseline job holds its GPU shared and steps aside for timing, so it
    takes no evaluation's place, and once the baselines end the evaluations still number ``evaluations``) and
    ``gpu_mem_gb`` (the cards' memory summed, in GiB: Snakemake's bound is host-wide; each card is guarded by its own
    lock, gpu_lock). A value that cannot be read is left out, which leaves it unbounded."""
    found: dict[str, int] = {"baselines": baselines}
    if host_bytes:
        found["mem_mb"] = int(host_bytes * HOST_MEMORY_SHARE / 1e6)
    if device == "cuda" and gpus:
        found["evaluations"] = JOBS_PER_GPU * len(gpus)
        found["gpu"] = found["evaluations"] + baselines
        cards = [card_gib(gpu) for gpu in gpus]
        if all(cards):
            found["gpu_mem_gb"] = int(sum(cards))
    return found


def host_memory_bytes() -> int | None:
    """The host's memory, bounded by this process's memory cgroups' limits (a container's, a Slurm job's)."""
    total, limit = int(psutil.virtual_memory().total), cgroup_limit()
    return total if limit is None else min(total, limit)
