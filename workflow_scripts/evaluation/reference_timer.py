"""The eager reference's paired timing for one answer: in a thread of its own, with the device's out-of-memory events
counted.

Why a thread: PyTorch keeps the cuDNN convolution plan it picked per thread (``benchmark_cache`` is
``thread_local`` in ATen's ``Conv_v8.cpp``) and picks it at a thread's first call of each shape, by trying the
heuristics' plans in order and moving on from any whose workspace it cannot allocate. A plan picked while the card was
full (other jobs' memory, or an answer holding the card on purpose) stays for the rest of that thread's calls. The
trusted side's seeded forwards run while other work shares the GPU; a thread started for each answer's timing makes
the reference's timed plan its own, picked at the first timed block: under the exclusive lease, with the answer's
tree stopped. (It was a suspect for L1/58 on H100s, 7.6 ms in the answer's process and 9.0 ms on the trusted side on
every block in s20 and s22, before this count existed. In s23 the count read 0 on all 133 problems of the H200
calibration and on the 24 of the H100 run, where L1/58 read 1.0; what split it is not shown. The thread stays: a
fallback plan is possible wherever the card is full, and an answer can fill it.)

Why the count: memory another process holds is still taken while the lease is exclusive, so the pick can still fall
back. Every allocation the caching allocator could not make counts in ``memory_stats()["num_ooms"]`` (cuDNN's
workspace included), so ``device_ooms`` says whether this answer's reference blocks met a full card: a reference
timed on a fallback plan is slower than it should be, and the answer's speedup against it is not evidence
(``scoring.rows.paired_interval`` gives it no interval).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

T = TypeVar("T")


def device_ooms(torch: Any, device_kind: str) -> int | None:
    """Allocations this process's caching allocator failed on the current CUDA device so far; None off CUDA."""
    if device_kind != "cuda":
        return None
    return int(torch.cuda.memory_stats().get("num_ooms", 0))


class ReferenceTimer:
    """One answer's reference blocks, run in one thread started for them (a context manager)."""

    def __init__(self, torch: Any, device_kind: str) -> None:
        self._torch = torch
        self._device_kind = device_kind
        self._thread: ThreadPoolExecutor | None = None
        # Out-of-memory events while this answer's reference blocks ran (None off CUDA).
        self.device_ooms: int | None = None

    def __enter__(self) -> "ReferenceTimer":
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference-timing")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._thread.shutdown(wait=True)  # the thread's cuDNN plans go with it
            self._thread = None

    def run(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)`` (the reference's timed work: ``ReferenceSide.time_block``, ``audit_placements``) in this
        timer's thread; its exceptions are raised here."""
        assert self._thread is not None, "ReferenceTimer used outside its with block"
        before = device_ooms(self._torch, self._device_kind)
        try:
            return self._thread.submit(work, *args).result()
        finally:
            after = device_ooms(self._torch, self._device_kind)
            if before is not None and after is not None:
                self.device_ooms = (self.device_ooms or 0) + after - before
