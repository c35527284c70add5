"""Stopping an answer's whole process tree while it is not being asked to run (``frozen``): while the trusted side
times the reference beside it and while its job waits for the GPU, no thread or process of the answer's can run,
so it can neither slow the reference (inflating its own speedup) nor a neighbour job's timing.

Every process of the tree gets SIGSTOP, which no process can catch, block or ignore; the tree is listed again until
no process of it is left running (one that forked meanwhile is stopped too), and ``thaw`` sends SIGCONT to each. A
child in a PID namespace of its own (both sandboxed levels) has no process outside the tree; without a sandbox a
process the answer detached from its tree is out of reach (the recorded isolation says so).

A stopped process's GPU work already submitted still runs: an answer could queue a long kernel and then be stopped
into the reference's timing or another job's. So where the driver can (``cuda_lock``), each process of the tree with
CUDA state is locked first, which completes its submitted work and holds its further CUDA calls, and stopped after (the
driver answers only a process that runs); a tree counts as ``complete`` only once each of its CUDA processes is locked
too, and no process of it the driver was not asked about, or found without CUDA state, holds a GPU device file open
once stopped (it may have started CUDA after it was asked, or drive the GPU without the CUDA library, whose work the
lock does not see). ``thaw`` resumes, then unlocks.

A tree of trusted code (a baseline's child: the problem's own ``Model`` and Inductor) may be held at the GPU only
(``stop=False``): its CUDA processes are locked and nothing is stopped, so its CPU work (Inductor's code generation and
compile workers) goes on beside another job's timing while its GPU work waits. Where the driver has no lock, it is
stopped as any tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import psutil

from workflow_scripts.evaluation import cuda_lock

# How long stopping a tree may take before the evaluation goes on regardless (SIGSTOP is delivered at once; a tree
# still forking keeps the lister busy only that long), and how long the driver may take to complete a process's
# submitted GPU work as it locks it: a correctness trial's kernels take milliseconds; a process whose queued work
# outlasts this is left unlocked and the tree incomplete.
STOP_WAIT_S = 2.0


class FrozenTree:
    """The processes of one tree that ``freeze`` stopped, to be resumed by ``thaw``."""

    def __init__(self, root_pid: int, stop: bool = True) -> None:
        self.root_pid = root_pid
        # Every process stopped, or (a trusted tree, where the driver can lock) only its GPU work held.
        self.stops = stop or not cuda_lock.available()
        self.stopped: dict[int, psutil.Process] = {}
        self.stops_complete = False  # every process of the tree was seen stopped
        self.gpu_work = cuda_lock.HeldWork()  # its CUDA processes locked (their GPU work done), or not

    @property
    def complete(self) -> bool:
        """No process of the tree has GPU work left running, and (unless only its GPU work is held) every process of
        it is stopped."""
        return (self.stops_complete or not self.stops) and self.gpu_work.complete

    def freeze(self) -> None:
        """Lock the tree's CUDA processes while they run (the driver answers only a running process; its lock
        completes their work), then stop every process; one that appeared in between cannot be asked any more, so it
        leaves the tree incomplete. A tree held at the GPU only is not stopped: a process that starts CUDA after the
        locks is not held (trusted code: its GPU benchmarks wait for the job's windows anyway)."""
        if not cuda_lock.available():
            self._stop()
            return
        listed = _tree_pid_list(self.root_pid)
        cuda_lock.hold(listed, STOP_WAIT_S, into=self.gpu_work)  # into the tree's record: a hold cut short is undone
        if not self.stops:
            return
        self._stop()
        cuda_lock.mark_unknown([pid for pid in self.stopped if pid not in listed], into=self.gpu_work)
        # A listed process the driver found without CUDA state ran on until its stop: it may have opened the GPU
        # meanwhile, or drive it without the CUDA library (whose work the driver's lock neither sees nor completes).
        # Stopped now, its open files say: a GPU device file among them (or files that cannot be read) counts too.
        unasked = [pid for pid in listed if pid in self.stopped
                   and pid not in self.gpu_work.locked and pid not in self.gpu_work.failed]
        cuda_lock.mark_unknown([pid for pid in unasked if opens_gpu_device(pid)], into=self.gpu_work)

    def _stop(self) -> None:
        end = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < end:
            tree = _tree(self.root_pid)
            new = [p for p in tree if p.pid not in self.stopped]
            for p in new:
                try:
                    p.send_signal(signal.SIGSTOP)
                    self.stopped[p.pid] = p
                except psutil.Error:
                    continue
            if not new and all(_stopped(p) for p in tree):
                self.stops_complete = True
                return
            time.sleep(0.0002)  # SIGSTOP lands within microseconds of the stopped process being scheduled

    def thaw(self) -> None:
        """Resume every stopped process, then unlock (``cuda_lock.UnlockFailed`` where the driver keeps one locked)."""
        for p in self.stopped.values():
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.Error:
                continue
        self.stopped.clear()
        cuda_lock.release(self.gpu_work)


@contextlib.contextmanager
def frozen(root_pid: int | None, stop: bool = True) -> Iterator[FrozenTree | None]:
    """The tree under ``root_pid`` stopped for the block's duration, or (``stop=False``, a trusted tree) only its GPU
    work held where the driver can (nothing to stop: None)."""
    if root_pid is None:
        yield None
        return
    tree = FrozenTree(root_pid, stop)
    try:
        tree.freeze()  # inside: a freeze cut short still resumes and unlocks what it reached
        yield tree
    finally:
        tree.thaw()


def _tree(root_pid: int) -> list[psutil.Process]:
    """The tree's processes, from each thread's ``/proc/<pid>/task/<tid>/children`` (a few reads per process of the
    tree; psutil's ``children`` reads every process of the host, milliseconds on a busy GPU host, and a paired timing
    stops the tree once per reference block). psutil's way where the kernel has no such file."""
    try:
        pids = _tree_pids(root_pid)
    except FileNotFoundError:
        pids = None
    if pids is not None:
        processes = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):  # one that ended since it was listed: nothing to stop
                processes.append(psutil.Process(pid))
        return processes
    try:
        root = psutil.Process(root_pid)
        return [root] + root.children(recursive=True)
    except psutil.Error:
        return []


