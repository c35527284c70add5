"""What every column of every parquet file the pipeline writes means, and in which unit: the one table of column
definitions. ``core.io.write_parquet`` copies a table's definitions into the Arrow schema (each field's metadata
holds ``description`` and ``unit``; the schema's metadata names the table), and refuses a column that has none, so
a new column cannot be written before it is described here.

A column shared by several tables (``model``, ``level``, ``problem_id``...) is defined once below and reused; a
name whose meaning differs between tables (``correct`` is a flag per row, a count per level) is defined per table.
``unit`` is ``none`` for identifiers, names, flags and text; ``count`` for numbers of rows.

Columns that exist once per value of a library's definition (the fast_p counts: one per baseline and threshold of
scoring/metrics.py THRESHOLDS) are a ``ColumnFamily``: one pattern and one description here, the members named by
the library that writes them (``column_names("levels", fast_counts=[...])``). core/ imports nothing of the libraries,
and the thresholds stay in scoring/, so changing one re-keys only the stages that score, not every evaluation (a
stage's code version hashes every core/ file).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from workflow_scripts.core.records import HEADLINE_STATISTIC

NO_UNIT = "none"
MS = "ms"
SECONDS = "s"
RATIO = "ratio"
COUNT = "count"
TOKENS = "tokens"
FRACTION = "fraction"
PERCENTAGE_POINTS = "percentage points"
SHA256 = "sha256 (hex)"
BYTES = "bytes"
FLOPS = "floating-point operations"
GIB = "GiB"


@dataclass(frozen=True)
class Column:
    description: str
    unit: str = NO_UNIT


@dataclass(frozen=True)
class ColumnFamily:
    """Columns named by a pattern: ``pattern``'s named groups fill ``description`` (str.format) for each member."""

    pattern: str  # matched whole (re.fullmatch)
    description: str
    unit: str = NO_UNIT

    def column(self, name: str) -> Column | None:
        match = re.fullmatch(self.pattern, name)
        return Column(self.description.format(**match.groupdict()), self.unit) if match else None


@dataclass(frozen=True)
class Table:
    """One kind of parquet file: what a row is, and its columns in the order the pipeline writes them (a family
    stands at its members' place, under its own name)."""

    description: str
    columns: dict[str, Column | ColumnFamily]
    families: dict[str, ColumnFamily] = field(init=False)

    def __post_init__(self) -> None:
        families = {name: c for name, c in self.columns.items() if isinstance(c, ColumnFamily)}
        object.__setattr__(self, "families", families)

    def column(self, name: str) -> Column | None:
        """The definition of column ``name``: its own, or its family's; None if it has none."""
        own = self.columns.get(name)
        if isinstance(own, Column):
            return own
        return next((found for family in self.families.values() if (found := family.column(name))), None)


class UndescribedColumnError(ValueError):
    """A table's frame holds a column this module does not define."""


# ---------------------------------------------------------------------------------------------------- shared

MODEL = Column("the model's name: its key under models: in the configuration")
LEVEL = Column("the KernelBench level of the problem (1, 2, ...)")
PROBLEM_ID = Column("the problem's id within its level (the number its file name starts with)")
PROBLEM = Column("the problem's name: its file stem without the id, e.g. ReLU")
COMPLETION_SHA256 = Column("sha256 of the completion's UTF-8 text; null without a completion", SHA256)
COMPLETION_TOKENS = Column("the completion's token count as the generator reported it (cached models: meta.json); "
                           "null when unknown", TOKENS)
CODE_SHA256 = Column("sha256 of the extracted code's UTF-8 text; null without code", SHA256)
REQUIRE_TRITON = Column("whether the answer had to launch a Triton kernel to be correct (false for the calibration "
                        "model, kind reference)")
KEEPS_TORCH_OP = Column("whether ModelNew.forward still calls a PyTorch layer, functional op, tensor math or tensor "
                        "arithmetic (static AST check, docs/design.md); null without code")
MEAN_COMPLETION_TOKENS = Column("mean completion_tokens over the rows with a token count; null if none has one",
                                TOKENS)
# The speedup thresholds are scoring/metrics.py's THRESHOLDS: a threshold there is a member here.
_P = r"(?P<p>[0-9]+(?:\.[0-9]+)?)"
FAST_COUNTS = ColumnFamily(rf"(?P<baseline>eager|compile)_fast_{_P}",
                           "correct answers with speedup_{baseline} strictly greater than {p} (KernelBench's fast_{p}; "
                           "an unknown speedup is never fast)", COUNT)
