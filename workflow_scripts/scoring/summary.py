"""Stage summarize: per-problem rows -> the published summary JSON, per-level tables, a markdown table, figures.

Input: the per-problem rows of ``<results>/evaluations.parquet`` (one row per model x problem, see docs/design.md);
the columns used are ``model, level, problem_id, problem, compiled, correct, speedup_eager, speedup_compile,
keeps_torch_op, completion_tokens``. Output: a JSON object with the keys and nesting of the published
``results.json`` (``benchmark``, ``models``, ``paired_bootstrap_vs_<reference>``, ``paired_bootstrap_note``,
``level2_strategy``, ``level2_strategy_note``). What the rows cannot say (protocol, runtime, labels) is the
context (scoring/context.py).

Definitions (the published ones):

* ``n`` = problems of the level; every problem stays in every denominator (failed answers, rejected answers,
  problems whose baseline failed).
* ``compiled`` / ``correct``: counts of rows with that flag.
* ``eager_fast_p`` / ``compile_fast_p`` (p in scoring/metrics.py THRESHOLDS; published: 1, 1.5, 2): correct AND
  speedup strictly > p. A null speedup (the baseline or the answer's timing is unknown) is never fast.
* ``flags``: correct answers whose speedup over eager OR over torch.compile is > FLAG_SPEEDUP (10).
* ``eager_fast_1_unflagged`` / ``compile_fast_1_unflagged``: the fast_1 counts (HEADLINE_THRESHOLD) without
  flagged answers.
* ``overall``: all levels together. Level keys come from the levels present in the rows.
* ``mean_completion_tokens``: mean over rows with a token count (null if none), unrounded; per model in the
  JSON, per model and level in levels.parquet.
* ``paired_bootstrap_vs_<ref>.<model>.{correct, fast_eager, fast_compile}``: per problem 1/0 success
  (fast_eager = eager_fast_1, fast_compile = compile_fast_1) over all problems of all levels in
  (level, problem_id) order. ``delta_pp = 100 * mean(model_i - ref_i)``; ``ci95_pp`` = 100 x the 2.5 / 97.5
  percentiles (numpy's default linear method) of the resampled mean difference; ``gained`` / ``lost`` = problems
  where only the model / only the reference succeeds.
* ``level2_strategy.<model>.<level>``: ``answers_keeping_pytorch_op`` = rows with keeps_torch_op true;
  ``fast_unflagged_hybrid`` / ``fast_unflagged_pure_triton`` = eager_fast_1_unflagged rows that do / do not.

Bootstrap RNG (fixed, so results reproduce): ``rng = numpy.random.default_rng(seed)``; the resample index
matrix is ``rng.integers(0, n, size=(resamples, n))`` (int64), drawn in consecutive row blocks of
``BOOTSTRAP_CHUNK`` rows, which yields exactly the same matrix as one call (numpy draws it element by element
from one stream; tests/test_summarize.py checks this). The same matrix serves every model and every metric, so
all comparisons are paired on the same resamples. Each block becomes a count matrix (how often each problem was
drawn) and the resampled sums are ``counts @ (model - ref)`` in float32, which is exact for integer data this
size. Values are not rounded: the published file stores raw floats such as 3.5000000000000004 (= 100 * 7/200).

CLI: ``python -m workflow_scripts summarize --rows ROWS.parquet --out OUT.json [--reference NAME]
[--compare NAME ...] [--resamples 100000] [--seed 42] [--tables-dir DIR] [--figures-dir DIR] [--markdown OUT.md]
[--context CONTEXT.json]``. Re-running on the same inputs gives byte-identical outputs (ordered keys, no
timestamps).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workflow_scripts.core.columns import column_names
from workflow_scripts.core.io import write_parquet
from workflow_scripts.scoring import metrics, significance
from workflow_scripts.scoring.context import ModelContext, SummaryContext
from workflow_scripts.scoring.samples import samples_block
from workflow_scripts.scoring.known_issues import known_issues

STRATEGY_FIELDS: tuple[str, ...] = ("answers_keeping_pytorch_op", "fast_unflagged_hybrid", "fast_unflagged_pure_triton")
# Where levels.parquet names a published count otherwise: "flags" would shadow pandas' DataFrame.flags.
TABLE_NAMES: dict[str, str] = {"flags": "flagged"}
BOOTSTRAP_METRICS: tuple[str, ...] = ("correct", "fast_eager", "fast_compile")
REQUIRED_COLUMNS: tuple[str, ...] = (
    "model", "level", "problem_id", "problem", "compiled", "correct", "speedup_eager", "speedup_compile",
    "keeps_torch_op", "completion_tokens",
)
# Columns read where present (rows built before they existed summarize without them: no speed verdicts).
OPTIONAL_COLUMNS: tuple[str, ...] = ("speedup_eager_low", "speedup_eager_high", "placement_spread", "timing_mode")
# What summary.json keeps of a vLLM model's self-parity report (generation/self_parity.py SelfParity.to_dict).
SELF_PARITY_FIELDS = ("prompts", "identical", "agreement", "token_agreement", "skipped")
DEFAULT_RESAMPLES = 100_000
DEFAULT_SEED = 42
BOOTSTRAP_CHUNK = 10_000  # rows of the index matrix drawn at once: bounds memory (~16 MB per block at n=200)


def strategy_note() -> str:
    return ("An answer 'keeps a PyTorch op' when forward() still calls a torch layer, functional op, tensor math "
            "method or arithmetic on inputs (static AST check). fast_unflagged_hybrid / fast_unflagged_pure_triton "
            f"split the {metrics.unflagged_fields()[0]} answers by that check.")


def bootstrap_note(reference: str, n_problems: int, resamples: int, seed: int) -> str:
    fields = bootstrap_fields()
    return (f"Differences in percentage points against '{reference}' on the same {n_problems} problems "
            f"(fast_eager = {fields['fast_eager']}, fast_compile = {fields['fast_compile']}); 95% percentile "
            f"interval from {resamples:,} paired resamples of problems, seed {seed}. gained / lost = problems where "
            f"only the model / only '{reference}' succeeds.")


# ---------------------------------------------------------------------------------------------------- records


def level_fields() -> list[str]:
    """The published counts of a level, in the published order: n, compiled, correct, the fast_p counts (one per
    baseline and threshold of scoring/metrics.py), flags, the unflagged headline counts. Made when asked, from
    THRESHOLDS: the JSON, levels.parquet, the markdown table and explain all read it."""
    return ["n", "compiled", "correct", *metrics.fast_fields(), "flags", *metrics.unflagged_fields()]


def table_name(count: str) -> str:
    """A published count's column in levels.parquet."""
    return TABLE_NAMES.get(count, count)


