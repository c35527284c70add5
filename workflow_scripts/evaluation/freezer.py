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

How a tree is held (``Hold``), where the driver can lock:

- ``STOPPED``: every process stopped, as above (an answer's tree, by default).
- ``GPU_HELD``: a tree of trusted code (a baseline's child: the problem's own ``Model`` and Inductor): its CUDA
  processes are locked and nothing is stopped, so its CPU work (Inductor's code generation and compile workers) goes on
  beside another job's timing while its GPU work waits.
- ``LOCKED_RUNNING``: an answer's tree whose own compiling may go on beside another job's timing
  (``evaluation.compile_beside_timing``): its CUDA processes are locked and left running (their CPU work, e.g. Triton
  compiling the answer's kernels, goes on; their next CUDA call waits for the unlock), every other process of the tree
  is stopped, and while the hold lasts ``recheck`` (every few milliseconds) stops any process that appeared since (a
  fresh process needs a context before it can run a kernel, expected to take far longer than that), stops again a
  stopped process that ran (a locked one resumed it) and any locked process the driver no longer finds locked; the
  last two break the hold (``broken``: the answer's ``hold_broken``). What it cannot see: native code of a locked
  process undoing or bypassing the lock (part of which may live in the process itself) or submitting GPU work
  without the CUDA library, and its CPU load on the host (``cpu_s``: the evidence;
  ``statuses.FLAGS["cpu_beside_timing"]``). docs/evaluation.md, Scheduling.

Where the driver has no lock, every tree is stopped as the first.
"""

from __future__ import annotations

import contextlib
import enum
import os
import signal
import time
from collections.abc import Collection, Iterator

import psutil

from workflow_scripts.evaluation import cuda_lock

# How long stopping a tree may take before the evaluation goes on regardless (SIGSTOP is delivered at once; a tree
# still forking keeps the lister busy only that long), and how long the driver may take to complete a process's
# submitted GPU work as it locks it: a correctness trial's kernels take milliseconds; a process whose queued work
# outlasts this is left unlocked and the tree incomplete.
STOP_WAIT_S = 2.0


class Hold(enum.Enum):
    """What a freeze does to a tree (the value is what records say: ``protocol.beside_others_timing``)."""

    STOPPED = "stopped"
    GPU_HELD = "gpu_held"
    LOCKED_RUNNING = "locked_running"


# The most cores a LOCKED_RUNNING tree's locked processes may keep busy on average while held before its record is
# flagged (``cpu_beside_timing``): compiling an answer's kernels takes one (Triton's code generation is one thread;
# ptxas, another process, is stopped), so more is CPU load it put beside another job's timing on purpose. Judged only
# over at least CPU_BESIDE_TIMING_MIN_S held, where one busy scheduler tick weighs little.
CPU_BESIDE_TIMING_CORES = 2.0
CPU_BESIDE_TIMING_MIN_S = 1.0
# A locked process the driver found running again while its hold lasted (``recheck``): it freed itself, or was freed.
UNLOCKED_ITSELF = -4
# How long the recheck waits for the driver's word on a locked process (its polls are 5 ms apart): one that does not
# answer in time (a stopped process is never answered) leaves the hold unconfirmed, and the tree is stopped whole.
RECHECK_QUERY_S = 0.05
# Rechecks after its SIGSTOP by which a process must stand stopped (the signal lands within microseconds of it being
# scheduled; one in an uninterruptible wait stops as it returns): found running later, something resumed it.
STOP_GRACE_POLLS = 2


class FrozenTree:
    """The processes of one tree that ``freeze`` stopped or locked, to be resumed by ``thaw``."""

    def __init__(self, root_pid: int, hold: Hold = Hold.STOPPED) -> None:
        self.root_pid = root_pid
        self.hold = hold if cuda_lock.available() else Hold.STOPPED  # without the driver's lock: stopped whole
        self.stopped: dict[int, psutil.Process] = {}
        self.stops_complete = False  # every process of the tree that is not left running locked was seen stopped
        self.gpu_work = cuda_lock.HeldWork()  # its CUDA processes locked (their GPU work done), or not
        self.runs_on: dict[int, psutil.Process] = {}  # LOCKED_RUNNING: the locked processes left running
        self.late_stops = 0  # processes ``recheck`` stopped (they appeared while the tree was held)
        # LOCKED_RUNNING, what ended the hold's running part (the tree then stands stopped whole until the thaw):
        # ``broken``, the answer's doing (a stopped process ran again, a locked one was found unlocked);
        # ``unconfirmed``, this side's (the driver did not answer, the recheck failed). Either leaves it incomplete.
        self.broken: list[str] = []
        self.unconfirmed: list[str] = []
        self._polls = 0  # rechecks so far
        self._stop_sent: dict[int, int] = {}  # each stopped process: the recheck by which its first SIGSTOP was sent
        self._seen_stopped: dict[int, tuple[tuple[float, int], bool]] = {}  # its run counters once stopped; stable
        self._cpu_from: dict[int, float] = {}  # each process left running locked: its CPU seconds as it was locked
        self.cpu_s = 0.0  # LOCKED_RUNNING: the CPU seconds its locked processes ran while held (set by ``thaw``)

    @property
    def stops(self) -> bool:
        """Nothing of the tree ran on while it was held: every process stopped."""
        return self.hold is not Hold.GPU_HELD and not self.runs_on

    @property
    def complete(self) -> bool:
        """No process of the tree has GPU work left running, every process of it that is not locked is stopped (a
        trusted tree, held at the GPU only: nothing needs to be), and (``LOCKED_RUNNING``) the hold held."""
        return ((self.stops_complete or self.hold is Hold.GPU_HELD) and self.gpu_work.complete
                and not self.broken and not self.unconfirmed)

    def freeze(self) -> None:
        """Lock the tree's CUDA processes while they run (the driver answers only a running process; its lock
        completes their work), then stop every process, or (``LOCKED_RUNNING``) every process but the locked ones.
        A process that appeared in between cannot be asked any more, so it leaves the tree incomplete (where locked
        ones run on beside it: only if it holds a GPU device file; it is too young to have made a context). A tree
        held at the GPU only is not stopped: a process that starts CUDA after the locks is not held (trusted code:
        its GPU benchmarks wait for the job's windows anyway)."""
        if not cuda_lock.available():
            self._stop()
            return
        listed = _tree_pid_list(self.root_pid)
        cuda_lock.hold(listed, STOP_WAIT_S, into=self.gpu_work)  # into the tree's record: a hold cut short is undone
        if self.hold is Hold.GPU_HELD:
            return
        if self.hold is Hold.LOCKED_RUNNING:
            for pid in self.gpu_work.locked:
                with contextlib.suppress(psutil.Error):  # kept: a signal to it checks that its pid is still its own
                    self.runs_on[pid] = psutil.Process(pid)
            self._cpu_from = {pid: _cpu_seconds(process) for pid, process in self.runs_on.items()}
        self._stop(spare=set(self.runs_on))
        newcomers = [pid for pid in self.stopped if pid not in listed]
        cuda_lock.mark_unknown([pid for pid in newcomers if not self.runs_on or opens_gpu_device(pid)],
                               into=self.gpu_work)
        # A listed process the driver found without CUDA state ran on until its stop: it may have opened the GPU
        # meanwhile, or drive it without the CUDA library (whose work the driver's lock neither sees nor completes).
        # Stopped now, its open files say: a GPU device file among them (or files that cannot be read) counts too.
        unasked = [pid for pid in listed if pid in self.stopped
                   and pid not in self.gpu_work.locked and pid not in self.gpu_work.failed]
        cuda_lock.mark_unknown([pid for pid in unasked if opens_gpu_device(pid)], into=self.gpu_work)

    def recheck(self) -> None:
        """While a ``LOCKED_RUNNING`` tree is held (at each poll of the step-aside, 5 ms apart): a process of it that
        appeared since is stopped; a stopped process found running ``STOP_GRACE_POLLS`` after its SIGSTOP, or whose
        CPU time or context switches moved once they had settled, ran again (a locked process resumed it); a locked
        process found unlocked, or without CUDA state (it exec'd), freed itself: either breaks the hold. A driver that
        does not answer, or a recheck that fails, leaves it unconfirmed. Broken or unconfirmed, the whole tree is
        stopped for the rest of the hold. Nothing for the other holds."""
        if self.hold is not Hold.LOCKED_RUNNING or not self.runs_on or self.broken or self.unconfirmed:
            return
        self._polls += 1
        try:
            self._recheck()
        except Exception as e:  # noqa: BLE001 - never leave the tree running unwatched beside the timing
            self._end_running(self.unconfirmed, f"recheck failed: {e!r}"[:200])

    def _recheck(self) -> None:
        for process in _tree(self.root_pid):
            if process.pid not in self.stopped and process.pid not in self.runs_on:
                self.late_stops += self._stop_one(process)
        for pid, process in list(self.stopped.items()):
            if self._ran_since_stopped(pid, process):
                self._end_running(self.broken, f"stopped process {pid} ran")
                return
        for pid, process in self.runs_on.items():
            if pid in self.stopped or cuda_lock.process_runs(process) is not True:
                continue  # stopped: it can do nothing, and the driver would not answer; or gone
            state = cuda_lock.lock_state(pid, RECHECK_QUERY_S)
            if state in ("unlocked", "no_cuda"):
                self.gpu_work.failed[pid] = UNLOCKED_ITSELF
                self._end_running(self.broken, f"locked process {pid} found {state}")
                return
            if state == "unknown":
                self.gpu_work.failed[pid] = cuda_lock.UNANSWERED
                self._end_running(self.unconfirmed, f"no word from the driver on locked process {pid}")
                return

    def _ran_since_stopped(self, pid: int, process: psutil.Process) -> bool:
        """Whether a process this side stopped ran again: still running ``STOP_GRACE_POLLS`` rechecks after its
        SIGSTOP (sent again meanwhile), or its CPU time or context switches moved after two equal readings with all
        its threads stopped (the kernel may count a last switch as it stops)."""
        runs = cuda_lock.process_runs(process)
        if runs is None:
            return False  # gone
        if runs or not _all_threads_stopped(pid):
            waiting = _status(process) == psutil.STATUS_DISK_SLEEP  # stops as its wait returns
            if self._polls - self._stop_sent.get(pid, 0) >= STOP_GRACE_POLLS and not waiting:
                return True
            self._seen_stopped.pop(pid, None)
            with contextlib.suppress(psutil.Error):
                process.send_signal(signal.SIGSTOP)  # again: it may have been resumed as the first one landed
            return False
        now = _run_counters(process)
        if now is None:
            return False
        seen = self._seen_stopped.get(pid)
        if seen is not None and seen[1]:
            return now != seen[0]
        self._seen_stopped[pid] = (now, seen is not None and seen[0] == now)
        return False

    def _end_running(self, why: list[str], reason: str) -> None:
        """The hold's running part ends: ``reason`` into ``why`` (``broken`` or ``unconfirmed``), every process of
        the tree stopped, locked ones too, until the thaw."""
        why.append(reason)
        for process in [*self.runs_on.values(), *self.stopped.values()]:  # again: one may have been resumed
            self._stop_one(process)
        with contextlib.suppress(Exception):
            self._stop()  # the rest, where the tree can still be listed

    def _stop_one(self, process: psutil.Process) -> int:
        try:
            process.send_signal(signal.SIGSTOP)
        except psutil.Error:
            return 0
        self.stopped[process.pid] = process
        self._stop_sent.setdefault(process.pid, self._polls)
        return 1

    def _stop(self, spare: Collection[int] = ()) -> None:
        end = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < end:
            tree = [p for p in _tree(self.root_pid) if p.pid not in spare]
            new = [p for p in tree if p.pid not in self.stopped]
            for p in new:
                self._stop_one(p)
            if not new and all(_stopped(p) for p in tree):
                self.stops_complete = True
                return
            time.sleep(0.0002)  # SIGSTOP lands within microseconds of the stopped process being scheduled

    def thaw(self) -> None:
        """Resume every stopped process (and every process left running locked: a process of the tree may have
        stopped it, and the driver answers only a running process), then unlock (``cuda_lock.UnlockFailed`` where
        the driver keeps one locked)."""
        self.cpu_s += sum(max(0.0, _cpu_seconds(self.runs_on[pid]) - before) for pid, before in self._cpu_from.items())
        self._cpu_from = {}
        for p in [*self.stopped.values(), *(p for pid, p in self.runs_on.items() if pid not in self.stopped)]:
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.Error:
                continue
        self.stopped.clear()
        cuda_lock.release(self.gpu_work)


@contextlib.contextmanager
def frozen(root_pid: int | None, hold: Hold = Hold.STOPPED) -> Iterator[FrozenTree | None]:
    """The tree under ``root_pid`` held for the block's duration as ``hold`` says (``Hold``; stopped whole where the
    driver cannot lock); None where there is no tree."""
    if root_pid is None:
        yield None
        return
    tree = FrozenTree(root_pid, hold)
    try:
        tree.freeze()  # inside: a freeze cut short still resumes and unlocks what it reached
        yield tree
    finally:
        tree.thaw()


def cpu_beside_timing_flagged(cpu_s: float, held_s: float) -> bool:
    """Whether a tree's locked processes ran more than ``CPU_BESIDE_TIMING_CORES`` cores on average over its held
    seconds (at least ``CPU_BESIDE_TIMING_MIN_S`` of them)."""
    return held_s >= CPU_BESIDE_TIMING_MIN_S and cpu_s > CPU_BESIDE_TIMING_CORES * held_s


def beside_others_timing(hold: Hold) -> str:
    """What a record says of a tree held as ``hold`` asks on this host (stopped whole where the driver cannot lock)."""
    return (hold if cuda_lock.available() else Hold.STOPPED).value


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of the process stands stopped (``status`` reads its main thread alone)."""
    states = cuda_lock.thread_states(pid)
    return bool(states) and all(state in ("T", "t", "Z", "X") for state in states)


def _status(process: psutil.Process) -> str | None:
    try:
        return process.status()
    except psutil.Error:
        return None


def _run_counters(process: psutil.Process) -> tuple[float, int] | None:
    """What moves only while a process runs: its CPU seconds and its context switches; None where it is gone."""
    try:
        times, switches = process.cpu_times(), process.num_ctx_switches()
    except psutil.Error:
        return None
    return times.user + times.system, switches.voluntary + switches.involuntary


def _cpu_seconds(process: psutil.Process) -> float:
    """The process's CPU seconds so far (user and system, its threads included); 0 where it is gone."""
    counters = _run_counters(process)
    return counters[0] if counters is not None else 0.0


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
