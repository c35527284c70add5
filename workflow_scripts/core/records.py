"""Records passed between stages. The completions record is generation.cache.CompletionRecord (it must import
in the vLLM environment); the per-problem row's columns are scoring.rows.COLUMNS."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

# The statistic of the timed trials that is "the" time of an answer or a baseline: the evaluation's runtime_ms, the
# baseline's eager_ms and compile_ms, the paired reference's eager time the rows take. KernelBench's mean. A key of
# the timing stats (evaluation/timing.py: mean, median, std, min, max); here, so that the evaluator and scoring read
# the same one.
HEADLINE_STATISTIC = "mean"


def headline_ms(stats: Mapping[str, Any] | None) -> float | None:
    """The headline time (milliseconds) of one timing's stats; None without stats or without a number there."""
    value = (stats or {}).get(HEADLINE_STATISTIC)
    return float(value) if isinstance(value, (int, float)) else None


# An evaluation's and a baseline's ``timing_mode``, per device (the timing code is evaluation/timing.py). Here, so
# that readers of the records (rows, figures) know the vocabulary without depending on the evaluator's code.
TIMING_MODES: dict[str, str] = {"cuda": "cuda_events", "cpu": "cpu_wall_interpreter"}

# The GPU timeline's lines (written by evaluation/timeline.py, read by scoring/gpu_timeline.py): the file in each
# host's lock folder, the activities that are timed work on the GPU, and those that are leases. Here, so
# that the reader does not depend on the evaluator's code.
TIMELINE_FILE = "timeline.jsonl"
# In the lock folder (above the hosts' folders): when the latest run of a results folder started (Snakemake's onstart):
# the timeline's tables are that run's (the lines of earlier runs stay in the files).
RUN_START_FILE = "run_start.json"
TIMED_KINDS = ("timing_answer", "timing_reference", "timing_probe", "placement_audit", "baseline_eager",
               "baseline_compile", "baseline_autotune", "device_rates")
# lease_held: a lease's whole hold, from its entry to its release, with the memory admission counted it for.
LEASE_KINDS = ("lease_acquire", "lease_shared", "lease_exclusive", "lease_wait", "lease_yielded", "lease_held")
# The purpose of a generating engine's leases (gpu_lock.hold_gpus): its GPUs are busy, not timing.
GENERATION_PURPOSE = "vllm"


@dataclass
class AnswerRecord:
    """The extraction stage's row: what code (if any) a completion yields."""

    model: str
    level: int
    problem_id: int
    completion_status: str  # ok | failed | missing
    completion_sha256: str | None
    completion_tokens: int | None
    extract_status: str  # ok | no_code | missing_completion
    code: str | None
    code_sha256: str | None
    require_triton: bool = True
    completion_error: str | None = None  # why a completion failed or is missing (e.g. names a non-UTF-8 file)


# The device's best rates (evaluation/device_rates.py measures them; scoring/speed_of_light.py reads them).
@dataclass(frozen=True)
class CopyPoint:
    bytes_moved: int  # read plus written
    seconds: float  # the best call

    @property
    def bytes_per_s(self) -> float:
        return self.bytes_moved / self.seconds


@dataclass(frozen=True)
class DeviceRates:
    device: str
    copies: list[CopyPoint]
    matmul_flops_per_s: dict[str, float]  # dtype name -> the best rate measured
    tf32: dict[str, Any]  # the flags float32 multiplies ran under
    fingerprint: dict[str, Any]  # where it was measured (the job checks it against the run's environment)
    stream_bytes_per_s: dict[str, float] = field(default_factory=dict)  # "read", "write": each alone, largest size

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceRates:
        return cls(device=data["device"], copies=[CopyPoint(**c) for c in data["copies"]],
                   matmul_flops_per_s=dict(data["matmul_flops_per_s"]), tf32=dict(data.get("tf32") or {}),
                   fingerprint=dict(data.get("fingerprint") or {}),
                   stream_bytes_per_s=dict(data.get("stream_bytes_per_s") or {}))

    @property
    def peak_bytes_per_s(self) -> float | None:
        """The fastest memory traffic measured: any copy of the ladder, a read or a write alone."""
        rates = [p.bytes_per_s for p in self.copies] + list(self.stream_bytes_per_s.values())
        return max(rates) if rates else None
