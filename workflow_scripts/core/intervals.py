"""Time intervals: how much of a span a set of (start, end) intervals covers, each second counted once however many
intervals hold it (the GPU timeline's busy share; a baseline's compile time less its waits and stops)."""

from __future__ import annotations


def covered_seconds(intervals: list[tuple[float, float]], low: float = float("-inf"),
                    high: float = float("inf")) -> float:
    """Seconds of [low, high] that at least one interval covers (overlaps counted once)."""
    total, reach = 0.0, low
    for start, end in sorted(intervals):
        start, end = max(start, reach), min(end, high)
        if end > start:
            total += end - start
            reach = end
    return total


def overlap_seconds(first: list[tuple[float, float]], second: list[tuple[float, float]]) -> float:
    """Seconds that both sets of intervals cover: |first & second| = |first| + |second| - |first + second|."""
    return covered_seconds(first) + covered_seconds(second) - covered_seconds(first + second)
