"""The timing window (evaluation/timing.py): KernelBench's structure, nothing of ours inside it, and work left on
other streams measured after it. CUDA is replaced by a recording stand-in, so the order of operations is checked
on any machine; the numbers themselves are measured on the GPU (bench/README.md)."""

from __future__ import annotations

from typing import Any

from workflow_scripts.evaluation import timing


class RecordingClock(timing.Clock):
    """A Clock whose CUDA calls only append their name to ``calls``; the host clock advances 1 us per read, and
    ``sync_cost_us`` more on a device-wide synchronize (work left on another stream)."""

    def __init__(self, sync_cost_us: float = 0.0) -> None:  # noqa: D107 - no torch, no CUDA
        self.device = "cuda"
        self.calls: list[str] = []
        self.now = 0.0
        self.sync_cost_us = sync_cost_us
        clock = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.name = ""

        self.Event = Event
        self._flush_buf = object()
        self._torch = None

        def record(event: Any) -> None:
            event.name = "start" if "record start" not in clock.calls else "end"
            clock.calls.append(f"record {event.name}")

        self.record = record
        self.synchronize = lambda: (clock.calls.append("device sync"), clock.advance(self.sync_cost_us))
        self.event_synchronize = lambda event: clock.calls.append(f"wait {event.name}")
        self.elapsed_time = lambda a, b: 0.05
        self.zero_ = lambda buf: clock.calls.append("flush L2")
        self.sleep = lambda cycles: clock.calls.append(f"device wait {cycles} cycles")

        class Gate:  # timing.TRIAL_GATE, recorded: what a trial holds it around
            def __enter__(self) -> None:
                clock.calls.append("gate taken")

            def __exit__(self, *exc: object) -> None:
                clock.calls.append("gate released")

        self._gate = Gate()

    def advance(self, us: float) -> None:
        self.now += us * 1e-6

    def perf_counter(self) -> float:  # type: ignore[override]
        self.advance(1.0)
        return self.now


def test_window_has_kernelbench_structure_and_nothing_inside() -> None:
    clock = RecordingClock()
    seen_in_window: list[list[str]] = []

    def call() -> str:
        seen_in_window.append(list(clock.calls))
        clock.calls.append("CALL")
        return "out"

    after: list[tuple[str, float | None]] = []
    ms, host_ms, leftover_us = clock._one_cuda(call, [], lambda out, phase, ms: after.append((clock.calls[-1], ms)))
    # KernelBench: synchronize, flush, start, call, end; then (outside) wait for the stream, then every stream.
    # The whole trial holds the trial gate (the trusted side's memory watcher polls only between trials).
    assert clock.calls == ["gate taken", "device sync", "flush L2", "record start", "CALL", "record end", "wait end",
                           "device sync", "gate released"]
    # no synchronize between flush and start
    assert seen_in_window == [["gate taken", "device sync", "flush L2", "record start"]]
    # the harness's own checks run after the window and outside the gate, told the trial's time
    assert after == [("gate released", 0.05)]
    assert ms == 0.05 and leftover_us < 20


def test_launch_headroom_is_a_device_wait_between_the_flush_and_the_start_event() -> None:
    clock = RecordingClock()
    clock._one_cuda(lambda: clock.calls.append("CALL"), [], None, headroom_us=200.0)
    # the wait is device work before `start`: outside the window, it gives the host's launch work a head start
    assert clock.calls == ["gate taken", "device sync", "flush L2",
                           f"device wait {200 * timing.HEADROOM_CYCLES_PER_US} cycles", "record start", "CALL",
                           "record end", "wait end", "device sync", "gate released"]


def test_launch_headroom_is_on_by_default_on_cuda_and_off_for_kernelbench_to_the_letter() -> None:
    from workflow_scripts.evaluation.answer import EvalConfig
    from workflow_scripts.evaluation.baseline import BaselineConfig

    assert EvalConfig(device="cuda").timing_protocol().launch_headroom_us == 200.0
    # answers and baselines are timed with the same window
    assert BaselineConfig(device="cuda").timing_protocol() == EvalConfig(device="cuda").timing_protocol()
    assert EvalConfig.kernelbench_exact(device="cuda").timing_protocol().launch_headroom_us == 0.0
    assert EvalConfig(device="cpu").timing_protocol().launch_headroom_us == 0.0  # no window on the CPU


def test_leftover_on_another_stream_is_measured_after_the_window() -> None:
    clock = RecordingClock(sync_cost_us=500.0)
    _, _, leftover_us = clock._one_cuda(lambda: None, [], None)
    assert leftover_us >= 500


def test_side_stream_flag_needs_every_trial_to_leave_work_behind() -> None:
    trials = [0.05] * 100  # a 50 us kernel
    assert timing.leftover_limit_us(0.05) == 20.0 + 2.5
    assert not timing.side_stream_leftover({"trials_ms": trials, "leftover_us": [4.0] * 99 + [900.0]})
    assert timing.side_stream_leftover({"trials_ms": trials, "leftover_us": [30.0] * 100})
    # A slow call may take longer to synchronize: the limit grows with the trial.
    assert not timing.side_stream_leftover({"trials_ms": [10.0] * 100, "leftover_us": [300.0] * 100})
    assert not timing.side_stream_leftover({"trials_ms": [], "leftover_us": []})


def test_paired_blocks_split_the_trials_once_with_warmup_only_in_the_first() -> None:
    protocol = timing.TimingProtocol(warmup=3, trials=25, discard_first=1, l2_flush_mib=256, launch_headroom_us=0.0)
    blocks = timing.paired_blocks(protocol, 10)
    assert [b.trials for b in blocks] == [10, 10, 5]
    assert [(b.warmup, b.discard_first) for b in blocks] == [(3, 1), (0, 0), (0, 0)]
    assert timing.paired_blocks(protocol, 0) == [protocol] and timing.paired_blocks(protocol, 25) == [protocol]
    assert [timing.answer_goes_first(i) for i in range(4)] == [True, False, True, False]  # A R R A A R R A
    # The reference's blocks: at most 5 trials (at least one), the warm-up and discarded calls kept.
    assert [timing.reference_block(b, 5).trials for b in blocks] == [5, 5, 5]
    assert (timing.reference_block(blocks[0], 5).warmup, timing.reference_block(blocks[0], 5).discard_first) == (3, 1)
    assert timing.reference_block(blocks[2], 0).trials == 1 and timing.reference_block(blocks[2], 50).trials == 5
    merged = timing.merge_raw([timing.RawTimes(trials_ms=[1.0], warmup_ms=[9.0]), timing.RawTimes(trials_ms=[2.0])])
    assert merged.trials_ms == [1.0, 2.0] and merged.warmup_ms == [9.0]
