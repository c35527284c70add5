"""Each problem's speed-of-light floor: the least time any answer can take on the run's device, from the work the
problem must do and what the device does at best (evaluation/device_rates.py, measured once per environment).

The work: every input, parameter and output moved once (read once, written once; the problems table's bytes), and
the forward's matrix-multiply, convolution and attention FLOPs (its ``flops``). The floor is the larger of

* the bytes at the fastest memory traffic the device showed: any copy of the ladder, a read or a write alone
  (``DeviceRates.peak_bytes_per_s``). Timed calls flush the L2 cache first, so their data comes from memory; the
  ladder's small copies ran from the cache, so the floor is generous to small problems;
* the FLOPs at the fastest multiply rate measured in any precision (float32 as the run's TF32 mode sets it, bfloat16,
  float16): an answer may compute in a lower precision and still pass the tolerance.

Both are generous to the answer, so an honest one lands above its floor: ``floor_fraction`` (floor / runtime) says
how close it came (1 is the speed of light). A correct answer timed more than ``FLOOR_MARGIN`` below its floor
(fraction above 1 + margin: PyTorch's own kernels, which measured the rates, may fall a few percent short of what a
tuned kernel streams) is flagged ``faster_than_floor`` (core/statuses.py): it did less than the problem asks, which
an answer can do honestly only on inputs with a known structure the floor ignores (triangular or diagonal matrices
skip half their reads) and otherwise by not doing the work on the timed calls. The flag is for review; it changes
no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from workflow_scripts.core.records import DeviceRates

FASTER_THAN_FLOOR_FLAG = "faster_than_floor"
FLOOR_MARGIN = 0.1  # a fraction above 1 + this is flagged


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


def floor_ms(work: ProblemWork, rates: DeviceRates | None) -> float | None:
    """The problem's floor on the measured device (ms); None without rates or without the problem's sizes."""
    bandwidth = rates.peak_bytes_per_s if rates is not None else None
    if rates is None or not bandwidth or work.bytes_moved is None:
        return None
    seconds = work.bytes_moved / bandwidth
    if work.flops and rates.matmul_flops_per_s:
        seconds = max(seconds, work.flops / max(rates.matmul_flops_per_s.values()))
    return 1e3 * seconds


def floor_fraction(floor: float | None, runtime_ms: float | None) -> float | None:
    """floor / runtime: 1 at the speed of light, above 1 faster than the floor; None unless both are known."""
    if floor is None or not runtime_ms:
        return None
    return floor / runtime_ms


def below_floor(fraction: float | None) -> bool:
    """Whether an answer's floor_fraction says it beat its floor by more than the margin (``faster_than_floor``)."""
    return fraction is not None and fraction > 1 + FLOOR_MARGIN
