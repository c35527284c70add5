"""A timing job on a GPU of a temporary lock folder, for the tests of leases that step aside for it (the GPU need not
exist: the locks are files). Imported by test modules (pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent

# Says it starts waiting for GPU 0 exclusively (polling fast, giving up after its third argument's seconds), then how
# long it waited once it holds it; holds it, leaves.
TIMER = """
import sys, time
from workflow_scripts.evaluation.gpu_lock import acquire_gpu
print("waiting", flush=True)
t0 = time.monotonic()
with acquire_gpu(exclusive=True, gpus=["0"], lock_dir=sys.argv[1], poll_s=0.05, timeout_s=float(sys.argv[3]),
                 purpose="evaluate"):
    print(time.monotonic() - t0, flush=True)
    time.sleep(float(sys.argv[2]))
"""


def start_timer(lock_dir: Path, hold_s: float, give_up_s: float = 10.0) -> subprocess.Popen:
    """The timing job started; it has begun waiting once its first line ("waiting") is read."""
    timer = subprocess.Popen([sys.executable, "-c", TIMER, str(lock_dir), str(hold_s), str(give_up_s)], cwd=REPO,
                             stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert timer.stdout is not None and timer.stdout.readline() == "waiting\n"
    return timer


# Holds GPU 0 shared as an evaluate job does (its first argument: steps aside or pins the GPU), says "held", and lets
# go once its standard input closes.
EVALUATION = """
import sys
from workflow_scripts.evaluation.gpu_lock import YieldingLease, acquire_gpu
with acquire_gpu(exclusive=False, gpus=["0"], lock_dir=sys.argv[1], purpose="evaluate") as lease, \\
        YieldingLease(lease, steps_aside=sys.argv[2] == "yields"):
    print("held", flush=True)
    sys.stdin.read()
"""


@contextlib.contextmanager
def evaluation_holding(lock_dir: Path, yields: bool) -> Iterator[None]:
    """An evaluate job of another process holding GPU 0 shared for the block (yielding or pinning)."""
    job = subprocess.Popen([sys.executable, "-c", EVALUATION, str(lock_dir), "yields" if yields else "pins"], cwd=REPO,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                           env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    try:
        assert job.stdout is not None and job.stdout.readline() == "held\n"
        yield
    finally:
        assert job.stdin is not None
        job.stdin.close()
        job.wait(30)


def stopped(pid: int) -> bool:
    return psutil.Process(pid).status() == psutil.STATUS_STOPPED


def lock_refused(lock_file: Path | str, operation: int) -> bool:
    """Whether a non-blocking flock ``operation`` on a descriptor of our own is refused: LOCK_SH, another holder has
    the GPU exclusively; LOCK_EX, someone holds it at all (no gate taken, so a yielding lease does not step aside for
    this probe)."""
    fd = os.open(lock_file, os.O_RDWR)
    try:
        fcntl.flock(fd, operation | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
