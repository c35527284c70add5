"""Whether a speedup is more than timing noise: the one definition of the speed verdicts and of fast_p_significant.

KernelBench's fast_1 (speedup strictly above 1) is partly a coin toss: the reference submitted as its own answer
reads 0.965-1.033 under KernelBench's harness. Beside the published counts (scoring/metrics.py, unchanged), each
correct answer gets:

- an interval for its speedup over the eager reference timed beside it (``speedup_interval``). Paired timing's blocks
  are independent runs interleaved in one exclusive window (ABBA), so block b gives the ratio r_b = mean of the
  reference's block / mean of the answer's block, and the interval is the ``CONFIDENCE`` interval of the
  ``TRIM``-trimmed mean of log r_b (Yuen's, ``trimmed_mean_interval``), exponentiated.
  Trimmed because a host stall of a few milliseconds inside one timed call (the timing thread descheduled between
  its start event and its launch) moves its block's mean by a tenth of the stall. On the H200 of s24 the plain
  t-interval of a 5%-faster answer read 0.91-1.10 while the medians of its calls read 1.046 (which blocks stalled
  was not recorded). A stall on either side moves one ratio to one tail, where the trimming drops it; so does an
  answer that skips work on a few calls (the upper tail). With fewer than ``MIN_BLOCKS`` blocks (the CPU's short protocol) the calls stand
  in for the blocks: a delta-method interval for log(mean reference) - log(mean answer) from the two sides' calls;
- a verdict against the noise band ``band`` (``noise_band``): what the calibration model (the reference as its own
  answer: true speedup 1) measured on the same environment, the margin around 1 that holds ``NOISE_QUANTILE`` of its
  intervals (the quantile of each interval's farther end, |log|), once it has at least ``MIN_CALIBRATION`` of them;
  else ``DEFAULT_BAND`` of the timing mode. The band is then what the environment cannot tell from 1 even for the
  same code in two processes (a cuDNN algorithm chosen differently, the answer process's own overhead), beside the
  random noise each interval already holds. ``faster``:
  the interval's low end above 1 + band; ``slower``: its high end below 1 / (1 + band); ``same``: the whole interval
  within [1 / (1 + band), 1 + band]; ``ambiguous`` otherwise;
- fast_p_significant: correct and the interval's low end above p x (1 + band): a fast_p that noise cannot explain.
- per problem, the band widened by the placement spread the trusted side measured (``problem_band``;
  evaluation/placement_audit.py): a kernel whose speed follows where its buffers lie in device memory can put the
  answer's process and the trusted side on different speeds for every block, which no interval of theirs shows. The
  calibration's intervals are read net of their problem's spread, so the environment's band is not counted twice.

- a paired bootstrap that includes timing noise (``noisy_paired_bootstrap``): the published bootstrap resamples
  problems and counts each answer fast or not as measured; this one also draws, in every resample, whether each
  answer is fast from its interval (``probability_fast``: the interval read as a log-normal 95% interval of the true
  speedup), so a fast_1 comparison that rests on speedups inside the noise widens accordingly.

Only the paired eager reference has an interval: the torch.compile baseline is timed in another job, in another
window, so nothing here bounds the drift between the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
MIN_BLOCKS = 3
# The share of the block ratios trimmed from each tail before the interval: 2 of the default 10 blocks each side,
# none below 5 blocks.
TRIM = 0.2
NOISE_QUANTILE = 0.98
MIN_CALIBRATION = 20
# The band where no calibration model measured one: on CUDA, twice the p90 |speedup - 1| of the calibration runs on
# H100s and H200s (0.3-1.3%, bench/README.md s18-s20); in the CPU interpreter, whose wall times share the host.
DEFAULT_BAND: dict[str, float] = {"cuda_events": 0.025, "cpu_wall_interpreter": 0.15}
VERDICTS = ("faster", "slower", "same", "ambiguous")
# Resamples of the bootstrap with timing noise: each draws every answer's outcome anew, so it costs problems x
# comparisons draws per resample (the published bootstrap's 100,000 would take seconds here).
NOISY_RESAMPLES = 10_000
Z95 = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))


@dataclass(frozen=True)
class SpeedupInterval:
    low: float
    high: float


@dataclass(frozen=True)
class NoiseBand:
    band: float  # a speedup within [1 / (1 + band), 1 + band] is indistinguishable from 1
    source: str  # "calibration" (measured by the calibration models on this environment) or "default"
    calibration_answers: int  # correct calibration answers it was measured over


def blocks(trials: Sequence[float], block_trials: int) -> list[list[float]]:
    """``trials`` in consecutive blocks of ``block_trials`` (the last may be shorter), as timing.paired_blocks
    split them."""
    size = max(1, int(block_trials))
    return [list(trials[i:i + size]) for i in range(0, len(trials), size)]


def speedup_interval(answer_trials: Sequence[float], reference_trials: Sequence[float], block_trials: int,
                     reference_block_trials: int) -> SpeedupInterval | None:
    """The interval of the reference-over-answer speedup from the two sides' timed calls (each in the order they
    ran, in blocks of ``block_trials`` and ``reference_block_trials``); None without enough positive times."""
    answer = blocks(answer_trials, block_trials)
    reference = blocks(reference_trials, reference_block_trials)
    if len(answer) == len(reference) >= MIN_BLOCKS:
        logs = [math.log(np.mean(r) / np.mean(a)) for a, r in zip(answer, reference)
                if np.mean(a) > 0 and np.mean(r) > 0]
        if len(logs) < MIN_BLOCKS:
            return None
        centre, half = trimmed_mean_interval(np.array(logs))
        return SpeedupInterval(math.exp(centre - half), math.exp(centre + half))
    return _calls_interval(np.asarray(answer_trials, dtype=float), np.asarray(reference_trials, dtype=float))


def trimmed_mean_interval(values: np.ndarray) -> tuple[float, float]:
    """Yuen's ``CONFIDENCE`` interval of the ``TRIM``-trimmed mean of ``values`` (at least 3): its centre and
    half-width. g = floor(TRIM n) values cut from each end, h = n - 2g kept; the standard error from the winsorized
    variance s_w^2, sqrt((n - 1) s_w^2 / (h (h - 1))), with h - 1 degrees of freedom: the plain t-interval where
    nothing is cut (g = 0). (scipy's ``mstats.trimmed_mean_ci`` divides by (1 - 2 TRIM) sqrt(n) instead: 1.67x the
    t-interval's width at 3 or 4 values, where nothing is cut.)"""
    ordered = np.sort(values)
    n = ordered.size
    cut = int(TRIM * n)
    kept = n - 2 * cut
    winsorized = np.clip(ordered, ordered[cut], ordered[n - cut - 1])
    error = math.sqrt((n - 1) * float(np.var(winsorized, ddof=1)) / (kept * (kept - 1)))
    return float(np.mean(ordered[cut:n - cut])), _t(kept - 1) * error


def _calls_interval(answer: np.ndarray, reference: np.ndarray) -> SpeedupInterval | None:
    """The delta-method interval from the calls themselves: log(mean reference) - log(mean answer), each mean's
    relative standard error sd / (mean sqrt(n))."""
    if answer.size < 2 or reference.size < 2 or answer.mean() <= 0 or reference.mean() <= 0:
        return None
    relative = [float(np.std(x, ddof=1) / (x.mean() * math.sqrt(x.size))) for x in (answer, reference)]
    centre = math.log(reference.mean() / answer.mean())
    half = _t(min(answer.size, reference.size) - 1) * math.hypot(*relative)
    return SpeedupInterval(math.exp(centre - half), math.exp(centre + half))


def _t(degrees: int) -> float:
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, max(1, degrees)))