def bootstrap_fields() -> dict[str, str]:
    """Each bootstrap metric -> the level count whose per-problem membership it compares (fast_eager is the headline
    eager fast_p count, eager_fast_1)."""
    key = metrics.HEADLINE_THRESHOLD[0]
    return {"correct": "correct", "fast_eager": metrics.fast_field("eager", key),
            "fast_compile": metrics.fast_field("compile", key)}


@dataclass(frozen=True)
class LevelCounts:
    """The counts of one model at one level (or overall); ``to_dict`` gives the published keys in their order."""

    n: int
    compiled: int
    correct: int
    fast: dict[str, int]  # eager_fast_1, ..., compile_fast_2: one per baseline and threshold (metrics.fast_fields)
    flags: int
    fast_unflagged: dict[str, int]  # eager_fast_1_unflagged, compile_fast_1_unflagged (metrics.unflagged_fields)

    def to_dict(self) -> dict[str, int]:
        return {"n": self.n, "compiled": self.compiled, "correct": self.correct, **self.fast, "flags": self.flags,
                **self.fast_unflagged}


@dataclass(frozen=True)
class StrategyCounts:
    """How the eager-fast, unflagged answers of one model at one level split by the keeps-a-torch-op check."""

    answers_keeping_pytorch_op: int
    fast_unflagged_hybrid: int
    fast_unflagged_pure_triton: int

    def to_dict(self) -> dict[str, int]:
        return {
            "answers_keeping_pytorch_op": self.answers_keeping_pytorch_op,
            "fast_unflagged_hybrid": self.fast_unflagged_hybrid,
            "fast_unflagged_pure_triton": self.fast_unflagged_pure_triton,
        }


@dataclass(frozen=True)
class BootstrapResult:
    """One paired comparison (model vs reference on one metric), in percentage points."""

    delta_pp: float
    ci95_pp: tuple[float, float]
    gained: int
    lost: int

    def to_dict(self) -> dict[str, Any]:
        return {"delta_pp": self.delta_pp, "ci95_pp": list(self.ci95_pp), "gained": self.gained, "lost": self.lost}


@dataclass(frozen=True)
class Outcomes:
    """Per-problem outcomes of one model, aligned to the sorted (level, problem_id) problem list."""

    levels: np.ndarray  # int, per problem
    compiled: np.ndarray  # bool
    correct: np.ndarray  # bool
    speedup_eager: np.ndarray  # float, NaN where unknown
    speedup_compile: np.ndarray  # float, NaN where unknown
    keeps_torch_op: np.ndarray  # bool (null -> False: no answer keeps nothing)
    completion_tokens: np.ndarray  # float, NaN where unknown
    # The interval of the speedup over the paired eager reference (scoring/significance.py), NaN where none.
    speedup_eager_low: np.ndarray
    speedup_eager_high: np.ndarray
    # The problem's placement spread (evaluation/placement_audit.py), NaN where not measured.
    placement_spread: np.ndarray

    def speedups(self, baseline: str) -> np.ndarray:
        return self.speedup_eager if baseline == "eager" else self.speedup_compile

    def fast(self, baseline: str, p: float) -> np.ndarray:
        return metrics.fast(self.correct, self.speedups(baseline), p)

    @property
    def flagged(self) -> np.ndarray:
        return metrics.flagged(self.correct, self.speedup_eager, self.speedup_compile)

    def success(self, metric: str) -> np.ndarray:
        """The 1/0 per-problem success the bootstrap compares."""
        if metric == "correct":
            return self.correct
        if metric == "fast_eager":
            return self.fast("eager", metrics.HEADLINE_THRESHOLD[1])
        if metric == "fast_compile":
            return self.fast("compile", metrics.HEADLINE_THRESHOLD[1])
        raise ValueError(f"unknown bootstrap metric {metric!r}")


# ---------------------------------------------------------------------------------------------------- rows


def _bool_array(series: pd.Series, name: str, *, null_as: bool | None) -> np.ndarray:
    if series.isna().any():
        if null_as is None:
            raise ValueError(f"column {name!r} has null values")
        series = series.astype("boolean").fillna(null_as)
    return series.astype(bool).to_numpy()


def _float_array(series: pd.Series) -> np.ndarray:
    # Nullable dtypes (Float64/Int64 with pd.NA) and object columns with None all become NaN.
    return pd.to_numeric(series, errors="raise").astype("float64").to_numpy(dtype=float, na_value=np.nan)


