"""The one definition of speedup, fast_p and the review-flag limit. Rows, the summary and the figures all use
these: change the definition here and every published number follows.

- speedup = baseline time / answer time, for a correct answer with both times known (else unknown);
- the eager baseline time of an answer is the eager reference timed beside it (paired timing: same inputs, blocks
  alternating with the answer's, so both see the same GPU state) when its evaluation has one, and the baseline
  stage's eager time otherwise (``eager_baseline``); each time is its trials' headline statistic
  (core/records.py HEADLINE_STATISTIC, the mean); the torch.compile baseline is always the baseline stage's. A
  problem whose eager baseline failed in the baseline stage has no eager speedup either way;
- fast_p = the answer is correct and its speedup is strictly greater than p (KernelBench's definition); an
  unknown speedup is never fast;
- a correct answer whose speedup over either baseline exceeds FLAG_SPEEDUP is flagged for review.
"""

from __future__ import annotations

import math

import numpy as np

from workflow_scripts.core.records import headline_ms

# Speedup thresholds of the published fast_p counts; the key is how the published file spells p. Every name that
# carries a threshold (summary.json's eager_fast_1.5, levels.parquet's columns, the markdown header, explain, the
# figures' dots, the report's captions) is made from this tuple at the time it is used: add a threshold here and
# all of them follow.
THRESHOLDS: tuple[tuple[str, float], ...] = (("1", 1.0), ("1.5", 1.5), ("2", 2.0))
# The threshold of the unflagged counts (eager_fast_1_unflagged), the strategy split and the bootstrap's fast
# metrics: KernelBench's fast_1, the published headline.
HEADLINE_THRESHOLD: tuple[str, float] = ("1", 1.0)
# The two baselines a speedup is taken against, in the published order of the counts (eager first).
BASELINES: tuple[str, ...] = ("eager", "compile")
FLAG_SPEEDUP = 10.0
SUSPICIOUS_SPEEDUP_FLAG = "suspicious_speedup"


def fast_field(baseline: str, key: str) -> str:
    """The published name of a fast_p count, e.g. eager_fast_1.5 (``key``: the threshold as THRESHOLDS spells it)."""
    return f"{baseline}_fast_{key}"


def fast_fields() -> list[str]:
    """Every fast_p count, in the published order: each baseline, each threshold."""
    return [fast_field(baseline, key) for baseline in BASELINES for key, _ in THRESHOLDS]


def unflagged_fields() -> list[str]:
    """The headline fast_p count of each baseline without the flagged answers (eager_fast_1_unflagged, ...)."""
    return [f"{fast_field(baseline, HEADLINE_THRESHOLD[0])}_unflagged" for baseline in BASELINES]


def thresholds_text() -> str:
    """The thresholds as a reader sees them: "1, 1.5, 2"."""
    return ", ".join(key for key, _ in THRESHOLDS)


def speedup(baseline_ms: float | None, runtime_ms: float | None) -> float | None:
    if baseline_ms is None or runtime_ms is None or runtime_ms <= 0 or not math.isfinite(baseline_ms):
        return None
    return baseline_ms / runtime_ms


def eager_baseline(evaluation: dict, baseline: dict) -> tuple[float | None, str | None]:
    """(eager milliseconds, source) for one answer: "paired" (timed beside it) or "baseline" (the baseline stage's
    time for the problem); (None, None) when the baseline stage's eager run failed or neither exists."""
    if baseline.get("eager_status") != "ok":
        return None, None
    paired = headline_ms((evaluation.get("paired_reference") or {}).get("stats"))
    if paired is not None:
        return paired, "paired"
    if baseline.get("eager_ms") is None:
        return None, None
    return float(baseline["eager_ms"]), "baseline"


def exceeds_flag_limit(*speedups: float | None) -> bool:
    return any(s is not None and s > FLAG_SPEEDUP for s in speedups)


def fast(correct: np.ndarray, speedups: np.ndarray, p: float) -> np.ndarray:
    """Per problem: correct and speedup > p (NaN, an unknown speedup, is never fast)."""
    with np.errstate(invalid="ignore"):
        return correct & (speedups > p)


def fast_counts(correct: np.ndarray, speedups: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The number of fast answers at every p of ``grid`` at once (the same definition as ``fast``)."""
    values = np.sort(speedups[correct & ~np.isnan(speedups)])
    return values.size - np.searchsorted(values, grid, side="right")


def geometric_mean_speedup(correct: np.ndarray, speedups: np.ndarray) -> tuple[float | None, int]:
    """(geometric mean, count) of the known positive speedups of correct answers, as KernelBench's users report it;
    None over no answer."""
    with np.errstate(invalid="ignore"):
        use = correct & np.isfinite(speedups) & (speedups > 0)
    count = int(use.sum())
    return (float(np.exp(np.log(speedups[use]).mean())) if count else None), count


def flagged(correct: np.ndarray, speedup_eager: np.ndarray, speedup_compile: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return correct & ((speedup_eager > FLAG_SPEEDUP) | (speedup_compile > FLAG_SPEEDUP))
