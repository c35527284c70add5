"""A run's progress lines (core/progress.py): counts per group, the rate since the run started, the ETA."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

from workflow_scripts.core.progress import RunProgress, report_progress


class Clock:
    """A wall clock that moves when told; files written "now" get its time as their modification time (write)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def write(self, path: Path) -> None:
        path.write_text("{}")
        os.utime(path, (self.now, self.now))


def targets(folder: Path, n: int, prefix: str) -> list[Path]:
    return [folder / f"{prefix}{i}.json" for i in range(n)]


def test_the_rate_and_eta_count_only_what_this_run_made(tmp_path: Path) -> None:
    evaluations, baselines = targets(tmp_path, 10, "e"), targets(tmp_path, 2, "b")
    clock = Clock()
    clock.now -= 3600
    clock.write(evaluations[0])  # made by an earlier run: done, but not this run's pace
    clock.now += 3600
    progress = RunProgress({"evaluations": evaluations, "baselines": baselines}, clock)
    assert progress.line().endswith("ETA unknown until an evaluation is done")
    clock.now += 60
    for path in evaluations[1:4]:
        clock.write(path)
    clock.write(baselines[0])
    clock.now += 120  # three evaluations in three minutes: six left take six more
    line = progress.line()
    assert line.startswith("progress 00:03:00: evaluations 4/10 (40.0%), 1.0/min since the run started")
    assert "baselines 1/2 (50.0%)" in line and line.endswith("ETA 6m")
    evaluations[1].unlink()  # removed to be made again (a rerun): no longer done, no longer made
    assert "evaluations 3/10 (30.0%), 0.7/min" in progress.line()
    for path in evaluations[1:]:
        clock.write(path)
    assert progress.line().endswith("ETA evaluations done")


def test_long_etas_read_in_hours(tmp_path: Path) -> None:
    evaluations = targets(tmp_path, 200, "e")
    clock = Clock()
    progress = RunProgress({"evaluations": evaluations}, clock)
    clock.write(evaluations[0])
    clock.now += 60  # one a minute: 199 minutes left
    assert progress.line().endswith("ETA 3h 19m")


def test_the_reporter_prints_on_its_own_and_zero_turns_it_off(tmp_path: Path) -> None:
    assert report_progress({"evaluations": []}, 0) is None
    stream = io.StringIO()
    report_progress({"evaluations": targets(tmp_path, 3, "e")}, 0.05, stream)
    deadline = time.monotonic() + 10
    while "progress" not in stream.getvalue() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "evaluations 0/3 (0.0%)" in stream.getvalue()