def normalize_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Check the rows (columns, one row per model x problem, every model on the same problems) and sort them
    by (level, problem_id) within each model, models in order of first appearance."""
    missing = [c for c in REQUIRED_COLUMNS if c not in rows.columns]
    if missing:
        raise ValueError(f"rows lack columns {missing}")
    if rows.empty:
        raise ValueError("no rows to summarize")
    frame = rows.loc[:, list(REQUIRED_COLUMNS)].copy()
    for column in OPTIONAL_COLUMNS:
        frame[column] = rows[column] if column in rows.columns else None
    frame["model"] = frame["model"].astype(str)
    frame["level"] = frame["level"].astype("int64")
    frame["problem_id"] = frame["problem_id"].astype("int64")
    duplicated = frame.duplicated(["model", "level", "problem_id"])
    if duplicated.any():
        first = frame[duplicated].iloc[0]
        raise ValueError(
            f"duplicate row for model {first['model']!r}, level {first['level']}, problem {first['problem_id']}"
        )
    problems = {(int(l), int(p)) for l, p in zip(frame["level"], frame["problem_id"])}
    for model, group in frame.groupby("model", sort=False):
        have = set(zip(group["level"].astype(int), group["problem_id"].astype(int)))
        if have != problems:
            lacking = sorted(problems - have)[:5]
            raise ValueError(f"model {model!r} lacks rows for problems {lacking} (every model needs every problem)")
    order = {m: i for i, m in enumerate(pd.unique(frame["model"]))}
    frame["_model_order"] = frame["model"].map(order)
    frame = frame.sort_values(["_model_order", "level", "problem_id"], kind="stable").drop(columns="_model_order")
    return frame.reset_index(drop=True)


def outcomes_by_model(rows: pd.DataFrame) -> dict[str, Outcomes]:
    """Per-model outcome arrays (rows must come from normalize_rows, so problems align across models)."""
    result: dict[str, Outcomes] = {}
    for model, group in rows.groupby("model", sort=False):
        compiled = _bool_array(group["compiled"], "compiled", null_as=None)
        correct = _bool_array(group["correct"], "correct", null_as=None)
        if (correct & ~compiled).any():
            raise ValueError(f"model {model!r} has rows that are correct but not compiled")
        result[str(model)] = Outcomes(
            levels=group["level"].to_numpy(dtype=np.int64),
            compiled=compiled,
            correct=correct,
            speedup_eager=_float_array(group["speedup_eager"]),
            speedup_compile=_float_array(group["speedup_compile"]),
            keeps_torch_op=_bool_array(group["keeps_torch_op"], "keeps_torch_op", null_as=False),
            completion_tokens=_float_array(group["completion_tokens"]),
            speedup_eager_low=_float_array(group["speedup_eager_low"]),
            speedup_eager_high=_float_array(group["speedup_eager_high"]),
            placement_spread=_float_array(group["placement_spread"]),
        )
    return result


def model_order(rows: pd.DataFrame, context: SummaryContext | None = None) -> list[str]:
    """Context order first (models present in the rows only), then the rest in order of first appearance."""
    present = [str(m) for m in pd.unique(rows["model"].astype(str))]
    listed = [m for m in (context.models if context else {}) if m in set(present)]
    return listed + [m for m in present if m not in set(listed)]


# ---------------------------------------------------------------------------------------------------- counts


def level_members(outcomes: Outcomes) -> dict[str, np.ndarray]:
    """Per problem, whether it counts in each published level count (keys: ``level_fields()``, in order). The one
    definition of the counts: ``level_counts`` sums these, ``explain`` lists the rows behind a number with them."""
    flagged = outcomes.flagged
    members = {"n": np.ones_like(outcomes.correct), "compiled": outcomes.compiled, "correct": outcomes.correct}
    members.update({metrics.fast_field(baseline, key): outcomes.fast(baseline, p)
                    for baseline in metrics.BASELINES for key, p in metrics.THRESHOLDS})
    members["flags"] = flagged
    headline = metrics.HEADLINE_THRESHOLD[1]
    members.update({name: outcomes.fast(baseline, headline) & ~flagged
                    for baseline, name in zip(metrics.BASELINES, metrics.unflagged_fields())})
    return {name: members[name] for name in level_fields()}


def strategy_members(outcomes: Outcomes) -> dict[str, np.ndarray]:
    """Per problem, whether it counts in each level2_strategy count (keys: STRATEGY_FIELDS)."""
    fast_unflagged = outcomes.fast("eager", metrics.HEADLINE_THRESHOLD[1]) & ~outcomes.flagged
    keeps = outcomes.keeps_torch_op
    return {
        "answers_keeping_pytorch_op": keeps,
        "fast_unflagged_hybrid": fast_unflagged & keeps,
        "fast_unflagged_pure_triton": fast_unflagged & ~keeps,
    }


def level_counts(outcomes: Outcomes, mask: np.ndarray | None = None) -> LevelCounts:
    """Counts over the problems selected by ``mask`` (all problems when None)."""
    sel = np.ones_like(outcomes.correct) if mask is None else mask
    counts = {name: int(np.count_nonzero(member & sel)) for name, member in level_members(outcomes).items()}
    return LevelCounts(n=counts["n"], compiled=counts["compiled"], correct=counts["correct"],
                       fast={name: counts[name] for name in metrics.fast_fields()}, flags=counts["flags"],
                       fast_unflagged={name: counts[name] for name in metrics.unflagged_fields()})


def strategy_counts(outcomes: Outcomes, mask: np.ndarray) -> StrategyCounts:
    return StrategyCounts(**{name: int(np.count_nonzero(member & mask))
                             for name, member in strategy_members(outcomes).items()})


def mean_completion_tokens(outcomes: Outcomes, mask: np.ndarray | None = None) -> float | None:
    """Mean token count over the problems selected by ``mask`` (all when None) that have one; None if none has."""
    tokens = outcomes.completion_tokens if mask is None else outcomes.completion_tokens[mask]
    known = tokens[~np.isnan(tokens)]
    if known.size == 0:
        return None
    # fsum is exact for token counts, so the mean is the correctly rounded sum / count (the published form).
    return math.fsum(known.tolist()) / known.size


def count_members(rows: pd.DataFrame, model: str) -> pd.DataFrame:
    """One row per problem of ``model`` in (level, problem_id) order: whether it counts in each published count
    (a column per ``level_fields()`` and STRATEGY_FIELDS entry) and in mean_completion_tokens (has a token count)."""
    frame = normalize_rows(rows)
    if model not in set(frame["model"].astype(str)):
        raise ValueError(f"model {model!r} is not in the rows (models: {list(pd.unique(frame['model']))})")
    outcomes = outcomes_by_model(frame)[model]
    own = frame[frame["model"].astype(str) == model]
    table = pd.DataFrame({"level": own["level"].to_numpy(dtype=np.int64),
                          "problem_id": own["problem_id"].to_numpy(dtype=np.int64),
                          "problem": own["problem"].to_numpy()})
    for name, member in {**level_members(outcomes), **strategy_members(outcomes)}.items():
        table[name] = member
    table["mean_completion_tokens"] = ~np.isnan(outcomes.completion_tokens)
    table["completion_tokens"] = outcomes.completion_tokens
    return table


# ---------------------------------------------------------------------------------------------------- bootstrap


def resample_counts(n: int, resamples: int, seed: int, chunk: int = BOOTSTRAP_CHUNK) -> Iterator[np.ndarray]:
    """Yield blocks of the (resamples x n) matrix of how often each problem is drawn, as float32.

    Row r of the full matrix counts the indices in row r of ``default_rng(seed).integers(0, n, (resamples, n))``.
    """
    rng = np.random.default_rng(seed)
    done = 0
    while done < resamples:
        rows = min(chunk, resamples - done)
        idx = rng.integers(0, n, size=(rows, n))
        flat = idx + (np.arange(rows, dtype=np.int64) * n)[:, None]  # row-offset so one bincount does every row
        yield np.bincount(flat.ravel(), minlength=rows * n).reshape(rows, n).astype(np.float32)
        done += rows


def paired_bootstrap(
    model: np.ndarray, reference: np.ndarray, *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED,
    chunk: int = BOOTSTRAP_CHUNK,
) -> list[BootstrapResult]:
    """Paired percentile bootstrap of ``model[k] - reference[k]`` for each row k (1/0 per problem).

    ``model`` and ``reference`` are (K, n) arrays (or (n,) for one comparison); every row is resampled with the
    same index matrix, so all K comparisons are paired on the same resamples.
    """
    m = np.atleast_2d(np.asarray(model, dtype=np.int64))
    r = np.atleast_2d(np.asarray(reference, dtype=np.int64))
    if m.shape != r.shape:
        raise ValueError(f"model and reference shapes differ: {m.shape} vs {r.shape}")
    k, n = m.shape
    if n == 0:
        raise ValueError("cannot bootstrap zero problems")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    diff = (m - r).T.astype(np.float32)  # (n, K)
    sums = np.empty((resamples, k), dtype=np.float32)
    start = 0
    for counts in resample_counts(n, resamples, seed, chunk):
        sums[start:start + len(counts)] = counts @ diff  # integer-valued and < 2**24: exact in float32
        start += len(counts)
    # Percentiles of the resampled mean difference, then x100: the published form (100 * (7/200) etc.).
    lo, hi = np.percentile(sums.astype(np.float64) / n, [2.5, 97.5], axis=0)
    results = []
    for j in range(k):
        results.append(BootstrapResult(
            delta_pp=100.0 * (int((m[j] - r[j]).sum()) / n),
            ci95_pp=(float(100.0 * lo[j]), float(100.0 * hi[j])),
            gained=int(np.count_nonzero((m[j] == 1) & (r[j] == 0))),
            lost=int(np.count_nonzero((m[j] == 0) & (r[j] == 1))),
        ))
    return results


def bootstrap_block(
    outcomes: Mapping[str, Outcomes], reference: str, compared: Sequence[str], *, resamples: int, seed: int,
) -> dict[str, dict[str, dict[str, Any]]]:
    """paired_bootstrap_vs_<reference>: every compared model x metric in one vectorised pass."""
    if not compared:
        return {}
    pairs = [(name, metric) for name in compared for metric in BOOTSTRAP_METRICS]
    model = np.stack([outcomes[name].success(metric) for name, metric in pairs])
    ref = np.stack([outcomes[reference].success(metric) for _, metric in pairs])
    results = paired_bootstrap(model, ref, resamples=resamples, seed=seed)
    block: dict[str, dict[str, dict[str, Any]]] = {}
    for (name, metric), result in zip(pairs, results):
        block.setdefault(name, {})[metric] = result.to_dict()
    return block


# ---------------------------------------------------------------------------------------------------- summary


def _level_keys(levels: np.ndarray) -> list[int]:
    return sorted(int(level) for level in np.unique(levels))


def summarize(
    rows: pd.DataFrame,
    *,
    reference: str | None = None,
    compare: Sequence[str] | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    context: SummaryContext | None = None,
    samples: Mapping[str, Sequence[str]] | None = None,
    self_parity: Mapping[str, Mapping[str, Any]] | None = None,
    calibration: Sequence[str] = (),
) -> dict[str, Any]:
    """The summary object (published schema) from the per-problem rows.

    ``reference`` defaults to the first model in model order; ``compare`` defaults to every other model. ``samples``
    (run -> its sample models) adds the pass@k block (scoring/samples.py) beside the published fields;
    ``self_parity`` (model -> its report, generation/self_parity.py) adds each such model's ``self_parity``.
    ``calibration``: the models that submit the reference as their own answer; left out of the default comparison.
    The ``audit`` block (``audit_block``) comes last, beside the published fields.
    """
    context = context or SummaryContext()
    frame = normalize_rows(rows)
    outcomes = outcomes_by_model(frame)
    order = model_order(frame, context)
    reference = order[0] if reference is None else reference
    if reference not in outcomes:
        raise ValueError(f"reference model {reference!r} is not in the rows (models: {order})")
    if compare is None:
        compared = [m for m in order if m != reference and m not in set(calibration)]
    else:
        unknown = [m for m in compare if m not in outcomes]
        if unknown:
            raise ValueError(f"--compare names models not in the rows: {unknown}")
        if reference in compare:
            raise ValueError(f"the reference {reference!r} cannot be compared with itself")
        wanted = set(compare)
        compared = [m for m in order if m in wanted]  # model order, whatever order the CLI named them in

    levels = _level_keys(next(iter(outcomes.values())).levels)
    n_problems = len(next(iter(outcomes.values())).levels)

    models: dict[str, Any] = {}
    strategy: dict[str, Any] = {}
    for name in order:
        o = outcomes[name]
        entry: dict[str, Any] = {}
        meta = context.models.get(name, ModelContext())
        if meta.label is not None:
            entry["label"] = meta.label
        entry["levels"] = {"overall": level_counts(o).to_dict()}
        for level in levels:
            entry["levels"][str(level)] = level_counts(o, o.levels == level).to_dict()
        entry["mean_completion_tokens"] = mean_completion_tokens(o)
        if meta.generation is not None:
            entry["generation"] = meta.generation
        if name in (self_parity or {}):
            entry["self_parity"] = {k: self_parity[name].get(k) for k in SELF_PARITY_FIELDS}  # type: ignore[index]
        models[name] = entry
        strategy[name] = {str(level): strategy_counts(o, o.levels == level).to_dict() for level in levels}

    boot_note = bootstrap_note(reference, n_problems, resamples, seed)
    if "paired_bootstrap" in context.notes:
        boot_note += " " + context.notes["paired_bootstrap"]
    split_note = strategy_note()
    if "level2_strategy" in context.notes:
        split_note += " " + context.notes["level2_strategy"]

    benchmark = dict(context.benchmark)
    if context.runtime is not None:
        benchmark["runtime"] = context.runtime  # the published file nests the runtime in benchmark

    summary: dict[str, Any] = {}
    if context.title is not None:
        summary["title"] = context.title
    summary["benchmark"] = benchmark
    summary["models"] = models
    summary[f"paired_bootstrap_vs_{reference}"] = bootstrap_block(
        outcomes, reference, compared, resamples=resamples, seed=seed
    )
    summary["paired_bootstrap_note"] = boot_note
    summary["level2_strategy"] = strategy
    summary["level2_strategy_note"] = split_note
    if samples:
        summary["samples"] = samples_block(outcomes, samples)
    names = {(int(lv), int(pid)): str(name) for lv, pid, name in zip(frame["level"], frame["problem_id"],
                                                                     frame["problem"])}
    summary["audit"] = audit_block(outcomes, order, names, audited_problems(rows, "degenerate"), calibration,
                                   audited_problems(rows, "tf32_sensitive"))
    summary["speed_verdicts"] = speed_verdicts_block(outcomes, order, levels, calibration, timing_mode(frame),
                                                     reference, compared, seed, names)
    return summary


AUDIT_NOTE = (
    "Beside the published counts, which stay as they are: a problem is degenerate where the evaluator's audit found "
    "that zeros, one constant per output or the reference's own output on other inputs pass the tolerance "
    "(evaluation/problem_audit.py), so an answer that ignores its inputs is credited there; without_degenerate "
    "counts every model over the other problems. geomean_speedup: the geometric mean of the speedups of correct "
    "answers (n: how many). calibration_models: the reference code submitted as its own answer (true speedup 1: "
    "its speedups show the timing noise), left out of the bootstrap's comparisons. known_issues: the problems "
    "reported unsound upstream (scoring/known_issues.py), each with its source. tf32_sensitive_problems: those "
    "whose reference outputs move beyond the tolerance with TF32 all on or all off (measured on CUDA only), so "
    "their verdicts depend on the run's TF32 mode.")


SPEED_VERDICTS_NOTE = (
    "Beside the published fast_p counts (strict speedup > p, unchanged): each correct answer timed beside the eager "
    "reference has a 95% interval for that speedup from its paired blocks (scoring/significance.py; answers timed "
    "against the baseline stage's eager time have none, and no verdict); its verdict is faster (the interval above "
    "1 + band), slower (below 1 / (1 + band)), same (within both) or ambiguous, where band is the margin around 1 "
    "that holds 98% of the calibration models' intervals on this environment (source: calibration) or the timing "
    "mode's default (source: default). eager_fast_p_significant: correct answers whose interval lies above "
    "p x (1 + band). bootstrap_with_timing_noise: the published paired bootstrap's fast_eager comparison, its "
    "resamples also drawing whether each answer is fast from its interval (read as a log-normal 95% interval; "
    "answers without one count as measured), so the difference's interval includes timing noise. "
    "placement_sensitive_problems: the problems whose placement spread (evaluation/placement_audit.py: the "
    "reference's speed over placements of its buffers in device memory) is beyond the band; every answer is judged "
    "against its problem's band, (1 + band) x spread - 1, and the calibration's band is read net of the spreads.")


def timing_mode(frame: pd.DataFrame) -> str | None:
    """The rows' timing mode (core/records.py TIMING_MODES), the most common over the rows that name one."""
    modes = frame["timing_mode"].dropna()
    return str(modes.mode().iloc[0]) if not modes.empty else None


