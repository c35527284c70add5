"""The records an evaluation writes: one answer's verdict (``EvalResult``, with its ``TrialRecord`` per correctness
call) and one problem's baselines (``BaselineResult``). Their ``to_dict()`` is the JSON each result file holds
(docs/design.md, "Evaluation" and "Baselines")."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TrialRecord:
    index: Any
    kind: str  # "seeded" | "hidden" | "post_timing"
    seed: int
    verdict: str  # ok | shape_mismatch | dtype_mismatch | device_mismatch | value_mismatch | bad_output | error
    max_abs_diff: float | None = None
    launches: int | None = None
    # The answer's process's own report of its call: evidence, decides nothing; where the lease steps aside
    # (evaluation.yield_gpu) it may hold seconds the process stood stopped.
    forward_ms: float | None = None
    ref_forward_ms: float | None = None
    detail: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class EvalResult:
    status: str
    compiled: bool
    correct: bool
    runtime_ms: float | None
    runtime_stats: dict[str, Any] | None
    max_abs_diff: float | None
    triton_launches: int | None
    flags: list[str]
    error: str | None
    device: str
    timing_mode: str
    tf32: dict[str, Any]
    fingerprint: dict[str, Any]
    protocol: dict[str, Any]
    trials: list[dict[str, Any]] = field(default_factory=list)
    timing_raw: dict[str, Any] | None = None  # discarded/warm-up/host times, launches per timed call
    phases_s: dict[str, float] = field(default_factory=dict)
    static: dict[str, Any] | None = None
    # The eager reference timed beside the answer (paired timing): stats, raw, block size, order.
    paired_reference: dict[str, Any] | None = None
    # The problem, as the trusted side audited it from the reference's outputs (problem_audit.ProblemAudit): whether
    # zeros, a constant or an input-independent output pass the tolerance. None where no reference side ran.
    problem_audit: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class BaselineResult:
    eager_ms: float | None
    eager_stats: dict[str, Any] | None
    eager_status: str
    compile_ms: float | None
    compile_stats: dict[str, Any] | None
    compile_status: str
    compile_time_s: float | None
    compile_backend: str
    compile_mode: str
    compile_max_abs_diff_vs_eager: float | None
    # What the compile child took from the shared compile cache and added to it (compile_cache.CacheUse); None
    # without one (a fresh cache: compile_time_s then includes building everything).
    compile_cache: dict[str, int] | None
    device: str
    timing_mode: str
    tf32: dict[str, Any]
    fingerprint: dict[str, Any]
    protocol: dict[str, Any]
    phases_s: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
