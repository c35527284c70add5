"""The eager reference's paired timing in a thread of its own per answer, with the card's out-of-memory events
counted (evaluation/reference_timer.py; issue 35, L1/58's fallback cuDNN plan), and what a starved reference does to
the row (scoring/rows.py). KB_TEST_DEVICE=cuda also runs the counting on a GPU."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from workflow_scripts.core.statuses import FLAGS
from workflow_scripts.evaluation import timing
from workflow_scripts.evaluation.reference_timer import ReferenceTimer, device_ooms
from workflow_scripts.scoring.rows import paired_interval

DEVICE = os.environ.get("KB_TEST_DEVICE", "cpu")


def test_each_timer_times_in_a_thread_of_its_own() -> None:
    seen: list[int] = []

    def block() -> timing.RawTimes:
        seen.append(threading.get_ident())
        return timing.RawTimes(trials_ms=[1.0])

    for _ in range(2):
        with ReferenceTimer(torch, "cpu") as timer:
            assert timer.run(block).trials_ms == [1.0]
            timer.run(block)
        assert seen[-1] == seen[-2]  # one thread for an answer's blocks: the plans it picked stay for them
        assert not any(t.ident == seen[-1] and t.is_alive() for t in threading.enumerate())  # gone with its plans
    assert threading.get_ident() not in seen
    assert timer.device_ooms is None  # no device allocator off CUDA


def test_a_failing_block_raises_in_the_caller() -> None:
    def block() -> timing.RawTimes:
        raise ValueError("the reference failed")

    with ReferenceTimer(torch, "cpu") as timer, pytest.raises(ValueError, match="the reference failed"):
        timer.run(block)


def test_a_reference_timed_on_a_full_card_gives_no_interval() -> None:
    evaluation = {"runtime_stats": {"trials": [1.0, 1.01, 0.99, 1.0]},
                  "paired_reference": {"raw": {"trials_ms": [1.2, 1.21, 1.19, 1.2]}, "block_trials": 2,
                                       "reference_block_trials": 2, "device_ooms": 0}}
    interval = paired_interval(evaluation)
    assert interval is not None and interval.low > 1.1
    evaluation["paired_reference"]["device_ooms"] = 3
    assert paired_interval(evaluation) is None  # its speed verdict is withheld, not `faster`
    assert not FLAGS["reference_memory_starved"].rejects  # a review flag: the status stands


@pytest.mark.skipif(DEVICE != "cuda" or not torch.cuda.is_available(), reason="KB_TEST_DEVICE=cuda on a GPU")
def test_out_of_memory_events_in_the_blocks_are_counted() -> None:
    def block(fail: bool) -> timing.RawTimes:
        if fail:
            try:  # what cuDNN meets on a full card: its workspace refused, caught, another plan tried
                torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:
                pass
        return timing.RawTimes(trials_ms=[1.0])

    before = device_ooms(torch, "cuda")
    with ReferenceTimer(torch, "cuda") as timer:
        timer.run(block, False)
        assert timer.device_ooms == 0
        timer.run(block, True)
        timer.run(block, True)
    assert timer.device_ooms == 2 and device_ooms(torch, "cuda") == before + 2