SIGNIFICANT_FAST_COUNTS = ColumnFamily(rf"(?P<baseline>eager)_fast_{_P}_significant",
                                       "correct answers whose speedup_{baseline}_low exceeds {p} x (1 + the noise "
                                       "band): fast_{p} that timing noise cannot explain (scoring/significance.py)",
                                       COUNT)
SPEED_VERDICTS = ColumnFamily(r"eager_(?P<verdict>faster|slower|same|ambiguous)",
                              "correct answers timed beside the eager reference whose speed verdict is {verdict} "
                              "(scoring/significance.py)", COUNT)
UNFLAGGED_FAST_COUNTS = ColumnFamily(rf"(?P<baseline>eager|compile)_fast_{_P}_unflagged",
                                     "{baseline}_fast_{p} without the flagged answers", COUNT)


def _rows_columns() -> dict[str, Column]:
    return {
        "model": MODEL,
        "level": LEVEL,
        "problem_id": PROBLEM_ID,
        "problem": PROBLEM,
        "status": Column("the answer's one status (core/statuses.py: missing_completion ... correct)"),
        "compiled": Column("KernelBench's compiled: the answer module imported and defined ModelNew"),
        "correct": Column("status is correct: every correctness trial matched the reference"),
        "runtime_ms": Column(f"{HEADLINE_STATISTIC} of the answer's timing trials; null unless correct", MS),
        "eager_ms": Column("the eager PyTorch reference's time: timed beside the answer when eager_source is "
                           "paired, else the baseline stage's; null when the eager baseline failed", MS),
        "eager_source": Column("where eager_ms comes from: paired (timed beside the answer) or baseline (the "
                               "baseline stage); null without eager_ms"),
        "compile_ms": Column("the torch.compile baseline's time (baseline stage); null when it failed", MS),
        "speedup_eager": Column("eager_ms / runtime_ms; null unless correct with both times known", RATIO),
        "speedup_compile": Column("compile_ms / runtime_ms; null unless correct with both times known", RATIO),
        "speedup_eager_low": Column("the low end of the 95% interval of the speedup over the eager reference timed "
                                    "beside the answer (scoring/significance.py: the trimmed mean of its paired "
                                    "blocks' log ratios, or its calls with fewer than 3 blocks); null without paired timing", RATIO),
        "speedup_eager_high": Column("the high end of that interval", RATIO),
        "floor_ms": Column("the problem's speed-of-light floor on the run's device (scoring/speed_of_light.py): its "
                           "bytes at the fastest memory traffic the device showed or its FLOPs at the best measured "
                           "multiply rate, whichever is longer; null without the problem's sizes", MS),
        "floor_fraction": Column("floor_ms / runtime_ms: how close the answer came to the floor (1: at it; above "
                                 "1.1: faster than it by more than the margin, flagged faster_than_floor); null "
                                 "unless correct", RATIO),
        "keeps_torch_op": KEEPS_TORCH_OP,
        "completion_tokens": COMPLETION_TOKENS,
        "completion_sha256": COMPLETION_SHA256,
        "code_sha256": CODE_SHA256,
        "problem_sha256": Column("sha256 of the problem file's bytes", SHA256),
        "flag_list": Column("the answer's flags, sorted and comma-separated (empty: none): run-time checks "
                            "(core/statuses.py FLAGS), static:<check> findings, suspicious_speedup, faster_than_floor"),
        "error": Column("the evaluator's error message (tail of the traceback); null without one"),
        "device": Column("where the answer was evaluated: cpu or cuda"),
        "timing_mode": Column("how times were taken: cuda_events, or cpu_wall_interpreter (Triton interpreter "
                              "wall-clock, says nothing about GPU speed); null when not timed"),
        "degenerate": Column("the problem as the evaluator audited it (evaluation/problem_audit.py): true where zeros, "
                             "one constant per output or the reference's output on other inputs pass the tolerance "
                             "(an answer that ignores its inputs is credited there); null where no evaluation ran"),
        "tf32_sensitive": Column("the problem as the evaluator audited it: true where the reference's outputs on the "
                                 "first seeded trial move beyond the tolerance with TF32 all on or all off (its "
                                 "verdicts depend on the TF32 mode); null where not measured (the CPU has no TF32)"),
        "placement_spread": Column("the problem as the evaluator audited it (evaluation/placement_audit.py): the "
                                   "reference forward's slowest median over its fastest across placements of its "
                                   "buffers in device memory, timed once per problem in the first exclusive window; "
                                   "the speed verdicts widen the problem's band by it (scoring/significance.py); null "
                                   "where not measured (off CUDA, no answer timed, a forward beyond the audit's "
                                   "budget)", RATIO),
        "eager_status": Column("the baseline stage's eager run: ok or its failure"),
        "compile_status": Column("the baseline stage's torch.compile run: ok or its failure"),
        "require_triton": REQUIRE_TRITON,
        "evaluation_key": Column("the store key of the evaluation object this row was built from "
                                 "(<store>/objects/<first 2>/<key>)", SHA256),
        "code_version": Column("the pipeline code that built the row: git:<commit> (the package unmodified at that "
                               "commit), git:<commit>+source:<sha256> (modified since), or source:<sha256> (no "
                               "git; sha256 over the package's source files, core/store.py package_version)"),
    }