def speed_verdicts_block(outcomes: Mapping[str, Outcomes], order: Sequence[str], levels: Sequence[int],
                         calibration: Sequence[str], mode: str | None, reference: str, compared: Sequence[str],
                         seed: int, names: Mapping[tuple[int, int], str]) -> dict[str, Any]:
    """The noise band, per model and level the speed verdicts' counts and eager_fast_p_significant, the problems
    whose placement spread is beyond the band (``names``: (level, problem_id) -> name, in the outcomes' order), and
    the fast_eager bootstrap with timing noise of each compared model against the reference."""
    measured = [o for m, o in outcomes.items() if m in set(calibration)]
    intervals = [significance.SpeedupInterval(lo, hi) for o in measured
                 for lo, hi in zip(o.speedup_eager_low[o.correct], o.speedup_eager_high[o.correct])]
    spreads = [spread for o in measured for spread in o.placement_spread[o.correct]]
    band = significance.noise_band(intervals, mode, spreads)
    models: dict[str, Any] = {}
    for name in order:
        o = outcomes[name]
        models[name] = {key: speed_verdict_counts(o, mask, band.band) for key, mask in scope_masks(o, levels).items()}
    return {"note": SPEED_VERDICTS_NOTE, "band": band.band, "source": band.source,
            "calibration_answers": band.calibration_answers, "timing_mode": mode,
            "placement_sensitive_problems": placement_sensitive(outcomes, names, band.band), "models": models,
            "bootstrap_with_timing_noise": noisy_bootstrap_block(outcomes, reference, compared, seed)}


