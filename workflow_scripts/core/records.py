"""Records passed between stages. The completions record is generation.cache.CompletionRecord (it must import
in the vLLM environment); the per-problem row's columns are scoring.rows.COLUMNS."""

from __future__ import annotations

from dataclasses import dataclass

# An evaluation's and a baseline's ``timing_mode``, per device (the timing code is evaluation/timing.py). Here, so
# that readers of the records (rows, figures) know the vocabulary without depending on the evaluator's code.
TIMING_MODES: dict[str, str] = {"cuda": "cuda_events", "cpu": "cpu_wall_interpreter"}


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