TABLES: dict[str, Table] = {
    "problems": Table("the suite's problem index: one row per problem (<results>/problems.parquet)", {
        "level": LEVEL,
        "problem_id": PROBLEM_ID,
        "problem": PROBLEM,
        "path": Column("the problem file, relative to the suite root (POSIX separators)"),
        "sha256": Column("sha256 of the problem file's bytes", SHA256),
        "input_bytes": Column("bytes of one seeded trial's inputs as the evaluation passes them (floating tensors as "
                              "float32), counted on the meta device without allocating (suite/sizes.py); null when "
                              "the meta device could not build the problem (size_error)", BYTES),
        "param_bytes": Column("bytes of the model's parameters and buffers in float32 (meta device); null as "
                              "input_bytes", BYTES),
        "output_bytes": Column("bytes of the model's outputs on those inputs (meta device); null as input_bytes",
                               BYTES),
        "flops": Column("floating-point operations of the forward's matrix multiplies, convolutions and attention "
                        "(PyTorch's FlopCounterMode on the meta device; elementwise work is not counted); null as "
                        "input_bytes", FLOPS),
        "forward_peak_bytes": Column("the most bytes the forward's live tensors (inputs, parameters and buffers, "
                                     "intermediates, outputs) held at once, traced op by op on the meta device "
                                     "(suite/sizes.py); without what a kernel allocates inside itself (a "
                                     "convolution's workspace); null as input_bytes", BYTES),
        "size_error": Column("why the sizes are null: the step that failed on the meta device and its error, one "
                             "line; null when the sizes are known"),
    }),
    "answers": Table("one model's extracted answers: one row per problem (<results>/answers/<model>.parquet)", {
        "model": MODEL,
        "level": LEVEL,
        "problem_id": PROBLEM_ID,
        "completion_status": Column("the completion's status: ok, failed (the generator gave no usable answer) or "
                                    "missing (none exists)"),
        "completion_sha256": COMPLETION_SHA256,
        "completion_tokens": COMPLETION_TOKENS,
        "extract_status": Column("ok (a fenced code block was found), no_code or missing_completion"),
        "code": Column("the extracted code: the completion's first fenced block, as KernelBench takes it"),
        "code_sha256": CODE_SHA256,
        "require_triton": REQUIRE_TRITON,
        "completion_error": Column("why the completion failed or is missing, naming its file where there is one (e.g. "
                                   "a cached completion that is not UTF-8 text); null when it is ok"),
    }),
    "static": Table("one model's static analysis: one row per problem (<results>/static/<model>.parquet); "
                    "null where the answer has no code", {
        "model": MODEL,
        "level": LEVEL,
        "problem_id": PROBLEM_ID,
        "parses": Column("whether the code parses as Python"),
        "has_model_new": Column("whether the code defines a top-level class ModelNew"),
        "defines_triton_kernel": Column("whether a function is decorated with triton.jit (or autotune/heuristics)"),
        "launches_triton_kernel": Column("whether code reached from ModelNew launches a jitted kernel[grid](...)"),
        "keeps_torch_op": KEEPS_TORCH_OP,
        "torch_ops_kept": Column("JSON list of the PyTorch ops forward still calls"),
        "findings": Column("JSON list of static findings: {code, severity (reject | flag), line, message}"),
        "worst_finding": Column("the most severe finding's severity: reject, flag, or null without findings"),
    }),
    "rows": Table("the per-problem rows: one row per model x problem, whatever happened to it "
                  "(<results>/evaluations.parquet; <results>/models/<model>.parquet for one model)", _rows_columns()),
    "flags": Table("flags and rejections per model: one row per model x flag or status with its count "
                   "(<results>/tables/flags.parquet; <results>/models/<model>.flags.parquet)", {
        "model": MODEL,
        "kind": Column("flag (a flag in flag_list) or status (a rejecting or no-launch status)"),
        "name": Column("the flag or status counted"),
        "count": Column("rows of the model carrying that flag or status", COUNT),
    }),
    "levels": Table("the summary per model and level: one row per model x level, overall first "
                    "(<results>/tables/levels.parquet)", {
        "model": MODEL,
        "label": Column("the model's label from the configuration; null without one"),
        "level": Column("the level counted: overall (all levels together) or the level number as text"),
        "n": Column("problems of the level: every problem stays in every denominator", COUNT),
        "compiled": Column("rows whose answer compiled (KernelBench's meaning)", COUNT),
        "correct": Column("rows whose answer is correct", COUNT),
        "fast_counts": FAST_COUNTS,
        "flagged": Column("correct answers whose speedup over eager or over torch.compile exceeds the flag limit "
                          "(scoring/metrics.py FLAG_SPEEDUP); the summary JSON's flags", COUNT),
        "unflagged_fast_counts": UNFLAGGED_FAST_COUNTS,
        "significant_fast_counts": SIGNIFICANT_FAST_COUNTS,
        "speed_verdicts": SPEED_VERDICTS,
        "compiled_rate": Column("compiled / n; null when n is 0", FRACTION),
        "correct_rate": Column("correct / n; null when n is 0", FRACTION),
        "answers_keeping_pytorch_op": Column("rows whose answer keeps a PyTorch op (keeps_torch_op)", COUNT),
        "fast_unflagged_hybrid": Column("eager_fast_1_unflagged answers that keep a PyTorch op", COUNT),
        "fast_unflagged_pure_triton": Column("eager_fast_1_unflagged answers that keep no PyTorch op", COUNT),
        "mean_completion_tokens": MEAN_COMPLETION_TOKENS,
    }),
    "gpu_timeline": Table("the run's GPU timeline: one row per interval a job spent on a GPU, from every host's "
                          "<results>/.locks/<host>/timeline.jsonl (<results>/tables/gpu_timeline.parquet; "
                          "evaluation/timeline.py)", {
        "host": Column("the host the job ran on"),
        "gpu": Column("the GPU's id as the host sees it (CUDA_VISIBLE_DEVICES), or cpu where no GPU is leased"),
        "activity": Column("lease_acquire (a job waiting to get onto the GPU), lease_shared, lease_exclusive, "
                           "lease_wait (an upgrade to exclusive waiting), lease_yielded "
                           "(a baseline's or a yielding evaluation's shared lease standing aside for another job's "
                           "timing), timing_answer, timing_reference, timing_probe (an evaluation's timed blocks), "
                           "baseline_eager or baseline_compile (a baseline's timings), baseline_autotune (a baseline's autotuning "
                           "benchmarks), lease_held (a lease's whole hold, with the memory admission counted it for), "
                           "hold_broken (an answer's tree held running beside another job's timing broke its hold: "
                           "that job's timing may have met its work; evaluation.compile_beside_timing)"),
        "purpose": Column("for lease intervals, what held the GPU: evaluate, baseline or vllm; null otherwise"),
        "problem": Column("the problem file's name without .py, for timed intervals; null for leases"),
        "answer": Column("the answer file timed (its path in the job's folder: one per answer judged), for an "
                         "evaluation's timed blocks; null otherwise"),
        "start": Column("when the interval began, after the run's first interval", SECONDS),
        "seconds": Column("how long it lasted", SECONDS),
        "compile_time_s": Column("for baseline_compile, how long the compiled module's first call (compiling and "
                                 "autotuning) took before this timing; null otherwise", SECONDS),
        "pid": Column("the process that wrote the line"),
        "declared_gib": Column("for lease_acquire and lease_held, the GPU memory the job declared and memory "
                               "admission counted it for (gpu_lock); null where it declared none, and otherwise", GIB),
        "admits_gib": Column("for lease_acquire and lease_held, the declared memory the GPU admits at once "
                             "(DEVICE_SHARE of its memory); null where unknown, and otherwise", GIB),
    }),
    "gpu_usage": Table("how busy each GPU was: one row per host x GPU of the timeline (<results>/tables/"
                       "gpu_usage.parquet; scoring/gpu_timeline.py)", {
        "host": Column("the host"),
        "gpu": Column("the GPU's id, or cpu"),
        "wall_s": Column("from the GPU's first interval to its last", SECONDS),
        "busy_s": Column("seconds with timed work on it (timing_* and baseline_* intervals, overlaps once)", SECONDS),
        "steady_from_s": Column("where the busy share starts: a minute after the first interval (0 for runs of "
                                "a minute or less)", SECONDS),
        "busy_share_steady": Column("busy seconds / wall seconds from steady_from_s on", FRACTION),
        "exclusive_s": Column("seconds it was held exclusively (lease_exclusive) by any lease but a generating "
                              "engine's (evaluations, baselines, the device rates)", SECONDS),
        "exclusive_idle_s": Column("of those, seconds without timed work (an exclusive window's own overhead)",
                                   SECONDS),
        "generation_s": Column("seconds a vLLM engine held it exclusively while generating (lease_exclusive, "
                               "purpose vllm)", SECONDS),
        "timed_beside_generation_s": Column("seconds of timed work while an engine held it: 0 unless the GPU lock "
                                            "failed (a timing beside generation is not clean)", SECONDS),
        "lease_wait_s": Column("seconds jobs waited to time on it (lease_wait, summed)", SECONDS),
        "acquire_wait_s": Column("seconds jobs waited to get onto it at all (lease_acquire, summed; each line says "
                                 "what refused them: memory admission, a waiting timer's gate, the lock)", SECONDS),
        "answers_timed": Column("answers with timed blocks on it", COUNT),
        "seconds_per_answer": Column("median over those answers of their timed blocks' seconds (the answer's, "
                                     "the paired reference's, the probe's)", SECONDS),
        "baselines": Column("problems whose baselines ran on it", COUNT),
        "seconds_per_baseline": Column("median over those problems of their baseline intervals' seconds (both "
                                       "timings and the autotuning windows)", SECONDS),
        "compile_seconds_per_baseline": Column("median of the compiled module's first call's seconds (compiling and "
                                               "autotuning)", SECONDS),
        "admits_gib": Column("the declared memory its admission takes at once (lease lines; the largest where "
                             "they differ)", GIB),
        "declared_gib_mean": Column("the memory its leases were declared for, averaged over the wall: near admits_gib, "
                                    "the declarations, not the GPU's time, kept further jobs off it", GIB),
        "memory_bound_s": Column("the declared GiB-seconds divided by admits_gib: the wall the declarations alone "
                                 "need, however the jobs are packed", SECONDS),
    }),
    "bootstrap": Table("the paired bootstrap: one row per compared model x metric (<results>/tables/"
                       "bootstrap.parquet)", {
        "model": MODEL,
        "reference": Column("the model every other model is compared with (summary.reference)"),
        "metric": Column("the per-problem success compared: correct, fast_eager (eager_fast_1) or fast_compile "
                         "(compile_fast_1)"),
        "delta_pp": Column("100 x mean(model success - reference success) over every problem", PERCENTAGE_POINTS),
        "ci95_low_pp": Column("2.5th percentile of the resampled delta (paired percentile bootstrap)",
                              PERCENTAGE_POINTS),
        "ci95_high_pp": Column("97.5th percentile of the resampled delta", PERCENTAGE_POINTS),
        "gained": Column("problems where only the model succeeds", COUNT),
        "lost": Column("problems where only the reference succeeds", COUNT),
    }),
}