def _tree_pid_list(root_pid: int) -> list[int]:
    return [p.pid for p in _tree(root_pid)]


def _tree_pids(root_pid: int) -> list[int]:
    """Raises FileNotFoundError when the kernel does not list children (CONFIG_PROC_CHILDREN) or the root is gone."""
    if not os.path.exists(f"/proc/{root_pid}/task/{root_pid}/children"):
        raise FileNotFoundError(root_pid)
    pids, todo = [], [root_pid]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:  # the process or one of its threads ended meanwhile
            continue
    return pids


# The device files through which a process reaches an NVIDIA GPU (/dev/nvidia0..N, nvidiactl, nvidia-uvm, ...).
GPU_DEVICE_PREFIX = "/dev/nvidia"


def opens_gpu_device(pid: int) -> bool:
    """Whether the process holds a GPU device file open or mapped (``GPU_DEVICE_PREFIX``; a mapping outlives the
    file's descriptor), or its open files or mappings cannot be read: either way it may have work on the GPU. A
    process gone meanwhile holds nothing."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            mapped = f.read()
    except FileNotFoundError:
        return False
    except OSError:
        return True
    if f" {GPU_DEVICE_PREFIX}" in mapped:
        return True
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(GPU_DEVICE_PREFIX):
                return True
        except FileNotFoundError:
            continue  # closed since the listing
        except OSError:
            return True
    return False


def _stopped(p: psutil.Process) -> bool:
    return cuda_lock.process_runs(p) is not True  # stopped, traced, or gone
