"""What the answer's process says, validated: every value it sends is evidence, never a verdict, and only
well-typed, finite, bounded values are kept. A timing block whose raw numbers or launch counts are not what the
protocol asked for is a forged message (``ProtocolError``: the answer's ``crash``, flagged
``result_channel_forged``)."""

from __future__ import annotations

from typing import Any

from workflow_scripts.evaluation import timing
from workflow_scripts.evaluation.channel import ProtocolError


def number(x: Any) -> float | None:
    """A finite float (an int or a float, not a bool), else None."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        x = float(x)
    except OverflowError:  # an integer beyond any float (JSON allows 10**400)
        return None
    return x if x == x and abs(x) != float("inf") else None


def count(x: Any) -> int | None:
    """A non-negative integer below 2**62 (a launch count, an index), else None."""
    return int(x) if isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 62 else None


def raw_times(raw: Any) -> timing.RawTimes:
    """One block's raw numbers as the answer's process sent them; anything but lists of numbers is a forged
    message."""
    if not isinstance(raw, dict):
        raise ProtocolError("timing without raw numbers")
    values: dict[str, list[float]] = {}
    for name in timing.RawTimes.__dataclass_fields__:
        xs = raw.get(name) or []
        if not isinstance(xs, list) or len(xs) > 100_000 or not all(number(x) is not None for x in xs):
            raise ProtocolError(f"timing: {name} is not a list of numbers")
        values[name] = [float(x) for x in xs]
    return timing.RawTimes(**values)


def launch_counts(report: Any, calls: int) -> list[int]:
    """A timing block's Triton launches per call (warm-up, discarded and timed calls, in order) as the answer's
    process counted them: anything but one count per call is a forged message. The trusted side judges them
    (``triton_launch_skipped_in_timing``)."""
    counts = [count(x) for x in report] if isinstance(report, list) else []
    if len(counts) != calls or any(n is None for n in counts):
        raise ProtocolError(f"timing: launches_per_call is not {calls} counts")
    return [n for n in counts if n is not None]


def text(x: Any, limit: int = 6000) -> str | None:
    """Any value as text of at most ``limit`` characters (an error message, a structure), or None."""
    return None if x is None else str(x)[:limit]