def table(name: str) -> Table:
    try:
        return TABLES[name]
    except KeyError:
        raise KeyError(f"no parquet table {name!r} in core/columns.py (tables: {sorted(TABLES)})") from None


def column_names(name: str, **members: Sequence[str]) -> list[str]:
    """The table's columns, in the order the pipeline writes them; each family's place holds the members given
    under its name (every family of the table must be given, each member must match its pattern)."""
    spec = table(name)
    if set(members) != set(spec.families):
        raise ValueError(f"table {name!r} has the column families {sorted(spec.families)}; got {sorted(members)}")
    names: list[str] = []
    for key, definition in spec.columns.items():
        if isinstance(definition, ColumnFamily):
            strangers = [m for m in members[key] if definition.column(m) is None]
            if strangers:
                raise ValueError(f"{strangers} are not members of the column family {key!r} of table {name!r}")
            names.extend(members[key])
        else:
            names.append(key)
    return names


def definitions(name: str, columns: list[str]) -> dict[str, Column]:
    """The definition of each of ``columns`` of table ``name``; an error names every column without one."""
    spec = table(name)
    found = {c: spec.column(c) for c in columns}
    missing = [c for c, definition in found.items() if definition is None]
    if missing:
        raise UndescribedColumnError(
            f"table {name!r} has columns {missing} with no description; define them in core/columns.py"
        )
    return {c: definition for c, definition in found.items() if definition is not None}