def noisy_bootstrap_block(outcomes: Mapping[str, Outcomes], reference: str, compared: Sequence[str],
                          seed: int) -> dict[str, Any]:
    """fast_eager (the headline threshold) of each compared model against the reference, with timing noise."""
    threshold = metrics.HEADLINE_THRESHOLD[1]

    def chance(o: Outcomes) -> np.ndarray:
        return np.where(o.correct, significance.probability_fast(o.speedup_eager, o.speedup_eager_low,
                                                                 o.speedup_eager_high, threshold), 0.0)

    models = {}
    against = chance(outcomes[reference])
    for name in compared:
        delta, (low, high) = significance.noisy_paired_bootstrap(chance(outcomes[name]), against, seed=seed)
        models[name] = {"delta_pp": delta, "ci95_pp": [low, high]}
    return {"reference": reference, "metric": "fast_eager", "resamples": significance.NOISY_RESAMPLES,
            "models": models}


def placement_sensitive(outcomes: Mapping[str, Outcomes], names: Mapping[tuple[int, int], str],
                        band: float) -> dict[str, float]:
    """``L<level>/<id> <name>`` -> placement spread of each problem whose spread, as any model's row recorded it, is
    beyond 1 + ``band``: its verdicts are judged against a band widened by it."""
    spreads = np.fmax.reduce([o.placement_spread for o in outcomes.values()]) if outcomes else np.array([])
    return {entry: round(float(spread), 5) for entry, spread in zip(problem_list(dict(names)), spreads)
            if np.isfinite(spread) and spread > 1 + band}


