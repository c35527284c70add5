"""Speed verdicts and fast_p_significant (workflow_scripts/scoring/significance.py): unit checks on timed calls
drawn as paired timing records them, and the summary's counts from rows."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from workflow_scripts.scoring import significance
from workflow_scripts.scoring.significance import SpeedupInterval, noise_band, speedup_interval, verdict

BLOCK = 10


def _paired(ratio: float, noise: float, seed: int, blocks: int = 10, drift: float = 0.0) -> tuple[list, list]:
    """An answer ``ratio`` times faster than its reference, timed in ABBA blocks of BLOCK calls, each call with
    relative noise ``noise`` and the GPU's state drifting by ``drift`` per block (both sides see it)."""
    rng = np.random.default_rng(seed)
    answer, reference = [], []
    for b in range(blocks):
        state = 1.0 + drift * b
        reference += list(2.0 * state * (1 + noise * rng.standard_normal(BLOCK)))
        answer += list(2.0 / ratio * state * (1 + noise * rng.standard_normal(BLOCK)))
    return answer, reference


def test_a_five_percent_faster_answer_is_faster_and_the_reference_itself_the_same() -> None:
    band = 0.015
    faster = speedup_interval(*_paired(1.05, 0.01, 1), BLOCK, BLOCK)
    assert faster is not None and verdict(faster, band) == "faster" and faster.low < 1.05 < faster.high
    same = [verdict(speedup_interval(*_paired(1.0, 0.01, seed), BLOCK, BLOCK), band) for seed in range(50)]
    assert same.count("same") >= 49 and "faster" not in same
    slower = speedup_interval(*_paired(0.9, 0.01, 2), BLOCK, BLOCK)
    assert verdict(slower, band) == "slower"


def test_drift_shared_by_both_sides_cancels_in_the_block_ratios() -> None:
    drifting = speedup_interval(*_paired(1.0, 0.002, 3, drift=0.05), BLOCK, BLOCK)
    assert drifting is not None and drifting.high / drifting.low < 1.01  # a 45% drift, and a tight interval
    assert verdict(drifting, 0.01) == "same"


def test_a_host_stall_in_one_call_leaves_the_verdicts_as_they_were() -> None:
    """A stall of several milliseconds inside one timed call (the timing thread descheduled between its events), as
    the H200 of s24 showed, on either side: the verdicts of a 5%-faster answer and of the reference itself stand."""
    band = 0.01
    answer, reference = _paired(1.05, 0.003, 6)
    answer[37] += 10.0  # one call of the answer's fourth block, 5x its time
    reference[62] += 8.0  # and one of the reference's seventh
    stalled = speedup_interval(answer, reference, BLOCK, BLOCK)
    assert stalled is not None and verdict(stalled, band) == "faster" and stalled.low < 1.05 < stalled.high
    answer, reference = _paired(1.0, 0.003, 7)
    reference[15] += 10.0
    itself = speedup_interval(answer, reference, BLOCK, BLOCK)
    assert itself is not None and verdict(itself, band) == "same"
    # Stalls in most blocks are the environment's noise, not a tail to trim: the interval says so.
    answer, reference = _paired(1.05, 0.003, 8)
    for call in range(5, 100, 20):
        answer[call] += 10.0
    assert verdict(speedup_interval(answer, reference, BLOCK, BLOCK), band) == "ambiguous"


def test_the_trimmed_interval_is_yuens_and_the_t_interval_where_nothing_is_cut() -> None:
    four = np.array([0.01, 0.03, -0.02, 0.02])  # 4 blocks: nothing cut
    centre, half = significance.trimmed_mean_interval(four)
    assert centre == pytest.approx(four.mean())
    assert half == pytest.approx(stats.t.ppf(0.975, 3) * four.std(ddof=1) / 2)
    ten = np.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 90.0])  # 2 cut from each end, 6 kept
    centre, half = significance.trimmed_mean_interval(ten)
    winsorized = np.array([2.0, 2.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 7.0, 7.0])
    assert centre == pytest.approx(4.5)  # the mean of 2..7: the outlier gone
    assert half == pytest.approx(stats.t.ppf(0.975, 5) * np.sqrt(9 * winsorized.var(ddof=1) / (6 * 5)))


def test_noisy_timing_is_ambiguous_not_faster() -> None:
    noisy = speedup_interval(*_paired(1.03, 0.3, 4, blocks=3), BLOCK, BLOCK)
    assert verdict(noisy, 0.015) == "ambiguous"


def test_one_block_falls_back_to_the_calls() -> None:
    answer, reference = _paired(1.2, 0.01, 5, blocks=1)
    interval = speedup_interval(answer, reference, len(answer), len(reference))
    assert interval is not None and interval.low < 1.2 < interval.high and verdict(interval, 0.02) == "faster"
    assert speedup_interval([1.0], [1.0], 1, 1) is None  # one call each: no spread, no interval


