"""The GPU timeline of a run (issue 34): every job appends one JSON line per interval it spent on a GPU to
``<lock dir>/timeline.jsonl``, the lock folder of its host (``gpu_lock.host_locks``), so every job of a run on that
host writes to one file. Each line is written by one ``write`` on a file opened with ``O_APPEND``: lines of
concurrent jobs never interleave (they stay far below the pipe-buffer size that bounds an atomic append).

A line: ``{"activity", "gpu", "start", "end", "pid", ...}`` (epoch seconds; ``gpu`` is the leased GPU's id, or the
device, ``cpu``, where no lease is taken), with the job's own fields (``purpose``, ``problem``, ``answer``,
``compile_time_s``). The activities:

* ``lease_shared``, ``lease_exclusive``: how long a job held its GPU in each mode (``gpu_lock.GpuLease``);
  ``lease_wait``: how long an upgrade to exclusive waited; ``lease_yielded``: how long a baseline's shared lease
  stood aside, its child stopped, for another job's timing (``gpu_lock.YieldingLease``); ``lease_acquire``: how
  long a job waited to get onto its GPU at all, with ``refused``, the polling rounds' refusals by what refused
  (``memory`` admission, the ``gate`` of a waiting timer, the ``lock``);
* ``timing_answer``, ``timing_reference``, ``timing_probe``: an evaluation's timed blocks (the answer's, the
  paired reference's, the overhead probe's), inside its exclusive lease;
* ``baseline_eager``, ``baseline_compile``: a baseline job's two timings (eager, the compiled module), each in an
  exclusive window (``baseline_windows``; the compiled one's line carries the ``compile_time_s`` of its first call,
  which ran before it under the shared lease); ``baseline_autotune``: a window in which Inductor's max-autotune
  benchmarked candidate kernels during that first call (exclusive, or the job's turn: ``baselines.autotune_alone``);
* ``device_rates``: the device's copy and multiply rates measured once per environment (``device_rates``).

Each run of the workflow marks its start (``mark_run_start``); the tables are made of the intervals since.
The file's name and the timed activities are in ``core/records.py`` (the reader shares them). ``scoring/gpu_timeline.py``
reads the lines back into the run's timeline table and its busy share.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workflow_scripts.core.io import atomic_write_text
from workflow_scripts.core.records import RUN_START_FILE, TIMELINE_FILE


def timeline_path(lock_dir: Path | str) -> Path:
    return Path(lock_dir) / TIMELINE_FILE


def append(lock_dir: Path | str | None, activity: str, gpu: str | None, start: float, end: float, **fields: Any) -> None:
    """One interval, appended as one line; nothing where there is no lock folder. A full disk costs the timeline
    a line, never the job."""
    if lock_dir is None:
        return
    line = json.dumps({"activity": activity, "gpu": gpu, "start": round(start, 6), "end": round(end, 6), "pid": os.getpid(),
                       **fields}, default=str) + "\n"
    with contextlib.suppress(OSError):
        Path(lock_dir).mkdir(parents=True, exist_ok=True)
        fd = os.open(timeline_path(lock_dir), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@contextlib.contextmanager
def span(lock_dir: Path | str | None, activity: str, gpu: str | None, **fields: Any) -> Iterator[None]:
    """The ``with`` block as one interval of ``activity``, written when it ends (also when it raises)."""
    start = time.time()
    try:
        yield
    finally:
        append(lock_dir, activity, gpu, start, time.time(), **fields)


def mark_run_start(locks: Path | str) -> None:
    """The start of a run of the workflow (Snakemake's ``onstart``: not for a dry run, nor when nothing is to be done),
    in the results folder's lock folder: the timeline's tables keep only the intervals after it."""
    atomic_write_text(Path(locks) / RUN_START_FILE, json.dumps({"start": time.time(), "pid": os.getpid()}))