def noise_band(calibration: Sequence[SpeedupInterval], timing_mode: str | None,
               spreads: Sequence[float] | None = None) -> NoiseBand:
    """The band from the calibration models' intervals on this environment (correct answers timed beside the
    reference), each net of its problem's placement spread (``spreads``, aligned; NaN or absent: none), or the
    timing mode's default where there are fewer than ``MIN_CALIBRATION``."""
    nets = np.log(placement_factor(np.asarray(spreads if spreads is not None else [np.nan] * len(calibration),
                                              dtype=float)))
    edges = np.array([max(0.0, max(abs(math.log(i.low)), abs(math.log(i.high))) - net)
                      for i, net in zip(calibration, nets)
                      if np.isfinite(i.low) and np.isfinite(i.high) and i.low > 0 and i.high > 0])
    if edges.size >= MIN_CALIBRATION:
        return NoiseBand(float(math.expm1(np.quantile(edges, NOISE_QUANTILE))), "calibration", int(edges.size))
    default = DEFAULT_BAND.get(timing_mode or "", max(DEFAULT_BAND.values()))
    return NoiseBand(default, "default", int(edges.size))


def placement_factor(spread: np.ndarray) -> np.ndarray:
    """Per answer, its problem's placement spread as a factor: the spread where measured and above 1, else 1."""
    spread = np.asarray(spread, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where(np.isfinite(spread) & (spread > 1), spread, 1.0)


def problem_band(band: float, spread: np.ndarray) -> np.ndarray:
    """Per answer, the band of its problem: (1 + band) x placement spread - 1 (``band`` where none was measured)."""
    return (1 + band) * placement_factor(spread) - 1


def verdict(interval: SpeedupInterval | None, band: float) -> str | None:
    """faster, slower, same or ambiguous (None without an interval: not correct, or not timed beside the
    reference)."""
    if interval is None:
        return None
    if interval.low > 1 + band:
        return "faster"
    if interval.high < 1 / (1 + band):
        return "slower"
    if interval.low >= 1 / (1 + band) and interval.high <= 1 + band:
        return "same"
    return "ambiguous"


def significantly_fast(low: np.ndarray, p: float, band: float | np.ndarray) -> np.ndarray:
    """Per answer: the interval's low end above p x (1 + band), ``band`` one for all or one per answer (NaN, no
    interval, never is)."""
    with np.errstate(invalid="ignore"):
        return low > p * (1 + band)


def probability_fast(speedup: np.ndarray, low: np.ndarray, high: np.ndarray, p: float) -> np.ndarray:
    """Per answer, the chance that its true speedup exceeds ``p``: its interval read as a log-normal ``CONFIDENCE``
    interval (centre the mean of the log ends, spread their half-width / z); without an interval (NaN ends: not
    timed beside the reference) the measured ``speedup > p`` as 1 or 0; an unknown speedup 0. The interval's
    half-width is a t quantile (``speedup_interval``; its degrees of freedom are not in the rows), so reading it
    with z overstates the spread by t / z: 2.57 / 1.96 at 10 blocks (5 degrees of freedom once trimmed), the noise
    side of the error."""
    centre = (np.log(low) + np.log(high)) / 2
    spread = (np.log(high) - np.log(low)) / (2 * Z95)
    measured = np.where(np.isfinite(speedup) & (speedup > p), 1.0, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        from_interval = np.where(spread > 0, stats.norm.sf((math.log(p) - centre) / spread),
                                 (centre > math.log(p)).astype(float))
    return np.where(np.isfinite(low) & np.isfinite(high) & (low > 0), from_interval, measured)


def noisy_paired_bootstrap(model: np.ndarray, reference: np.ndarray, *, resamples: int = NOISY_RESAMPLES,
                           seed: int = 0) -> tuple[float, tuple[float, float]]:
    """The mean difference of success between two models in percentage points and its 95% percentile interval,
    resampling the problems and, in each resample, drawing each answer's success with its probability (``model``,
    ``reference``: per problem, e.g. ``probability_fast``)."""
    model, reference = np.asarray(model, dtype=float), np.asarray(reference, dtype=float)
    n = model.size
    if n == 0 or reference.size != n:
        raise ValueError(f"cannot bootstrap {n} problems against {reference.size}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))
    draws = rng.random((resamples, n))
    # One draw per problem per resample for each model (the same measurement where a problem is picked twice).
    wins = (draws[np.arange(resamples)[:, None], picks] < model[picks]).astype(float)
    ref_draws = rng.random((resamples, n))
    ref_wins = (ref_draws[np.arange(resamples)[:, None], picks] < reference[picks]).astype(float)
    means = (wins - ref_wins).mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return 100.0 * float((model - reference).mean()), (100.0 * float(low), 100.0 * float(high))
