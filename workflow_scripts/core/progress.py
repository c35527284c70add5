"""A run's progress as the user watching it needs it (issue 34): how many of the run's evaluations and baselines
exist, how fast they have been coming since the run started, and when the rest will be done at that rate.

The workflow starts ``report_progress`` when a run starts (Snakemake's ``onstart``: never for a dry run); a daemon
thread then prints one line every ``progress_every_s`` seconds of the configuration (0: never) to the run's standard
error, beside Snakemake's own job lines:

    progress 00:12:30: evaluations 120/3000 (4.0%), 11.2/min since the run started; baselines 14/200; ETA 4h 17m

Counting files keeps it independent of how jobs are scheduled (a job that judges other models' answers along, a job
reused from the store, a cluster node writing to a shared folder): a target counts as done once its file exists, and
as made by this run once it was written since the run started (its modification time), which is what the rate
counts: a resumed run's ETA is about the work left, not the work done before, and a file that Snakemake removes to
make it again counts again once it is made. The totals are the configuration's targets: a run that targets one
model counts the others' files as they stand.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

# The group whose rate gives the ETA: answers are most of a study's work; the other groups are reported beside it.
PACED_GROUP = "evaluations"


@dataclass(frozen=True)
class GroupCount:
    done: int
    total: int

    @property
    def share(self) -> float:
        return self.done / self.total if self.total else 1.0


class RunProgress:
    """The run's targets by group (e.g. evaluations, baselines), counted on demand: each file there is done, each
    written since the run started is this run's (its rate)."""

    def __init__(self, groups: Mapping[str, Iterable[str | Path]], clock: Callable[[], float] = time.time) -> None:
        """``clock``: the wall clock the files' modification times are on."""
        self.groups = {name: [Path(p) for p in paths] for name, paths in groups.items()}
        self.clock = clock
        self.started = clock()

    def counts(self) -> dict[str, GroupCount]:
        return {name: GroupCount(sum(p.exists() for p in paths), len(paths)) for name, paths in self.groups.items()}

    def made(self, name: str) -> int:
        """The group's files written since the run started."""
        made = 0
        for path in self.groups[name]:
            try:
                made += path.stat().st_mtime >= self.started
            except OSError:  # not there (yet, or removed to be made again)
                pass
        return made

    def line(self) -> str:
        now, counts = self.clock(), self.counts()
        elapsed_min = max(now - self.started, 1e-9) / 60
        parts = []
        for name, count in counts.items():
            if not count.total:
                continue
            part = f"{name} {count.done}/{count.total} ({100 * count.share:.1f}%)"
            if name == PACED_GROUP:
                part += f", {self.made(name) / elapsed_min:.1f}/min since the run started"
            parts.append(part)
        return f"progress {_clock(now - self.started)}: {'; '.join(parts) or 'nothing to count'}; ETA {self.eta(counts)}"

    def eta(self, counts: Mapping[str, GroupCount]) -> str:
        paced = counts.get(PACED_GROUP)
        if paced is None or paced.total == 0:
            return "unknown"
        left = paced.total - paced.done
        if left == 0:
            return "evaluations done"
        made = self.made(PACED_GROUP)
        if made <= 0:
            return "unknown until an evaluation is done"
        seconds = left * (self.clock() - self.started) / made
        return _duration(seconds)


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def _duration(seconds: float) -> str:
    minutes = int(round(seconds / 60))
    return f"{minutes // 60}h {minutes % 60}m" if minutes >= 60 else f"{max(minutes, 1)}m"


def report_progress(groups: Mapping[str, Iterable[str | Path]], every_s: float,
                    stream: TextIO = sys.stderr) -> threading.Thread | None:
    """A daemon thread printing the run's progress every ``every_s`` seconds until the process ends (None where
    ``every_s`` is 0: no reporting)."""
    if every_s <= 0:
        return None
    progress = RunProgress(groups)

    def loop() -> None:
        while True:
            time.sleep(every_s)
            print(progress.line(), file=stream, flush=True)

    thread = threading.Thread(target=loop, name="run-progress", daemon=True)
    thread.start()
    return thread
