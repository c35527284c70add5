"""bench/wall_bound.py's reading of a run's GPU timeline: where the wall went while nothing was timed, and how long
jobs waited to get onto the GPU (issue 34's done-when 2)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from wall_bound import entry_waits, idle_breakdown  # noqa: E402


def span(activity: str, start: float, end: float, **fields: object) -> dict:
    return {"activity": activity, "gpu": "0", "start": start, "end": end, "pid": 1, **fields}


def test_idle_seconds_are_split_by_who_held_the_gpu_while_a_timer_waited() -> None:
    lines = [
        span("timing_answer", 0.0, 1.0),
        # 1-3: a timer waits while an evaluation holds the GPU shared; 3-4 while a baseline does; 4-4.5 nobody holds it
        span("lease_wait", 1.0, 4.5, purpose="evaluate"),
        span("lease_shared", 0.5, 3.0, purpose="evaluate"),
        span("lease_shared", 3.0, 4.0, purpose="baseline"),
        span("lease_exclusive", 4.5, 6.0, purpose="evaluate"),
        span("timing_answer", 5.0, 6.0),  # 4.5-5: held exclusively, nothing timed
        span("lease_shared", 6.0, 8.0, purpose="evaluate"),  # 6-8: nobody waits, an evaluation holds it
        span("lease_shared", 8.0, 9.0, purpose="baseline"),  # 8-9: nobody waits, a baseline holds it
        span("timing_answer", 9.0, 10.0),
    ]
    assert idle_breakdown(lines) == {
        "waiting_none_timed": 3.5, "waiting_evaluation_shared": 2.0, "waiting_baseline_shared": 1.0,
        "waiting_none_held": 0.5, "nobody_waiting": 3.0, "nobody_waiting_evaluation_shared": 2.0,
        "exclusive_none_timed": 0.5}


def test_entry_waits_add_up_each_purpose_and_its_refusals() -> None:
    lines = [
        span("lease_acquire", 0.0, 2.5, purpose="evaluate", refused={"memory": 1, "gate": 4, "lock": 0}),
        span("lease_acquire", 1.0, 1.5, purpose="evaluate", refused={"memory": 0, "gate": 0, "lock": 2}),
        span("lease_acquire", 3.0, 3.0, purpose="baseline", refused={"memory": 0, "gate": 0, "lock": 0}),
        span("lease_shared", 2.5, 9.0, purpose="evaluate"),  # not an entry
    ]
    waits = entry_waits(lines)
    assert waits["evaluate"] == {"jobs": 2, "seconds": 3.0, "longest_s": 2.5, "refused_memory": 1,
                                 "refused_gate": 4, "refused_lock": 2}
    assert waits["baseline"]["jobs"] == 1 and waits["baseline"]["seconds"] == pytest.approx(0.0)