def speed_verdict_counts(o: Outcomes, mask: np.ndarray, band: float) -> dict[str, int]:
    """One model's counts over ``mask``: each verdict (eager_faster, ...) and eager_fast_p_significant per
    threshold, each answer against its problem's band (``band`` widened by the placement spread)."""
    low = np.where(o.correct, o.speedup_eager_low, np.nan)[mask]
    high = np.where(o.correct, o.speedup_eager_high, np.nan)[mask]
    bands = significance.problem_band(band, o.placement_spread[mask])
    verdicts = [significance.verdict(significance.SpeedupInterval(lo, hi), b) if np.isfinite(lo) and
                np.isfinite(hi) else None for lo, hi, b in zip(low, high, bands)]
    counts = {field: sum(x == v for x in verdicts) for v, field in zip(significance.VERDICTS, verdict_fields())}
    counts.update({field: int(significance.significantly_fast(low, p, bands).sum())
                   for (_, p), field in zip(metrics.THRESHOLDS, significant_fields())})
    return counts


def significant_fields() -> list[str]:
    """eager_fast_1_significant, ...: the significant count of each threshold (as THRESHOLDS spells it)."""
    return [f"{metrics.fast_field('eager', key)}_significant" for key, _ in metrics.THRESHOLDS]


def verdict_fields() -> list[str]:
    """eager_faster, ...: the count of each speed verdict (significance.VERDICTS)."""
    return [f"eager_{v}" for v in significance.VERDICTS]


def scope_masks(o: Outcomes, levels: Sequence[int]) -> dict[str, np.ndarray]:
    """The problems of each scope a block counts over: overall, then each level."""
    return {"overall": np.ones_like(o.correct)} | {str(level): o.levels == level for level in levels}


def audited_problems(rows: pd.DataFrame, column: str) -> dict[tuple[int, int], str]:
    """(level, problem_id) -> problem name of every problem the audit marked in any of its rows: the rows'
    ``column`` (``degenerate``, ``tf32_sensitive``) true; none without the column."""
    if column not in rows.columns:
        return {}
    marked = rows[rows[column].astype("boolean").fillna(False).to_numpy(dtype=bool)]
    return {(int(r.level), int(r.problem_id)): str(r.problem) for r in marked.itertuples()}


def problem_list(marked: Mapping[tuple[int, int], str]) -> list[str]:
    """``L<level>/<id> <name>`` of each marked problem, in problem order."""
    return [f"L{lv}/{pid} {marked[(lv, pid)]}" for lv, pid in sorted(marked)]


def audit_block(outcomes: Mapping[str, Outcomes], order: Sequence[str], names: Mapping[tuple[int, int], str],
                degenerate: Mapping[tuple[int, int], str], calibration: Sequence[str],
                tf32_sensitive: Mapping[tuple[int, int], str] | None = None) -> dict[str, Any]:
    """The counts without the degenerate problems and the geometric-mean speedups, per model and level; the
    problems reported unsound (scoring/known_issues.py) among ``names`` ((level, problem_id) -> problem name of
    every problem); the problems whose outputs depend on the TF32 mode."""
    keys = sorted(names)  # the order of every model's outcome arrays (normalize_rows)
    kept = np.array([key not in degenerate for key in keys], dtype=bool)
    levels = _level_keys(next(iter(outcomes.values())).levels)
    models: dict[str, Any] = {}
    for name in order:
        o = outcomes[name]
        scopes = scope_masks(o, levels)
        means = {}
        for scope, mask in scopes.items():
            means[scope] = {}
            for baseline in metrics.BASELINES:
                mean, n = metrics.geometric_mean_speedup(o.correct & mask, o.speedups(baseline))
                means[scope] |= {baseline: mean, f"{baseline}_n": n}
        models[name] = {"without_degenerate": {scope: level_counts(o, mask & kept).to_dict()
                                               for scope, mask in scopes.items()},
                        "geomean_speedup": means}
    return {"note": AUDIT_NOTE, "calibration_models": [m for m in order if m in set(calibration)],
            "degenerate_problems": problem_list(degenerate),
            "tf32_sensitive_problems": problem_list(tf32_sensitive or {}),
            "known_issues": [k.to_dict() for k in known_issues((lv, pid, names[(lv, pid)]) for lv, pid in keys)],
            "models": models}


def bootstrap_reference(summary: Mapping[str, Any]) -> str:
    keys = [k for k in summary if k.startswith("paired_bootstrap_vs_")]
    if len(keys) != 1:
        raise ValueError(f"expected one paired_bootstrap_vs_<reference> block, found {keys}")
    return keys[0].removeprefix("paired_bootstrap_vs_")


