"""The reference's speed over placements of its buffers in device memory: the part of a problem's timing noise that
paired timing cannot cancel.

Some cuDNN kernels run at one of two speeds depending on where their buffers lie in device memory (docs/evaluation.md,
"address-sensitive kernels"): on the H200, L2/77's ConvTranspose3d dgrad kernel took 4.2 or 5.7 ms (the reference as
its own answer read 1.30), and L2/61 read 0.937 and 1.067 (3.24 or 3.49 ms in one plain process, by placement). On
H100s L1/58 read 7.6 ms in the answer's process and 9.0 ms on the trusted side, outputs bit-identical, in two runs of
three: the same kind of split, its cause not shown. Which placement a process gets follows what the other processes
hold when it allocates, so the answer's process and the trusted side can land on different ones whatever either does,
and each keeps its placement for every block. So the trusted side measures the spread once per problem, in its first
exclusive window: the reference's forward timed at each of ``PADS_BYTES`` placements (the cache emptied, one more pad
held beside the earlier ones, the inputs and the module copied anew, one warm-up call, then ``CALLS`` calls by the
clock that times every block). The spread (the slowest placement's median over the fastest's) widens that problem's
noise band in the speed verdicts (``scoring.significance.problem_band``).

The pads are held together, each moving the next copies further through the address space, as the series that moved
L2/77 and L2/61 between their two speeds inside one plain process on the H200 did (bench/archive/NOTES.md, fourteenth
session; bench/README.md, s23: L2/61 3.24 ms, 3.49 ms after a pad of 256 MiB + 512 B, fast again after 300 MiB). Pads
taken one at a time and freed (the first version of this audit) left the trusted side on one speed of L2/61: its
spread read 1.004 while the answer's process ran 6.7% faster. A problem whose speed does not follow placement reads
about 1.0, and its band is unchanged in effect.
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from workflow_scripts.evaluation import timing

# Held together (1.63 GiB in all at the last placement).
PADS_BYTES = (0, 512, 1 << 20, 3 << 20, 64 << 20, (256 << 20) + 512, 300 << 20, 1 << 30)
WARMUP = 1  # an untimed call per placement (the module's kernels and plans are the reference's: loaded already)
CALLS = 3  # timed calls per placement (their median)
# Exclusive GPU time one problem's audit may take; problems whose forward would need more go unaudited (None).
BUDGET_S = 2.0
# A module and inputs this large are not copied (a multi-GB problem's copy could find the card full).
MAX_COPY_BYTES = 1 << 30


@dataclass(frozen=True)
class PlacementAudit:
    """The reference forward's median at each placement (ms), in ``PADS_BYTES`` order."""

    medians_ms: list[float]

    @property
    def spread(self) -> float:
        return max(self.medians_ms) / min(self.medians_ms)


def affordable(forward_ms: float | None, copy_bytes: int) -> bool:
    """Whether the audit fits ``BUDGET_S`` and ``MAX_COPY_BYTES`` for a forward of ``forward_ms``."""
    calls = len(PADS_BYTES) * (WARMUP + CALLS)
    return forward_ms is not None and forward_ms * calls <= BUDGET_S * 1e3 and copy_bytes <= MAX_COPY_BYTES


def measure(torch: Any, model: Any, inputs: list[Any], clock: timing.Clock, protocol: timing.TimingProtocol
            ) -> PlacementAudit:
    """The forward's median over ``CALLS`` calls at each placement, by ``protocol``'s flush and headroom. The
    caller holds the GPU exclusively."""
    placement_protocol = dataclasses.replace(protocol, warmup=WARMUP, trials=CALLS, discard_first=0)
    device = next((x.device for x in inputs if isinstance(x, torch.Tensor)), None)
    pads: list[Any] = []
    medians = []
    try:
        for pad_bytes in PADS_BYTES:
            if device is not None and device.type == "cuda":
                torch.cuda.empty_cache()  # the previous copies' blocks go back: the next land beyond the pads
            pads.append(torch.empty(pad_bytes, dtype=torch.uint8, device=device))
            medians.append(_median_of_copies(torch, model, inputs, clock, placement_protocol))
    finally:
        pads.clear()
    return PlacementAudit(medians)


def _median_of_copies(torch: Any, model: Any, inputs: list[Any], clock: timing.Clock,
                      protocol: timing.TimingProtocol) -> float:
    """The forward of fresh copies of the module and the inputs, wherever the allocator puts them now."""
    moved = copy.deepcopy(model)
    copies = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    return statistics.median(clock.time_callable(moved, copies, protocol).trials_ms)
