"""Each problem's speed-of-light floor: the least time any answer can take on the run's device, from the work the
problem must do and what the device does at best (evaluation/device_rates.py, measured once per environment).

The work: every input, parameter and output moved once (read once, written once; the problems table's bytes), and
the forward's matrix-multiply, convolution and attention FLOPs (its ``flops``). The floor is the larger of

* the bytes at the best copy bandwidth the device reached moving at least as many bytes (a small problem's data
  sits in the L2 cache between timed calls, and so does a small copy's: the rate that bounds it is the cache's);
* the FLOPs at the fastest multiply rate measured in any precision (float32 as the run's TF32 mode sets it, bfloat16,
  float16): an answer may compute in a lower precision and still pass the tolerance.

Both are generous to the answer, so an honest one lands above its floor: ``floor_fraction`` (floor / runtime) says
how close it came (1 is the speed of light). A correct answer timed below its floor is flagged ``faster_than_floor``
(core/statuses.py): it did less than the problem asks, which an answer can do honestly only on inputs with a known
structure the floor ignores (triangular or diagonal matrices skip half their reads) and otherwise by not doing the
work on the timed calls. The flag is for review; it changes no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from workflow_scripts.core.records import DeviceRates

FASTER_THAN_FLOOR_FLAG = "faster_than_floor"


@dataclass(frozen=True)
class ProblemWork:
    """What a problem must do at least: bytes moved once each, and FLOPs in products."""

    bytes_moved: int | None
    flops: int | None

    @classmethod
    def of(cls, problem: dict[str, Any]) -> ProblemWork:
        """From a problems-table row (null sizes stay unknown)."""
        sizes = [problem.get(k) for k in ("input_bytes", "param_bytes", "output_bytes")]
        flops = problem.get("flops")
        return cls(None if any(pd.isna(v) for v in sizes) else int(sum(sizes)),
                   None if pd.isna(flops) else int(flops))


def copy_bandwidth(bytes_moved: int, rates: DeviceRates) -> float:
    """Bytes per second: the best copy rate measured over copies that moved at least ``bytes_moved`` (beyond the
    largest copy, the largest copy's)."""
    at_least = [p for p in rates.copies if p.bytes_moved >= bytes_moved]
    candidates = at_least or [max(rates.copies, key=lambda p: p.bytes_moved)]
    return max(p.bytes_per_s for p in candidates)


def floor_ms(work: ProblemWork, rates: DeviceRates | None) -> float | None:
    """The problem's floor on the measured device (ms); None without rates or without the problem's sizes."""
    if rates is None or not rates.copies or work.bytes_moved is None:
        return None
    seconds = work.bytes_moved / copy_bandwidth(work.bytes_moved, rates)
    if work.flops and rates.matmul_flops_per_s:
        seconds = max(seconds, work.flops / max(rates.matmul_flops_per_s.values()))
    return 1e3 * seconds


def floor_fraction(floor: float | None, runtime_ms: float | None) -> float | None:
    """floor / runtime: 1 at the speed of light, above 1 faster than the floor; None unless both are known."""
    if floor is None or not runtime_ms:
        return None
    return floor / runtime_ms