def dumps_summary(summary: Mapping[str, Any]) -> str:
    """The JSON text: the published layout (indent 1), insertion-ordered keys, no NaN."""
    return json.dumps(summary, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


# ---------------------------------------------------------------------------------------------------- tables


def levels_columns() -> list[str]:
    """The levels table's columns, each column family's members named by scoring's definitions."""
    return column_names("levels", fast_counts=metrics.fast_fields(), unflagged_fast_counts=metrics.unflagged_fields(),
                        significant_fast_counts=significant_fields(), speed_verdicts=verdict_fields())


def levels_table(summary: Mapping[str, Any], rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model x level ('overall' first): the level counts, rates, the strategy split and the mean
    completion tokens of that level (from ``rows``, the rows the summary was computed from). The JSON's ``flags``
    count is the column ``flagged`` (a column named flags would shadow pandas' DataFrame.flags)."""
    outcomes = outcomes_by_model(normalize_rows(rows))
    records = []
    for name, entry in summary["models"].items():
        if name not in outcomes:
            raise ValueError(f"the summary's model {name!r} is not in the rows (models: {sorted(outcomes)})")
        own = outcomes[name]
        strategy = summary["level2_strategy"].get(name, {})
        for level, counts in entry["levels"].items():
            record: dict[str, Any] = {"model": name, "label": entry.get("label"), "level": level}
            record.update({table_name(count): value for count, value in counts.items()})
            n = counts["n"]
            record["compiled_rate"] = counts["compiled"] / n if n else None
            record["correct_rate"] = counts["correct"] / n if n else None
            if level == "overall":  # the JSON has no overall split; the table sums the levels
                parts = list(strategy.values())
                split = {f: sum(p[f] for p in parts) for f in STRATEGY_FIELDS} if parts else {}
            else:
                split = strategy.get(level, {})
            for f in STRATEGY_FIELDS:
                record[f] = split.get(f)
            mask = None if level == "overall" else own.levels == int(level)
            record["mean_completion_tokens"] = mean_completion_tokens(own, mask)
            record.update(summary.get("speed_verdicts", {}).get("models", {}).get(name, {}).get(level, {}))
            records.append(record)
    frame = pd.DataFrame.from_records(records, columns=levels_columns())
    ints = [table_name(f) for f in level_fields()] + list(STRATEGY_FIELDS) + significant_fields() + verdict_fields()
    return frame.astype({c: "Int64" for c in ints} | {"label": "string", "model": "string", "level": "string",
                                                       "mean_completion_tokens": "Float64"})


def bootstrap_table(summary: Mapping[str, Any]) -> pd.DataFrame:
    """One row per compared model x metric."""
    reference = bootstrap_reference(summary)
    records = []
    for name, results in summary[f"paired_bootstrap_vs_{reference}"].items():
        for metric, r in results.items():
            records.append({
                "model": name, "reference": reference, "metric": metric, "delta_pp": r["delta_pp"],
                "ci95_low_pp": r["ci95_pp"][0], "ci95_high_pp": r["ci95_pp"][1],
                "gained": r["gained"], "lost": r["lost"],
            })
    frame = pd.DataFrame.from_records(records, columns=column_names("bootstrap"))
    return frame.astype({"model": "string", "reference": "string", "metric": "string", "delta_pp": "float64",
                         "ci95_low_pp": "float64", "ci95_high_pp": "float64", "gained": "int64", "lost": "int64"})


def _pct(count: int, n: int) -> str:
    return f"{count} ({100.0 * count / n:.1f}%)" if n else str(count)


def _pp(x: float) -> str:
    return f"{x:+.1f}"


# How the rows' times were taken, by the runtime's device (the evaluation's timing_mode).
TIMING_WORDS = {"cuda": "CUDA events around each call, after an L2 flush",
                "cpu": "wall clock in the Triton interpreter (says nothing about GPU speed)"}


def markdown_header(summary: Mapping[str, Any]) -> list[str]:
    """What was measured: the device, the timing, the protocol, the problems, the calibration models and the
    degenerate problems (``audit``), before any number."""
    bench = summary.get("benchmark") or {}
    runtime = bench.get("runtime") or {}
    device = runtime.get("gpu_name") or (f"CPU ({runtime['cpu_model']})" if runtime.get("cpu_model") else None)
    n = next(iter(summary["models"].values()))["levels"]["overall"]["n"] if summary["models"] else 0
    lines = [f"# {summary.get('title') or bench.get('name') or 'KernelBench'}", "",
             f"Measured on {device or 'an unrecorded device'}; timing: "
             f"{TIMING_WORDS.get(runtime.get('device'), 'not recorded')}; protocol: "
             f"{bench.get('protocol') or 'not recorded'}; {n} problems per model, each in every denominator."]
    audit = summary.get("audit") or {}
    if audit.get("calibration_models"):
        lines.append(f"Calibration: {', '.join(audit['calibration_models'])}: the reference code submitted as its "
                     "own answer (true speedup 1: its speedups show the timing noise), left out of the bootstrap's "
                     "comparisons.")
    if audit:
        degenerate = audit["degenerate_problems"]
        listed = (": " + ", ".join(degenerate[:20]) + (", ..." if len(degenerate) > 20 else "")) if degenerate else ""
        lines.append(f"Degenerate problems (zeros, a constant or another input's output passes the tolerance): "
                     f"{len(degenerate)} of {n}{listed}.")
        if audit.get("tf32_sensitive_problems"):
            sensitive = audit["tf32_sensitive_problems"]
            lines.append(f"TF32-sensitive problems (the reference's outputs move beyond the tolerance with TF32 all "
                         f"on or all off, so their verdicts depend on the TF32 mode): {len(sensitive)} of {n}: "
                         f"{', '.join(sensitive[:20])}{', ...' if len(sensitive) > 20 else ''}.")
        if audit.get("known_issues"):
            reported = ", ".join(f"L{k['level']}/{k['problem_id']} ({k['kind']}, {k['source']})"
                                 for k in audit["known_issues"])
            lines.append(f"Reported unsound upstream: {reported}.")
    return lines + [""]


def _markdown_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"


def _markdown_head(header: Sequence[str], text_columns: int = 1) -> list[str]:
    """A table's header row and its rule: the first ``text_columns`` left-aligned, the rest (numbers) right."""
    return [_markdown_row(header), "|" + "|".join(["---"] * text_columns + ["---:"] * (len(header) - text_columns)) + "|"]


def audit_table(summary: Mapping[str, Any]) -> list[str]:
    """Per model: the headline counts without the degenerate problems and the geometric-mean speedups."""
    audit = summary.get("audit")
    if not audit:
        return []
    fast = [metrics.fast_field(baseline, metrics.HEADLINE_THRESHOLD[0]) for baseline in metrics.BASELINES]
    header = ["model", "n without degenerate", "correct", *(f.replace("_fast_", " fast_") for f in fast),
              *(f"geomean speedup {b} (n)" for b in metrics.BASELINES)]
    lines = ["", *_markdown_head(header)]
    for name, entry in audit["models"].items():
        c, means = entry["without_degenerate"]["overall"], entry["geomean_speedup"]["overall"]
        cells = [name, str(c["n"]), _pct(c["correct"], c["n"]), *(_pct(c[f], c["n"]) for f in fast)]
        cells += [f"{means[b]:.3f} ({means[f'{b}_n']})" if means[b] is not None else "-" for b in metrics.BASELINES]
        lines.append(_markdown_row(cells))
    return lines


def speed_verdicts_table(summary: Mapping[str, Any]) -> list[str]:
    """Per model: the speed verdicts against the paired eager reference and the significant fast_p counts."""
    block = summary.get("speed_verdicts")
    judged = [levels["overall"] for levels in (block or {}).get("models", {}).values()]
    if not any(c[f] for c in judged for f in verdict_fields()):
        return []  # no answer was timed beside the reference: nothing to say
    header = ["model", *significance.VERDICTS, *(f.replace("eager_fast_", "fast_") for f in significant_fields())]
    lines = ["", f"Speed verdicts against the eager reference timed beside each answer (noise band "
                 f"{100 * block['band']:.1f}%, {block['source']}; scoring/significance.py):", "",
             *_markdown_head(header)]
    for name, levels in block["models"].items():
        c = levels["overall"]
        lines.append(_markdown_row([name, *(str(c[f]) for f in verdict_fields() + significant_fields())]))
    widened = block.get("placement_sensitive_problems") or {}
    if widened:
        listed = ", ".join(f"{problem} ({spread:.3f})" for problem, spread in list(widened.items())[:20])
        lines += ["", f"Placement-sensitive problems (the reference's speed moves with where its buffers lie in "
                      f"device memory by more than the band; their verdicts use the band widened by that spread): "
                      f"{len(widened)}: {listed}{', ...' if len(widened) > 20 else ''}."]
    return lines


def markdown_table(summary: Mapping[str, Any]) -> str:
    """What was measured (``markdown_header``), the headline table: overall counts (and % of all problems) per
    model, and the bootstrap delta on correct; then the same without the degenerate problems (``audit_table``) and
    the speed verdicts (``speed_verdicts_table``)."""
    reference = bootstrap_reference(summary)
    boot = summary[f"paired_bootstrap_vs_{reference}"]
    fast = [(metrics.fast_field(baseline, key), f"{baseline} fast_{key}")
            for baseline in metrics.BASELINES for key, _ in metrics.THRESHOLDS]
    header = ["model", "label", "n", "compiled", "correct", *(title for _, title in fast), "flags",
              f"Δ correct vs {reference}, pp [95% CI]"]
    lines = markdown_header(summary)
    lines += _markdown_head(header, text_columns=2)
    for name, entry in summary["models"].items():
        c = entry["levels"]["overall"]
        n = c["n"]
        if name in boot:
            b = boot[name]["correct"]
            delta = f"{_pp(b['delta_pp'])} [{_pp(b['ci95_pp'][0])}, {_pp(b['ci95_pp'][1])}]"
        else:
            delta = "reference" if name == reference else ""
        cells = [name, str(entry.get("label") or ""), str(n), _pct(c["compiled"], n), _pct(c["correct"], n)]
        cells += [_pct(c[count], n) for count, _ in fast]
        cells += [str(c["flags"]), delta]
        lines.append(_markdown_row(cells))
    lines += audit_table(summary)
    lines += speed_verdicts_table(summary)
    for name, entry in summary["models"].items():
        parity = entry.get("self_parity")
        if parity and parity.get("prompts"):
            lines.append(f"\nSelf-parity of {name}: {parity['identical']} of {parity['prompts']} sampled prompts "
                         f"generated identically twice (token agreement {parity['token_agreement']:.3f}).")
    for run, entry in (summary.get("samples") or {}).items():
        passes = ", ".join(f"pass@{k} {100 * v:.1f}%" for k, v in entry["pass_at_k"].items())
        lines.append(f"\nRun {run}, {entry['n']} samples per problem ({', '.join(entry['models'])}): {passes}.")
    return "\n".join(lines) + "\n"


def write_outputs(
    summary: Mapping[str, Any], out: Path, rows: pd.DataFrame, *, tables_dir: Path | None = None,
    markdown: Path | None = None,
) -> list[Path]:
    """Write the JSON, the tables (levels.parquet, bootstrap.parquet) and optionally the markdown table; ``rows``
    are the rows the summary was computed from."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(dumps_summary(summary))
    tables_dir = Path(tables_dir) if tables_dir is not None else out.parent / "tables"
    tables_dir.mkdir(parents=True, exist_ok=True)
    written = [out, tables_dir / "levels.parquet", tables_dir / "bootstrap.parquet"]
    write_parquet(written[1], levels_table(summary, rows), "levels")
    write_parquet(written[2], bootstrap_table(summary), "bootstrap")
    if markdown is not None:
        markdown = Path(markdown)
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(markdown_table(summary))
        written.append(markdown)
    return written