def test_the_band_holds_the_calibration_intervals_or_is_the_default() -> None:
    """The band is the margin around 1 that holds 98% of the calibration model's intervals (each by its farther
    end), so the calibration itself reads same on about 98% of its problems by construction; the check with teeth
    is that a real 5% speedup still reads faster against it."""
    calibration = [SpeedupInterval(1.0 + 0.001 * k - 0.002, 1.0 + 0.001 * k + 0.002) for k in range(-20, 21)]
    measured = noise_band(calibration, "cuda_events")
    assert measured.source == "calibration" and measured.calibration_answers == 41
    assert measured.band == pytest.approx(0.0216, abs=0.0006)  # the farther ends reach 1.022 and 0.978
    assert [verdict(i, measured.band) for i in calibration].count("same") >= 40
    faster = speedup_interval(*_paired(1.05, 0.01, 1), BLOCK, BLOCK)
    assert verdict(faster, measured.band) == "faster"
    default = noise_band(calibration[:5], "cuda_events")
    assert (default.source, default.band) == ("default", significance.DEFAULT_BAND["cuda_events"])
    assert noise_band([], "cpu_wall_interpreter").band == significance.DEFAULT_BAND["cpu_wall_interpreter"]


def test_verdicts_at_the_band_edges() -> None:
    assert verdict(SpeedupInterval(1.021, 1.05), 0.02) == "faster"
    assert verdict(SpeedupInterval(1.019, 1.05), 0.02) == "ambiguous"
    assert verdict(SpeedupInterval(0.99, 1.01), 0.02) == "same"
    assert verdict(SpeedupInterval(0.90, 0.97), 0.02) == "slower"
    assert verdict(None, 0.02) is None
    low = np.array([1.1, 1.51, np.nan, 2.2])
    assert significance.significantly_fast(low, 1.0, 0.02).tolist() == [True, True, False, True]
    assert significance.significantly_fast(low, 1.5, 0.02).tolist() == [False, False, False, True]


def test_the_chance_of_being_fast_follows_the_interval_or_the_measurement() -> None:
    speedup = np.array([1.5, 1.0, 1.2, 0.8, np.nan])
    low = np.array([1.4, 0.9, np.nan, np.nan, np.nan])
    high = np.array([1.6, 1.0 / 0.9, np.nan, np.nan, np.nan])
    chance = significance.probability_fast(speedup, low, high, 1.0)
    assert chance[0] == pytest.approx(1.0) and chance[1] == pytest.approx(0.5)  # far above 1; centred on 1
    assert list(chance[2:]) == [1.0, 0.0, 0.0]  # no interval: as measured; no speedup: never fast


def test_timing_noise_widens_the_bootstrap_interval() -> None:
    # 100 problems: the model is fast on half of them for certain, or on each with even chance (speedups inside the
    # noise); the reference never is. The expected difference is 50 points either way; noise widens the interval.
    certain, coin = np.r_[np.ones(50), np.zeros(50)], np.full(100, 0.5)
    never = np.zeros(100)
    delta, (low, high) = significance.noisy_paired_bootstrap(certain, never, seed=1)
    noisy_delta, (noisy_low, noisy_high) = significance.noisy_paired_bootstrap(coin, never, seed=1)
    assert delta == noisy_delta == pytest.approx(50.0)
    assert low < 50 < high and noisy_low < 50 < noisy_high
    assert noisy_high - noisy_low > 1.2 * (high - low)
    with pytest.raises(ValueError, match="cannot bootstrap"):
        significance.noisy_paired_bootstrap(np.zeros(0), np.zeros(0))


def test_a_placement_spread_widens_its_problems_band_only() -> None:
    """L2/77 on the H200: the reference as its own answer read 1.30 on every block, because its process and the
    trusted side landed on different placements of the dgrad kernel's buffers (placement_audit). With the spread the
    trusted side measured, that reads same; a 5% speedup on a problem without spread still reads faster."""
    calibration_l2_77 = SpeedupInterval(1.298, 1.302)
    bands = significance.problem_band(0.025, np.array([1.31, np.nan, 0.99, 1.0]))
    assert bands == pytest.approx([1.025 * 1.31 - 1, 0.025, 0.025, 0.025])
    assert verdict(calibration_l2_77, 0.025) == "faster"  # what the band alone says
    assert verdict(calibration_l2_77, bands[0]) == "same"
    assert verdict(SpeedupInterval(1.045, 1.055), bands[1]) == "faster"
    assert significance.significantly_fast(np.array([1.298, 1.298]), 1.0, bands[:2]).tolist() == [False, True]


def test_the_calibration_band_is_read_net_of_placement_spreads() -> None:
    calibration = [SpeedupInterval(1.0 + 0.001 * k - 0.002, 1.0 + 0.001 * k + 0.002) for k in range(-20, 21)]
    outliers = [SpeedupInterval(1.298, 1.302)] * 3  # three problems on split placements
    spreads = [np.nan] * len(calibration) + [1.31] * 3
    assert noise_band(calibration + outliers, "cuda_events").band > 0.25  # counted as noise, they take the band
    assert noise_band(calibration + outliers, "cuda_events", spreads).band == pytest.approx(0.0216, abs=0.0006)
